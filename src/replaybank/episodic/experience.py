"""Higher-level experiences drawn from episodes, as the store records them: insights and workflows.

An episode is one attempt (:mod:`.episode`); an *experience* is what the agent keeps from one or
more of them, at one of two levels:

* ``"insight"`` (:class:`Insight`): a lesson in words (title, description, content), drawn from a
  success or from a failure;
* ``"workflow"`` (:class:`Workflow`): the tool-call sequence of a success with the task's values
  replaced by typed placeholders (:class:`Slot`), each bound to where it came from: a span of the
  task text, or a key of an earlier call's result. :mod:`.workflow` builds and binds them;
  :mod:`.checks` decides whether one may be replayed.

Both carry their **provenance**: the store ids of the episodes they were drawn from (``episodes``,
at least one) and the generation that drew them. The store deduplicates experiences by
:attr:`Insight.fingerprint` / :attr:`Workflow.fingerprint` (the content, provenance excluded):
adding the same one again adds its episodes to the first one's provenance.

Here are the records, their JSON forms (``to_dict`` / ``from_dict``, every field checked, raising
``ReplayBankError`` naming the field) and what makes a workflow well-formed
(:func:`workflow_problems`). Only the standard library.

Example:
    >>> ins = Insight("Convert units", "durations are seconds", "Write 5 minutes as dur=300s.",
    ...               "failure", episodes=(3,), generation=2)
    >>> Insight.from_dict(ins.to_dict()) == ins
    True
    >>> wf = Workflow(("Add ", " to the cart, qty ", "."),
    ...               (Slot("s0", "sku", "text", form="verbatim"), Slot("s1", "int", "text", form="verbatim")),
    ...               (CallTemplate("cart.add", (Arg("sku", slot="s0"), Arg("qty", slot="s1"))),),
    ...               family="cart.add", episodes=(1,))
    >>> workflow_problems(wf)
    []
    >>> Workflow.from_dict(wf.to_dict()) == wf
    True
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from replaybank.errors import InvalidArgumentError

from . import fields as f

Level = Literal["workflow", "insight"]
Outcome = Literal["success", "failure"]
SlotSource = Literal["text", "result"]
LEVELS: tuple[str, ...] = ("workflow", "insight")
OUTCOMES: tuple[str, ...] = ("success", "failure")


def _fingerprint(level: str, content: Mapping[str, Any]) -> str:
    blob = json.dumps([level, content], sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


def _provenance(d: Mapping[str, Any], where: str) -> tuple[tuple[int, ...], int]:
    episodes = tuple(f.integer(e, f"{where}.episodes[{k}]", low=0)
                     for k, e in enumerate(f.items(d.get("episodes", ()), f"{where}.episodes")))
    return episodes, f.integer(d.get("generation", 0), f"{where}.generation", low=0)


class Drawn:
    """What an insight and a workflow share: content, fingerprinted, and provenance (``episodes``,
    ``generation``); a subclass gives ``level`` and :meth:`content_dict`."""

    level: ClassVar[str]
    episodes: tuple[int, ...]
    generation: int

    def content_dict(self) -> dict[str, Any]:
        """The content, provenance excluded: what the store keeps as the body and fingerprints."""
        raise NotImplementedError

    @property
    def fingerprint(self) -> str:
        """sha256 of the level and content: two experiences with the same one are one record."""
        return _fingerprint(self.level, self.content_dict())

    def to_dict(self) -> dict[str, Any]:
        return {**self.content_dict(), "episodes": list(self.episodes), "generation": self.generation}


@dataclass(frozen=True)
class Insight(Drawn):
    """A lesson drawn (by reflection) from one or more episodes.

    Args:
        title: a short name ("Convert durations to seconds").
        description: when it applies, in one sentence.
        content: the lesson itself.
        outcome: ``"success"`` if drawn from what went right, ``"failure"`` from what went wrong.
        episodes: provenance: the store ids of the episodes it was drawn from (at least one to
            be stored; the store adds the ids of later duplicates).
        generation: the loop generation that drew it.
    """

    title: str
    description: str
    content: str
    outcome: Outcome
    episodes: tuple[int, ...] = ()
    generation: int = 0

    level: ClassVar[str] = "insight"

    def content_dict(self) -> dict[str, Any]:
        """The content, provenance excluded: what the store keeps as the body and fingerprints."""
        return {"title": self.title, "description": self.description, "content": self.content,
                "outcome": self.outcome}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], where: str = "insight") -> Insight:
        """The insight of :meth:`to_dict` (provenance optional), every field checked."""
        f.nesting(d, where)
        d = f.record(d, where)
        outcome = f.text(f.required(d, "outcome", where), f"{where}.outcome")
        if outcome not in OUTCOMES:
            raise InvalidArgumentError(f"{where}.outcome {outcome!r} is not 'success' or 'failure'")
        episodes, generation = _provenance(d, where)
        return cls(
            f.text(f.required(d, "title", where), f"{where}.title"),
            f.text(f.required(d, "description", where), f"{where}.description"),
            f.text(f.required(d, "content", where), f"{where}.content"),
            "success" if outcome == "success" else "failure",
            episodes,
            generation,
        )


@dataclass(frozen=True)
class Slot:
    """A typed placeholder of a workflow and where its value comes from.

    Args:
        name: how the calls refer to it (``s0``, ``s1``, ...).
        type: the value type of the arguments it fills (a name of :data:`replaybank.episodic.qx.TYPES`).
        source: ``"text"``: a span of the task text (a hole of :attr:`Workflow.pattern`);
            ``"result"``: a ``key=value`` of an earlier call's result.
        form: (text) how the value is written in the text: a form of
            :data:`replaybank.episodic.workflow.FORMS` (``verbatim``, ``duration``, ``dollars``, ...),
            whose normaliser turns the span into the value.
        call: (result) the index of the earlier call whose result holds the value.
        key: (result) the key of that result (``total`` for ``cart.add``).
    """

    name: str
    type: str
    source: SlotSource
    form: str = ""
    call: int = 0
    key: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "type": self.type, "source": self.source, "form": self.form,
                "call": self.call, "key": self.key}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], where: str = "slot") -> Slot:
        d = f.record(d, where)
        source = f.text(f.required(d, "source", where), f"{where}.source")
        if source not in ("text", "result"):
            raise InvalidArgumentError(f"{where}.source {source!r} is not 'text' or 'result'")
        return cls(
            f.text(f.required(d, "name", where), f"{where}.name"),
            f.text(f.required(d, "type", where), f"{where}.type"),
            "text" if source == "text" else "result",
            f.text(d.get("form", ""), f"{where}.form"),
            f.integer(d.get("call", 0), f"{where}.call", low=0),
            f.text(d.get("key", ""), f"{where}.key"),
        )


@dataclass(frozen=True)
class Arg:
    """One argument of a call template: filled from a slot (``slot``) or a constant (``value``)."""

    key: str
    slot: str | None = None
    value: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "slot": self.slot, "value": self.value}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], where: str = "arg") -> Arg:
        d = f.record(d, where)
        return cls(f.text(f.required(d, "key", where), f"{where}.key"),
                   f.optional_text(d.get("slot"), f"{where}.slot"),
                   f.optional_text(d.get("value"), f"{where}.value"))


@dataclass(frozen=True)
class CallTemplate:
    """One call of a workflow: the tool and its arguments, in the order they are written."""

    tool: str
    args: tuple[Arg, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"tool": self.tool, "args": [a.to_dict() for a in self.args]}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], where: str = "call") -> CallTemplate:
        d = f.record(d, where)
        args = f.items(f.required(d, "args", where), f"{where}.args")
        return cls(f.text(f.required(d, "tool", where), f"{where}.tool"),
                   tuple(Arg.from_dict(a, f"{where}.args[{k}]") for k, a in enumerate(args)))


@dataclass(frozen=True)
class Workflow(Drawn):
    """A success's tool-call sequence with its values replaced by typed placeholders.

    Args:
        pattern: the task text cut around its text slots: ``pattern[0] hole0 pattern[1] hole1 ...
            pattern[-1]``, one more piece than there are text slots; a new task matches when its
            text is the pieces with, in each hole, a span written in that slot's form.
        slots: the placeholders; the text slots first, in the order their holes appear in the
            text, then the result slots.
        calls: the call templates, in order.
        family: the task family it was drawn from (``cart.add>purse.send``), for reports.
        episodes, generation: provenance, as for :class:`Insight`.
    """

    pattern: tuple[str, ...]
    slots: tuple[Slot, ...]
    calls: tuple[CallTemplate, ...]
    family: str = ""
    episodes: tuple[int, ...] = ()
    generation: int = 0

    level: ClassVar[str] = "workflow"
    outcome = "success"  # a workflow is only ever drawn from a success

    @property
    def tools(self) -> tuple[str, ...]:
        return tuple(c.tool for c in self.calls)

    def content_dict(self) -> dict[str, Any]:
        """The content, provenance excluded: what the store keeps as the body and fingerprints."""
        return {"pattern": list(self.pattern), "slots": [s.to_dict() for s in self.slots],
                "calls": [c.to_dict() for c in self.calls], "family": self.family}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], where: str = "workflow") -> Workflow:
        """The workflow of :meth:`to_dict` (provenance optional), every field's type checked;
        whether it is well-formed is :func:`workflow_problems`'s question."""
        f.nesting(d, where)
        d = f.record(d, where)
        pattern = f.items(f.required(d, "pattern", where), f"{where}.pattern")
        slots = f.items(f.required(d, "slots", where), f"{where}.slots")
        calls = f.items(f.required(d, "calls", where), f"{where}.calls")
        episodes, generation = _provenance(d, where)
        return cls(
            tuple(f.text(p, f"{where}.pattern[{k}]") for k, p in enumerate(pattern)),
            tuple(Slot.from_dict(s, f"{where}.slots[{k}]") for k, s in enumerate(slots)),
            tuple(CallTemplate.from_dict(c, f"{where}.calls[{k}]") for k, c in enumerate(calls)),
            f.text(d.get("family", ""), f"{where}.family"),
            episodes,
            generation,
        )


