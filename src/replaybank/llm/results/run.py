"""A run over seeds (``metrics.json``: what :mod:`replaybank.llm.report.metrics` assembles)."""

from __future__ import annotations

from dataclasses import dataclass, field

from replaybank.llm.config.recipe import Recipe
from replaybank.llm.eval.interference import InterferenceReport
from replaybank.llm.records import JsonObject, Record, ResultsError, flat_optional, omitted
from replaybank.llm.results.frontier import Frontier
from replaybank.llm.results.seed import (
    CurvePoint,
    Generation,
    LossShare,
    MatrixResult,
    SeedManifest,
    TrainTotal,
)
from replaybank.llm.results.training import MixtureEntry

__all__ = ["SCHEMA_VERSION", "ArmMatrix", "ArmSummary", "Effect", "FamilySeed", "FamilyStats", "FlipCount", "Gate", "GateArm", "GateFamily", "Interval", "IntervalMethod", "Mixing", "MixingMeasured", "EarlyWarning", "ProbeComparison", "ProbeSection", "RiseRatio", "RunResult", "SeedFlips", "Stat", "TargetArm", "Targets", "WarningPoint"]

SCHEMA_VERSION = 4
"""Version of ``metrics.json`` this package writes and reads."""


@dataclass(frozen=True)
class Stat(Record):
    """One scalar of an arm over seeds (:func:`..report.seeds.aggregate`)."""

    mean: float
    std: float | None
    """Sample standard deviation; None for a single seed."""
    n: int
    values: list[float]


@dataclass(frozen=True)
class Interval(Record):
    """A mean with its 95% interval."""

    mean: float
    low: float
    high: float


@dataclass(frozen=True)
class FamilySeed(Record):
    seed: int
    n: int
    score: float
    score_low: float
    score_high: float
    retention: float | None
    lost: int
    gained: int


@dataclass(frozen=True)
class FamilyStats(Record):
    """One suite family of one arm over seeds (:func:`..report.families.family_summary`)."""

    score: Interval | None
    retention: Interval | None
    n_items: int
    n_seeds: int
    lost: int
    gained: int
    per_seed: list[FamilySeed]


@dataclass(frozen=True)
class FlipCount(Record):
    lost: int
    gained: int


@dataclass(frozen=True)
class SeedFlips(Record):
    """The items an arm lost and gained against the base model in one seed, in full."""

    seed: int
    lost: list[JsonObject]
    """``{"id", "family", "check", "prompt", "base_answer", "arm_answer", ...}`` (:func:`..eval.flips.flips`)."""
    gained: list[JsonObject]
    per_family: dict[str, FlipCount]


@dataclass(frozen=True)
class ArmMatrix(Record):
    R_mean: list[list[float]]
    per_seed: list[MatrixResult]


@dataclass(frozen=True)
class ArmSummary(Record):
    """One arm over seeds (``metrics.json``: ``arms.<arm>``).

    Every scalar of :attr:`summary` is also written at the top level of the arm's object as its
    mean, and its std under ``std``; :meth:`from_json` reads them from ``summary``.
    """

    summary: dict[str, Stat]
    matrix: ArmMatrix
    spec: Recipe | None = omitted()
    """The arm's rehearsal recipe."""
    share: float | None = omitted()
    loss_share: LossShare | None = omitted()
    curve: list[CurvePoint] | None = omitted()
    """The first seed's."""
    generations: list[Generation] | None = omitted()
    """The first seed's."""
    train_total: TrainTotal | None = omitted()
    controller: str | None = omitted()
    mixture: list[MixtureEntry] | None = omitted()
    mixture_per_seed: list[list[MixtureEntry]] | None = omitted()
    families: dict[str, FamilyStats] | None = omitted()
    flips: list[SeedFlips] | None = omitted()
    frontier: list[Frontier] | None = omitted()
    """``[evaluation] choose = "floor"`` only: the arm's operating points and the chosen one, per seed."""

    def mean(self, key: str) -> float | None:
        stat = self.summary.get(key)
        return None if stat is None else stat.mean

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {key: s.mean for key, s in self.summary.items()}
        out["std"] = {key: s.std for key, s in self.summary.items()}
        out.update(super().to_json())
        return out


@dataclass(frozen=True)
class RiseRatio(Record):
    rise_ratio: float | None
    """Rehearsal rise / naive rise; None when naive did not rise."""


@dataclass(frozen=True)
class Effect(Record):
    """The historical three arms compared (:func:`..report.metrics.effect`)."""

    criteria: dict[str, bool]
    naive_general_rise: float | None = omitted()
    rehearsal_general_rise: float | None = omitted()
    ratio: RiseRatio | None = flat_optional()
    domain_loss_ratio: float | None = omitted()


@dataclass(frozen=True)
class TargetArm(Record):
    checks: dict[str, bool | None]
    met: bool
    count: int


