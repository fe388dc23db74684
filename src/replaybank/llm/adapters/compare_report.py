"""Issue 26's comparison over seeds: flat scalars per approach, mean ± std, the targets, the table.

Pure functions over :func:`.compare.measure_seed`'s results (no torch): :func:`flatten` reduces one
seed to scalars per approach, :func:`summarise_seeds` aggregates them with the main job's
:func:`replaybank.llm.report.seeds.aggregate` (mean, sample std with ``ddof = 1``, None for one
seed), :func:`check_targets` checks the issue's targets on the seed means and :func:`table` prints
the Markdown table.

Example:
    >>> seed = {"skills": ["a", "b"], "approaches": {
    ...     "routed": {"accuracy": [0.5, 0.75], "retention": 1.0, "memory_bytes": 2_000_000},
    ...     "oracle": {"accuracy": [0.5, 0.875], "retention": None, "memory_bytes": 2_000_000}}}
    >>> flat = flatten(seed)["routed"]
    >>> flat["acc_mean"], flat["gap_b"], flat["memory_mb"]
    (0.625, -0.125, 2.0)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["GAP_TARGET", "RETENTION_TARGET", "check_targets", "flatten", "summarise_seeds", "table"]

GAP_TARGET = -0.05
"""Routed: no skill's accuracy more than 5 points below its own adapter's (the oracle)."""
RETENTION_TARGET = 0.95
"""Routed: general retention at least 95% of the base model's."""


def flatten(seed: dict[str, Any]) -> dict[str, dict[str, float]]:
    """``{approach: {scalar: value}}`` of one seed: ``acc_<skill>``, ``acc_mean``, ``gap_<skill>``
    (accuracy minus the oracle's on the same seed), ``retention``, ``retention_<family>``,
    ``leakage``, ``memory_mb``, ``latency_ms``, ``ms_per_token``, the routed approach's
    ``routing_accuracy``, ``fallback_skill``, ``fallback_general``, and for arms of the run their
    ``backward_transfer`` (from the run's accuracy matrix). Missing figures are left out."""
    skills = list(seed["skills"])
    oracle = seed["approaches"].get("oracle", {}).get("accuracy")
    out: dict[str, dict[str, float]] = {}
    for name, a in seed["approaches"].items():
        flat: dict[str, float] = {}
        acc = [float(x) for x in a.get("accuracy") or []]
        for skill, x in zip(skills, acc, strict=False):
            flat[f"acc_{skill}"] = x
        if acc:
            flat["acc_mean"] = sum(acc) / len(acc)
        if oracle and acc and name != "oracle":
            for skill, x, own in zip(skills, acc, oracle, strict=False):
                flat[f"gap_{skill}"] = x - float(own)
        for key in ("retention", "leakage", "latency_ms", "ms_per_token"):
            if a.get(key) is not None:
                flat[key] = float(a[key])
        for fam, value in (a.get("retention_family") or {}).items():
            if value is not None:
                flat[f"retention_{fam}"] = float(value)
        if a.get("memory_bytes") is not None:
            flat["memory_mb"] = float(a["memory_bytes"]) / 1e6
        routing = a.get("routing") or {}
        for key, value in (("routing_accuracy", routing.get("accuracy")), ("fallback_skill", routing.get("fallback_skill")),
                           ("fallback_general", routing.get("fallback_general"))):
            if value is not None:
                flat[key] = float(value)
        matrix = (seed.get("run_matrix") or {}).get(name) or {}
        if matrix.get("backward_transfer") is not None:
            flat["backward_transfer"] = float(matrix["backward_transfer"])
        out[name] = flat
    return out


