"""The main job's headline tables, read from a run's ``metrics.json`` (no model, no training).

    python benchmarks/main_job_table.py runs/seeds5/metrics.json [--flips 3]

Prints, as Markdown: per arm the retention of every suite family (mean over seeds and its 95%
interval, bootstrap over seeds and items), the lowest seed, tool-call leakage, generated tool-call
exact match on the held-out requests (mean ± sample std over seeds), the items lost and gained
against the base model (summed over seeds), the targets met, the retention gate, and the first
``--flips`` items each trained arm lost on the first seed. Used for README.md and docs/llm.md.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.0f}"


def retention_cell(fam: dict[str, Any] | None) -> str:
    if not fam or not fam.get("retention"):
        return "-"
    r = fam["retention"]
    lows = [s["retention"] for s in fam.get("per_seed", []) if s.get("retention") is not None]
    low = f"; min {pct(min(lows))}" if len(lows) > 1 else ""
    return f"{pct(r['mean'])} [{pct(r['low'])}, {pct(r['high'])}]{low}"


def mean_std(summary: dict[str, Any], key: str) -> str:
    entry = summary.get(key)
    if not entry:
        return "-"
    std = entry.get("std")
    return f"{pct(entry['mean'])}" + (f" ± {pct(std)}" if std is not None else "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("metrics", type=Path)
    parser.add_argument("--flips", type=int, default=3, help="lost items listed per trained arm (first seed)")
    args = parser.parse_args()
    m = json.loads(args.metrics.read_text())
    arms = m["arms"]
    fams = list(dict.fromkeys(f for a in arms.values() for f in a.get("families", {})))
    seeds = m.get("seeds", [])
    print(f"{len(seeds)} seeds {seeds}; wall {m.get('wall_seconds')} s; "
          f"load {m.get('environment', {}).get('loadavg_1min_start')} -> {m.get('environment', {}).get('loadavg_1min_end')}\n")
    print("| arm | " + " | ".join(f"{f} retention %" for f in fams) + " | leakage % | tool-call exact match % | lost / gained items |")
    print("|---|" + "---:|" * (len(fams) + 3))
    for name, arm in arms.items():
        if "summary" not in arm:  # no measurements of its own (a copied row in a run before 0.1.0)
            continue
        s = arm.get("summary", {})
        cells = [retention_cell(arm.get("families", {}).get(f)) for f in fams]
        lost = sum(int(arm.get("families", {}).get(f, {}).get("lost", 0)) for f in fams)
        gained = sum(int(arm.get("families", {}).get(f, {}).get("gained", 0)) for f in fams)
        flips = f"{lost} / {gained}" if name != "base" else "-"
        print(f"| {name} | " + " | ".join(cells) + f" | {mean_std(s, 'leakage')} | {mean_std(s, 'domain_exact_match')} | {flips} |")
    t = m.get("targets", {})
    print(f"\ntargets: naive loses behaviour {t.get('naive_loses_behaviour')}, naive learns the skill "
          f"{t.get('naive_learns_skill')}, best arm {t.get('best_arm')}")
    for name, a in t.get("arms", {}).items():
        missed = [k for k, v in a["checks"].items() if v is False]
        print(f"- {name}: {'all met' if a['met'] else 'not met: ' + ', '.join(missed)}")
    gate = m.get("gate", {})
    if gate:
        print(f"\ngate: arm {gate.get('chosen_arm')} ({gate.get('chosen_by')}) passed {gate.get('passed')}")
    for name, arm in arms.items():
        flips = arm.get("flips") or []
        if not flips or args.flips <= 0:
            continue
        first = flips[0]
        per_fam = {f: v["lost"] for f, v in first.get("per_family", {}).items() if v["lost"]}
        print(f"\n{name}, seed {first['seed']}: lost {len(first['lost'])} {per_fam}, gained {len(first['gained'])}")
        for item in first["lost"][: args.flips]:
            print(f"  - [{item['family']}] {item['prompt'][:70]!r}: base {item['base_answer'][:60]!r} -> "
                  f"arm {item['arm_answer'][:60]!r}")


if __name__ == "__main__":
    main()
