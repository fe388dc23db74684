"""Retrieval by level: episodes, insights and workflows from the store, each formatted for the
prompt, within one character budget.

``[loop] retrieve`` names the levels a prompt draws on, in the order they are filled:

* ``episodes``: successful episodes, most similar first by BM25 over the task text
  (:class:`replaybank.episodic.retrieval.Retriever`), shown as the conversation turns they were
  (request, call, tool result, ...), before the task;
* ``insights``: lessons (title, description, content; a reflection on a failure is one), most
  similar first by BM25 over their title, description and content, listed in the system
  message under ``Lessons from earlier attempts:``;
* ``workflows``: the call sequences of earlier successes with their values as typed
  placeholders, most similar first by BM25 over their task pattern, listed in the system message
  under ``Workflows that solved similar requests:``.

Up to ``k`` items of each level are retrieved. ``budget`` bounds the characters of everything
retrieved (the system prompt and the task itself are not counted): levels are filled in order,
each most similar item first; an item that does not fit is left out and counted, and the smaller
ones after it may still fit (:class:`Shown`). ``budget = 0`` sets no bound. With the default
(episodes only, no bound) the prompt is exactly
:meth:`~replaybank.episodic.retrieval.Retriever.context`'s.

Example:
    >>> from replaybank.episodic.experience import Insight, StoredInsight
    >>> ins = StoredInsight(1, Insight("cart.add failure: qty", "Add tea -> wrong qty", "Copy the number.", "failure", (4,)))
    >>> messages, shown = render(Recall((), (ins,), ()), "Add 2 tea.", system="Use qx.", budget=0)
    >>> print(messages[0]["content"])
    Use qx.
    <BLANKLINE>
    Lessons from earlier attempts:
    - cart.add failure: qty: Copy the number.
    >>> shown.insights, shown.dropped
    (1, 0)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

from replaybank.episodic import EpisodeStore, StoredEpisode, Task
from replaybank.episodic.episode import Message
from replaybank.episodic.experience import StoredInsight, StoredWorkflow, Workflow
from replaybank.episodic.retrieval import BM25, Retriever
from replaybank.llm.config.loop import RETRIEVE_LEVELS

T = TypeVar("T")
LESSONS_HEAD = "Lessons from earlier attempts:"
WORKFLOWS_HEAD = "Workflows that solved similar requests:"


@dataclass(frozen=True)
class Recall:
    """What was retrieved for one task, per level, most similar first."""

    episodes: tuple[StoredEpisode, ...] = ()
    insights: tuple[StoredInsight, ...] = ()
    workflows: tuple[StoredWorkflow, ...] = ()


@dataclass(frozen=True)
class Shown:
    """What of a :class:`Recall` went into the prompt: items per level, items left out for the
    budget, the characters the shown items take, and the store ids of the episodes shown."""

    episodes: int = 0
    insights: int = 0
    workflows: int = 0
    dropped: int = 0
    chars: int = 0
    replayed: tuple[int, ...] = ()


def insight_line(rec: StoredInsight) -> str:
    """An insight as one line of the lessons list: ``- title: content``."""
    return f"- {rec.insight.title}: {rec.insight.content}"


def workflow_line(wf: Workflow) -> str:
    """A workflow as one line: its task pattern with typed holes, then its calls.

    Example:
        >>> from replaybank.episodic.experience import Arg, CallTemplate, Slot
        >>> wf = Workflow(("Add ", " to the cart, qty ", "."),
        ...               (Slot("s0", "sku", "text", form="verbatim"), Slot("s1", "int", "text", form="verbatim")),
        ...               (CallTemplate("cart.add", (Arg("sku", slot="s0"), Arg("qty", slot="s1"))),), episodes=(1,))
        >>> workflow_line(wf)
        '- "Add <s0:sku> to the cart, qty <s1:int>." -> <<qx cart.add; sku=<s0>; qty=<s1>>>'
    """
    text_slots = [s for s in wf.slots if s.source == "text"]
    pattern = wf.pattern[0] + "".join(f"<{s.name}:{s.type}>{piece}"
                                      for s, piece in zip(text_slots, wf.pattern[1:], strict=False))
    results = [f"<{s.name}:{s.type}> is {s.key} of call {s.call}" for s in wf.slots if s.source == "result"]
    calls = " ".join(
        "<<qx " + "; ".join([c.tool] + [f"{a.key}={f'<{a.slot}>' if a.slot is not None else a.value}" for a in c.args]) + ">>"
        for c in wf.calls
    )
    return f'- "{pattern}" -> {calls}' + (f" ({'; '.join(results)})" if results else "")


def _episode_chars(rec: StoredEpisode) -> int:
    return sum(len(m["content"]) for m in rec.episode.messages())


class LevelRetriever:
    """BM25 retrieval of each level a prompt draws on.

    Args:
        levels: the levels to retrieve, in the order a prompt is filled (``[loop] retrieve``).
        episodes: the episode retriever (successes), or None without ``episodes``.
        insights, workflows: the candidates of those levels.
    """

    def __init__(
        self, levels: Sequence[str], episodes: Retriever | None = None,
        insights: Sequence[StoredInsight] = (), workflows: Sequence[StoredWorkflow] = (),
    ) -> None:
        self.levels = tuple(levels)
        self.episodes = episodes
        self.insights = list(insights)
        self.workflows = list(workflows)
        self.insight_index = BM25([f"{r.insight.title} {r.insight.description} {r.insight.content}"
                                   for r in self.insights])
        self.workflow_index = BM25([" ".join(r.workflow.pattern) for r in self.workflows])

    @classmethod
    def from_store(cls, store: EpisodeStore, levels: Sequence[str]) -> LevelRetriever:
        """Candidates of every level in ``levels`` read from ``store``."""
        return cls(
            levels,
            Retriever.from_store(store) if "episodes" in levels else None,
            store.insights() if "insights" in levels else (),
            store.workflows() if "workflows" in levels else (),
        )

    def pool(self) -> dict[str, int]:
        """How many candidates each level has."""
        return {"episodes": len(self.episodes) if self.episodes is not None else 0,
                "insights": len(self.insights), "workflows": len(self.workflows)}

    def recall(self, task: Task, k: int) -> Recall:
        """Up to ``k`` items of each level for ``task`` (an earlier answer to this very task is
        never among the episodes), most similar first, ties by store id ascending."""
        if k <= 0:
            return Recall()
        found = self.episodes.retrieve(task.text, k, exclude_task_ids=(task.id,)) if self.episodes is not None else []
        return Recall(tuple(found), tuple(_best(self.insights, self.insight_index, task.text, k)),
                      tuple(_best(self.workflows, self.workflow_index, task.text, k)))


def _best(items: list[T], index: BM25, text: str, k: int) -> list[T]:
    """The ``k`` items ``index`` ranks best for ``text``, ties in store order (id ascending)."""
    return [items[i] for i in index.best(text, k)] if items else []


@dataclass(frozen=True)
class Picked:
    """What of a :class:`Recall` goes into a prompt within a budget: the episodes, the insights'
    and workflows' lines, and the counts a :class:`Shown` records."""

    examples: tuple[StoredEpisode, ...]
    lessons: tuple[str, ...]
    flows: tuple[str, ...]
    shown: Shown


