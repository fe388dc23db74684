"""Matched-pair interventions: the same workload replayed with exactly one factor changed.

A **unit** is one seeded workload: ``requests`` requests drawn (by the seed) from a recorded trace
and served ``concurrent`` at a time in a seeded order (``schedule.py``). Every unit is replayed
under a **baseline** setting and under each **intervention**, which changes one factor only:

==========  ===========================  =========================================================
factor      baseline                     intervention
==========  ===========================  =========================================================
semantics   per step (atomic unions)     per token (the biased replay)
mixing      each workload on its own     the units of all workloads (same seed) in one stream,
            (counts summed)              served ``concurrent`` at a time (the contaminated trace)
prefetch    off                          ``prefetch`` experts per event for layers >= 1
capacity    ``ratio`` of each layer      ``alt_ratio`` of each layer
==========  ===========================  =========================================================

For each pair, the causal policies (``CAUSAL``) are ranked by misses (1 = fewest; ties share the
mean rank) and the two rankings compared: Kendall's tau-b, whether the best policy changed, how
many policies changed rank, and each policy's shift in the share of the LRU-to-optimal gap it
recovers. ``mixing`` has one unit per seed (all workloads); the others one per workload and seed.

>>> kendall_tau([1, 2, 3, 4], [1, 2, 4, 3])
0.6666666666666666
>>> rank({"lru": 10, "lfu": 8, "pred": 8})
{'lru': 3.0, 'lfu': 1.5, 'pred': 1.5}
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ..errors import ReplayBankError
from .schedule import concat, interleave, requests_of, select
from .simulate import POLICIES, Comparison, Counts, capacity_for_ratio, compare
from .trace import Trace

CAUSAL = ("lru", "lfu", "lfru", "random", "pred")
FACTORS = ("semantics", "mixing", "prefetch", "capacity")


@dataclass(frozen=True)
class Setting:
    """How one replay of a unit is run (the baseline, or the baseline with one factor changed)."""

    semantics: str = "step"
    mixed: bool = False
    prefetch: int = 0
    ratio: float = 0.5


@dataclass(frozen=True)
class Design:
    """The study: unit sizes, seeds, the baseline and the changed values."""

    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    requests: int = 24
    concurrent: int = 4
    ratio: float = 0.5
    alt_ratio: float = 0.625
    prefetch: int = 2

    def __post_init__(self) -> None:
        seeds = tuple(self.seeds) if isinstance(self.seeds, (list, tuple)) else None
        if not seeds or not all(
            isinstance(s, (int, np.integer)) and not isinstance(s, bool) and s >= 0 for s in seeds
        ):
            raise ReplayBankError(
                f"seeds = {self.seeds!r}: expected a non-empty tuple of integers >= 0"
            )
        object.__setattr__(self, "seeds", tuple(int(s) for s in seeds))
        for name, low in (("requests", 1), ("concurrent", 1), ("prefetch", 0)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < low:
                raise ReplayBankError(f"{name} = {v!r}: expected an integer >= {low}")
        for name in ("ratio", "alt_ratio"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v <= 1:
                raise ReplayBankError(f"{name} = {v!r}: expected a capacity ratio in (0, 1]")

    def baseline(self) -> Setting:
        return Setting(ratio=self.ratio)

    def changed(self, factor: str) -> Setting:
        base = self.baseline()
        return {
            "semantics": replace(base, semantics="token"),
            "mixing": replace(base, mixed=True),
            "prefetch": replace(base, prefetch=self.prefetch),
            "capacity": replace(base, ratio=self.alt_ratio),
        }[factor]


def kendall_tau(a: Sequence[float], b: Sequence[float]) -> float:
    """Kendall's tau-b of two paired sequences (ties allowed; ``nan`` if either is constant)."""
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    i, j = np.triu_indices(len(x), 1)
    dx, dy = np.sign(x[i] - x[j]), np.sign(y[i] - y[j])
    denom = np.sqrt(np.count_nonzero(dx) * np.count_nonzero(dy))
    return float((dx * dy).sum() / denom) if denom else float("nan")


def rank(misses: Mapping[str, float]) -> dict[str, float]:
    """1 = fewest misses; tied policies share the mean of their ranks."""
    values = np.array(list(misses.values()), dtype=float)
    out = {}
    for name, v in misses.items():
        below, same = int((values < v).sum()), int((values == v).sum())
        out[name] = below + (same + 1) / 2
    return out


def unit_traces(workloads: Mapping[str, Trace], design: Design, seed: int) -> dict[str, Trace]:
    """Each workload's unit of ``seed``: ``design.requests`` of its requests, interleaved.

    Raises:
        ReplayBankError: a workload with fewer requests than ``design.requests``.
    """
    out: dict[str, Trace] = {}
    for name, trace in workloads.items():
        ids = requests_of(trace)
        if len(ids) < design.requests:
            raise ReplayBankError(
                f"workload {name!r}: {len(ids)} requests, the design draws {design.requests}"
            )
        rng = np.random.default_rng([seed, len(out)])
        chosen = sorted(rng.choice(ids, size=design.requests, replace=False).tolist())
        out[name] = interleave(select(trace, chosen), design.concurrent, seed)
    return out


