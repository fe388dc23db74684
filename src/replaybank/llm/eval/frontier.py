"""The frontier of an arm's operating points and the rule that picks one: pure functions, numpy only.

Every recipe trades domain skill for retention; a trained adapter run at other post-hoc scales (or
taken at earlier checkpoints) traces that trade-off. A point is a :class:`FrontierPoint` (how it
was made, its validation domain exact match, its validation retention per family);
:func:`pareto` keeps the points nothing beats on both axes; :func:`choose` takes the point with the
best domain score among those whose validation retention keeps the floor; :func:`spearman` says
how strongly the two axes move against each other.

Example:
    >>> pts = [point(1.0, 0.9, {"code": 0.70}), point(0.5, 0.6, {"code": 0.92}), point(0.25, 0.3, {"code": 0.99})]
    >>> choice = choose(pts, 0.9)
    >>> choice.index, choice.reason
    (1, 'best validation domain exact match (0.600) among the 2 of 3 points whose validation retention keeps the floor')
    >>> choose(pts, 0.995).index is None
    True
    >>> pareto(pts), round(spearman([0.9, 0.6, 0.3], [0.70, 0.92, 0.99]), 3)
    ([0, 1, 2], -1.0)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from replaybank.llm.results.frontier import FrontierPoint

__all__ = ["Choice", "FrontierPoint", "choose", "keeps_floor", "min_retention", "pareto", "point", "spearman"]


@dataclass(frozen=True)
class Choice:
    """The chooser's answer: the index of the chosen point (None: none keeps the floor) and why."""

    index: int | None
    reason: str


def min_retention(retention: Mapping[str, float | None]) -> float | None:
    """The least retention over the families that have one (None when none has).

    Example:
        >>> min_retention({"code": 0.8, "open": None, "arithmetic": 0.95})
        0.8
    """
    known = [float(v) for v in retention.values() if v is not None]
    return min(known) if known else None


def point(scale: float, domain: float, retention: Mapping[str, float | None], profile: str = "uniform") -> FrontierPoint:
    """A uniform (or, with ``profile="depth"``, LiNeS-style: ``scale`` at the first layer, 1 at the
    last) scale point; for tests and examples."""
    lo, hi = (scale, scale) if profile == "uniform" else (scale, 1.0)
    return FrontierPoint(made_by="scale", profile=profile, lo=lo, hi=hi, change=(lo + hi) / 2,
                         domain_exact_match=domain, retention=dict(retention), min_retention=min_retention(retention))


def keeps_floor(p: FrontierPoint, floor: float | Mapping[str, float]) -> bool:
    """Whether every family with a retention keeps its floor (one number for all, or per family:
    a family the table leaves out is not held to one). A point with no retention at all keeps none."""
    known = {f: v for f, v in p.retention.items() if v is not None}
    if not known:
        return False
    if isinstance(floor, Mapping):
        return all(v >= floor[f] for f, v in known.items() if f in floor)
    return all(v >= floor for v in known.values())


def pareto(points: Sequence[FrontierPoint]) -> list[int]:
    """Indices (in order) of the points that no other point dominates: at least as good on
    domain exact match and on min retention, and better on one. A point without a retention is
    never on the front.

    Example:
        >>> pareto([point(1, 0.9, {"c": 0.5}), point(0.5, 0.9, {"c": 0.6}), point(0.2, 0.1, {"c": 0.6})])
        [1]
    """
    xs = np.array([p.domain_exact_match for p in points], dtype=float)
    ys = np.array([np.nan if p.min_retention is None else p.min_retention for p in points], dtype=float)
    front: list[int] = []
    for i in range(len(points)):
        if np.isnan(ys[i]):
            continue
        others = ~np.isnan(ys)
        better_or_equal = others & (xs >= xs[i]) & (ys >= ys[i])
        strictly = (xs > xs[i]) | (ys > ys[i])
        if not np.any(better_or_equal & strictly):
            front.append(i)
    return front


def choose(points: Sequence[FrontierPoint], floor: float | Mapping[str, float]) -> Choice:
    """The point with the best validation domain exact match among those whose validation retention
    keeps ``floor`` (:func:`keeps_floor`); ties go to the higher min retention, then the smaller
    change (less of the trained update), then the earlier point.

    Args:
        points: the frontier (validation figures).
        floor: ``[evaluation] retention_floor``: one number, or ``{family: floor}``.

    Returns:
        A :class:`Choice`; ``index`` is None, with the reason, when no point keeps the floor.

    Example:
        >>> pts = [point(1.0, 0.5, {"code": 0.95}), point(0.5, 0.5, {"code": 0.95})]
        >>> choose(pts, {"code": 0.9}).index
        1
    """
    if not points:
        return Choice(None, "no operating point was measured")
    kept = [i for i, p in enumerate(points) if keeps_floor(p, floor)]
    if not kept:
        best = max((p.min_retention for p in points if p.min_retention is not None), default=None)
        shown = "no retention" if best is None else f"the best min retention is {best:.3f}"
        return Choice(None, f"no point's validation retention keeps the floor ({shown}); the arm runs as trained")
    index = min(kept, key=lambda i: (-points[i].domain_exact_match, -(points[i].min_retention or 0.0), points[i].change, i))
    return Choice(index, f"best validation domain exact match ({points[index].domain_exact_match:.3f}) among the "
                         f"{len(kept)} of {len(points)} points whose validation retention keeps the floor")


def _ranks(values: np.ndarray) -> np.ndarray:
    """Ranks from 1, ties sharing their mean rank."""
    order = np.argsort(values, kind="mergesort")
    ranks = np.empty(len(values), dtype=float)
    ranks[order] = np.arange(1, len(values) + 1, dtype=float)
    for v in np.unique(values):
        tied = values == v
        ranks[tied] = ranks[tied].mean()
    return ranks


def spearman(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Spearman's rank correlation (ties take their mean rank); None with fewer than two points or
    when either side has a single value.

    Raises:
        ValueError: ``x`` and ``y`` differ in length.

    Example:
        >>> round(spearman([1, 2, 3, 4], [10, 20, 30, 25]), 3), spearman([1, 2], [5, 5]) is None
        (0.8, True)
    """
    a, b = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if a.shape != b.shape:
        raise ValueError(f"spearman: {len(a)} values against {len(b)}")
    if len(a) < 2 or np.ptp(a) == 0 or np.ptp(b) == 0:
        return None
    ra, rb = _ranks(a), _ranks(b)
    return float(np.corrcoef(ra, rb)[0, 1])