def pick(recall: Recall, *, budget: int, levels: Sequence[str] = RETRIEVE_LEVELS) -> Picked:
    """What of ``recall``'s ``levels`` (filled in that order, each most similar item first) fits
    within ``budget`` characters (0: no bound); an item that does not fit is left out and counted.

    Example:
        >>> from replaybank.episodic.experience import Insight, StoredInsight
        >>> long = StoredInsight(1, Insight("qty", "", "Copy the number of items from the request.", "failure", ()))
        >>> short = StoredInsight(2, Insight("sku", "", "Use _ for spaces.", "failure", ()))
        >>> p = pick(Recall((), (long, short), ()), budget=30)
        >>> p.lessons, p.shown.dropped
        (('- sku: Use _ for spaces.',), 1)
    """
    left = budget if budget > 0 else None
    shown = {"episodes": 0, "insights": 0, "workflows": 0}
    dropped = chars = 0
    lessons: list[str] = []
    flows: list[str] = []
    examples: list[StoredEpisode] = []

    def fits(n: int) -> bool:
        nonlocal left, dropped, chars
        if left is not None and n > left:
            dropped += 1
            return False
        if left is not None:
            left -= n
        chars += n
        return True

    for level in levels:
        if level == "episodes":
            examples += [r for r in recall.episodes if fits(_episode_chars(r))]
            shown["episodes"] = len(examples)
        elif level == "insights":
            lessons += [line for line in map(insight_line, recall.insights) if fits(len(line))]
            shown["insights"] = len(lessons)
        elif level == "workflows":
            flows += [line for line in (workflow_line(r.workflow) for r in recall.workflows) if fits(len(line))]
            shown["workflows"] = len(flows)
    return Picked(tuple(examples), tuple(lessons), tuple(flows),
                  Shown(dropped=dropped, chars=chars, replayed=tuple(r.id for r in examples), **shown))


