"""What the main job (``replaybank run``) computes, typed: the ``metrics.json`` schema as frozen dataclasses.

The fields of these records are the file format: :meth:`Record.to_json` writes a field under its
own name (``None`` fields marked :func:`omitted` are left out; a field marked :func:`flat` is
written into its parent's object), and :meth:`Record.from_json` reads the same object back,
checking every key it needs and raising :class:`ResultsError` with the path of the first bad key.
A results file may come from anyone, so nothing here trusts it.

Three files use them: ``metrics.json`` (:class:`RunResult`, which carries
:data:`SCHEMA_VERSION`), and in the run folder ``seeds/seed<N>.json`` (:class:`SeedResult`) and
``arms/seed<N>-<arm>.json`` (:class:`ArmResult`), which resume an interrupted run. Records that
other modules own and this module passes through unread (the config, the data manifests, a
training log, a recipe, a suite item's outcome) are :data:`JsonObject`.

Example:
    >>> s = Stat.from_json({"mean": 0.5, "std": None, "n": 1, "values": [0.5]}, where="x")
    >>> s.mean, s.to_json()
    (0.5, {'mean': 0.5, 'std': None, 'n': 1, 'values': [0.5]})
    >>> Stat.from_json({"mean": "high", "std": None, "n": 1, "values": []}, where="metrics.json: arms.naive")
    Traceback (most recent call last):
    ...
    replaybank.llm.results.ResultsError: metrics.json: arms.naive.mean: expected a number, got 'high'
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar, Union

from replaybank.errors import ReplayBankError

__all__ = [
    "SCHEMA_VERSION", "AliasRow", "ArmMatrix", "ArmResult", "ArmSummary", "ArmTraining", "CurvePoint",
    "DomainCell", "DomainScore", "Effect", "FamilySeed", "FamilyStats", "FlipCount", "Gate", "GateArm",
    "GateFamily", "Generation", "Interval", "IntervalMethod", "JsonObject", "Losses", "LossShare",
    "MatrixResult", "Mixing", "MixingMeasured", "ProbeComparison", "ProbeSection", "Record", "ResultsError",
    "RiseRatio", "RunResult", "SeedFlips", "SeedManifest", "SeedResult", "SourceUse", "Stat", "SuiteScore",
    "TargetArm", "Targets", "TrainTotal",
]

SCHEMA_VERSION = 3
"""Version of ``metrics.json`` (and of the seed files) this module writes and reads."""

JsonObject = dict[str, object]
"""A JSON object another module owns (config, data manifest, training log, ...), passed through as is."""

R = TypeVar("R", bound="Record")


class ResultsError(ReplayBankError):
    """A results file (``metrics.json``, a seed's or an arm's results) does not hold what it should."""


def omitted() -> Any:
    """A field left out of the JSON object when it is None (and None when the key is missing)."""
    return field(default=None, metadata={"omit": True})


def flat(*, optional: bool = False) -> Any:
    """A record field whose keys are written into the parent's object; ``optional``: None when
    its first key is missing."""
    return field(default=None, metadata={"flat": True}) if optional else field(metadata={"flat": True})


class Record:
    """A frozen dataclass that is one JSON object of a results file."""

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {}
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if f.metadata.get("flat"):
                if value is not None:
                    out.update(value.to_json())
            elif value is not None or not f.metadata.get("omit"):
                out[f.name] = _encode(value)
        return out

    @classmethod
    def from_json(cls: type[R], data: object, where: str = "results") -> R:
        """Read one object back; ``where`` names it in errors (``metrics.json: arms.naive``).

        Raises:
            ResultsError: ``data`` is not an object, or a key is missing or holds the wrong type.
        """
        if not isinstance(data, dict):
            raise ResultsError(f"{where}: expected a JSON object, got {_show(data)}")
        hints = typing.get_type_hints(cls)
        values: dict[str, object] = {}
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            tp = hints[f.name]
            if f.metadata.get("flat"):
                sub = _record_type(tp)
                first = dataclasses.fields(sub)[0].name  # type: ignore[arg-type]
                values[f.name] = sub.from_json(data, where) if first in data or not _is_optional(tp) else None
            elif f.name in data:
                values[f.name] = _decode(tp, data[f.name], _child(where, f.name))
            elif f.metadata.get("omit"):
                values[f.name] = None
            else:
                raise ResultsError(f"{where}: missing key {f.name!r}")
        return cls(**values)


def _encode(value: object) -> object:
    if isinstance(value, Record):
        return value.to_json()
    if isinstance(value, (list, tuple)):
        return [_encode(v) for v in value]
    if isinstance(value, dict):
        return {k: _encode(v) for k, v in value.items()}
    return value


def _child(where: str, key: str) -> str:
    """``metrics.json: arms`` for a key of the file's own object, ``...: arms.naive`` below it."""
    return f"{where}.{key}" if ": " in where else f"{where}: {key}"


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _is_optional(tp: object) -> bool:
    return typing.get_origin(tp) in (Union, types.UnionType) and type(None) in typing.get_args(tp)


