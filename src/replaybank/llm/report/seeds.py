"""Aggregating arms over seeds, and checking the experiment's targets on the aggregate.

Every arm of every seed is reduced to flat scalars (:func:`replaybank.llm.eval.measure.flatten`);
:func:`aggregate` gives, per arm and scalar, the mean, the sample standard deviation (``ddof=1``;
``None`` for a single seed, where no spread is measured), the count and the values in seed order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from replaybank.llm.eval.suite import CHECKED_FAMILIES
from replaybank.llm.results import Stat, TargetArm, Targets

Aggregate = dict[str, dict[str, Stat]]
"""``{arm: {scalar: Stat}}`` over seeds."""

FAMILIES = CHECKED_FAMILIES
"""The families a rehearsal arm's retention target is checked on: the checker-scored ones
(``open``, agreement with the base model's wording, is reported but not a target)."""


def aggregate(per_seed: Sequence[Mapping[str, Mapping[str, float]]]) -> Aggregate:
    """``{arm: {scalar: Stat}}`` over seeds: mean, std, n and the values.

    A scalar missing in some seeds is aggregated over the seeds that have it.

    Raises:
        ValueError: with no seeds.

    Example:
        >>> agg = aggregate([{"naive": {"leakage": 0.5}}, {"naive": {"leakage": 0.7}}, {"naive": {"leakage": 0.9}}])
        >>> round(agg["naive"]["leakage"].mean, 6), round(agg["naive"]["leakage"].std, 6), agg["naive"]["leakage"].n
        (0.7, 0.2, 3)
        >>> aggregate([{"base": {"x": 1.0}}])["base"]["x"].std is None
        True
    """
    if not per_seed:
        raise ValueError("no seeds to aggregate")
    arms: list[str] = []
    for seed in per_seed:
        arms += [a for a in seed if a not in arms]
    out: Aggregate = {}
    for arm in arms:
        keys: list[str] = []
        for seed in per_seed:
            keys += [k for k in seed.get(arm, {}) if k not in keys]
        out[arm] = {}
        for key in keys:
            values = [float(seed[arm][key]) for seed in per_seed if key in seed.get(arm, {})]
            arr = np.asarray(values, dtype=np.float64)
            out[arm][key] = Stat(
                mean=float(arr.mean()),
                std=float(arr.std(ddof=1)) if arr.size > 1 else None,
                n=int(arr.size),
                values=values,
            )
    return out


def _mean(summary: Mapping[str, Stat], key: str) -> float | None:
    entry = summary.get(key)
    return None if entry is None else float(entry.mean)


LEAKAGE_TARGET = 0.02
RETENTION_TARGET, SEED_FLOOR = 0.90, 0.85
DOMAIN_TARGET, DOMAIN_SLACK = 0.50, 0.05


def check_targets(agg: Aggregate, rehearsal_arms: Sequence[str]) -> Targets:
    """The main job's targets (docs/llm.md) on the seed means (and, for retention, on every seed).

    * naive loses behaviour: leakage >= 0.5, or conversation retention <= 2/3;
    * naive learns the skill: domain exact match >= 0.5 (mean over seeds);
    * per rehearsal arm: leakage <= 0.02; retention >= 0.9 in each checker-scored family
      (:data:`FAMILIES`; ``open`` is not a target) as the mean over seeds, and no seed below 0.85;
      domain exact match at least naive's minus 0.05; mean retention over those families above
      naive's. ``best_arm`` is the arm meeting most targets (ties: lower leakage).

    Example:
        >>> agg = aggregate([{"naive": {"leakage": 0.8, "retention_conversation": 0.5, "domain_exact_match": 0.9},
        ...                   "r": {"leakage": 0.0, "retention_conversation": 0.95, "retention_arithmetic": 1.0,
        ...                         "retention_code": 0.92, "domain_exact_match": 0.88}}])
        >>> t = check_targets(agg, ["r"])
        >>> t.naive_loses_behaviour, t.naive_learns_skill, t.arms["r"].met, t.best_arm
        (True, True, True, 'r')
    """
    arms: dict[str, TargetArm] = {}
    naive = agg.get("naive", {})
    leak, conv = _mean(naive, "leakage"), _mean(naive, "retention_conversation")
    loses = None
    if leak is not None or conv is not None:
        loses = bool((leak is not None and leak >= 0.5) or (conv is not None and conv <= 2 / 3))
    naive_dom = _mean(naive, "domain_exact_match")
    learns = naive_dom >= DOMAIN_TARGET if naive_dom is not None else None
    naive_ret = _mean_retention(naive)
    for arm in rehearsal_arms:
        s = agg.get(arm)
        if not s:
            continue
        checks: dict[str, bool | None] = {}
        arm_leak = _mean(s, "leakage")
        checks["leakage_at_most_2pct"] = None if arm_leak is None else arm_leak <= LEAKAGE_TARGET
        for fam in FAMILIES:
            entry = s.get(f"retention_{fam}")
            checks[f"retention_{fam}_at_least_90pct"] = None if entry is None else (
                entry.mean >= RETENTION_TARGET and min(entry.values) >= SEED_FLOOR)
        dom = _mean(s, "domain_exact_match")
        checks["domain_within_5_points_of_naive"] = None if dom is None or naive_dom is None else dom >= naive_dom - DOMAIN_SLACK
        ret = _mean_retention(s)
        checks["retention_above_naive"] = None if ret is None or naive_ret is None else ret > naive_ret
        known = [v for v in checks.values() if v is not None]
        arms[arm] = TargetArm(checks=checks, met=bool(known) and all(known), count=sum(known))
    best = max(arms, key=lambda a: (arms[a].count, -(_mean(agg[a], "leakage") or 0.0))) if arms else None
    return Targets(arms=arms, naive_loses_behaviour=loses, naive_learns_skill=learns, best_arm=best)


def _mean_retention(summary: Mapping[str, Stat]) -> float | None:
    values = [v for fam in FAMILIES if (v := _mean(summary, f"retention_{fam}")) is not None]
    return float(np.mean(values)) if values else None