def workflow_problems(wf: Workflow) -> list[str]:
    """What makes ``wf`` ill-formed (empty if nothing): no calls; a pattern that does not have one
    more piece than there are text slots; text slots after result slots; a slot name repeated; a
    text slot without a form; a result slot whose call is not earlier than every call using it;
    an argument repeated in a call, or not exactly one of ``slot`` / ``value``, or naming no
    slot of the workflow; a slot no call uses.

    Example:
        >>> bad = Workflow(("Pay ", "."), (Slot("s0", "int", "result", call=0, key="total"),),
        ...                (CallTemplate("purse.send", (Arg("cents", slot="s0"), Arg("to", slot="s9"))),))
        >>> for p in workflow_problems(bad): print(p)
        pattern has 2 pieces for 0 text slots (expected 1)
        call 0 (purse.send): cents uses slot s0, the result of call 0, which is not an earlier call
        call 0 (purse.send): to names no slot of the workflow ('s9')
    """
    problems: list[str] = []
    if not wf.calls:
        problems.append("no calls")
    text_slots = [s for s in wf.slots if s.source == "text"]
    if len(wf.pattern) != len(text_slots) + 1:
        problems.append(f"pattern has {len(wf.pattern)} pieces for {len(text_slots)} text slots "
                        f"(expected {len(text_slots) + 1})")
    if [s.source for s in wf.slots] != sorted((s.source for s in wf.slots), key=lambda x: x != "text"):
        problems.append("a text slot comes after a result slot (text slots come first, in text order)")
    by_name: dict[str, Slot] = {}
    for s in wf.slots:
        if s.name in by_name:
            problems.append(f"slot name {s.name!r} repeated")
        by_name[s.name] = s
        if s.source == "text" and not s.form:
            problems.append(f"text slot {s.name} has no form")
        if s.source == "result" and not s.key:
            problems.append(f"result slot {s.name} names no result key")
    used: set[str] = set()
    for i, call in enumerate(wf.calls):
        keys = [a.key for a in call.args]
        for key in sorted({k for k in keys if keys.count(k) > 1}):
            problems.append(f"call {i} ({call.tool}): argument {key} repeated")
        for a in call.args:
            if (a.slot is None) == (a.value is None):
                problems.append(f"call {i} ({call.tool}): {a.key} has {'both' if a.slot else 'neither'} "
                                "a slot and a value")
                continue
            if a.slot is None:
                continue
            used.add(a.slot)
            slot = by_name.get(a.slot)
            if slot is None:
                problems.append(f"call {i} ({call.tool}): {a.key} names no slot of the workflow ({a.slot!r})")
            elif slot.source == "result" and slot.call >= i:
                problems.append(f"call {i} ({call.tool}): {a.key} uses slot {slot.name}, the result of "
                                f"call {slot.call}, which is not an earlier call")
    problems += [f"slot {s.name} is used by no call" for s in wf.slots if s.name not in used]
    return problems


@dataclass(frozen=True)
class StoredInsight:
    """An insight as read back: its store id; ``insight.episodes`` is its whole provenance (every
    episode it was drawn from, by every add of it), ascending; ``insight.generation`` the first add's."""

    id: int
    insight: Insight


@dataclass(frozen=True)
class StoredWorkflow:
    """A workflow as read back (provenance as for :class:`StoredInsight`)."""

    id: int
    workflow: Workflow
