"""An arm's frontier of operating points (domain skill vs retention on the validation data) and the
point chosen from it (:mod:`replaybank.llm.eval.frontier`, :mod:`replaybank.llm.eval.operating`)."""

from __future__ import annotations

from dataclasses import dataclass

from replaybank.llm.records import JsonObject, Record, omitted

__all__ = ["Frontier", "FrontierPoint"]


@dataclass(frozen=True)
class FrontierPoint(Record):
    """One way of running a trained adapter, measured on the validation data.

    A post-hoc ``scale`` multiplies every LoRA layer's scaling by a factor: ``lo`` at the first
    decoder layer and ``hi`` at the last, linear in between (``uniform``: ``lo == hi``; ``depth``:
    LiNeS-style, ``lo`` the configured scale and ``hi`` 1). A ``checkpoint`` is the adapter as it
    was at optimizer step ``step``.
    """

    made_by: str
    """``scale`` or ``checkpoint``."""
    profile: str
    """``uniform`` or ``depth`` for a scale; ``none`` for a checkpoint."""
    lo: float
    hi: float
    change: float
    """How much of the trained update the point applies (the mean layer factor of a scale, a
    checkpoint's step over the last step): among equal points the smaller change is chosen."""
    domain_exact_match: float
    """Generated exact match on the validation domain requests (mean over the distinct domains)."""
    retention: dict[str, float | None]
    """Per family on the validation suite: the score over the base model's (None: the base scores 0)."""
    min_retention: float | None
    """The least of :attr:`retention` (None when no family has one)."""
    step: int | None = omitted()
    """A checkpoint's optimizer step in its (the last) generation's training; absent for a scale."""

    def label(self) -> str:
        """``step N`` for a checkpoint; the factor (``0.5``) or first-last factors (``0.5-1``) of a scale."""
        if self.made_by == "checkpoint":
            return f"step {self.step}"
        return f"{self.lo:g}" if self.lo == self.hi else f"{self.lo:g}-{self.hi:g}"


@dataclass(frozen=True)
class Frontier(Record):
    """Every operating point of one trained arm in one seed, and the one it runs at."""

    points: list[FrontierPoint]
    pareto: list[int]
    """Indices of the points no other point beats on both domain exact match and min retention."""
    floor: dict[str, float]
    """``[evaluation] retention_floor`` per family, as the chooser applied it."""
    chosen: int | None
    """Index of the chosen point; None when no point is eligible (the arm then runs as trained)."""
    reason: str
    """Why that point (or why none)."""
    tradeoff: float | None
    """Spearman rank correlation of domain exact match and min retention over the points (negative:
    a real trade-off); None with fewer than two distinct values on either side."""
    trained_exact_match: float
    """The trained adapter's test domain exact match, before choosing (the arm's ``domain`` is the chosen point's)."""
    trained_retention: dict[str, float | None]
    """The trained adapter's test-suite retention per family, before choosing."""
    validation: JsonObject
    """What the points were measured on: the validation suite's items and the requests' source."""
    seconds: float | None = omitted()
    keep_skill: float | None = omitted()
    """``[evaluation] keep_skill`` as the chooser applied it: an eligible point keeps at least this
    share of the as-trained point's validation domain exact match (0: no such rule; absent in
    files written before the rule)."""
