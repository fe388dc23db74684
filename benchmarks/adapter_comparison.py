"""One adapter carried over vs one adapter per skill, merged or routed.

    python benchmarks/adapter_comparison.py RUN [--carried naive,rehearsal-replay] [--suite-per-family N]

RUN is a finished ``replaybank run`` folder over a sequence of skills whose arms include one with
``fresh_adapter = true`` (one adapter per skill; benchmarks/adapter_comparison.toml is the config)
and ``[output] save_adapters = true``. Per seed, every approach is measured on the run's own
held-out requests of every skill (generated exact match), on the run's general suite (retention
per family vs the base model), for adapter memory and median latency per request; approaches: the
carried-over adapters of the last generation (naive; the best rehearsal arm), the skill adapters
merged with each of linear, cat, ties, dare_ties, svd (equal weights), routed by BM25 over each
skill's training prompts with a fallback to the base, and the oracle (each skill's own adapter on
its own requests). Prints a Markdown table (mean ± std over seeds) and the targets; writes JSON to
benchmarks/results/adapter_comparison/. Code: replaybank.llm.adapters.compare.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> None:
    from replaybank.llm.adapters.compare import (
        MERGES,
        Settings,
        best,
        check_targets,
        measure_seed,
        read_run,
        summarise_seeds,
        table,
    )

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, help="a finished `replaybank run` folder")
    parser.add_argument("--per-skill", help="the arm with fresh_adapter = true (default: the run's one)")
    parser.add_argument("--carried", help="carried-over arms, comma-separated (default: naive and the rehearsal arm with "
                                          "the highest final accuracy over all skills)")
    parser.add_argument("--merges", default=",".join(MERGES), help="merge types, comma-separated")
    parser.add_argument("--weight", type=float, default=1.0, help="every skill adapter's weight in the merges")
    parser.add_argument("--density", type=float, default=0.5, help="kept share of ties / dare_ties")
    parser.add_argument("--threshold", type=float, help="router confidence below which the base answers (default: the "
                                                        "router's top_k and threshold calibrated left-one-out)")
    parser.add_argument("--no-background", action="store_true", help="route without the shipped general prompts")
    parser.add_argument("--suite-per-family", type=int, help="suite items a family (default: the run's; 0 = all)")
    parser.add_argument("--eval-rows", type=int, help="held-out requests a skill (default: all the run held out)")
    parser.add_argument("--latency-requests", type=int, default=8, help="requests timed one at a time per approach")
    parser.add_argument("--seeds", help="seeds of the run to measure, comma-separated (default: all)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--out", type=Path, help="JSON file (default: benchmarks/results/adapter_comparison/RUN.json)")
    args = parser.parse_args()

    import torch
    from tqdm.auto import tqdm

    from replaybank.llm.model import load_model
    from replaybank.llm.runtime import environment, loadavg, pick_device, use_device

    t0, load0 = time.perf_counter(), loadavg()
    run = read_run(args.run, args.per_skill, args.carried.split(",") if args.carried else None)
    seeds = [int(s) for s in args.seeds.split(",")] if args.seeds else run.seeds
    settings = Settings(merges=tuple(m for m in args.merges.split(",") if m), weight=args.weight, density=args.density,
                        threshold=args.threshold, background=not args.no_background,
                        suite_per_family=args.suite_per_family, eval_rows=args.eval_rows,
                        latency_requests=args.latency_requests)
    torch.set_num_threads(args.threads)
    device = pick_device(run.device)
    use_device(device)
    base, tokenizer = load_model(run.base_model, device, lambda m: None)
    per_seed = []
    steps = len(seeds) * (len(run.carried) + len(settings.merges) + 2)
    with tqdm(total=steps, desc="adapter comparison", unit="approach", dynamic_ncols=True) as bar:
        for seed in seeds:
            with tempfile.TemporaryDirectory(prefix="adapter-comparison-") as scratch:
                def progress(name: str, seed: int = seed) -> None:
                    bar.set_postfix_str(f"seed {seed}: {name}")
                    bar.update()

                per_seed.append(measure_seed(base, tokenizer, run, seed, settings, Path(scratch) / "library", progress))
    skills = per_seed[0]["skills"]
    agg = summarise_seeds(per_seed)
    targets, winner = check_targets(agg, skills), best(agg)
    text = table(agg, skills)
    env = {**environment(device), "loadavg_1min_start": load0, "loadavg_1min_end": loadavg(), "cpus": os.cpu_count()}
    print(f"\n{len(seeds)} seeds {seeds} of {args.run}; skills {skills}; carried {run.carried}; per-skill arm "
          f"{run.per_skill!r}; load {load0} -> {env['loadavg_1min_end']}\n")
    print(text)
    print("\nlargest difference to the run's own accuracies for the same adapters (0 = same rows, same scoring): "
          + "; ".join(f"seed {s['seed']}: {s['run_agreement']}" for s in per_seed))
    print(f"\nrouted targets (no skill > 5 points below its own adapter; retention >= 95%): {json.dumps(targets)}")
    if winner:
        print(f"highest mean accuracy: {winner}")
    out = args.out or HERE / "results" / "adapter_comparison" / f"{args.run.resolve().name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({
        "run": str(args.run), "seeds": seeds, "skills": skills, "per_skill_arm": run.per_skill, "carried": run.carried,
        "settings": per_seed[0]["settings"], "aggregate": agg, "targets": targets, "best": winner, "table": text,
        "per_seed": per_seed, "environment": env, "wall_seconds": round(time.perf_counter() - t0, 1),
    }, indent=1, default=str) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
