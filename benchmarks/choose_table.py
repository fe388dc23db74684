"""The operating points a ``choose = "floor"`` run measured and chose, read from its ``metrics.json``
(no model, no training).

    python benchmarks/choose_table.py benchmarks/results/choose_floor/run/metrics.json [--json OUT]
        [--what-if FLOOR ...] [--keep-skill K]

Prints, as Markdown, for every arm that chose its operating point:

* per seed, every point of its frontier on the validation data (profile, first- and last-layer
  factor, validation domain exact match, retention per family and its least), the chosen one marked,
  and the chooser's reason;
* per seed, the test figures of the adapter as trained beside those of the chosen point (domain
  exact match on the test requests, retention per family on the test split), and their mean over
  seeds.

``--what-if FLOOR`` (repeatable) applies the chooser's own rule
(:func:`replaybank.llm.eval.frontier.choose`) to the measured points again with another floor: a
number, or ``family=number,...`` with every family it leaves out at 0.9 (as ``retention_floor``
reads a table). It says which point that floor would choose per seed, on the validation figures
only: the test figures of a point the run did not choose need a run with that floor.
``--keep-skill K`` (in [0, 1], default 0: no skill rule) applies ``[evaluation] keep_skill`` with
every ``--what-if`` floor: a point is eligible only if its validation domain exact match is at least
``K`` times the as-trained (uniform scale 1) point's.

``--json`` writes the same figures as JSON (the source of the tables in docs/llm.md).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

FAMILIES = ("arithmetic", "code", "conversation", "instruction", "open")


def pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.0f}"


def seed_rows(arm: dict[str, Any], seeds: list[int]) -> list[dict[str, Any]]:
    """Per seed: the frontier, the chosen point, and the test figures as trained and as chosen."""
    per_seed_domain = arm["summary"]["domain_exact_match"]["values"]
    rows = []
    for k, (seed, frontier) in enumerate(zip(seeds, arm["frontier"], strict=True)):
        chosen_test = {fam: next((s["retention"] for s in arm["families"][fam]["per_seed"] if s["seed"] == seed), None)
                       for fam in FAMILIES if fam in arm.get("families", {})}
        chosen = frontier["chosen"]
        rows.append({
            "seed": seed,
            "points": frontier["points"],
            "chosen": chosen,
            "reason": frontier["reason"],
            "tradeoff": frontier["tradeoff"],
            "trained": {"domain_exact_match": frontier["trained_exact_match"], "retention": frontier["trained_retention"]},
            "at_chosen": {"domain_exact_match": per_seed_domain[k], "retention": chosen_test},
        })
    return rows


def mean_of(rows: list[dict[str, Any]], which: str) -> dict[str, Any]:
    def mean(values: list[float | None]) -> float | None:
        kept = [v for v in values if v is not None]
        return statistics.fmean(kept) if kept else None

    return {
        "domain_exact_match": mean([r[which]["domain_exact_match"] for r in rows]),
        "retention": {fam: mean([r[which]["retention"].get(fam) for r in rows]) for fam in FAMILIES},
        "min_retention": mean([min((v for v in r[which]["retention"].values() if v is not None), default=None)
                               for r in rows]),
    }


def where(p: dict[str, Any]) -> tuple[str, str]:
    """A point's kind and place: ``("uniform", "0.5 / 0.5")``, or ``("checkpoint", "step 40")``."""
    if p.get("made_by") == "checkpoint":
        return "checkpoint", f"step {p.get('step')}"
    return p["profile"], f"{p['lo']:g} / {p['hi']:g}"


def parse_floor(text: str) -> float | dict[str, float]:
    """``0.8`` or ``open=0.5,arithmetic=0.8`` (the families left out keep 0.9)."""
    if "=" not in text:
        return float(text)
    table = dict.fromkeys(FAMILIES, 0.9)
    for part in text.split(","):
        fam, _, value = part.partition("=")
        if fam.strip() not in table:
            raise SystemExit(f"--what-if {text!r}: unknown family {fam.strip()!r}; families: {', '.join(FAMILIES)}")
        table[fam.strip()] = float(value)
    return table