def render(
    recall: Recall, text: str, *, system: str | None, budget: int, levels: Sequence[str] = RETRIEVE_LEVELS,
) -> tuple[list[Message], Shown]:
    """The prompt messages of a task whose request is ``text``, with what ``recall`` holds of
    ``levels`` (in that order) within ``budget`` characters (0: no bound; see :func:`pick`).

    Insights and workflows go into the system message (one is made when ``system`` is empty),
    episodes before the request as their turns.
    """
    picked = pick(recall, budget=budget, levels=levels)
    head = system or ""
    if picked.lessons:
        head += ("\n\n" if head else "") + LESSONS_HEAD + "\n" + "\n".join(picked.lessons)
    if picked.flows:
        head += ("\n\n" if head else "") + WORKFLOWS_HEAD + "\n" + "\n".join(picked.flows)
    messages: list[Message] = [{"role": "system", "content": head}] if head else []
    for rec in picked.examples:
        messages += rec.episode.messages()
    messages.append({"role": "user", "content": text})
    return messages, picked.shown


def add_lessons(messages: Sequence[Message], lines: Sequence[str]) -> list[Message]:
    """``messages`` with ``lines`` first in the system message's lessons list (the list is made,
    and a system message when there is none).

    Example:
        >>> m = add_lessons([{"role": "system", "content": "Use qx."}, {"role": "user", "content": "Add tea."}],
        ...                 ["- qty: copy the number."])
        >>> print(m[0]["content"])
        Use qx.
        <BLANKLINE>
        Lessons from earlier attempts:
        - qty: copy the number.
    """
    out = [dict(m) for m in messages]
    if not lines:
        return out
    if not out or out[0]["role"] != "system":
        out.insert(0, {"role": "system", "content": ""})
    head = out[0]["content"]
    block = "\n".join(lines)
    if LESSONS_HEAD + "\n" in head:
        head = head.replace(LESSONS_HEAD + "\n", f"{LESSONS_HEAD}\n{block}\n", 1)
    else:
        head += ("\n\n" if head else "") + f"{LESSONS_HEAD}\n{block}"
    out[0]["content"] = head
    return out


def level_prompts(
    tasks: Sequence[Task], retriever: LevelRetriever, k: int, *, system: str, budget: int,
) -> tuple[list[tuple[list[Message], tuple[int, ...]]], list[Recall], dict[str, int]]:
    """Messages and replayed episode ids per task, drawn from ``retriever``'s levels in its order
    within ``budget`` characters; also what was recalled per task and the totals of what was
    shown (``episodes``, ``insights``, ``workflows``, ``dropped``, ``chars``, summed over tasks)."""
    prompts: list[tuple[list[Message], tuple[int, ...]]] = []
    recalls: list[Recall] = []
    totals = {"episodes": 0, "insights": 0, "workflows": 0, "dropped": 0, "chars": 0}
    for task in tasks:
        recall = retriever.recall(task, k)
        messages, shown = render(recall, task.text, system=system or None, budget=budget, levels=retriever.levels)
        prompts.append((messages, shown.replayed))
        recalls.append(recall)
        for key in totals:
            totals[key] += getattr(shown, key)
    return prompts, recalls, totals
