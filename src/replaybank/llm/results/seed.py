"""One arm in one seed (what :mod:`replaybank.llm.eval.measure` produces) and one seed's results
(``seeds/seed<N>.json``, ``arms/seed<N>-<arm>.json``: what an interrupted run resumes from)."""

from __future__ import annotations

from dataclasses import dataclass, field

from replaybank.llm.eval.interference import InterferenceReport
from replaybank.llm.records import FLAT, JsonObject, Record, flat_optional, omitted
from replaybank.llm.results.frontier import Frontier
from replaybank.llm.results.training import MixtureEntry, TrainLogRecord

__all__ = ["ArmResult", "ArmTraining", "CurvePoint", "DomainCell", "DomainScore", "Generation", "LossShare", "Losses", "MatrixResult", "SeedManifest", "SeedResult", "SourceUse", "SuiteScore", "TrainTotal"]


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
    losses: Losses = field(metadata=FLAT)
    domain_kl: float | None = omitted()
    """KL(base || adapter), nats per token, over the prompt and answer tokens of the held-out rows of the
    domain being trained (:func:`..eval.drift.domain_kl`): the early warning of forgetting."""


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
    train: TrainLogRecord
    general_loss: float
    domain_loss: float
    domain_accuracy: list[DomainScore]
    empty_sources: list[str] | None = omitted()
    """The recipe's sources that gave this generation no row (``replay`` and ``onpolicy`` in the first
    generation; ``onpolicy`` when the model answered no earlier prompt right); None when every source had rows."""


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
    mixture: list[MixtureEntry]
    """A replay controller's mixture after every evaluation (empty without one)."""
    curve: list[CurvePoint]
    generations: list[Generation]
    train_total: TrainTotal


@dataclass(frozen=True)
class ArmResult(Record):
    """One arm in one seed (``base`` included): losses, probe, suite, domain accuracy, matrix."""

    losses: Losses = field(metadata=FLAT)
    probe_score: float
    probe_logprob: float
    suite: SuiteScore
    domain: DomainScore
    matrix: MatrixResult
    self_loss: float | None = omitted()
    """Loss on the self-synthesized rows (when an arm of the run uses them)."""
    matrix_row: list[DomainCell] | None = omitted()
    """The base model's row of the matrix (the forward-transfer baseline); base only."""
    training: ArmTraining | None = flat_optional()
    """None for ``base``."""
    unrouted: JsonObject | None = omitted()
    """``routed`` only: the adapter's own ``suite`` and ``domain``, before routing."""
    routing: JsonObject | None = omitted()
    """``routed`` only: the shares of requests routed to the adapter and to the base model."""
    router: JsonObject | None = omitted()
    """``routed`` only: the calibrated ``top_k``, ``threshold`` and left-one-out shares."""
    accuracy: list[float] | None = omitted()
    """``routed`` only: routed exact match per generation."""
    frontier: Frontier | None = omitted()
    """``[evaluation] choose = "floor"`` only: the operating points measured on the validation data
    and the one chosen; the arm's other figures are the chosen point's."""


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
    probes: dict[str, InterferenceReport]
    timings: dict[str, float]
