"""Per-seed figures of one arm of the main job and others, gathered from several runs, and their paired gaps.

    python benchmarks/paired_seeds.py RUN/metrics.json [RUN/metrics.json ...] \
        --arm self-distill --against naive[,peer-osf,...] [--json OUT.json]

Each ``metrics.json`` holds, per arm, every seed's value of each figure (``arms.<arm>.summary.<figure>.values``,
in the order of the run's ``seeds``). Seeds are gathered over the files (a seed found in two files is
taken from the first); only seeds where both arms were measured are paired. For each arm of
``--against``: prints, per seed, the tool-call exact match of both arms and each family's retention
of ``--arm``, then two mean gaps, ``--arm`` minus the other, each with a 95% interval (a percentile
bootstrap over the seeds, 10,000 resamples, seed 0): in tool-call exact match, and in the least
family's retention (the lowest of the five families' retention, a seed at a time). With several
arms to pair against, a last table gives both gaps for every one. Runs made with different configs
(threads, ``choose``) are gathered as they are: say so where the figures are quoted.
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


FAMILIES = FIGURES[1:6]


def least_family(figures: dict[str, float]) -> float:
    """The lowest retention over the five families of one seed's figures.

    Example:
        >>> least_family({"retention_arithmetic": 0.5, "retention_code": 0.9, "retention_conversation": 1.0,
        ...               "retention_instruction": 0.8, "retention_open": 0.7})
        0.5
    """
    return min(figures[f] for f in FAMILIES)


def pair(mine: dict[int, dict[str, float]], theirs: dict[int, dict[str, float]], arm: str, against: str) -> dict[str, Any]:
    """Both arms seed by seed where both were measured, and the paired gaps ``arm`` minus ``against``.

    Returns:
        ``seeds``, ``rows`` (per seed: both arms' figures and the exact-match ``gap``), ``gap`` (exact
        match: ``mean``, ``low``, ``high``), ``min_family_per_seed`` (``arm``'s least family), and
        ``min_family_gap`` (the least family of ``arm`` minus that of ``against``, paired by seed).

    Raises:
        SystemExit: no seed holds both arms.
    """
    seeds = sorted(set(mine) & set(theirs))
    if not seeds:
        raise SystemExit(f"no seed holds both {arm} and {against}")
    rows = [{"seed": s, against: theirs[s], arm: mine[s], "gap": mine[s]["domain_exact_match"] - theirs[s]["domain_exact_match"]}
            for s in seeds]
    mean, low, high = bootstrap_mean([r["gap"] for r in rows])
    floor_gaps = [least_family(mine[s]) - least_family(theirs[s]) for s in seeds]
    f_mean, f_low, f_high = bootstrap_mean(floor_gaps)
    return {"against": against, "seeds": seeds, "rows": rows, "gap": {"mean": mean, "low": low, "high": high},
            "min_family_per_seed": [least_family(mine[s]) for s in seeds],
            "min_family_gap": {"mean": f_mean, "low": f_low, "high": f_high, "per_seed": floor_gaps}}


def points(gap: dict[str, float]) -> str:
    """A gap and its interval in points: ``+1.0 [-2.0, +3.5]``."""
    return f"{100 * gap['mean']:+.1f} [{100 * gap['low']:+.1f}, {100 * gap['high']:+.1f}]"


def metrics_parser(description: str) -> argparse.ArgumentParser:
    """A command line over ``metrics.json`` files of finished runs, with ``--json OUT``."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("metrics", type=Path, nargs="+", help="metrics.json files of finished runs")
    parser.add_argument("--json", type=Path, help="write what is printed here, as JSON")
    return parser


def main() -> None:
    parser = metrics_parser(__doc__.splitlines()[0])
    parser.add_argument("--arm", required=True, help="the arm whose gaps are measured")
    parser.add_argument("--against", required=True, help="the arm, or comma-separated arms, it is paired with")
    args = parser.parse_args()
    mine = gather(args.metrics, args.arm)
    others = [a.strip() for a in args.against.split(",") if a.strip()]
    pct = lambda v: f"{100 * v:.1f}"  # noqa: E731
    pairs = []
    for against in others:
        found = pair(mine, gather(args.metrics, against), args.arm, against)
        pairs.append(found)
        print(f"| seed | {against} exact match % | {args.arm} exact match % | gap | "
              + " | ".join(f.removeprefix("retention_") for f in FAMILIES) + f" ({args.arm}) |")
        print("|---:|---:|---:|---:|" + "---:|" * 5)
        for r in found["rows"]:
            print(f"| {r['seed']} | {pct(r[against]['domain_exact_match'])} | {pct(r[args.arm]['domain_exact_match'])} "
                  f"| {100 * r['gap']:+.1f} | " + " | ".join(pct(r[args.arm][f]) for f in FAMILIES) + " |")
        print(f"\ngap in exact match, {args.arm} - {against}: {points(found['gap'])} points over "
              f"{len(found['seeds'])} seeds; in the least family's retention: {points(found['min_family_gap'])}; "
              f"{args.arm}'s lowest family per seed: {', '.join(pct(m) for m in found['min_family_per_seed'])}\n")
    if len(pairs) > 1:
        print(f"| {args.arm} against | seeds | least family's retention, gap in points [95% interval] "
              "| tool-call exact match, gap in points [95% interval] |")
        print("|---|---:|---:|---:|")
        for found in pairs:
            print(f"| {found['against']} | {len(found['seeds'])} | {points(found['min_family_gap'])} | {points(found['gap'])} |")
    if args.json:
        command = ("python benchmarks/paired_seeds.py " + " ".join(map(str, args.metrics))
                   + f" --arm {args.arm} --against {args.against}")
        body = {"command": command, **pairs[0]} if len(pairs) == 1 else {"command": command, "arm": args.arm, "pairs": pairs}
        args.json.write_text(json.dumps(body, indent=1) + "\n")


if __name__ == "__main__":
    main()
