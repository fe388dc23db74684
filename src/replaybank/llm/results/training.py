"""What one generation's training did (``Generation.train``: :meth:`..train.log.TrainLog.to_dict`,
read back as :class:`TrainLogRecord`) and a replay controller's mixture (:class:`MixtureEntry`).

Example:
    >>> step = {"step": 1, "epoch": 0, "loss": 2.0, "domain_loss": 2.0, "rehearsal_loss": None, "rows": 5,
    ...         "rehearsal_rows": 0, "tokens": 40, "rehearsal_tokens": 0, "source_rows": {"domain": 5},
    ...         "label_tokens": {"domain": 20}, "kl": None, "batch": "ab12"}
    >>> log = TrainLogRecord.from_json({"steps": [step], "evals": [], "tokens": 40, "seconds": 1.0,
    ...                                 "tokens_per_second": 40.0, "resumed_from_step": 0}, where="log")
    >>> log.steps[0].rows, log.projected_share, log.to_json()["steps"] == [step]
    (5, <Absent.ABSENT: 'absent'>, True)
"""

from __future__ import annotations

from dataclasses import dataclass, field

from replaybank.llm.records import Absent, Record, ResultsError, absent, omitted

__all__ = ["DistillStep", "EvalPoint", "MixtureEntry", "Refresh", "TrainLogRecord", "TrainStep"]


@dataclass(frozen=True)
class TrainStep(Record):
    """One optimizer step of the LoRA loop (:func:`..train.step.train_step`'s fields)."""

    step: int
    epoch: int
    loss: float
    domain_loss: float | None
    rehearsal_loss: float | None
    rows: int
    rehearsal_rows: int
    tokens: int
    rehearsal_tokens: int
    source_rows: dict[str, int]
    label_tokens: dict[str, int]
    kl: float | None
    projected: bool | None | Absent = absent()
    """A-GEM only: whether the projection acted (null: the step had no rehearsal rows)."""
    batch: str | None = omitted()
    """A digest of the step's rows (source and index)."""
    refresh: dict[str, dict[str, float]] | None = omitted()
    """What each targeted source's refresh of its priorities saw after this step."""


@dataclass(frozen=True)
class DistillStep(Record):
    """One logged step of TRL's SDFT trainer (:mod:`..train.trl_peer`): the LoRA loop's step keys it has,
    its loss (SDFT's, not cross-entropy) also as ``domain_loss``."""

    step: int
    epoch: float | None
    loss: float
    domain_loss: float
    rehearsal_loss: float | None
    distillation_loss: float | None
    completion_mean_length: float
    source_rows: dict[str, int]


@dataclass(frozen=True)
class EvalPoint(Record):
    """The losses at one evaluation point of the training run, at its own step (the run's ``curve`` counts steps
    over the generations)."""

    general_loss: float
    docs_loss: float
    domain_loss: float
    domain_kl: float
    step: int


@dataclass(frozen=True)
class Refresh(Record):
    """One rewrite of a source's rows (``selfgen``) after ``step``: its cost and the source's own counts."""

    source: str
    step: int
    seconds: float
    """Generating the rows."""
    train_seconds: float
    """Training since the source's previous rewrite."""
    counts: dict[str, float]
    """Written into the entry's object after the four keys above."""

    def to_json(self) -> dict[str, object]:
        out = super().to_json()
        out.pop("counts")
        out.update(self.counts)
        return out

    @classmethod
    def from_json(cls, data: object, where: str = "results") -> Refresh:
        if not isinstance(data, dict):
            raise ResultsError(f"{where}: expected a JSON object, got {data!r:.60}")
        own = {"source", "step", "seconds", "train_seconds"}
        rest = {k: v for k, v in data.items() if k not in own}
        return super().from_json({**{k: v for k, v in data.items() if k in own}, "counts": rest}, where)


@dataclass(frozen=True)
class TrainLogRecord(Record):
    """The training log of one generation (:meth:`..train.log.TrainLog.to_dict`)."""

    steps: list[TrainStep | DistillStep]
    evals: list[EvalPoint]
    tokens: int
    seconds: float
    tokens_per_second: float | None
    resumed_from_step: int
    projected_share: float | None | Absent = absent()
    """A-GEM only: the share of the steps with rehearsal rows whose domain gradient was projected."""
    refreshes: list[Refresh] | None = omitted()
    """Left out when no source's rows were rewritten."""


@dataclass(frozen=True)
class MixtureEntry(Record):
    """A replay controller's mixture after one evaluation (:meth:`..train.steer.Steering.observe`),
    the step counted over the generations."""

    step: int
    shares: dict[str, float]
    """The target share of every source, ``domain`` included."""
    loss: dict[str, float] | None = omitted()
    """The controller's summarized losses (absent before the first step)."""
    trend: dict[str, float] | None = omitted()
    generation: int = field(kw_only=True)  # written last; a field without a default after those with one
