"""Per arm and suite family, over seeds: score and retention with 95% intervals, items, flips.

Reads the per-item outcomes every seed kept (``per_seed[k][arm]["suite"]["items"]``, the base
model's in ``per_seed[k]["base"]``) and pairs them by item id, so it works for whatever families
the suite holds. Per seed: the family score with its Wilson interval over the seed's items, the
retention (score / the base model's score on the same items; None when the base scores 0) and
the items lost and gained (:func:`replaybank.llm.eval.flips.flips`). Over seeds: the mean score and
the mean retention, each with a two-level percentile bootstrap (seeds, then items within each
seed; :func:`replaybank.intervals.bootstrap_ratio`), and the flips summed.

Example:
    >>> item = lambda i, s: {"id": i, "family": "code", "prompt": i, "score": s, "answer": str(s)}
    >>> seed = {"base": {"suite": {"items": [item("a", 1.0), item("b", 1.0)]}},
    ...         "naive": {"suite": {"items": [item("a", 0.0), item("b", 1.0)]}}}
    >>> out = family_summary([seed], [0])
    >>> fam = out["naive"]["families"]["code"]
    >>> fam["retention"]["mean"], fam["lost"], fam["n_items"], [f["id"] for f in out["naive"]["flips"][0]["lost"]]
    (0.5, 1, 2, ['a'])
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from replaybank.intervals import RESAMPLES, bootstrap_ratio, wilson
from replaybank.llm.eval.flips import flips

__all__ = ["BOOTSTRAP_SEED", "LEVEL", "family_summary", "interval_method"]

LEVEL = 0.95
BOOTSTRAP_SEED = 0
"""Seed of the bootstrap's generator: the same run always reports the same intervals."""


def interval_method(resamples: int = RESAMPLES) -> dict[str, Any]:
    """How the intervals were computed (written to metrics.json as ``intervals``)."""
    return {
        "level": LEVEL,
        "per_seed": "Wilson score interval of the family score over the seed's items",
        "over_seeds": "percentile bootstrap of the mean over seeds: resample the seeds, then the items "
                      "within each resampled seed (base and arm scores of an item paired)",
        "resamples": resamples,
        "bootstrap_seed": BOOTSTRAP_SEED,
    }


def family_summary(
    per_seed: Sequence[dict[str, dict[str, Any]]], seeds: Sequence[int], *, resamples: int = RESAMPLES,
) -> dict[str, dict[str, Any]]:
    """``{arm: {"families": {family: ...}, "flips": [per seed]}}`` for every arm with suite items.

    Args:
        per_seed: every seed's arm results (``run_seed``'s ``"arms"``), each holding ``"base"``.
        seeds: the seed numbers, in the same order.
        resamples: bootstrap resamples.

    Returns:
        Per arm: ``families[family] = {"score": {"mean", "low", "high"}, "retention": {"mean",
        "low", "high"} | None, "n_items", "n_seeds", "lost", "gained", "per_seed": [{"seed", "n",
        "score", "score_low", "score_high", "retention", "lost", "gained"}]}``; and ``flips`` (not
        for ``base``): ``[{"seed", "lost", "gained", "per_family"}]`` with the items in full.
        Arms or seeds without per-item outcomes (or without a base) are left out.
    """
    out: dict[str, dict[str, Any]] = {}
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
        per_seed_flips = [{"seed": s, **flips(b, a)} for s, b, a in pairs]
        out[arm] = {"families": _families(pairs, per_seed_flips, resamples)}
        if arm != "base":
            out[arm]["flips"] = per_seed_flips
    return out


def _items(result: dict[str, Any] | None) -> list[dict[str, Any]]:
    suite = (result or {}).get("suite") or {}
    return list(suite.get("items") or [])


def _families(
    pairs: list[tuple[int, list[dict[str, Any]], list[dict[str, Any]]]], per_seed_flips: list[dict[str, Any]],
    resamples: int,
) -> dict[str, dict[str, Any]]:
    families: list[str] = []
    for _, _, arm_items in pairs:
        families += [f for f in dict.fromkeys(str(o["family"]) for o in arm_items) if f not in families]
    out: dict[str, dict[str, Any]] = {}
    for fam in families:
        rows: list[dict[str, Any]] = []
        scores: list[tuple[np.ndarray, np.ndarray]] = []
        paired: list[tuple[np.ndarray, np.ndarray]] = []
        for (seed, base_items, arm_items), fl in zip(pairs, per_seed_flips, strict=True):
            base = {o["id"]: float(o["score"]) for o in base_items}
            arm_scores = np.array([float(o["score"]) for o in arm_items if o["family"] == fam])
            if arm_scores.size == 0:
                continue
            base_scores = np.array([base[o["id"]] for o in arm_items if o["family"] == fam])
            low, high = wilson(float(np.clip(arm_scores.sum(), 0, arm_scores.size)), int(arm_scores.size), LEVEL)
            counts = fl["per_family"].get(fam, {"lost": 0, "gained": 0})
            ref = float(base_scores.mean())
            rows.append({
                "seed": seed, "n": int(arm_scores.size), "score": round(float(arm_scores.mean()), 4),
                "score_low": round(low, 4), "score_high": round(high, 4),
                "retention": round(float(arm_scores.mean()) / ref, 4) if ref > 0 else None,
                "lost": counts["lost"], "gained": counts["gained"],
            })
            scores.append((arm_scores, np.ones_like(arm_scores)))
            paired.append((arm_scores, base_scores))
        score = bootstrap_ratio(scores, resamples=resamples, seed=BOOTSTRAP_SEED, level=LEVEL)
        retention = bootstrap_ratio(paired, resamples=resamples, seed=BOOTSTRAP_SEED, level=LEVEL)
        out[fam] = {
            "score": score.to_dict() if score else None,
            "retention": retention.to_dict() if retention else None,
            "n_items": sum(r["n"] for r in rows), "n_seeds": len(rows),
            "lost": sum(r["lost"] for r in rows), "gained": sum(r["gained"] for r in rows),
            "per_seed": rows,
        }
    return out
