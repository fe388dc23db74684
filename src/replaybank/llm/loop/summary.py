"""What the loop report's ``metrics.json`` holds, typed: each arm's figures per generation over seeds,
and the retention gaps of rehearsal paired per seed.

The fields of these records are the file format (:class:`replaybank.llm.records.Record`):
:meth:`LoopMetrics.to_json` is the object :func:`replaybank.llm.loop.report.write_report` writes,
and :meth:`LoopMetrics.from_json` reads it back to the same JSON.

Example:
    >>> figures = GenerationFigures(generation=1, exact=[0.25, 0.5], credit=[0.5, 0.75], exact_ctx=[0.5, 0.5],
    ...     credit_ctx=[0.75, 0.75], retention=[0.9, None])
    >>> arm = LoopArm(seeds=[0, 1], runs=["raw-s0", "raw-s1"], generations=[figures], seconds=[12.5, 13.0])
    >>> metrics = LoopMetrics(arms={"all (K=3), no rehearsal": arm}, paired_retention_gap={})
    >>> list(metrics.to_json()), figures.of("retention")
    (['all (K=3), no rehearsal'], [0.9, None])
    >>> LoopMetrics.from_json(metrics.to_json()) == metrics
    True
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from replaybank.llm.loop.results import GenerationRow
from replaybank.llm.records import Record, ResultsError

__all__ = ["GAP_KEY", "METRICS", "GenerationFigures", "LoopArm", "LoopMetrics", "Metric", "RetentionGap"]

Metric = Literal["exact", "credit", "exact_ctx", "credit_ctx", "retention"]
METRICS: tuple[Metric, ...] = ("exact", "credit", "exact_ctx", "credit_ctx", "retention")
GAP_KEY = "paired_retention_gap"
"""The key of ``metrics.json`` beside the arms that holds :attr:`LoopMetrics.paired_retention_gap`."""


@dataclass(frozen=True)
class GenerationFigures(Record):
    """``<arm>.generations[g]``: one generation's held-out figures and retention, a value per seed
    (in the order of the arm's ``seeds``)."""

    generation: int
    exact: list[float]
    """Held-out exact without context."""
    credit: list[float]
    """Held-out credit without context."""
    exact_ctx: list[float]
    credit_ctx: list[float]
    retention: list[float | None]
    """Suite retention vs base (None where no family has one)."""

    @classmethod
    def over(cls, generation: int, rows: Sequence[GenerationRow]) -> GenerationFigures:
        """The figures of one generation's rows, one row per seed."""
        evals = [r.evaluation for r in rows]
        return cls(generation=generation, exact=[e.no_context.success for e in evals],
                   credit=[e.no_context.credit for e in evals], exact_ctx=[e.context.success for e in evals],
                   credit_ctx=[e.context.credit for e in evals], retention=[e.retention for e in evals])

    def of(self, metric: Metric) -> Sequence[float | None]:
        """The per-seed values of one metric."""
        by_name: dict[Metric, Sequence[float | None]] = {
            "exact": self.exact, "credit": self.credit, "exact_ctx": self.exact_ctx,
            "credit_ctx": self.credit_ctx, "retention": self.retention,
        }
        return by_name[metric]


@dataclass(frozen=True)
class LoopArm(Record):
    """``<arm>``: the runs that are seeds of one lineage and rehearsal recipe (the arm's name is
    :func:`replaybank.llm.loop.report.group_key`), over the generations every one finished."""

    seeds: list[int]
    runs: list[str]
    """The run folders' names, in the order of ``seeds``."""
    generations: list[GenerationFigures]
    seconds: list[float]
    """Wall seconds per run (setup, generation 0 and every generation)."""


@dataclass(frozen=True)
class RetentionGap(Record):
    """``paired_retention_gap.<arm>``: retention with rehearsal minus without, per generation and
    per seed both arms ran (None where either has no retention)."""

    seeds: list[int]
    generations: list[list[float | None]]


@dataclass(frozen=True)
class LoopMetrics(Record):
    """``metrics.json`` of the loop's report: an object per arm by name, and beside them
    :data:`GAP_KEY` (written only when some arm has a gap)."""

    arms: dict[str, LoopArm]
    paired_retention_gap: dict[str, RetentionGap]

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {key: arm.to_json() for key, arm in self.arms.items()}
        if self.paired_retention_gap:
            out[GAP_KEY] = {key: gap.to_json() for key, gap in self.paired_retention_gap.items()}
        return out

    @classmethod
    def from_json(cls, data: object, where: str = "metrics.json") -> LoopMetrics:
        """Read ``metrics.json`` back.

        Raises:
            ResultsError: ``data`` is not an object, or an arm or gap is missing a key or holds the wrong type.
        """
        if not isinstance(data, dict):
            raise ResultsError(f"{where}: expected a JSON object, got {type(data).__name__}")
        gaps = data.get(GAP_KEY, {})
        if not isinstance(gaps, dict):
            raise ResultsError(f"{where}: {GAP_KEY}: expected a JSON object, got {type(gaps).__name__}")
        return cls(
            arms={str(k): LoopArm.from_json(v, f"{where}: {k}") for k, v in data.items() if k != GAP_KEY},
            paired_retention_gap={str(k): RetentionGap.from_json(v, f"{where}: {GAP_KEY}.{k}") for k, v in gaps.items()},
        )
