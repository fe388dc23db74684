"""Group self-consistency: the retrieved experience split into groups, one answer per group, and
a majority vote over the answers' canonical calls.

The vote reads only what the answers say (their calls in canonical form,
:func:`canonical_answer`): no answer is checked against the task's expected calls to choose it,
so the vote needs no checker. Ties go to the answer of the earliest group, and groups are dealt
round-robin from the retrieval order (group 0 holds the most similar example), so the vote is
deterministic. Each group costs its own answer: :func:`vote_attempts` counts the model calls
(one per turn of each group's episode).

Example:
    >>> split_groups(["a", "b", "c", "d", "e"], 2)
    [['a', 'c', 'e'], ['b', 'd']]
    >>> v = majority(["<<qx cart.add; sku=tea; qty=1>>", "<<qx cart.add;sku=tea;qty=2>>",
    ...               "ok <<qx cart.add; sku=tea;  qty=2>> end"])
    >>> v.answer, v.group, v.votes
    ('<<qx cart.add; sku=tea; qty=2>>', 1, 2)
    >>> majority(["<<qx a.b; k=1>>", "<<qx a.b; k=2>>"]).group  # a tie: the earlier group
    0
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from replaybank.episodic import Task
from replaybank.episodic.env import Environment
from replaybank.episodic.qx import parse_calls
from replaybank.errors import InvalidArgumentError
from replaybank.llm.loop.act import Attempt, attempt
from replaybank.llm.loop.context import LevelRetriever, Recall, render

T = TypeVar("T")


def canonical_answer(output: str) -> str:
    """The calls of ``output`` in canonical form, one per line (``""`` when it makes none): two
    answers that differ only in spacing or surrounding text vote together.

    Example:
        >>> canonical_answer("Sure: <<qx cart.add;sku=tea;qty=1>> done")
        '<<qx cart.add; sku=tea; qty=1>>'
    """
    return "\n".join(c.canonical() for c in parse_calls(output))


def split_groups(items: Sequence[T], k: int) -> list[list[T]]:
    """``items`` dealt round-robin into ``k`` groups (item ``i`` to group ``i mod k``), so every
    group gets examples from the top of the ranking; a group is empty when there are fewer than
    ``k`` items.

    Raises:
        InvalidArgumentError: ``k`` below 1.
    """
    if k < 1:
        raise InvalidArgumentError(f"split_groups: k must be at least 1, got {k!r}")
    return [list(items[g::k]) for g in range(k)]


@dataclass(frozen=True)
class Vote:
    """The result of one vote.

    Args:
        answer: the winning canonical answer (``""``: no call won).
        group: the earliest group that gave it (its episode is the one kept).
        votes: how many groups gave it.
        groups: how many groups voted.
    """

    answer: str
    group: int
    votes: int
    groups: int


def majority(outputs: Sequence[str]) -> Vote:
    """The majority over the canonical answers of ``outputs`` (one per group, in group order);
    ties go to the answer that appears first.

    Raises:
        InvalidArgumentError: no outputs.
    """
    if not outputs:
        raise InvalidArgumentError("majority: no answers to vote on")
    answers = [canonical_answer(o) for o in outputs]
    counts = Counter(answers)
    best = max(counts.values())
    group = next(i for i, a in enumerate(answers) if counts[a] == best)
    return Vote(answers[group], group, best, len(answers))


@dataclass(frozen=True)
class VoteCounts:
    """What the votes of one evaluation cost and how they went.

    Args:
        groups: groups per task.
        model_calls: generated answers over every group's episode (one per turn).
        tokens: tokens those answers generated.
        unanimous: share of tasks whose groups all gave the same answer.
    """

    groups: int
    model_calls: int
    tokens: int
    unanimous: float


def group_recalls(recall: Recall, k: int) -> list[Recall]:
    """``recall`` split into ``k`` groups, each level dealt round-robin (:func:`split_groups`)."""
    eps, ins, wfs = split_groups(recall.episodes, k), split_groups(recall.insights, k), split_groups(recall.workflows, k)
    return [Recall(tuple(eps[g]), tuple(ins[g]), tuple(wfs[g])) for g in range(k)]


def vote_attempts(
    model: Any, tokenizer: Any, env: Environment, tasks: Sequence[Task], retriever: LevelRetriever, k: int,
    groups: int, *, system: str, budget: int, generate_fn: Callable[..., Any] | None = None, **attempt_kw: Any,
) -> tuple[list[Attempt], list[Vote], VoteCounts]:
    """Each task answered once per group of its retrieved experience (``k`` items of each level,
    dealt into ``groups`` groups, each group's prompt within ``budget`` characters), all in one
    batch; the episode kept per task is the winning group's (:func:`majority`).

    ``attempt_kw``: as for :func:`replaybank.llm.loop.act.attempt` (greedy by default).

    Raises:
        InvalidArgumentError: ``groups`` below 1.
    """
    if groups < 1:
        raise InvalidArgumentError(f"vote_attempts: groups must be at least 1, got {groups!r}")
    prompts = []
    for task in tasks:
        for part in group_recalls(retriever.recall(task, k), groups):
            messages, shown = render(part, task.text, system=system or None, budget=budget, levels=retriever.levels)
            prompts.append((messages, shown.replayed))
    answers, stats = attempt(model, tokenizer, env, [t for t in tasks for _ in range(groups)], prompts,
                             generate_fn=generate_fn, **attempt_kw)
    chosen, votes = [], []
    for i in range(len(tasks)):
        mine = answers[i * groups:(i + 1) * groups]
        v = majority([a.output for a in mine])
        chosen.append(mine[v.group])
        votes.append(v)
    counts = VoteCounts(groups, sum(max(len(a.steps), 1) for a in answers), stats.tokens,
                        sum(v.votes == v.groups for v in votes) / max(len(votes), 1))
    return chosen, votes, counts
