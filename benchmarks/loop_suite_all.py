"""Retention of finished loop runs on every suite item, not the run's 16-per-family sample.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/loop_suite_all.py runs/final/window-rehearsal-s0 ... \\
        [--generations 1,5] [--out benchmarks/results/loop_suite_all.json]

A loop run scores retention on 16 suite items per family (48 items, seeded per run): cheap
enough for every generation, but one sample's retention has a standard deviation of 3-5 points
from the sample alone (docs/loop.md, "Retention"). This script loads each run's saved adapters
(``adapters/genN``, hash-checked) and scores the whole suite (118 items; arithmetic items the
base model gets wrong are dropped as in the loop), so a run's retention is read without that
noise. Nothing is trained; the runs are read, never written.

Prints one row per run and generation (retention, per family, leakage) and a mean +- sample std
per group (the run folder's name without its seed).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[var] = "1"
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path, help="run folders (each with state.json and adapters/)")
    parser.add_argument("--generations", default="1,5", help="comma-separated generations to score (default 1,5)")
    parser.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    args = parser.parse_args()
    try:
        gens = [int(g) for g in args.generations.split(",")]
    except ValueError:
        parser.error(f"--generations {args.generations!r}: expected comma-separated integers, e.g. 1,5")

    import torch

    from replaybank.llm.eval.measure import suite_retention
    from replaybank.llm.eval.suite import evaluate_suite, load_suite, prepare_suite
    from replaybank.llm.loop.consolidate import load_adapter
    from replaybank.llm.loop.state import read_state
    from replaybank.llm.model import cache_dir, load_model
    from replaybank.llm.train import add_lora

    torch.set_num_threads(1)
    configs = {}
    for run in args.runs:
        state = read_state(run)
        if state is None:
            parser.error(f"{run}: no state.json; pass finished loop run folders (e.g. runs/loop/window-rehearsal-s0)")
        missing = [g for g in gens if g > state.finished]
        if missing:
            parser.error(f"{run}: generations {missing} not finished (last finished: {state.finished})")
        configs[run] = state.loop_config
    first = next(iter(configs.values()))
    for run, cfg in configs.items():
        if (cfg.training.lora_rank, cfg.training.lora_target_modules) != (first.training.lora_rank,
                                                                           first.training.lora_target_modules):
            parser.error(f"{run}: another LoRA shape than {args.runs[0]}; score runs of one adapter shape together")
    base, tok = load_model(first.training.base_model)
    model = add_lora(base, first.training)  # a fresh adapter is the identity: base answers below
    initial = {k: v.detach().clone() for k, v in model.state_dict().items() if "lora_" in k}
    batch = first.evaluation.generation_batch_size
    suite = prepare_suite(model, tok, load_suite(), cache_dir=cache_dir() / "suite", batch_size=batch)
    rows: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    for run, cfg in configs.items():
        for g in gens:
            model.load_state_dict(initial, strict=False)
            adapter = load_adapter(model, run / "adapters" / f"gen{g}")
            res = evaluate_suite(model, tok, suite, batch_size=batch, desc=f"{run.name} gen {g}")
            row = {"run": run.name, "group": run.name.rsplit("-s", 1)[0], "seed": cfg.loop.seed, "generation": g,
                   "adapter": adapter, "retention": suite_retention(res["retention"]), "families": res["retention"],
                   "leakage": res["leakage"], "n": res["n"], "seconds": res["seconds"]}
            rows.append(row)
            fams = " / ".join(f"{v:.0%}" for v in res["retention"].values() if v is not None)
            print(f"{run.name} gen {g}: retention {row['retention']:.1%} ({fams}) leakage {res['leakage']:.0%} "
                  f"[{res['seconds']:.0f} s]", flush=True)
    print(f"\nall {sum(suite.base['n'].values())} suite items ({suite.base['n']}); {time.perf_counter() - t0:.0f} s\n")
    print("| group | generation | retention % per seed | mean +- sd |")
    print("|---|---:|---|---|")
    groups = sorted({(r["group"], r["generation"]) for r in rows})
    summary = {}
    for group, g in groups:
        vals = [100 * r["retention"] for r in rows if (r["group"], r["generation"]) == (group, g)]
        sd = statistics.stdev(vals) if len(vals) > 1 else 0.0
        summary[f"{group}/gen{g}"] = {"values": vals, "mean": statistics.mean(vals), "sd": sd}
        print(f"| {group} | {g} | {', '.join(f'{v:.1f}' for v in vals)} | {statistics.mean(vals):.1f} +- {sd:.1f} |")
    if args.out:
        args.out.write_text(json.dumps({"suite_n": suite.base["n"], "rows": rows, "summary": summary}, indent=1))
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