@dataclass(frozen=True)
class Targets(Record):
    """The experiment's targets on the seed means (:func:`..report.seeds.check_targets`)."""

    arms: dict[str, TargetArm]
    naive_loses_behaviour: bool | None = omitted()
    naive_learns_skill: bool | None = omitted()
    best_arm: str | None = omitted()


@dataclass(frozen=True)
class GateFamily(Record):
    retention: float | None
    low: float | None
    high: float | None
    floor: float
    status: str
    """``pass``, ``fail``, ``clearly below`` or ``n/a`` (no retention)."""


@dataclass(frozen=True)
class GateArm(Record):
    families: dict[str, GateFamily]
    passed: bool
    failed: list[str]


@dataclass(frozen=True)
class Gate(Record):
    """The retention gate (:func:`..report.gate.evaluate_gate`)."""

    rule: str
    floor: dict[str, float]
    arms: dict[str, GateArm]
    chosen_arm: str | None
    chosen_by: str
    passed: bool


@dataclass(frozen=True)
class IntervalMethod(Record):
    """How the intervals were computed."""

    level: float
    per_seed: str
    over_seeds: str
    resamples: int
    bootstrap_seed: int


@dataclass(frozen=True)
class ProbeComparison(Record):
    """Per rehearsal source: the probe's measured gradients (no verdict) next to the forgetting measured in the run."""

    source: str
    cosine_mean: float
    cosine_std: float | None
    alpha_suggested: float
    """The first-step mixing ratio that keeps every measured pair from ascending on the rehearsal batch."""
    loss: str | None
    dot_mean: float | None = omitted()
    """The mean ``<g_d, g_r>`` over the pairs."""
    conflicting_pairs: int | None = omitted()
    """Pairs with ``<g_d, g_r> < 0``, of :attr:`pairs`."""
    pairs: int | None = omitted()
    naive_loss_rise: float | None = omitted()
    rehearsal_arm: str | None = omitted()
    rehearsal_loss_rise: float | None = omitted()
    naive_retention_min: float | None = omitted()
    """The naive arm's measured forgetting on the suite: its smallest family retention (seed mean)."""
    naive_retention_mean: float | None = omitted()
    """The same, the mean over the checker-scored families."""


@dataclass(frozen=True)
class ProbeSection(Record):
    fresh_lora: dict[str, InterferenceReport]
    """The interference probe's report per source (:meth:`..eval.interference.ProbeReport.to_dict`)."""
    comparison: list[ProbeComparison]


@dataclass(frozen=True)
class WarningPoint(Record):
    """One trained arm in one seed: its last logged KL to the base on domain rows, its final retention."""

    arm: str
    seed: int
    kl: float
    """Nats per token (:attr:`.seed.CurvePoint.domain_kl` of the last evaluation point)."""
    retention_min: float
    """The smallest retention over the checker-scored suite families."""
    retention_mean: float
    """The mean retention over the checker-scored suite families."""


@dataclass(frozen=True)
class EarlyWarning(Record):
    """Does KL(base || adapter) on domain rows rank the arms by what they forget? (:func:`..eval.drift.early_warning`)"""

    points: list[WarningPoint]
    n: int
    spearman_min: float | None
    """Spearman rank correlation of ``kl`` with ``retention_min`` over the points; None below three
    points or with a constant side. Negative: more drift, less retained."""
    spearman_mean: float | None
    """The same with ``retention_mean``."""


@dataclass(frozen=True)
class MixingMeasured(Record):
    """The corpus arm's measured mixture over every step (first seed)."""

    rows_per_batch: list[int]
    measured_row_share: float | None
    rehearsal_tokens: int
    measured_token_share: float | None
    measured_label_token_share: dict[str, float]


@dataclass(frozen=True)
class Mixing(Record):
    share: float
    how: str
    batch_size: int
    mix_by: str
    semantics: str
    measured: MixingMeasured | None = flat_optional()


@dataclass(frozen=True)
class RunResult(Record):
    """The run (``metrics.json``)."""

    arms: dict[str, ArmSummary]
    effect: Effect
    targets: Targets
    gate: Gate
    intervals: IntervalMethod
    probe: ProbeSection
    mixing: Mixing
    data: JsonObject
    data_per_seed: list[SeedManifest]
    suite: list[JsonObject]
    config: JsonObject
    config_source: str
    environment: JsonObject = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    seeds: list[int] = field(default_factory=list)
    wall_seconds: float = 0.0
    schema_version: int = SCHEMA_VERSION
    early_warning: EarlyWarning | None = omitted()
    """KL to the base on domain rows against retention over arms and seeds (absent in older files)."""

    @classmethod
    def from_json(cls, data: object, where: str = "metrics.json") -> RunResult:
        """Read ``metrics.json`` back.

        Raises:
            ResultsError: another schema version, or a key missing or of the wrong type.
        """
        version = data.get("schema_version") if isinstance(data, dict) else None
        if version != SCHEMA_VERSION:
            raise ResultsError(f"{where}: schema_version {version!r}; this replaybank reads version {SCHEMA_VERSION}")
        return super().from_json(data, where)

