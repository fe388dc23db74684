"""The frontier of an arm's operating points and the rule that picks one: pure functions, numpy only.

Every recipe trades domain skill for retention; a trained adapter run at other post-hoc scales (or
taken at earlier checkpoints) traces that trade-off. A point is a :class:`FrontierPoint` (how it
was made, its validation domain exact match, its validation retention per family);
:func:`pareto` keeps the points nothing beats on both axes; :func:`choose` takes the point with the
best domain score among those whose validation retention keeps the floor and whose domain score
keeps a share of the adapter's as trained (a point that keeps the floor by giving up the skill is
refused); :func:`spearman` says how strongly the two axes move against each other.

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

__all__ = ["Choice", "FrontierPoint", "as_trained", "choose", "keeps_floor", "keeps_skill", "min_retention", "pareto", "point", "spearman"]


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


def as_trained(points: Sequence[FrontierPoint]) -> int | None:
    """Index of the adapter as trained among ``points``: the first uniform scale-1 point (None when
    none was measured).

    Example:
        >>> as_trained([point(0.5, 0.1, {"c": 1.0}), point(1.0, 0.7, {"c": 0.8})])
        1
    """
    return next((i for i, p in enumerate(points) if p.made_by == "scale" and p.lo == 1.0 and p.hi == 1.0), None)


def keeps_skill(p: FrontierPoint, keep_skill: float, trained: float) -> bool:
    """Whether ``p``'s validation domain exact match is at least ``keep_skill`` times ``trained``
    (the adapter as trained); ``keep_skill = 0`` keeps every point.

    Example:
        >>> keeps_skill(point(0.5, 0.04, {"c": 0.9}), 0.5, 0.71), keeps_skill(point(0.5, 0.04, {"c": 0.9}), 0.0, 0.71)
        (False, True)
    """
    return p.domain_exact_match >= keep_skill * trained


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def choose(
    points: Sequence[FrontierPoint], floor: float | Mapping[str, float], keep_skill: float = 0.0,
    trained: float | None = None,
) -> Choice:
    """The point with the best validation domain exact match among the eligible ones: those whose
    validation retention keeps ``floor`` (:func:`keeps_floor`) and whose validation domain exact
    match keeps ``keep_skill`` of the adapter's as trained (:func:`keeps_skill`); ties go to the
    higher min retention, then the smaller change (less of the trained update), then the earlier
    point.

    Args:
        points: the frontier (validation figures).
        floor: ``[evaluation] retention_floor``: one number, or ``{family: floor}``.
        keep_skill: ``[evaluation] keep_skill`` in [0, 1]; 0 turns the skill rule off.
        trained: the validation domain exact match of the adapter as trained; None: the uniform
            scale-1 point's (:func:`as_trained`).

    Returns:
        A :class:`Choice`; ``index`` is None, with the reason, when no point is eligible. The reason
        says whether no point keeps the floor, or some do but only by losing the skill.

    Raises:
        ValueError: ``keep_skill`` outside [0, 1], or ``keep_skill > 0`` with no ``trained`` and no
            uniform scale-1 point among ``points``.

    Example:
        >>> pts = [point(1.0, 0.5, {"code": 0.95}), point(0.5, 0.5, {"code": 0.95})]
        >>> choose(pts, {"code": 0.9}).index
        1
        >>> skill = [point(1.0, 0.71, {"code": 0.61}), point(0.5, 0.04, {"code": 0.72})]
        >>> choose(skill, 0.7, keep_skill=0.5).reason
        '1 of 2 points keep the floor, but only by losing the skill (best such: 4% validation domain exact match vs 71% as trained; keep_skill = 0.5 asks for at least 36%); the arm runs as trained'
        >>> choose(skill, 0.7).index
        1
    """
    if not 0.0 <= keep_skill <= 1.0:
        raise ValueError(f"choose: keep_skill = {keep_skill!r} is outside [0, 1]")
    if not points:
        return Choice(None, "no operating point was measured")
    if keep_skill > 0 and trained is None:
        at = as_trained(points)
        if at is None:
            raise ValueError("choose: keep_skill > 0 needs the adapter as trained (a uniform scale-1 point, or trained=)")
        trained = points[at].domain_exact_match
    kept = [i for i, p in enumerate(points) if keeps_floor(p, floor)]
    if not kept:
        best = max((p.min_retention for p in points if p.min_retention is not None), default=None)
        shown = "no retention" if best is None else f"the best min retention is {best:.3f}"
        return Choice(None, f"no point's validation retention keeps the floor ({shown}); the arm runs as trained")
    if keep_skill == 0 or trained is None:
        eligible, skill = kept, ""
    else:
        eligible = [i for i in kept if keeps_skill(points[i], keep_skill, trained)]
        skill = f" and that keep {keep_skill:g} of the trained validation domain exact match ({trained:.3f})"
        if not eligible:
            best_kept = max(points[i].domain_exact_match for i in kept)
            return Choice(None, f"{len(kept)} of {len(points)} points keep the floor, but only by losing the skill "
                                f"(best such: {_pct(best_kept)} validation domain exact match vs {_pct(trained)} as "
                                f"trained; keep_skill = {keep_skill:g} asks for at least {_pct(keep_skill * trained)}); "
                                "the arm runs as trained")
    index = min(eligible, key=lambda i: (-points[i].domain_exact_match, -(points[i].min_retention or 0.0), points[i].change, i))
    return Choice(index, f"best validation domain exact match ({points[index].domain_exact_match:.3f}) among the "
                         f"{len(eligible)} of {len(points)} points whose validation retention keeps the floor{skill}")


def _ranks(values: np.ndarray) -> np.ndarray:
    """Ranks from 1, ties sharing their mean rank."""
    order = np.argsort(values, kind="mergesort")
    ranks = np.empty(len(values), dtype=float)
    ranks[order] = np.arange(1, len(values) + 1, dtype=float)
    for v in np.unique(values):
        tied = values == v
        ranks[tied] = ranks[tied].mean()
    return ranks


def spearman(x: Sequence[float], y: Sequence[float], *, min_points: int = 2) -> float | None:
    """Spearman's rank correlation of ``x`` and ``y`` (ties take their mean rank).

    None with fewer than ``min_points`` pairs (two always rank perfectly: a caller reporting a
    correlation as evidence asks for three), or when either side has a single value.

    Raises:
        ValueError: ``x`` and ``y`` differ in length.

    Example:
        >>> round(spearman([1, 2, 3, 4], [10, 20, 30, 25]), 3), spearman([1, 2], [5, 5]) is None
        (0.8, True)
        >>> spearman([0.1, 0.5, 0.9], [0.9, 0.6, 0.2]), spearman([1, 2], [2, 1], min_points=3) is None
        (-1.0, True)
    """
    a, b = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if a.shape != b.shape:
        raise ValueError(f"spearman: {len(a)} values against {len(b)}")
    if len(a) < max(min_points, 2) or np.ptp(a) == 0 or np.ptp(b) == 0:
        return None
    ra, rb = _ranks(a), _ranks(b)
    return float(np.corrcoef(ra, rb)[0, 1])
