"""What one generation of the loop measures, typed: a row of ``state.json``'s ``generations``.

The fields of these records are the file format (:class:`replaybank.llm.records.Record`): a field
is written under its own name in the order declared, a field marked ``omitted`` is left out when
None, and a ``FLAT`` field's keys are written into its parent's object. :meth:`GenerationRow.to_json`
is the row the loop writes, and :meth:`GenerationRow.from_json` reads it back to the same JSON.
The keys a run from before they were recorded lacks are optional; what a row must hold is checked
first by :func:`replaybank.llm.loop.state.check_state`.

The records of one phase's own figures live beside the phase: :class:`.act.Score` (an arm of the
evaluation, or acting), :class:`.act.ActStats`, :class:`.replay.ReplayCounts`,
:class:`.replay.Learned`, :class:`.reflect.ReflectionCounts`, :class:`.reflect.Retry`. Objects
another module owns and the loop passes through unread are :data:`~replaybank.llm.records.JsonObject`
(the training log, the suite's scores per family, what the context showed).

Example:
    >>> row = GenerationRow.from_json({"generation": 0, "adapter": "base",
    ...     "no_context": {"success": 0.25, "credit": 0.5}, "context": {"success": 0.5, "credit": 0.75},
    ...     "validation": {"success": 0.0, "credit": 0.0}, "suite": {"leakage": None}, "retention": 0.95},
    ...     where="state.json: generations[0]")
    >>> row.evaluation.context.success, row.act is None, row.to_json()["retention"]
    (0.5, True, 0.95)
    >>> GenerationRow.from_json({**row.to_json(), "train_rows": "12"}, where="state.json: generations[0]")
    Traceback (most recent call last):
    ...
    replaybank.llm.records.ResultsError: state.json: generations[0].train_rows: expected an integer, got '12'
"""

from __future__ import annotations

from dataclasses import dataclass, field

from replaybank.llm.loop.act import ActStats, Score
from replaybank.llm.loop.reflect import ReflectionCounts, Retry
from replaybank.llm.loop.replay import Learned, ReplayCounts
from replaybank.llm.records import FLAT, JsonObject, Record, flat_optional, omitted

__all__ = ["Acted", "EvalSpeed", "Evaluation", "Example", "GenerationRow", "ReflectionFigures", "ReplayArm",
           "ResumedAct", "SuiteFigures", "VoteArm"]


@dataclass(frozen=True)
class ReflectionFigures(Record):
    """``act.reflection``: the reflections written, and the retry pass (absent when the
    generation was resumed and only the reflections a kill left out were written)."""

    counts: ReflectionCounts = field(metadata=FLAT)
    retry: Retry | None = omitted()


@dataclass(frozen=True)
class Acted(Record):
    """``act`` of a generation that acted: its attempts scored, how generation ran, and with the
    experience keys on, what the context showed, the replayed tasks, the workflows learned and
    the reflections."""

    score: Score = field(metadata=FLAT)
    stats: ActStats | None = flat_optional()
    retrieval_pool: int | None = omitted()
    """Episodes the retriever drew from."""
    shown: JsonObject | None = omitted()
    """What the context showed per level, and the pool (:mod:`.context`); only with levels or a budget."""
    replay: ReplayCounts | None = omitted()
    workflows: Learned | None = omitted()
    reflection: ReflectionFigures | None = omitted()

    @property
    def resumed(self) -> bool:
        return False


@dataclass(frozen=True)
class ResumedAct(Record):
    """``act`` of a generation whose attempts were already in the store (a kill during
    consolidation or evaluation): counted from the store, not acted again."""

    resumed: bool
    n: int
    success: float
    credit: float
    reflection: ReflectionFigures | None = omitted()


@dataclass(frozen=True)
class ReplayArm(Record):
    """``replay``: the with-context arm with a replayed workflow wherever one passes its checks."""

    score: Score = field(metadata=FLAT)
    counts: ReplayCounts = field(metadata=FLAT)


@dataclass(frozen=True)
class VoteArm(Record):
    """``vote``: the with-context arm answered by a vote over groups of the retrieved experience.

    ``score.model_calls`` is the vote's cost (every group's answers), ``model_calls_per_solved``
    the chosen answers' calls per solved task.
    """

    score: Score = field(metadata=FLAT)
    groups: int
    tokens: int
    unanimous: float
    context_model_calls: int
    """What the with-context arm (one answer per task) spent, to compare."""


@dataclass(frozen=True)
class SuiteFigures(Record):
    """``suite``: the general-capability suite (:func:`replaybank.llm.eval.suite.evaluate_suite`)."""

    families: JsonObject | None = omitted()
    retention: dict[str, float | None] | None = omitted()
    """Per family, its score over the base model's (None where the base scores 0)."""
    leakage: float | None = None
    """Share of answers with a tool call."""
    seconds: float | None = omitted()


@dataclass(frozen=True)
class EvalSpeed(Record):
    """``eval_tokens_per_second`` of the held-out arms."""

    no_context: float
    context: float


@dataclass(frozen=True)
class Example(Record):
    """A held-out answer without context, kept for the report (private values redacted)."""

    task: str
    expected: list[str]
    output: str
    success: bool


@dataclass(frozen=True, kw_only=True)
class Evaluation(Record):
    """What :func:`replaybank.llm.recipes.loop.evaluate` measures of one generation's model."""

    vote: VoteArm | None = omitted()
    no_context: Score
    context: Score
    validation: Score
    suite: SuiteFigures
    retention: float | None
    """Mean over suite families of the retention (None when no family has one)."""
    eval_tokens_per_second: EvalSpeed | None = omitted()
    examples: list[Example] | None = omitted()
    replay: ReplayArm | None = omitted()


@dataclass(frozen=True, kw_only=True)
class GenerationRow(Record):
    """One finished generation (generation 0 is the base model: no act, lineage or training)."""

    generation: int
    adapter: str
    """``base``, or the first 16 hex digits of the saved adapter's SHA-256."""
    lineage: list[int] | None = omitted()
    """The generations whose successes it was trained on."""
    train_rows: int | None = omitted()
    act: ResumedAct | Acted | None = omitted()
    train: JsonObject | None = omitted()
    """The training log without per-step rows (:func:`.consolidate.consolidate`)."""
    evaluation: Evaluation = field(metadata=FLAT)
    seconds: float | None = omitted()
    """Wall time of the generation (acting to evaluation)."""

    @property
    def train_steps(self) -> int | None:
        """Optimizer steps of the consolidation (None for generation 0)."""
        steps = None if self.train is None else self.train.get("steps")
        return steps if isinstance(steps, int) else None
