"""What an episode is: the task, the context the agent saw, its steps and the checker's verdict.

These are plain frozen dataclasses that turn into JSON-safe dicts and back; the store
(:mod:`replaybank.episodic.store`) keeps them in SQLite, the environment
(:mod:`replaybank.episodic.env`) makes tasks and verdicts, retrieval reads them back.

Example:
    >>> task = Task("t1", "Set a timer of 300s tagged tea.", family="timer.arm", difficulty=1,
    ...             expected=("<<qx timer.arm; dur=300s; tag=tea>>",))
    >>> step = Step(prompt=task.text, output="<<qx timer.arm; dur=300s; tag=tea>>",
    ...             call="<<qx timer.arm; dur=300s; tag=tea>>", result="ok")
    >>> ep = Episode(task, (step,), Verdict(True, 1.0), generation=1, seed=0)
    >>> ep.output
    '<<qx timer.arm; dur=300s; tag=tea>>'
    >>> Episode.from_dict(ep.to_dict()) == ep
    True
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from replaybank.errors import InvalidArgumentError, InvalidTypeError

from . import fields as f

Source = Literal["agent", "demo", "replayed"]
#: every :data:`Source`: the model's own attempts, demonstrations, workflows replayed without the model
SOURCES: tuple[str, ...] = ("agent", "demo", "replayed")
Message = dict[str, str]


@dataclass(frozen=True)
class Task:
    """One request the agent must serve.

    Args:
        id: stable identifier (the same request always has the same id).
        text: the request as the agent sees it.
        family: a grouping for reports (for the qx tasks: the tool name, ``a+b`` for two calls).
        difficulty: a rung of the ladder, 1 = easiest.
        expected: the reference answer(s), e.g. the expected tool calls, for the checker.
    """

    id: str
    text: str
    family: str = ""
    difficulty: int = 1
    expected: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "text": self.text,
            "family": self.family,
            "difficulty": self.difficulty,
            "expected": list(self.expected),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], where: str = "task") -> Task:
        """The task of :meth:`to_dict`, every field checked (raises ``ReplayBankError`` naming it)."""
        d = f.record(d, where)
        return cls(
            id=f.text(f.required(d, "id", where), f"{where}.id"),
            text=f.text(f.required(d, "text", where), f"{where}.text"),
            family=f.text(d.get("family", ""), f"{where}.family"),
            difficulty=f.integer(d.get("difficulty", 1), f"{where}.difficulty", low=0),
            expected=tuple(f.text(x, f"{where}.expected[{k}]")
                           for k, x in enumerate(f.items(d.get("expected", ()), f"{where}.expected"))),
        )


@dataclass(frozen=True)
class Step:
    """One turn of the agent.

    Args:
        prompt: the new text the agent was given at this turn (the request on the first turn,
            the previous tool result after that); the fixed context is in ``Episode.context``.
        output: what the model generated.
        call: the tool call it made, in canonical form, or None if it made none.
        result: what the tool returned (or the reason the call was refused and not executed),
            or None; in a multi-turn episode it is the next step's ``prompt`` (a ``tool`` turn).
    """

    prompt: str
    output: str
    call: str | None = None
    result: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"prompt": self.prompt, "output": self.output, "call": self.call, "result": self.result}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], where: str = "step") -> Step:
        d = f.record(d, where)
        return cls(
            f.text(f.required(d, "prompt", where), f"{where}.prompt"),
            f.text(f.required(d, "output", where), f"{where}.output"),
            f.optional_text(d.get("call"), f"{where}.call"),
            f.optional_text(d.get("result"), f"{where}.result"),
        )


@dataclass(frozen=True)
class Verdict:
    """The checker's judgement of an episode.

    Args:
        success: the task was solved exactly.
        reward: a score in [0, 1] (for the qx checker: argument-level credit, 1.0 when exact).
        credit: per-argument credit, e.g. ``{"timer.arm.dur": 1.0, "timer.arm.tag": 0.0}``.
        detail: a human-readable reason (what was wrong).
    """

    success: bool
    reward: float
    credit: Mapping[str, float] = field(default_factory=dict)
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "success": self.success,
            "reward": self.reward,
            "credit": dict(self.credit),
            "detail": self.detail,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], where: str = "verdict") -> Verdict:
        d = f.record(d, where)
        credit = {f.text(k, f"{where}.credit key"): f.real(v, f"{where}.credit[{k!r}]")
                  for k, v in f.record(d.get("credit", {}), f"{where}.credit").items()}
        return cls(
            f.flag(f.required(d, "success", where), f"{where}.success"),
            f.real(f.required(d, "reward", where), f"{where}.reward", low=0.0, high=1.0),
            credit,
            f.text(d.get("detail", ""), f"{where}.detail"),
        )


@dataclass(frozen=True)
class Episode:
    """One attempt at a task, as recorded.

    Args:
        task: the task.
        steps: the agent's turns, in order (at least one).
        verdict: the checker's verdict.
        generation: the loop generation that acted (0 for seeded demonstrations).
        adapter: a hash of the adapter that acted ("" for the base model).
        seed: the sampling seed, or None.
        context: the chat messages the agent saw before the task (system prompt, replayed
            examples); not part of what is learned.
        replayed: store ids of the episodes whose traces were put in ``context``; for a
            ``"replayed"`` episode, the episodes the replayed workflow was drawn from.
        source: ``"agent"`` for the model's own attempts, ``"demo"`` for demonstrations,
            ``"replayed"`` for a stored workflow run without the model (:mod:`.replay`).
        started_at, finished_at: Unix timestamps.
    """

    task: Task
    steps: tuple[Step, ...]
    verdict: Verdict
    generation: int = 0
    adapter: str = ""
    seed: int | None = None
    context: tuple[Message, ...] = ()
    replayed: tuple[int, ...] = ()
    source: Source = "agent"
    started_at: float = field(default_factory=time.time)
    finished_at: float = field(default_factory=time.time)

    @property
    def output(self) -> str:
        """Everything the model generated, turns joined by newlines (the deduplication key)."""
        return "\n".join(s.output for s in self.steps)

    @property
    def fingerprint(self) -> str:
        """sha256 of task id and output (and of the source, for a replayed episode, so that a replay
        never merges with the agent's own attempt): two episodes with the same fingerprint are one
        memory."""
        kind = "\0replayed" if self.source == "replayed" else ""
        return hashlib.sha256(f"{self.task.id}\0{self.output}{kind}".encode()).hexdigest()

    def messages(self) -> list[Message]:
        """The turns as chat messages, context excluded: the request as a ``user`` turn, each
        output as an ``assistant`` turn, and each later step's prompt (the previous call's result)
        as a ``tool`` turn.

        Example:
            >>> t = Task("t", "2+2?")
            >>> Episode(t, (Step("2+2?", "4"),), Verdict(True, 1.0)).messages()
            [{'role': 'user', 'content': '2+2?'}, {'role': 'assistant', 'content': '4'}]
            >>> two = (Step("Add tea.", "<<qx a>>", "<<qx a>>", "ok"), Step("ok", "<<qx b>>"))
            >>> [m["role"] for m in Episode(t, two, Verdict(True, 1.0)).messages()]
            ['user', 'assistant', 'tool', 'assistant']
        """
        out: list[Message] = []
        for i, s in enumerate(self.steps):
            out.append({"role": "user" if i == 0 else "tool", "content": s.prompt})
            out.append({"role": "assistant", "content": s.output})
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "task": self.task.to_dict(),
            "steps": [s.to_dict() for s in self.steps],
            "verdict": self.verdict.to_dict(),
            "generation": self.generation,
            "adapter": self.adapter,
            "seed": self.seed,
            "context": [dict(m) for m in self.context],
            "replayed": list(self.replayed),
            "source": self.source,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], where: str = "episode") -> Episode:
        """The episode of :meth:`to_dict`, every field checked: nesting (at most
        :data:`~replaybank.episodic.fields.MAX_DEPTH` levels), types, ranges (``generation``,
        ``difficulty``, ``replayed`` ids >= 0, ``reward`` in [0, 1], integers within SQLite's
        64 bits), finiteness, UTF-8 text, at least one step.

        Raises:
            InvalidTypeError, InvalidArgumentError: (``ReplayBankError``) naming the field.
        """
        f.nesting(d, where)
        d = f.record(d, where)
        task = Task.from_dict(f.required(d, "task", where), f"{where}.task")
        where = f"{where} (task {task.id!r})"
        steps = tuple(Step.from_dict(s, f"{where}.steps[{k}]")
                      for k, s in enumerate(f.items(f.required(d, "steps", where), f"{where}.steps")))
        if not steps:
            raise InvalidArgumentError(f"{where}: no steps; record at least one turn")
        source = d.get("source", "agent")
        if source not in SOURCES:
            raise InvalidArgumentError(f"{where}: source {f.show(source)} is not one of {', '.join(SOURCES)}")
        context = tuple(
            {f.text(k, f"{where}.context[{i}] key"): f.text(v, f"{where}.context[{i}][{k!r}]")
             for k, v in f.record(m, f"{where}.context[{i}]").items()}
            for i, m in enumerate(f.items(d.get("context", ()), f"{where}.context"))
        )
        return cls(
            task=task,
            steps=steps,
            verdict=Verdict.from_dict(f.required(d, "verdict", where), f"{where}.verdict"),
            generation=f.integer(d.get("generation", 0), f"{where}.generation", low=0),
            adapter=f.text(d.get("adapter", ""), f"{where}.adapter"),
            seed=f.optional_integer(d.get("seed"), f"{where}.seed"),
            context=context,
            replayed=tuple(f.integer(i, f"{where}.replayed[{k}]", low=0)
                           for k, i in enumerate(f.items(d.get("replayed", ()), f"{where}.replayed"))),
            source="demo" if source == "demo" else "replayed" if source == "replayed" else "agent",
            started_at=f.real(d.get("started_at", 0.0), f"{where}.started_at"),
            finished_at=f.real(d.get("finished_at", 0.0), f"{where}.finished_at"),
        )


@dataclass(frozen=True)
class StoredEpisode:
    """An episode as read back from the store.

    Args:
        id: the store id (grows, never reused).
        episode: the episode as first recorded (its context, generation, adapter and seed are
            those of the first attempt).
        count: how many attempts produced this same task + output.
        generations: the distinct generations those attempts came from, ascending.
    """

    id: int
    episode: Episode
    count: int
    generations: tuple[int, ...]

    @property
    def last_generation(self) -> int:
        return self.generations[-1] if self.generations else self.episode.generation


def demonstration(
    task: Task, outputs: Sequence[str], results: Sequence[str | None] = (), calls: Sequence[str | None] = ()
) -> Episode:
    """A demonstration episode (``source="demo"``, generation 0, success): how a user seeds a store.

    Args:
        task: the task demonstrated.
        outputs: the correct output of each turn.
        results: the tool result after each turn (optional; a multi-turn demonstration needs
            them: turn ``i + 1`` is shown result ``i``).
        calls: the call of each turn as recorded (optional).

    Example:
        >>> d = demonstration(Task("t", "2+2?"), ["4"])
        >>> d.source, d.verdict.success, d.generation
        ('demo', True, 0)
        >>> d = demonstration(Task("t", "Add tea, pay it."), ["<<qx a>>", "<<qx b>>"], ["ok total=9", "ok"])
        >>> [m["content"] for m in d.messages()]
        ['Add tea, pay it.', '<<qx a>>', 'ok total=9', '<<qx b>>']
    """
    steps = []
    for i, out in enumerate(outputs):
        prompt = task.text if i == 0 else str(results[i - 1] if i - 1 < len(results) else "")
        steps.append(Step(prompt, out, calls[i] if i < len(calls) else None, results[i] if i < len(results) else None))
    return Episode(task, tuple(steps), Verdict(True, 1.0, {}, "demonstration"), source="demo")


def check_episode(ep: Any, i: int) -> Episode:
    """``ep`` checked field by field, as the store must record it (``i``: its index in the call,
    for the message); returns it with plain Python types (numpy scalars converted).

    Raises:
        InvalidTypeError, InvalidArgumentError: (``ReplayBankError``) naming the episode and field.
    """
    where = f"episode {i}"
    if not isinstance(ep, Episode):
        raise InvalidTypeError(f"{where} is not an Episode ({type(ep).__name__})")
    for name, kind in (("task", Task), ("verdict", Verdict)):
        if not isinstance(getattr(ep, name), kind):
            raise InvalidTypeError(f"{where}: {name} is not a {kind.__name__} ({type(getattr(ep, name)).__name__})")
    steps = f.items(ep.steps, f"{where}: steps")
    for k, s in enumerate(steps):
        if not isinstance(s, Step):
            raise InvalidTypeError(f"{where}: steps[{k}] is not a Step ({type(s).__name__})")
    t, v = ep.task, ep.verdict
    raw = {
        "task": {"id": t.id, "text": t.text, "family": t.family, "difficulty": t.difficulty, "expected": t.expected},
        "steps": [{"prompt": s.prompt, "output": s.output, "call": s.call, "result": s.result} for s in steps],
        "verdict": {"success": v.success, "reward": v.reward, "credit": v.credit, "detail": v.detail},
        "generation": ep.generation, "adapter": ep.adapter, "seed": ep.seed, "context": ep.context,
        "replayed": ep.replayed, "source": ep.source, "started_at": ep.started_at, "finished_at": ep.finished_at,
    }
    return Episode.from_dict(raw, where)