def what_if(rows: list[dict[str, Any]], text: str, keep_skill: float = 0.0) -> list[dict[str, Any]]:
    """Per seed, the point the chooser picks from the measured points under the floor ``text`` and
    the skill rule ``keep_skill``."""
    from replaybank.llm.eval.frontier import choose
    from replaybank.llm.results.frontier import FrontierPoint

    floor = parse_floor(text)
    out = []
    for r in rows:
        points = [FrontierPoint.from_json(p) for p in r["points"]]
        choice = choose(points, floor, keep_skill=keep_skill)
        p = None if choice.index is None else r["points"][choice.index]
        out.append({"seed": r["seed"], "chosen": choice.index, "reason": choice.reason, "point": p})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("metrics", type=Path, help="a run's metrics.json")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    ap.add_argument("--what-if", action="append", default=[], metavar="FLOOR",
                    help="another floor applied to the measured points: 0.8, or open=0.5,arithmetic=0.8")
    ap.add_argument("--keep-skill", type=float, default=0.0, metavar="K",
                    help="with every --what-if: a point must keep K (in [0, 1]) of the as-trained validation domain "
                         "exact match ([evaluation] keep_skill); default 0, no such rule")
    args = ap.parse_args()
    if not 0.0 <= args.keep_skill <= 1.0:
        ap.error(f"--keep-skill {args.keep_skill!r}: expected a number in [0, 1]")
    metrics = json.loads(args.metrics.read_text(encoding="utf-8"))
    seeds = metrics["seeds"]
    out: dict[str, Any] = {"source": str(args.metrics), "seeds": seeds, "arms": {}}
    if args.keep_skill:
        out["keep_skill"] = args.keep_skill
    for name, arm in metrics["arms"].items():
        if not arm.get("frontier"):
            continue
        rows = seed_rows(arm, seeds)
        out["arms"][name] = {"seeds": rows, "mean_trained": mean_of(rows, "trained"),
                             "mean_at_chosen": mean_of(rows, "at_chosen"),
                             "what_if": {text: what_if(rows, text, args.keep_skill) for text in args.what_if}}
        print(f"\n### {name}: the frontier on validation data\n")
        print("| seed | profile | first / last layer (or step) | domain exact match % | " + " | ".join(FAMILIES) + " | min |")
        print("|---:|---|---|---:|" + "---:|" * (len(FAMILIES) + 1))
        for r in rows:
            for i, p in enumerate(r["points"]):
                mark = " **chosen**" if i == r["chosen"] else ""
                cells = " | ".join(pct(p["retention"].get(f)) for f in FAMILIES)
                kind, place = where(p)
                print(f"| {r['seed']} | {kind}{mark} | {place} | "
                      f"{pct(p['domain_exact_match'])} | {cells} | {pct(p['min_retention'])} |")
        for r in rows:
            print(f"\nseed {r['seed']}: {r['reason']} (Spearman of domain and min retention over the points: "
                  f"{'-' if r['tradeoff'] is None else format(r['tradeoff'], '.2f')})")
        print(f"\n### {name}: the test split, as trained and at the chosen point\n")
        print("| seed | point | domain exact match % | " + " | ".join(FAMILIES) + " | min |")
        print("|---:|---|---:|" + "---:|" * (len(FAMILIES) + 1))
        for r in rows + [{"seed": "mean", **{w: out["arms"][name][f"mean_{w}"] for w in ("trained", "at_chosen")}}]:
            for which in ("trained", "at_chosen"):
                fig = r[which]
                ret = fig["retention"]
                low = fig.get("min_retention", min((v for v in ret.values() if v is not None), default=None))
                cells = " | ".join(pct(ret.get(f)) for f in FAMILIES)
                print(f"| {r['seed']} | {which.replace('_', ' ')} | {pct(fig['domain_exact_match'])} | {cells} | {pct(low)} |")
        for text, picks in out["arms"][name]["what_if"].items():
            rule = f" with keep_skill {args.keep_skill:g}" if args.keep_skill else ""
            print(f"\n### {name}: the floor {text}{rule} applied to the same points (validation figures)\n")
            print("| seed | point | domain exact match % | min retention % |")
            print("|---:|---|---:|---:|")
            for pick in picks:
                p = pick["point"]
                shown = "none eligible" if p is None else " ".join(where(p))
                print(f"| {pick['seed']} | {shown} | {'-' if p is None else pct(p['domain_exact_match'])} | "
                      f"{'-' if p is None else pct(p['min_retention'])} |")
            for pick in picks:
                if pick["point"] is None:
                    print(f"\nseed {pick['seed']}: {pick['reason']}")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
        print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
