"""Per arm and suite family, over seeds: score and retention with 95% intervals, items, flips.

Reads the per-item outcomes every seed kept (``per_seed[k][arm]["suite"]["items"]``, the base
model's in ``per_seed[k]["base"]``) and pairs them by item id, so it works for whatever families
the suite holds. Per seed: the family score with its Wilson interval over the seed's items, the
retention (score / the base model's score on the same items; None when the base scores 0) and
the items lost and gained (:func:`replaybank.llm.eval.flips.flips`). Over seeds: the mean score and
the mean retention, each with a two-level percentile bootstrap (seeds, then items within each
seed; :func:`replaybank.intervals.bootstrap_ratio`), and the flips summed.

Example:
    >>> from replaybank.llm.results import ArmResult, DomainScore, Losses, MatrixResult, SuiteScore
    >>> item = lambda i, s: {"id": i, "family": "code", "prompt": i, "score": s, "answer": str(s)}
    >>> arm = lambda *items: ArmResult(Losses(1.0, 1.0, 1.0, [1.0]), 0.0, 0.0, SuiteScore({}, 0.0, {}, {}, list(items)),
    ...                                DomainScore(0.0, None, 1), MatrixResult([[0.0]]))
    >>> seed = {"base": arm(item("a", 1.0), item("b", 1.0)), "naive": arm(item("a", 0.0), item("b", 1.0))}
    >>> out = family_summary([seed], [0])
    >>> fam = out["naive"].families["code"]
    >>> fam.retention.mean, fam.lost, fam.n_items, [f["id"] for f in out["naive"].flips[0].lost]
    (0.5, 1, 2, ['a'])
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from replaybank.intervals import RESAMPLES, bootstrap_ratio, wilson
from replaybank.llm.eval.flips import flips
from replaybank.llm.results import (
    ArmResult,
    FamilySeed,
    FamilyStats,
    Interval,
    IntervalMethod,
    JsonObject,
    SeedFlips,
)

__all__ = ["BOOTSTRAP_SEED", "LEVEL", "ArmFamilies", "family_summary", "interval_method"]

LEVEL = 0.95
BOOTSTRAP_SEED = 0
"""Seed of the bootstrap's generator: the same run always reports the same intervals."""


@dataclass(frozen=True)
class ArmFamilies:
    """One arm's suite families over seeds, and (not for ``base``) the items it lost and gained per seed."""

    families: dict[str, FamilyStats]
    flips: list[SeedFlips] | None


def interval_method(resamples: int = RESAMPLES) -> IntervalMethod:
    """How the intervals were computed (written to metrics.json as ``intervals``)."""
    return IntervalMethod(
        level=LEVEL,
        per_seed="Wilson score interval of the family score over the seed's items",
        over_seeds="percentile bootstrap of the mean over seeds: resample the seeds, then the items "
                   "within each resampled seed (base and arm scores of an item paired)",
        resamples=resamples,
        bootstrap_seed=BOOTSTRAP_SEED,
    )


def family_summary(
    per_seed: Sequence[Mapping[str, ArmResult]], seeds: Sequence[int], *, resamples: int = RESAMPLES,
) -> dict[str, ArmFamilies]:
    """``{arm: ArmFamilies}`` for every arm with suite items.

    Args:
        per_seed: every seed's arm results (``run_seed``'s ``"arms"``), each holding ``"base"``.
        seeds: the seed numbers, in the same order.
        resamples: bootstrap resamples.

    Returns:
        Per arm: :class:`~replaybank.llm.results.FamilyStats` per family, and (not for ``base``)
        :class:`~replaybank.llm.results.SeedFlips` per seed with the items in full. Arms or seeds
        without per-item outcomes (or without a base) are left out.
    """
    out: dict[str, ArmFamilies] = {}
    arms: list[str] = []
    for seed_arms in per_seed:
        arms += [a for a in seed_arms if a not in arms]
    for arm in arms:
        pairs = [
            (seed, _items(seed_arms.get("base")), _items(seed_arms.get(arm)))
            for seed, seed_arms in zip(seeds, per_seed, strict=True)
        ]
        pairs = [(s, b, a) for s, b, a in pairs if b and a]
        if not pairs:
            continue
        per_seed_flips = [SeedFlips.from_json({"seed": s, **flips(b, a)}, "flips") for s, b, a in pairs]
        out[arm] = ArmFamilies(_families(pairs, per_seed_flips, resamples), per_seed_flips if arm != "base" else None)
    return out


def _items(result: ArmResult | None) -> list[JsonObject]:
    return list(result.suite.items) if result is not None else []


def _families(
    pairs: list[tuple[int, list[JsonObject], list[JsonObject]]], per_seed_flips: list[SeedFlips], resamples: int,
) -> dict[str, FamilyStats]:
    families: list[str] = []
    for _, _, arm_items in pairs:
        families += [f for f in dict.fromkeys(str(o["family"]) for o in arm_items) if f not in families]
    out: dict[str, FamilyStats] = {}
    for fam in families:
        rows: list[FamilySeed] = []
        scores: list[tuple[np.ndarray, np.ndarray]] = []
        paired: list[tuple[np.ndarray, np.ndarray]] = []
        for (seed, base_items, arm_items), fl in zip(pairs, per_seed_flips, strict=True):
            base = {o["id"]: float(o["score"]) for o in base_items}  # type: ignore[arg-type]
            arm_scores = np.array([float(o["score"]) for o in arm_items if o["family"] == fam])  # type: ignore[arg-type]
            if arm_scores.size == 0:
                continue
            base_scores = np.array([base[o["id"]] for o in arm_items if o["family"] == fam])
            low, high = wilson(float(np.clip(arm_scores.sum(), 0, arm_scores.size)), int(arm_scores.size), LEVEL)
            counts = fl.per_family.get(fam)
            ref = float(base_scores.mean())
            rows.append(FamilySeed(
                seed=seed, n=int(arm_scores.size), score=round(float(arm_scores.mean()), 4),
                score_low=round(low, 4), score_high=round(high, 4),
                retention=round(float(arm_scores.mean()) / ref, 4) if ref > 0 else None,
                lost=counts.lost if counts else 0, gained=counts.gained if counts else 0,
            ))
            scores.append((arm_scores, np.ones_like(arm_scores)))
            paired.append((arm_scores, base_scores))
        score = bootstrap_ratio(scores, resamples=resamples, seed=BOOTSTRAP_SEED, level=LEVEL)
        retention = bootstrap_ratio(paired, resamples=resamples, seed=BOOTSTRAP_SEED, level=LEVEL)
        out[fam] = FamilyStats(
            score=Interval.from_json(score.to_dict(), "bootstrap") if score else None,
            retention=Interval.from_json(retention.to_dict(), "bootstrap") if retention else None,
            n_items=sum(r.n for r in rows), n_seeds=len(rows),
            lost=sum(r.lost for r in rows), gained=sum(r.gained for r in rows),
            per_seed=rows,
        )
    return out
