"""How often forgetting-targeted rehearsal draws malformed rows, with and without its outlier guard.

    .venv/bin/python benchmarks/outlier_guard.py [--rows 1000] [--draws 20000] [--seeds 10]

No LLM: a constructed pool of per-row losses. 90% normal rows: base-model loss ~ N(2.0, 0.2), a
rise under fine-tuning ~ Exp(mean 0.3) (some forgotten more than others); 10% malformed rows (random
bytes, markup): base loss ~ N(9, 1) and rise ~ N(3, 0.5), high and noisy, as such rows are. Each
variant draws through :class:`replaybank.llm.train.targeted.TargetedRows` (the core's
``ReplayBuffer`` + ``Prioritized``):

* ``uniform``: every row alike (no rise anywhere: every priority equal);
* ``by rise, no guard``: priority = rise, no held-out rows, no cap;
* ``by rise, cap only`` / ``by rise, hold-out only``: one guard each;
* ``by rise, guarded``: the recipe's defaults (hold out base losses above median + 3.5 scaled MADs,
  cap at the 0.9 quantile).

Reports, mean over seeds: the share of draws that are malformed rows, and the mean rise of the
normal rows drawn relative to a uniform draw's (does the guarded variant still target forgetting?).
Prints a table; writes ``benchmarks/results/outlier_guard.json``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from replaybank.llm.train.targeted import TargetedRows

VARIANTS = {  # name -> (cap, outlier_mads, uniform)
    "uniform": (1.0, float("inf"), True),
    "by rise, no guard": (1.0, float("inf"), False),
    "by rise, cap only (0.9)": (0.9, float("inf"), False),
    "by rise, hold-out only (3.5 MAD)": (1.0, 3.5, False),
    "by rise, guarded (both)": (0.9, 3.5, False),
}


def pool(rows: int, malformed: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    bad = np.zeros(rows, dtype=bool)
    bad[rng.choice(rows, size=int(rows * malformed), replace=False)] = True
    base = np.where(bad, rng.normal(9.0, 1.0, rows), rng.normal(2.0, 0.2, rows))
    rise = np.where(bad, rng.normal(3.0, 0.5, rows), rng.exponential(0.3, rows))
    return base, base + np.maximum(rise, 0.0), bad


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1000)
    parser.add_argument("--malformed", type=float, default=0.1)
    parser.add_argument("--draws", type=int, default=20000)
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "outlier_guard.json")
    args = parser.parse_args()

    results: dict[str, dict[str, list[float]]] = {v: {"malformed_share": [], "normal_rise_vs_uniform": []} for v in VARIANTS}
    for seed in range(args.seeds):
        base, now, bad = pool(args.rows, args.malformed, np.random.default_rng(seed))
        rise = now - base
        for name, (cap, mads, uniform) in VARIANTS.items():
            current = base if uniform else now  # uniform: no rise anywhere, every priority equal
            rows = TargetedRows(args.rows, lambda i, c=current: c[i], lambda i, b=base: b[i], refresh_every=1, cap=cap,
                                outlier_mads=mads, seed=seed)
            drawn = rows.pick(args.draws)
            normal = drawn[~bad[drawn]]
            results[name]["malformed_share"].append(float(bad[drawn].mean()))
            results[name]["normal_rise_vs_uniform"].append(float(rise[normal].mean() / rise[~bad].mean()) if normal.size else 0.0)

    summary = {name: {k: round(float(np.mean(v)), 4) for k, v in r.items()} for name, r in results.items()}
    print(f"{args.rows} rows, {args.malformed:.0%} malformed, {args.draws} draws x {args.seeds} seeds\n")
    print(f"| {'variant':34} | malformed share of draws | mean rise of normal rows drawn (x uniform) |")
    print(f"|{'-' * 36}|--------------------------|--------------------------------------------|")
    for name, s in summary.items():
        print(f"| {name:34} | {s['malformed_share']:24.4f} | {s['normal_rise_vs_uniform']:42.2f} |")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
                                    "variants": summary, "per_seed": results}, indent=2) + "\n")
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
