"""Cost and base-model scores of the general-capability suite, and self-synthesis yield.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/llm_suite.py [--passes 2] [--selfsynth-rows 40] [--seeds 1] [--magpie]

Loads SmolLM2-135M-Instruct on the CPU with one torch thread, prepares the shipped suite (the base
model's answers are generated once, into a fresh temporary cache, and timed), then times
``evaluate_suite`` passes of the base model over the kept items (the figure an arm pays per
evaluation), and one ``synthesize`` call per seed for ``--selfsynth-rows`` rows (fresh cache;
then a second, cached call; ``--magpie`` adds one call with Magpie-style requests). Prints a table and writes ``benchmarks/results/llm_suite.json``
with per-family base scores, suite sizes, seconds per pass (wall, and CPU time of this process and
its children: on a shared machine wall time measures the neighbours too) and self-synthesis yield.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path

for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[var] = "1"
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def cpu_seconds() -> float:
    """CPU time of this process and its finished children (the code checks run in subprocesses)."""
    import resource

    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passes", type=int, default=2, help="timed evaluate_suite passes")
    parser.add_argument("--selfsynth-rows", type=int, default=40, help="rows per self-synthesis call")
    parser.add_argument("--seeds", type=int, default=1, help="self-synthesis seeds")
    parser.add_argument("--magpie", action="store_true", help="also one seed with prompts='magpie'")
    parser.add_argument("--out", default="benchmarks/results/llm_suite.json")
    args = parser.parse_args()

    import torch

    from replaybank.llm.data.selfsynth import synthesize
    from replaybank.llm.eval.suite import evaluate_suite, load_suite, prepare_suite
    from replaybank.llm.model import load_model

    torch.set_num_threads(1)
    model, tok = load_model("SmolLM2-135M-Instruct", "cpu", log=lambda *a: None)
    items = load_suite()
    out: dict = {"machine": platform.processor() or platform.machine(), "torch_threads": 1, "items": len(items)}
    with tempfile.TemporaryDirectory() as tmp:
        t0, c0 = time.perf_counter(), cpu_seconds()
        suite = prepare_suite(model, tok, items, cache_dir=Path(tmp), desc="base answers")
        out["prepare_seconds"] = round(time.perf_counter() - t0, 1)
        out["prepare_cpu_seconds"] = round(cpu_seconds() - c0, 1)
        out["kept"], out["dropped"] = len(suite.items), suite.dropped
        out["base"] = {k: v for k, v in suite.base.items() if k != "items"}
        passes, cpu = [], []
        for p in range(args.passes):
            c0 = cpu_seconds()
            res = evaluate_suite(model, tok, suite, desc=f"pass {p + 1}")
            passes.append(res["seconds"])
            cpu.append(round(cpu_seconds() - c0, 1))
        out["seconds_per_pass"], out["cpu_seconds_per_pass"] = passes, cpu
        out["repeat_identical"] = res["families"] == suite.base["families"] and res["leakage"] == suite.base["leakage"]
        exclude = [i.prompt for i in items]
        synth = []
        sources = [("builtin", seed) for seed in range(args.seeds)] + [("magpie", 0)] * args.magpie
        for source, seed in sources:
            c0 = cpu_seconds()
            rows, manifest = synthesize(model, tok, seed=seed, n_rows=args.selfsynth_rows, cache_dir=Path(tmp),
                                        exclude=exclude, prompts=source)
            manifest["cpu_seconds"] = round(cpu_seconds() - c0, 1)
            t1 = time.perf_counter()
            synthesize(model, tok, seed=seed, n_rows=args.selfsynth_rows, cache_dir=Path(tmp), exclude=exclude,
                       prompts=source)
            manifest = {k: v for k, v in manifest.items() if k not in ("cache", "model")}
            manifest["prompts"] = source
            synth.append({**manifest, "cached_call_seconds": round(time.perf_counter() - t1, 3),
                          "examples": rows[:3]})
        out["selfsynth"] = synth
    print(f"suite: {len(items)} items, {out['kept']} kept; base answers generated in "
          f"{out['prepare_seconds']} s ({out['prepare_cpu_seconds']} CPU s)")
    print(f"{'family':<14}{'n':>5}{'base score':>12}")
    for fam, score in out["base"]["families"].items():
        print(f"{fam:<14}{out['base']['n'][fam]:>5}{score:>12.3f}")
    print(f"{'leakage':<14}{'':>5}{out['base']['leakage']:>12.3f}")
    print("evaluate_suite pass (1 torch thread): wall seconds", passes, "CPU seconds", cpu)
    for s in synth:
        magpie = f" Magpie requests {s['magpie']};" if s["magpie"] else ""
        print(f"self-synthesis ({s['prompts']}) seed {s['seed']}: kept {s['kept']} of {s['generated']} generated"
              f" in {s['seconds']} s ({s['cpu_seconds']} CPU s);{magpie} dropped {s['dropped']};"
              f" cached call {s['cached_call_seconds']} s")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n", "utf-8")


if __name__ == "__main__":
    main()