def _record_type(tp: object) -> type[Record]:
    args = [a for a in typing.get_args(tp) if a is not type(None)] if _is_optional(tp) else [tp]
    return args[0]  # type: ignore[no-any-return]


def _decode(tp: object, value: object, where: str) -> object:
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if value is None and len(args) < len(typing.get_args(tp)):
            return None
        if len(args) == 1:
            return _decode(args[0], value, where)
        # a union of records: the one whose MARK key the object holds, else the one without a MARK
        marked = [a for a in args if isinstance(value, dict) and getattr(a, "MARK", None) in value]
        pick = marked[0] if marked else next(a for a in args if getattr(a, "MARK", None) is None)
        return _decode(pick, value, where)
    if tp is object:
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ResultsError(f"{where}: expected a number, got {_show(value)}")
        return value  # an int stays an int: the file is written back byte for byte
    if tp in (int, str, bool):
        if not isinstance(value, tp) or (tp is int and isinstance(value, bool)):  # type: ignore[arg-type]
            kind = {int: "an integer", str: "a string", bool: "true or false"}[tp]  # type: ignore[index]
            raise ResultsError(f"{where}: expected {kind}, got {_show(value)}")
        return value
    if origin is list:
        if not isinstance(value, list):
            raise ResultsError(f"{where}: expected a list, got {_show(value)}")
        (item,) = typing.get_args(tp)
        return [_decode(item, v, f"{where}[{k}]") for k, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise ResultsError(f"{where}: expected a JSON object, got {_show(value)}")
        _, item = typing.get_args(tp)
        return {str(k): _decode(item, v, _child(where, str(k))) for k, v in value.items()}
    if isinstance(tp, type) and issubclass(tp, Record):
        return tp.from_json(value, where)
    raise TypeError(f"results.py: no reader for the type {tp!r} at {where}")  # a bug here, not in the file


# --- one arm in one seed: what eval.measure produces --------------------------------------------


@dataclass(frozen=True)
class Losses(Record):
    """Teacher-forced losses, nats per labelled token (:func:`..eval.measure.measure_losses`)."""

    general_loss: float
    """Held-out general text from a source other than the rehearsal pool."""
    docs_loss: float
    """Held-out documents of the rehearsal corpus, wrapped like rehearsal rows."""
    domain_loss: float
    """Mean over the distinct domains' held-out rows."""
    domain_losses: list[float]
    """One per generation."""


@dataclass(frozen=True)
class DomainScore(Record):
    """Generated accuracy on held-out domain requests."""

    exact_match: float
    call_score: float | None
    n: int


@dataclass(frozen=True)
class DomainCell(DomainScore):
    """One cell of the accuracy matrix: a domain's score with its truncation count and items."""

    truncated: object
    items: list[JsonObject] | None


@dataclass(frozen=True)
class SuiteScore(Record):
    """The general-capability suite on one model (:func:`..eval.suite.evaluate_suite`)."""

    families: dict[str, float]
    leakage: float
    retention: dict[str, float | None]
    n: dict[str, int]
    items: list[JsonObject]
    """Per-item outcomes (``id``, ``family``, ``score``, the answer, ...)."""
    seconds: float | None = omitted()
    """Wall time (not for the base model, whose answers are the reference)."""


@dataclass(frozen=True)
class MatrixResult(Record):
    """Accuracy matrix ``R[i][j]`` (exact match on domain ``j`` after generation ``i``) and its summaries."""

    R: list[list[float]]
    average_accuracy: float | None = omitted()
    backward_transfer: float | None = omitted()
    forgetting: float | None = omitted()
    baseline: list[float] | None = omitted()


@dataclass(frozen=True)
class CurvePoint(Record):
    """The losses at one evaluation point during training."""

    step: int
    generation: int
    losses: Losses = flat()


@dataclass(frozen=True)
class SourceUse(Record):
    """A rehearsal source in one generation: its rows, target share and rows per virtual epoch."""

    rows: int
    share: float
    rows_per_epoch: float


@dataclass(frozen=True)
class Generation(Record):
    """One generation of a trained arm."""

    generation: int
    lineage: list[int]
    domain_rows: int
    rehearsal_share: float
    sources: dict[str, SourceUse]
    train: JsonObject
    """The training log (:meth:`..train.log.TrainLog.to_dict`: ``steps``, ``evals``, ``tokens``, ...)."""
    general_loss: float
    domain_loss: float
    domain_accuracy: list[DomainScore]


@dataclass(frozen=True)
class LossShare(Record):
    """Measured share of each source in the rows and in the labelled tokens (= the loss)."""

    rows: dict[str, float]
    label_tokens: dict[str, float]


@dataclass(frozen=True)
class TrainTotal(Record):
    tokens: int
    seconds: float
    tokens_per_second: float | None


@dataclass(frozen=True)
class ArmTraining(Record):
    """What only a trained arm has: its share, the curve, the generations, the mixture."""

    share: float
    loss_share: LossShare
    controller: str | None
    mixture: list[JsonObject]
    """A replay controller's mixture after every evaluation (empty without one)."""
    curve: list[CurvePoint]
    generations: list[Generation]
    train_total: TrainTotal


@dataclass(frozen=True)
class ArmResult(Record):
    """One arm in one seed (``base`` included): losses, probe, suite, domain accuracy, matrix."""

    losses: Losses = flat()
    probe_score: float
    probe_logprob: float
    suite: SuiteScore
    domain: DomainScore
    matrix: MatrixResult
    self_loss: float | None = omitted()
    """Loss on the self-synthesized rows (when an arm of the run uses them)."""
    matrix_row: list[DomainCell] | None = omitted()
    """The base model's row of the matrix (the forward-transfer baseline); base only."""
    training: ArmTraining | None = flat(optional=True)
    """None for ``base``."""

    def scalars(self) -> dict[str, float]:
        """The flat scalars seeds are aggregated over (:func:`..eval.measure.flatten`)."""
        from replaybank.llm.eval.measure import flatten

        return flatten(self)


@dataclass(frozen=True)
class SeedManifest(Record):
    """The data of one seed: the rehearsal share and how it was decided, the data manifests."""

    seed: int
    share: float
    how: str
    data: JsonObject
    self: JsonObject | None


@dataclass(frozen=True)
class SeedResult(Record):
    """One seed (``seeds/seed<N>.json``): every arm, the data, the suite sample, the probe, timings."""

    arms: dict[str, ArmResult]
    manifest: SeedManifest
    suite: JsonObject
    probes: dict[str, JsonObject]
    timings: dict[str, float]


# --- over seeds: what report.metrics assembles --------------------------------------------------


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
    spec: JsonObject | None = omitted()
    share: float | None = omitted()
    loss_share: LossShare | None = omitted()
    curve: list[CurvePoint] | None = omitted()
    """The first seed's."""
    generations: list[Generation] | None = omitted()
    """The first seed's."""
    train_total: TrainTotal | None = omitted()
    controller: str | None = omitted()
    mixture: list[JsonObject] | None = omitted()
    mixture_per_seed: list[list[JsonObject]] | None = omitted()
    families: dict[str, FamilyStats] | None = omitted()
    flips: list[SeedFlips] | None = omitted()

    def mean(self, key: str) -> float | None:
        stat = self.summary.get(key)
        return None if stat is None else stat.mean

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {key: s.mean for key, s in self.summary.items()}
        out["std"] = {key: s.std for key, s in self.summary.items()}
        out.update(super().to_json())
        return out


@dataclass(frozen=True)
class AliasRow(Record):
    """A row that repeats a few means of another arm under an older name (``rehearsal``)."""

    MARK: ClassVar[str] = "alias_of"
    alias_of: str
    share: float
    general_loss: float | None = omitted()
    domain_loss: float | None = omitted()
    probe_score: float | None = omitted()
    probe_logprob: float | None = omitted()


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
    ratio: RiseRatio | None = flat(optional=True)
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
    """Per rehearsal source: the probe's prediction next to the forgetting measured on its rows."""

    source: str
    cosine_mean: float
    cosine_std: float | None
    alpha_suggested: float
    predicts_forgetting: bool
    loss: str | None
    naive_loss_rise: float | None = omitted()
    rehearsal_arm: str | None = omitted()
    rehearsal_loss_rise: float | None = omitted()


@dataclass(frozen=True)
class ProbeSection(Record):
    fresh_lora: dict[str, JsonObject]
    """The interference probe's report per source (:meth:`..eval.interference.ProbeReport.to_dict`)."""
    comparison: list[ProbeComparison]


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
    measured: MixingMeasured | None = flat(optional=True)


@dataclass(frozen=True)
class RunResult(Record):
    """The run (``metrics.json``)."""

    arms: dict[str, ArmSummary | AliasRow]
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

    def trained(self) -> dict[str, ArmSummary]:
        """Every arm but aliases of another arm, in the run's order."""
        return {name: a for name, a in self.arms.items() if isinstance(a, ArmSummary)}
