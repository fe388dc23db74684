"""The traces study's outputs: metrics.json, report.md and plots (matplotlib imported lazily).

``sweep`` replays a trace at several capacity ratios (miss rate per policy per layer: the
"miss rate vs capacity ratio" plot); ``write_report`` writes, into one folder, ``metrics.json``
(the study of ``interventions.run_study``, the sweeps, the per-step union statistics and per-layer
capacity ratios of every workload: the figures the paper asks every evaluation to report),
``report.md`` (tables of the same) and ``miss_rate_vs_capacity.png`` / ``gap_recovered.png``.
Other files in the folder are left alone; those four names are replaced only when the folder
already holds a report (its ``metrics.json`` has a ``study``), so a user's own ``report.md`` is
never overwritten (``check_report_folder``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ReplayBankError
from ..files import check_path, check_writable, write_regular
from .events import union_stats
from .interventions import CAUSAL, FACTORS
from .simulate import POLICIES, capacity_for_ratio, compare
from .trace import Trace

FACTOR_TEXT = {
    "semantics": "per-token replay instead of atomic per-step unions",
    "mixing": "workloads mixed in one stream instead of replayed separately",
    "prefetch": "prefetch of the next layer's predicted experts on",
    "capacity": "a larger capacity ratio",
}


def sweep(trace: Trace, ratios: Sequence[float], seed: int = 0) -> dict[str, Any]:
    """Per feasible ratio (every layer's capacity at least its largest step union), each policy's
    miss rate per layer and in total, per step."""
    largest = [s["max"] for s in union_stats(trace)]
    rows = []
    for ratio in ratios:
        caps = capacity_for_ratio(trace, ratio)
        if any(c < u for c, u in zip(caps, largest)):
            continue
        res = compare(trace, caps, POLICIES, seed=seed)
        rows.append(
            {
                "ratio": ratio,
                "capacities": list(caps),
                "miss_rate": {p: [c.miss_rate for c in r.layers] for p, r in res.results.items()},
                "total": {p: r.total.miss_rate for p, r in res.results.items()},
                "gap_recovered": {p: res.gap_recovered(p) for p in POLICIES},
            }
        )
    return {"workload": trace.meta.get("workload", "?"), "layers": list(trace.layers), "rows": rows}


def _clean(value: Any) -> Any:
    """JSON without NaN: ``nan`` becomes ``None``."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if isinstance(value, np.generic):
        return _clean(value.item())
    return value


def _f(x: Any, digits: int = 3) -> str:
    return (
        "-" if x is None or (isinstance(x, float) and not math.isfinite(x)) else f"{x:.{digits}f}"
    )


def _pm(spread: Mapping[str, float], digits: int = 3) -> str:
    return f"{_f(spread['mean'], digits)} ± {_f(spread['std'], digits)}"


def _baseline_table(study: Mapping[str, Any]) -> list[str]:
    rows = study["baseline"]
    lines = [
        "| workload | policy | miss rate | victim rate | gap recovered | stalls / event |",
        "|---|---|---|---|---|---|",
    ]
    for name in dict.fromkeys(r["workload"] for r in rows):
        mine = [r["policies"] for r in rows if r["workload"] == name]
        for p in POLICIES:
            spread = {
                key: _spread_of([m[p][key] for m in mine])
                for key in ("miss_rate", "victim_rate", "gap_recovered")
            }
            stalls = _spread_of([m[p]["stalls"] / m[p]["events"] for m in mine])
            lines.append(
                f"| {name} | {p} | {_pm(spread['miss_rate'], 4)} | {_pm(spread['victim_rate'])} | "
                f"{_pm(spread['gap_recovered'])} | {_pm(stalls)} |"
            )
    return lines


def _spread_of(values: Sequence[Any]) -> dict[str, float]:
    v = np.asarray([x for x in values if x is not None and x == x], dtype=float)
    if len(v) == 0:
        return {"mean": math.nan, "std": math.nan}
    return {"mean": float(v.mean()), "std": float(v.std(ddof=1)) if len(v) > 1 else 0.0}


def _factor_table(study: Mapping[str, Any]) -> list[str]:
    lines = [
        "| factor changed | units | Kendall tau (mean ± sd; min) | best policy changed | any rank changed | "
        "top-3 miss spread | mean ranks before → after (" + ", ".join(CAUSAL) + ") |",
        "|---|---|---|---|---|---|---|",
    ]
    for factor in FACTORS:
        if factor not in study["factors"]:
            continue
        s = study["factors"][factor]["summary"]
        ranks = ", ".join(f"{a:.1f}→{b:.1f}" for a, b in (s["mean_rank"][c] for c in CAUSAL))
        lines.append(
            f"| {factor}: {FACTOR_TEXT[factor]} | {s['units']} | {_pm(s['tau'], 2)}; {_f(s['tau']['min'], 2)} | "
            f"{s['winner_changed']:.0%} | {s['any_rank_changed']:.0%} | {s['top3_spread']['mean']:.1%} | {ranks} |"
        )
    return lines


def _gap_shift_table(study: Mapping[str, Any]) -> list[str]:
    lines = ["| factor | " + " | ".join(CAUSAL) + " |", "|---|" + "---|" * len(CAUSAL)]
    for factor in FACTORS:
        if factor in study["factors"]:
            shift = study["factors"][factor]["summary"]["gap_shift"]
            lines.append(f"| {factor} | " + " | ".join(_pm(shift[c], 2) for c in CAUSAL) + " |")
    return lines


def _miss_table(study: Mapping[str, Any]) -> list[str]:
    lines = ["| factor | " + " | ".join(POLICIES) + " |", "|---|" + "---|" * len(POLICIES)]
    for factor in FACTORS:
        if factor in study["factors"]:
            rates = study["factors"][factor]["summary"]["miss_rate"]
            cells = [f"{rates[p][0]:.4f} → {rates[p][1]:.4f}" for p in POLICIES]
            lines.append(f"| {factor} | " + " | ".join(cells) + " |")
    return lines


def _prefetch_table(study: Mapping[str, Any]) -> list[str]:
    if "prefetch" not in study["factors"]:
        return []
    s = study["factors"]["prefetch"]["summary"]
    lines = [
        "Prefetch on (a runtime mechanism), per policy, mean over units:",
        "",
        "| policy | demand misses (stalling loads) | all loads (bytes moved) | stalls | prefetch accuracy |",
        "|---|---|---|---|---|",
    ]
    for p in POLICIES:
        (m0, m1), (l0, l1), (s0, s1) = s["miss_rate"][p], s["loads"][p], s["stalls"][p]
        lines.append(
            f"| {p} | {m1 / m0 - 1:+.1%} | {l1 / l0 - 1:+.1%} | {s1 / s0 - 1:+.1%} | "
            f"{_f(s['prefetch_accuracy'][p][1])} |"
        )
    return [*lines, ""]


def _union_table(unions: Mapping[str, Any], caps: Mapping[str, Any]) -> list[str]:
    lines = [
        "| workload | layer | experts | capacity (ratio) | union max | mean | p95 | prefill mean | decode mean |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, stats in unions.items():
        for s, c in zip(stats, caps[name]):
            lines.append(
                f"| {name} | {s['layer']} | {s['num_experts']} | {c} ({c / s['num_experts']:.2f}) | "
                f"{s['max']:.0f} | {s['mean']:.2f} | {s['p95']:.1f} | {_f(s['prefill_mean'], 2)} | "
                f"{_f(s['decode_mean'], 2)} |"
            )
    return lines


def plot(out: Path, sweeps: Sequence[Mapping[str, Any]], study: Mapping[str, Any]) -> list[str]:
    """``miss_rate_vs_capacity.png`` (rows: workloads, columns: layers) and ``gap_recovered.png``
    (each causal policy's baseline gap recovered per workload, mean ± sd over seeds)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    layers = max(len(s["layers"]) for s in sweeps)
    fig, axes = plt.subplots(len(sweeps), layers, figsize=(3.2 * layers, 2.8 * len(sweeps)),
                             squeeze=False, sharey="row")  # fmt: skip
    for row, s in enumerate(sweeps):
        ratios = [r["ratio"] for r in s["rows"]]
        for col in range(len(s["layers"])):
            ax = axes[row][col]
            for p in POLICIES:
                ax.plot(ratios, [r["miss_rate"][p][col] for r in s["rows"]], marker=".", label=p)
            ax.set_title(f"{s['workload']}, layer {s['layers'][col]}", fontsize=9)
            ax.set_xlabel("capacity ratio", fontsize=8)
            if col == 0:
                ax.set_ylabel("miss rate (per step)", fontsize=8)
    axes[0][-1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "miss_rate_vs_capacity.png", dpi=110)
    plt.close(fig)

    names = list(dict.fromkeys(r["workload"] for r in study["baseline"]))
    fig, ax = plt.subplots(figsize=(6.4, 3.2))
    width = 0.8 / max(len(names), 1)
    for k, name in enumerate(names):
        rows = [r["policies"] for r in study["baseline"] if r["workload"] == name]
        spreads = [_spread_of([m[p]["gap_recovered"] for m in rows]) for p in CAUSAL]
        x = np.arange(len(CAUSAL)) + (k - (len(names) - 1) / 2) * width
        ax.bar(x, [s["mean"] for s in spreads], width, yerr=[s["std"] for s in spreads],
               label=name, capsize=2)  # fmt: skip
    ax.axhline(0, color="black", linewidth=0.6)
    ax.set_xticks(np.arange(len(CAUSAL)), list(CAUSAL))
    ax.set_ylabel("share of LRU→optimal gap recovered")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "gap_recovered.png", dpi=110)
    plt.close(fig)
    return ["miss_rate_vs_capacity.png", "gap_recovered.png"]


REPORT_FILES = ("metrics.json", "report.md", "miss_rate_vs_capacity.png", "gap_recovered.png")


def check_report_folder(out: Path) -> Path:
    """``out`` when a report may be written there: missing, or a folder where none of
    ``REPORT_FILES`` exists, or one holding an earlier report (its ``metrics.json`` is a JSON
    object with a ``study``); each of those names that exists must be a regular file.

    Raises:
        ReplayBankError: naming the folder or file that is not the report's to replace.
    """
    out = check_path(out, what="--out report folder")
    if not out.exists():
        return out
    if not out.is_dir():
        raise ReplayBankError(f"--out {out}: exists and is not a folder; name a report folder")
    present = [name for name in REPORT_FILES if (out / name).exists() or (out / name).is_symlink()]
    for name in present:
        check_writable(out / name, what="report file")
    if present:
        try:
            old = json.loads((out / "metrics.json").read_bytes())
        except (OSError, ValueError):
            old = None
        if not isinstance(old, dict) or "study" not in old:
            raise ReplayBankError(
                f"--out {out}: holds {present} but no earlier report (a metrics.json with a study); "
                "a report replaces only its own files: name a new or empty folder"
            )
    return out


def write_report(
    out: Path,
    study: Mapping[str, Any],
    sweeps: Sequence[Mapping[str, Any]],
    workloads: Mapping[str, Trace],
    extra: Mapping[str, Any] | None = None,
) -> Path:
    """Write metrics.json, report.md and the plots into ``out`` (created); return report.md.

    Raises:
        ReplayBankError: ``out`` holds files of those names that are not an earlier report's
            (see ``check_report_folder``).
    """
    out = check_report_folder(out)
    out.mkdir(parents=True, exist_ok=True)
    design = study["design"]
    unions = {name: union_stats(t) for name, t in workloads.items()}
    caps = {name: list(capacity_for_ratio(t, design["ratio"])) for name, t in workloads.items()}
    metrics = {
        "study": study,
        "sweeps": list(sweeps),
        "per_step_union": unions,
        "capacity": caps,
        "capacity_ratio": {
            n: [c / e for c, e in zip(caps[n], workloads[n].num_experts)] for n in caps
        },
        "workloads": {
            n: {
                "steps": t.num_steps,
                "tokens": t.num_tokens,
                "routing_events": t.routing_events,
                "layers": list(t.layers),
                "num_experts": list(t.num_experts),
                "top_k": t.top_k,
                "meta": dict(t.meta),
            }  # fmt: skip
            for n, t in workloads.items()
        },
        **(extra or {}),
    }
    write_regular(out / "metrics.json", json.dumps(_clean(metrics), indent=1, allow_nan=False))
    plots = plot(out, sweeps, study)
    lines = [
        "# Expert-cache policies on MoE routing traces: matched-pair interventions",
        "",
        f"Units: {design['requests']} requests per workload per seed, {design['concurrent']} in flight, "
        f"seeds {design['seeds']}. Baseline: atomic per-step unions, workloads separate, no prefetch, "
        f"capacity ratio {design['ratio']}. Interventions change one factor: per-token replay, workloads "
        f"mixed, prefetch {design['prefetch']} experts per event, capacity ratio {design['alt_ratio']}.",
        "",
        "## Per-step union of experts and per-layer capacity (the figures every evaluation should report)",
        "",
        *_union_table(unions, caps),
        "",
        "## Baseline: how far each policy is from the offline optimum (mean ± sd over seeds)",
        "",
        *_baseline_table(study),
        "",
        "Victim rate: share of evictions whose victim the optimum would also have evicted from that "
        "cache. Gap recovered: (misses_lru - misses_policy) / (misses_lru - misses_opt).",
        "",
        "## Each factor's effect on the ranking of the causal policies",
        "",
        *_factor_table(study),
        "",
        "Top-3 miss spread: at baseline, (misses of the third-best causal policy - misses of the best) "
        "/ misses of the best, mean over units: rank flips among policies this close are flips among "
        "near ties.",
        "",
        "Miss rate, baseline → intervention (mean over units; per-token replay counts needs per token):",
        "",
        *_miss_table(study),
        "",
        *_prefetch_table(study),
        "Shift in gap recovered (intervention minus baseline, mean ± sd over units):",
        "",
        *_gap_shift_table(study),
        "",
        "## Plots",
        "",
        *[f"![{p}]({p})" for p in plots],
        "",
    ]
    path = write_regular(out / "report.md", "\n".join(lines))
    return path
