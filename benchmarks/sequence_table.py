"""The domain-sequence table from a finished domain-sequence run: per arm, over seeds, with paired differences.

    python benchmarks/sequence_table.py RUN [RUN ...] [--against fixed10,fixed30] [--out FILE.json]

RUN is a ``replaybank run`` folder over a sequence of skills (``benchmarks/results/sequence3/``'s
config). Per arm: average accuracy and backward transfer of the accuracy matrix (mean +- std over
seeds), each earlier skill's forgetting (its peak exact match minus its final one), the general
suite's retention per family, and the rehearsal rows trained (share of all rows, from the
training log); then the paired differences (same seed) of every arm against each ``--against``
arm. Several RUN folders (the same config's seeds, other arms) are read as one run: an arm may
come from one folder only. Prints Markdown; ``--out`` writes the figures as JSON.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np


def seed_figures(metrics: dict) -> dict[str, list[dict]]:
    """Per arm, per seed: average accuracy, backward transfer, forgetting per skill, retention per family."""
    out: dict[str, list[dict]] = {}
    families = ["conversation", "instruction", "arithmetic", "code"]
    for name, arm in metrics["arms"].items():
        if "matrix" not in arm or np.asarray(arm["matrix"]["per_seed"][0]["R"]).shape[0] < 2:
            continue  # the base arm (one row: it never trains) has no sequence to forget
        rows = []
        for k, m in enumerate(arm["matrix"]["per_seed"]):
            R = np.asarray(m["R"], dtype=float)
            forget = [float(R[: R.shape[0] - 1, j].max() - R[-1, j]) for j in range(R.shape[1] - 1)]
            per_seed = arm.get("per_seed", [{}] * (k + 1))
            retention = {f: _retention(arm, per_seed, k, f) for f in families}
            rows.append({"average_accuracy": float(m["average_accuracy"]), "backward_transfer": float(m["backward_transfer"]),
                         "final_row": R[-1].tolist(), "forgetting": forget, "retention": retention})  # fmt: skip
        out[name] = rows
    return out


def _retention(arm: dict, per_seed: list[dict], k: int, family: str) -> float | None:
    """Seed ``k``'s retention of one suite family (the arm's summary keeps every seed's value)."""
    values = arm.get("summary", {}).get(f"retention_{family}", {}).get("values", [])
    value = values[k] if k < len(values) else (per_seed[k].get(f"retention_{family}") if k < len(per_seed) else None)
    return None if value is None else float(value)


def rehearsal_share(arm: dict) -> float | None:
    """Rehearsal rows / all rows over every generation's training log (the first seed's)."""
    rows = reh = 0
    for gen in arm.get("generations", []):
        for step in gen.get("train", {}).get("steps", []):
            rows += step.get("rows", 0)
            reh += step.get("rehearsal_rows", 0)
    return reh / rows if rows else None


def _ms(values: list[float]) -> str:
    v = np.asarray([x for x in values if x is not None], dtype=float)
    if v.size == 0:
        return "-"
    return f"{v.mean():+.3f} ± {v.std(ddof=1) if v.size > 1 else 0.0:.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, nargs="+")
    parser.add_argument("--against", default="fixed10,fixed30", help="arms the paired differences are taken against")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    metrics: dict = {"arms": {}}
    for run in args.run:
        arms = json.loads((run / "metrics.json").read_text(encoding="utf-8"))["arms"]
        clash = sorted(set(arms) & set(metrics["arms"]) - {"base"})
        if clash:
            raise SystemExit(f"{run}/metrics.json: arm(s) {clash} already read from an earlier RUN; give each arm once")
        metrics["arms"].update(arms)
    figures = seed_figures(metrics)
    print("| arm | average accuracy | backward transfer | forgetting per earlier skill | final row (mean) | "
          "retention conv / instr / arith / code | rehearsal rows (seed 0) |")
    print("|---|---|---|---|---|---|---:|")
    summary = {}
    for name, rows in figures.items():
        forget = np.mean([r["forgetting"] for r in rows], axis=0).round(3).tolist()
        final = np.mean([r["final_row"] for r in rows], axis=0).round(3).tolist()
        ret = {f: np.mean([r["retention"][f] for r in rows if r["retention"][f] is not None] or [np.nan])
               for f in rows[0]["retention"]}  # fmt: skip
        share = rehearsal_share(metrics["arms"][name])
        summary[name] = {"seeds": rows, "forgetting_mean": forget, "final_row_mean": final, "retention_mean": ret,
                         "rehearsal_share_seed0": share}  # fmt: skip
        print(f"| {name} | {_ms([r['average_accuracy'] for r in rows])} | {_ms([r['backward_transfer'] for r in rows])} "
              f"| {forget} | {final} | {' / '.join(f'{100 * v:.0f}' for v in ret.values())}% "
              f"| {'-' if share is None else f'{100 * share:.1f}%'} |")
    for ref in [a for a in args.against.split(",") if a in figures]:
        print(f"\nPaired differences against {ref} (same seed; mean ± std over seeds):\n")
        print("| arm | average accuracy | backward transfer |\n|---|---|---|")
        base = figures[ref]
        for name, rows in figures.items():
            if name == ref:
                continue
            n = min(len(rows), len(base))
            aa = [rows[k]["average_accuracy"] - base[k]["average_accuracy"] for k in range(n)]
            bwt = [rows[k]["backward_transfer"] - base[k]["backward_transfer"] for k in range(n)]
            summary[name][f"paired_vs_{ref}"] = {"average_accuracy": aa, "backward_transfer": bwt}
            print(f"| {name} | {_ms(aa)} | {_ms(bwt)} |")
    if args.out:
        args.out.write_text(json.dumps(summary, indent=1, default=float) + "\n", encoding="utf-8")
        print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