def summarise_seeds(seeds: Sequence[dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """``{approach: {scalar: {"mean", "std", "n", "values"}}}`` over seeds.

    Raises:
        ValueError: with no seeds.
    """
    from replaybank.llm.report.seeds import aggregate

    return {arm: {key: stat.to_json() for key, stat in scalars.items()}
            for arm, scalars in aggregate([flatten(s) for s in seeds]).items()}


def check_targets(agg: dict[str, dict[str, dict[str, Any]]], skills: Sequence[str]) -> dict[str, Any]:
    """The issue's targets for ``routed``, on the seed means (None when not measured).

    Example:
        >>> agg = {"routed": {"gap_a": {"mean": -0.02}, "gap_b": {"mean": -0.10}, "retention": {"mean": 0.97}}}
        >>> t = check_targets(agg, ["a", "b"])
        >>> t["skills"]["b"], t["retention"]["met"], t["met"]
        ({'gap': -0.1, 'met': False}, True, False)
    """
    routed = agg.get("routed", {})
    per_skill: dict[str, dict[str, Any]] = {}
    for skill in skills:
        gap = routed.get(f"gap_{skill}", {}).get("mean")
        per_skill[skill] = {"gap": gap, "met": None if gap is None else gap >= GAP_TARGET - 1e-12}
    retention = routed.get("retention", {}).get("mean")
    checks = [c["met"] for c in per_skill.values()] + [None if retention is None else retention >= RETENTION_TARGET]
    return {
        "skills": per_skill, "gap_target": GAP_TARGET,
        "retention": {"value": retention, "target": RETENTION_TARGET, "met": checks[-1]},
        "met": None if any(c is None for c in checks) else all(checks),
    }


def best(agg: dict[str, dict[str, dict[str, Any]]]) -> dict[str, Any] | None:
    """The approach (oracle aside) with the highest mean accuracy over the skills, its margin over
    the next and its memory.

    Example:
        >>> best({"a": {"acc_mean": {"mean": 0.6}, "memory_mb": {"mean": 9.0}}, "b": {"acc_mean": {"mean": 0.5}}})
        {'approach': 'a', 'acc_mean': 0.6, 'margin': 0.09999999999999998, 'next': 'b', 'memory_mb': 9.0}
    """
    ranked = sorted(((v["acc_mean"]["mean"], k) for k, v in agg.items() if k != "oracle" and "acc_mean" in v), reverse=True)
    if not ranked:
        return None
    (top, name), rest = ranked[0], ranked[1:]
    return {"approach": name, "acc_mean": top, "margin": top - rest[0][0] if rest else None,
            "next": rest[0][1] if rest else None, "memory_mb": agg[name].get("memory_mb", {}).get("mean")}


def _cell(entry: dict[str, Any] | None, scale: float = 100.0, digits: int = 1) -> str:
    if not entry:
        return "-"
    std = entry.get("std")
    return f"{scale * entry['mean']:.{digits}f}" + (f" ± {scale * std:.{digits}f}" if std is not None else "")


def table(agg: dict[str, dict[str, dict[str, Any]]], skills: Sequence[str]) -> str:
    """The Markdown table: per approach, accuracy per skill and its mean (%), the worst skill's gap
    to its own adapter (points), general retention (%), adapter memory (MB), median latency per
    request (ms), and the routed approach's routing accuracy and fallback rate on general requests (%).

    Example:
        >>> agg = {"routed": {"acc_a": {"mean": 0.5, "std": 0.1}, "retention": {"mean": 0.96, "std": None}}}
        >>> print(table(agg, ["a"]).splitlines()[2])
        | routed | 50.0 ± 10.0 | - | - | 96.0 | - | - | - | - |
    """
    head = ["approach", *(f"{s} acc %" for s in skills), "mean acc %", "worst gap vs own (pts)", "retention %",
            "adapter MB", "latency ms", "routing acc %", "fallback general %"]
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    for name, s in agg.items():
        gaps = [s[f"gap_{k}"] for k in skills if f"gap_{k}" in s]
        worst = min(gaps, key=lambda e: e["mean"]) if gaps else None
        cells = [*(_cell(s.get(f"acc_{k}")) for k in skills), _cell(s.get("acc_mean")), _cell(worst),
                 _cell(s.get("retention")), _cell(s.get("memory_mb"), 1.0), _cell(s.get("latency_ms"), 1.0, 0),
                 _cell(s.get("routing_accuracy")), _cell(s.get("fallback_general"))]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
