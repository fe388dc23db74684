"""Per-seed figures of two arms of the main job gathered from several runs, and their paired gap.

    python benchmarks/paired_seeds.py RUN/metrics.json [RUN/metrics.json ...] \
        --arm self-distill --against naive [--json OUT.json]

Each ``metrics.json`` holds, per arm, every seed's value of each figure (``arms.<arm>.summary.<figure>.values``,
in the order of the run's ``seeds``). Seeds are gathered over the files (a seed found in two files is
taken from the first); only seeds where both arms were measured are paired. Prints, per seed, the
tool-call exact match of both arms and each family's retention of ``--arm``, then the mean gap
``--arm`` minus ``--against`` with a 95% interval (a percentile bootstrap over the seeds, 10,000
resamples, seed 0). Runs made with different configs (threads, ``choose``) are gathered as they are:
say so where the figures are quoted.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np

FIGURES = ["domain_exact_match", "retention_arithmetic", "retention_code", "retention_conversation",
           "retention_instruction", "retention_open", "leakage"]


def per_seed(metrics: dict[str, Any], arm: str) -> dict[int, dict[str, float]]:
    """``{seed: {figure: value}}`` of ``arm`` in one run's metrics (empty when the run lacks the arm)."""
    summary = metrics.get("arms", {}).get(arm, {}).get("summary")
    if not summary:
        return {}
    seeds = [int(s) for s in metrics["seeds"]]
    out: dict[int, dict[str, float]] = {s: {} for s in seeds}
    for figure in FIGURES:
        values = summary.get(figure, {}).get("values")
        if values is None:
            continue
        if len(values) != len(seeds):
            raise SystemExit(f"{arm}: {figure} has {len(values)} values for {len(seeds)} seeds")
        for s, v in zip(seeds, values):
            out[s][figure] = float(v)
    return out


def gather(paths: list[Path], arm: str) -> dict[int, dict[str, float]]:
    """Every seed of ``arm`` over ``paths``, the first file holding a seed winning."""
    found: dict[int, dict[str, float]] = {}
    for path in paths:
        for seed, figures in per_seed(json.loads(path.read_text()), arm).items():
            found.setdefault(seed, {**figures, "from": str(path)})  # type: ignore[dict-item]
    return found


def bootstrap_mean(gaps: list[float], resamples: int = 10_000, seed: int = 0) -> tuple[float, float, float]:
    """Mean of ``gaps`` and its 95% percentile-bootstrap interval.

    Example:
        >>> bootstrap_mean([1.0, 1.0, 1.0])
        (1.0, 1.0, 1.0)
    """
    x = np.asarray(gaps, dtype=float)
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, len(x), size=(resamples, len(x)))].mean(axis=1)
    return float(x.mean()), float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("metrics", type=Path, nargs="+", help="metrics.json files of finished runs")
    parser.add_argument("--arm", required=True, help="the arm whose gap is measured")
    parser.add_argument("--against", required=True, help="the arm it is paired with")
    parser.add_argument("--json", type=Path, help="write the table here")
    args = parser.parse_args()
    mine, theirs = gather(args.metrics, args.arm), gather(args.metrics, args.against)
    seeds = sorted(set(mine) & set(theirs))
    if not seeds:
        raise SystemExit(f"no seed holds both {args.arm} and {args.against}")
    pct = lambda v: f"{100 * v:.1f}"  # noqa: E731
    print(f"| seed | {args.against} exact match % | {args.arm} exact match % | gap | "
          + " | ".join(f.removeprefix("retention_") for f in FIGURES[1:6]) + f" ({args.arm}) |")
    print("|---:|---:|---:|---:|" + "---:|" * 5)
    rows = []
    for s in seeds:
        gap = mine[s]["domain_exact_match"] - theirs[s]["domain_exact_match"]
        rows.append({"seed": s, args.against: theirs[s], args.arm: mine[s], "gap": gap})
        print(f"| {s} | {pct(theirs[s]['domain_exact_match'])} | {pct(mine[s]['domain_exact_match'])} | {100 * gap:+.1f} | "
              + " | ".join(pct(mine[s][f]) for f in FIGURES[1:6]) + " |")
    mean, low, high = bootstrap_mean([r["gap"] for r in rows])
    mins = [min(mine[s][f] for f in FIGURES[1:6]) for s in seeds]
    print(f"\ngap in exact match, {args.arm} - {args.against}: {100 * mean:+.1f} points [{100 * low:+.1f}, {100 * high:+.1f}] "
          f"over {len(seeds)} seeds; {args.arm}'s lowest family per seed: {', '.join(pct(m) for m in mins)}")
    if args.json:
        args.json.write_text(json.dumps({"command": "python benchmarks/paired_seeds.py " + " ".join(map(str, args.metrics))
                                         + f" --arm {args.arm} --against {args.against}",
                                         "seeds": seeds, "rows": rows,
                                         "gap": {"mean": mean, "low": low, "high": high},
                                         "min_family_per_seed": mins}, indent=1) + "\n")


if __name__ == "__main__":
    main()
