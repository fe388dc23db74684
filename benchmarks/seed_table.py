"""Arms of the main job side by side over seeds gathered from several runs (no model, no training).

    python benchmarks/seed_table.py RUN/metrics.json [RUN/metrics.json ...] \
        --arms naive,self-distill,routed [--json OUT.json]

The seeds of each arm are gathered over the files as ``benchmarks/paired_seeds.py`` gathers them (a
seed found in two files is taken from the first; the arm's own seeds, so two arms may differ in
seeds). Prints, per arm, the number of seeds, each family's retention of the base model's items (the
mean over seeds and the lowest seed), the least family (the lowest family of each seed: its mean,
95% interval by a percentile bootstrap over seeds, and the lowest seed), tool-call leakage and
exact match on the held-out requests (mean ± sample std over seeds); then the early warning pooled
over the listed arms' seeds: each run's ``early_warning`` points (the last logged KL(base || adapter)
on the domain rows, the final retention's minimum and mean; an arm and seed taken from the first
file holding it), and the Spearman correlation of the KL with each. Runs made with different
configs (threads, ``choose``) are gathered as they are: say so where the figures are quoted.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from paired_seeds import FAMILIES, bootstrap_mean, gather, least_family, metrics_parser  # noqa: E402

from replaybank.llm.eval.frontier import spearman  # noqa: E402


def summarize(seeds: dict[int, dict[str, float]]) -> dict[str, Any]:
    """One arm's figures over its seeds: per family and the least family, leakage and exact match.

    Args:
        seeds: ``{seed: {figure: value}}`` as :func:`paired_seeds.gather` returns it.

    Returns:
        ``seeds``; per figure of :data:`paired_seeds.FAMILIES`, ``leakage`` and ``domain_exact_match``:
        ``mean``, ``std`` (sample, ``None`` for one seed), ``min`` and ``values`` in seed order; and
        ``least_family`` with its bootstrap interval ``low`` / ``high`` too.

    Example:
        >>> fams = {f: 0.9 for f in FAMILIES}
        >>> s = summarize({0: {**fams, "retention_open": 0.5, "leakage": 0.0, "domain_exact_match": 0.6},
        ...                1: {**fams, "leakage": 0.0, "domain_exact_match": 0.4}})
        >>> s["least_family"]["values"], s["domain_exact_match"]["mean"]
        ([0.5, 0.9], 0.5)
    """
    order = sorted(seeds)
    out: dict[str, Any] = {"seeds": order}
    for figure in [*FAMILIES, "leakage", "domain_exact_match"]:
        values = [seeds[s][figure] for s in order if figure in seeds[s]]
        if values:
            out[figure] = {"mean": float(np.mean(values)), "std": float(np.std(values, ddof=1)) if len(values) > 1 else None,
                           "min": min(values), "values": values}
    least = [least_family(seeds[s]) for s in order if all(f in seeds[s] for f in FAMILIES)]
    if least:
        mean, low, high = bootstrap_mean(least)
        out["least_family"] = {"mean": mean, "low": low, "high": high, "min": min(least), "values": least}
    return out


def pooled_warning(paths: list[Path], arms: list[str]) -> dict[str, Any]:
    """The early-warning points of ``arms`` over the runs, one per arm and seed, and their correlations.

    Returns:
        ``points`` (``arm``, ``seed``, ``kl``, ``retention_min``, ``retention_mean``, ``from``), ``n``,
        and ``spearman_min`` / ``spearman_mean`` (``None`` below three points or when one side is constant).
    """
    points: dict[tuple[str, int], dict[str, Any]] = {}
    for path in paths:
        warning = json.loads(path.read_text()).get("early_warning") or {}
        for point in warning.get("points", []):
            if point["arm"] in arms:
                points.setdefault((point["arm"], int(point["seed"])), {**point, "from": str(path)})
    found = [points[k] for k in sorted(points, key=lambda k: (arms.index(k[0]), k[1]))]
    kls = [p["kl"] for p in found]
    return {"points": found, "n": len(found),
            "spearman_min": spearman(kls, [p["retention_min"] for p in found], min_points=3),
            "spearman_mean": spearman(kls, [p["retention_mean"] for p in found], min_points=3)}


def cell(entry: dict[str, Any] | None, *, spread: str = "min") -> str:
    """A figure as a percentage: ``mean; min lowest`` (``spread="min"``) or ``mean ± std``."""
    if entry is None:
        return "-"
    mean = f"{100 * entry['mean']:.0f}"
    if len(entry["values"]) < 2:
        return mean
    if spread == "std":
        return f"{mean} ± {100 * entry['std']:.0f}"
    return f"{mean}; min {100 * entry['min']:.0f}"


def main() -> None:
    parser = metrics_parser(__doc__.splitlines()[0])
    parser.add_argument("--arms", required=True, help="comma-separated arms, in the table's order")
    args = parser.parse_args()
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    table = {}
    for arm in arms:
        found = gather(args.metrics, arm)
        if not found:
            raise SystemExit(f"no run in {', '.join(map(str, args.metrics))} holds the arm {arm!r}")
        table[arm] = {**summarize(found), "from": {str(s): str(found[s]["from"]) for s in sorted(found)}}
    print("| arm | seeds | " + " | ".join(f.removeprefix("retention_") for f in FAMILIES)
          + " | least family [95% interval]; lowest seed | leakage % | tool-call exact match % |")
    print("|---|---:|" + "---:|" * (len(FAMILIES) + 3))
    for arm, s in table.items():
        least = s.get("least_family")
        least_cell = "-" if least is None else (f"{100 * least['mean']:.0f} [{100 * least['low']:.0f}, "
                                                f"{100 * least['high']:.0f}]; min {100 * least['min']:.0f}")
        print(f"| {arm} | {len(s['seeds'])} | " + " | ".join(cell(s.get(f)) for f in FAMILIES)
              + f" | {least_cell} | {cell(s.get('leakage'), spread='std')} | {cell(s.get('domain_exact_match'), spread='std')} |")
    warning = pooled_warning(args.metrics, arms)
    rho = lambda v: "n/a" if v is None else f"{v:.2f}"  # noqa: E731
    print(f"\nearly warning over {warning['n']} arm-seeds ({', '.join(sorted({p['arm'] for p in warning['points']}))}): "
          f"Spearman of the last domain KL with the least family's retention {rho(warning['spearman_min'])}, "
          f"with the mean retention {rho(warning['spearman_mean'])}")
    if args.json:
        command = "python benchmarks/seed_table.py " + " ".join(map(str, args.metrics)) + f" --arms {args.arms}"
        args.json.write_text(json.dumps({"command": command, "arms": table, "early_warning": warning}, indent=1) + "\n")


if __name__ == "__main__":
    main()
