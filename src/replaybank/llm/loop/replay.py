"""Record-and-replay in the loop (``[loop] replay_workflows``): learn workflows from the recorded
successes, and replay one that passes every check instead of asking the model.

* :func:`learn_workflows`: each success of a generation (or each demonstration) is abstracted into
  a workflow (:func:`replaybank.episodic.workflow.abstract`) and stored with its provenance; the
  same workflow from several successes is one record with all of them as provenance. A success
  that gives no workflow (a value found nowhere in its text or results) is counted, not stored.
  Replayed episodes are not learned from again: their workflow is already stored.
* :func:`replay_tasks`: for each distinct task, the stored workflows whose pattern its text matches
  are checked (:mod:`replaybank.episodic.checks`) against the environment's API; the first that
  passes is run through the environment (:func:`replaybank.episodic.replay.run`, no model call),
  and the environment's checker judges it. That attempt (``source="replayed"``) stands for every
  sample of the task: a failed check sends the task to the model, a finished replay does not, even
  when the checker fails it (the checker is the judge, not a second chance).

Both only read and add to the store: with ``replay_workflows = false`` the loop never calls them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from replaybank.episodic import EpisodeStore, Task
from replaybank.episodic.checks import REASONS, Refusal
from replaybank.episodic.env import Environment, run_check
from replaybank.episodic.qx import SCHEMA
from replaybank.episodic.replay import choose, run
from replaybank.episodic.turns import ToolEnvironment
from replaybank.episodic.workflow import AbstractionError, abstract
from replaybank.llm.loop.act import Attempt
from replaybank.llm.records import Record

Api = Mapping[str, Mapping[str, str]]


@dataclass(frozen=True)
class Learned(Record):
    """What :func:`learn_workflows` did: successes abstracted (``stored``: workflows added or
    joined, as provenance), and successes that gave none (``not_abstracted``)."""

    stored: int
    not_abstracted: int


def learn_workflows(store: EpisodeStore, *, generation: int | None, api: Api = SCHEMA) -> Learned:
    """Abstract the successes of ``generation`` (the demonstrations when None) into workflows and
    store them, each in its own transaction (adding one again only adds its provenance)."""
    if generation is None:
        episodes = store.episodes(source="demo", success=True)
    else:
        episodes = store.episodes(generation=[generation], success=True, source="agent")
    stored = failed = 0
    for rec in episodes:
        try:
            wf = abstract(rec.episode, rec.id, api=api)
        except AbstractionError:
            failed += 1
            continue
        store.add_workflow(wf)
        stored += 1
    return Learned(stored, failed)


@dataclass(frozen=True)
class ReplayCounts(Record):
    """The counts of a replay lookup (:meth:`Replays.counts`), as ``state.json`` holds them."""

    tasks: int
    replayed: int
    replayed_success: int
    no_candidate: int
    fell_back: int
    refused: dict[str, int]


@dataclass(frozen=True)
class Replays:
    """The replay attempts, by task id, and the counts the loop reports.

    Args:
        attempts: task id -> the replayed attempt (its ``source`` is ``"replayed"``).
        tasks: distinct tasks looked up.
        no_candidate: tasks no stored workflow's pattern matches.
        refused: refusals by reason (every reason of :data:`~replaybank.episodic.checks.REASONS`,
            zeros included), before replay or while rendering a call.
        fell_back: tasks sent to the model after every candidate was refused.
    """

    attempts: dict[str, Attempt] = field(default_factory=dict)
    tasks: int = 0
    no_candidate: int = 0
    refused: Mapping[str, int] = field(default_factory=lambda: dict.fromkeys(REASONS, 0))
    fell_back: int = 0

    def counts(self) -> ReplayCounts:
        solved = sum(a.verdict.success for a in self.attempts.values())
        return ReplayCounts(tasks=self.tasks, replayed=len(self.attempts), replayed_success=solved,
                            no_candidate=self.no_candidate, fell_back=self.fell_back, refused=dict(self.refused))


def replay_tasks(env: Environment, store: EpisodeStore, tasks: Sequence[Task], *, api: Api = SCHEMA) -> Replays:
    """Replay every distinct task of ``tasks`` that a stored workflow passing every check serves
    (see the module doc).

    An environment that cannot run calls (no ``execute``) replays nothing: every task goes to the
    model, counted as ``no_candidate``.

    Raises:
        CheckerError: the environment's ``execute`` or checker raised or returned something invalid.
    """
    distinct = list({t.id: t for t in tasks}.values())
    if not isinstance(env, ToolEnvironment):
        return Replays(tasks=len(distinct), no_candidate=len(distinct))
    workflows = store.workflows()
    attempts: dict[str, Attempt] = {}
    refused: Counter[str] = Counter(dict.fromkeys(REASONS, 0))
    none = fell_back = 0
    for task in distinct:
        chosen, refusals = choose(workflows, task.text, api)
        refused.update(r.reason for r in refusals)
        if chosen is None:
            none += not refusals
            fell_back += bool(refusals)
            continue
        steps = run(env, task, chosen.workflow, chosen.binding, api)
        if isinstance(steps, Refusal):
            refused[steps.reason] += 1
            fell_back += 1
            continue
        output = "\n".join(s.output for s in steps)
        attempts[task.id] = Attempt(task, [], tuple(chosen.workflow.episodes), output, run_check(env, task, output),
                                    0, False, steps, model_calls=0, source="replayed")
    return Replays(attempts, len(distinct), none, dict(refused), fell_back)