def replay(traces: Sequence[Trace], setting: Setting, design: Design, seed: int) -> dict[str, Any]:
    """Every policy on ``traces`` under ``setting``: separately (counts summed over traces) or,
    when ``setting.mixed``, as one interleaved stream. Returns per policy the summed ``Counts``
    and the gap recovered."""
    if setting.mixed:
        traces = [interleave(concat(traces), design.concurrent, seed)]
    totals: dict[str, Counts] = {p: Counts() for p in POLICIES}
    for trace in traces:
        res: Comparison = compare(
            trace, capacity_for_ratio(trace, setting.ratio), POLICIES,
            semantics=setting.semantics, prefetch=setting.prefetch, seed=seed,  # type: ignore[arg-type]
        )  # fmt: skip
        for p in POLICIES:
            totals[p] = totals[p] + res.results[p].total
    lru, opt = totals["lru"].misses, totals["opt"].misses
    return {
        p: {
            "counts": c,
            "gap_recovered": None if lru == opt else (lru - c.misses) / (lru - opt),
        }
        for p, c in totals.items()
    }


def _pair(base: dict[str, Any], alt: dict[str, Any]) -> dict[str, Any]:
    mb = {p: base[p]["counts"].misses for p in CAUSAL}
    ma = {p: alt[p]["counts"].misses for p in CAUSAL}
    rb, ra = rank(mb), rank(ma)
    best_b = min(CAUSAL, key=lambda p: (mb[p], p))
    best_a = min(CAUSAL, key=lambda p: (ma[p], p))

    def gap(r: dict[str, Any], p: str) -> float:
        g = r[p]["gap_recovered"]
        return float("nan") if g is None else g

    top = sorted(mb.values())[:3]
    return {
        "tau": kendall_tau([mb[p] for p in CAUSAL], [ma[p] for p in CAUSAL]),
        # how close the three best causal policies are at baseline (rank flips among near ties)
        "top3_spread": (top[-1] - top[0]) / top[0] if top[0] else float("nan"),
        "winner_changed": best_b != best_a,
        "winner": [best_b, best_a],
        "rank_changes": int(sum(rb[p] != ra[p] for p in CAUSAL)),
        "ranks": {p: [rb[p], ra[p]] for p in CAUSAL},
        "gap_shift": {p: gap(alt, p) - gap(base, p) for p in CAUSAL},
        **{
            key: {p: [getattr(r[p]["counts"], key) for r in (base, alt)] for p in POLICIES}
            for key in ("miss_rate", "loads", "stalls", "prefetch_accuracy")
        },
    }


def run_study(workloads: Mapping[str, Trace], design: Design) -> dict[str, Any]:
    """The baseline of every unit and every factor's matched pairs; plain dicts (for JSON).

    Returns:
        ``{"design", "baseline": [unit rows], "factors": {factor: {"pairs": [...], "summary"}}}``
        where a unit row holds ``workload``, ``seed`` and per policy its counts, miss rate,
        victim rate and gap recovered.
    """
    if len(workloads) < 1:
        raise ReplayBankError("run_study: no workloads")
    base_rows, pairs = [], {f: [] for f in FACTORS}  # type: ignore[var-annotated]
    for seed in design.seeds:
        units = unit_traces(workloads, design, seed)
        base: dict[str, dict[str, Any]] = {}
        for name, trace in units.items():
            base[name] = replay([trace], design.baseline(), design, seed)
            base_rows.append({"workload": name, "seed": seed, "policies": _rows(base[name])})
            for factor in ("semantics", "prefetch", "capacity"):
                alt = replay([trace], design.changed(factor), design, seed)
                pairs[factor].append({"workload": name, "seed": seed, **_pair(base[name], alt)})
        if len(units) > 1:
            separate = replay(list(units.values()), design.baseline(), design, seed)
            mixed = replay(list(units.values()), design.changed("mixing"), design, seed)
            pairs["mixing"].append(
                {"workload": "+".join(units), "seed": seed, **_pair(separate, mixed)}
            )
    return {
        "design": {**design.__dict__, "seeds": list(design.seeds), "causal": list(CAUSAL)},
        "baseline": base_rows,
        "factors": {f: {"pairs": p, "summary": summarize(p)} for f, p in pairs.items() if p},
    }


def _rows(result: dict[str, Any]) -> dict[str, Any]:
    return {
        p: {**r["counts"].to_dict(), "gap_recovered": r["gap_recovered"]} for p, r in result.items()
    }


def _spread(values: Sequence[float]) -> dict[str, float]:
    v = np.asarray([x for x in values if x == x], dtype=float)
    if len(v) == 0:
        return {"mean": float("nan"), "std": float("nan"), "min": float("nan"), "max": float("nan")}
    return {"mean": float(v.mean()), "std": float(v.std(ddof=1)) if len(v) > 1 else 0.0,
            "min": float(v.min()), "max": float(v.max())}  # fmt: skip


def summarize(pairs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Over a factor's pairs: tau (mean, std, min, max), the share of units whose best policy or
    any rank changed, the baseline's relative miss spread among the three best causal policies,
    per policy the mean rank and miss rate before and after, and the gap shift."""
    return {
        "units": len(pairs),
        "tau": _spread([p["tau"] for p in pairs]),
        "winner_changed": float(np.mean([p["winner_changed"] for p in pairs])),
        "any_rank_changed": float(np.mean([p["rank_changes"] > 0 for p in pairs])),
        "rank_changes": _spread([p["rank_changes"] for p in pairs]),
        "top3_spread": _spread([p["top3_spread"] for p in pairs]),
        **{
            key: {
                c: [_spread([p[key][c][k] for p in pairs])["mean"] for k in (0, 1)]
                for c in POLICIES
            }
            for key in ("miss_rate", "loads", "stalls", "prefetch_accuracy")
        },
        "mean_rank": {
            c: [float(np.mean([p["ranks"][c][k] for p in pairs])) for k in (0, 1)] for c in CAUSAL
        },
        "gap_shift": {c: _spread([p["gap_shift"][c] for p in pairs]) for c in CAUSAL},
    }
