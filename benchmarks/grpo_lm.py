"""GRPO with LoRA on SmolLM2-135M-Instruct: generated tokens to a held-out accuracy, with and
without rollout replay, plus synchronous vs asynchronous generation.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/grpo_lm.py --seeds 3 --jobs 2 [any `replaybank rl grpo` option]

Runs both arms (``no_replay``, ``replay``) for every seed with ``replaybank.rl.grpo_trainer``
(``--jobs`` worker processes, one torch thread each, each loading the model once), prints the
per-seed table (tokens and seconds until the held-out accuracy first reaches ``--target``, final
accuracy, share of wall time in generation), then, unless ``--async-updates 0``, times
``--async-updates`` updates of the replay arm (seed 0) synchronously and with generation in a
thread overlapping learning, alone on the machine. Writes ``benchmarks/results/grpo_lm.json`` and
``grpo_lm.png`` (held-out accuracy against generated tokens and seconds, per seed and arm).

Runtime on the shared 2-core CPU machine: 3 seeds x 60 updates per arm took 45.5 min with
``--jobs 1`` (one core; 3-6 s per update, 11-17 s per 128-sample evaluation) and 44 min with
``--jobs 2`` under heavier load (about 7 s per update and 20-30 s per evaluation per process); the
async timing (10 + 10 updates) 2.4 min. The commands and tables (lr 2e-3 and 5e-3) are in
docs/rl.md ("GRPO on SmolLM2-135M-Instruct").
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[var] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from replaybank.rl.cli import add_dataclass_options, args_from_namespace  # noqa: E402
from replaybank.rl.grpo_trainer import (  # noqa: E402
    GrpoLmArgs,
    check_args,
    format_table,
    load_base,
    summarize,
    train_arm,
)

_BASE: Any = None


def _init(args: GrpoLmArgs) -> None:
    import torch

    global _BASE
    torch.set_num_threads(1)
    _BASE = load_base(args)


def _one(job: tuple[GrpoLmArgs, str, int]) -> dict[str, Any]:
    args, arm, seed = job
    return train_arm(args, arm, seed, _BASE)  # type: ignore[arg-type]


def comparison(args: GrpoLmArgs, jobs: int, partial: Path) -> list[dict[str, Any]]:
    """Every (seed, arm) run, in ``jobs`` processes, with a progress bar over runs; the runs done
    so far are rewritten to ``partial`` after each one (an interrupted benchmark keeps them)."""
    import multiprocessing as mp

    from tqdm.auto import tqdm

    arms = check_args(args)
    work = [(args, arm, seed) for seed in range(args.seeds) for arm in arms]
    runs = []
    with mp.get_context("spawn").Pool(jobs, initializer=_init, initargs=(args,)) as pool, \
            tqdm(total=len(work), desc="grpo runs", unit="run", dynamic_ncols=True) as bar:
        for r in pool.imap_unordered(_one, work):
            runs.append(r)
            partial.write_text(json.dumps({"args": asdict(args), "runs": runs}, indent=2) + "\n")
            bar.set_postfix(last=f"{r['arm']}/{r['seed']}: acc {r['final_accuracy']:.2f}", refresh=False)
            bar.update(1)
    return sorted(runs, key=lambda r: (r["seed"], r["arm"]))


def async_timing(args: GrpoLmArgs, updates: int) -> dict[str, Any]:
    """Seconds per update of the replay arm (seed 0), synchronous vs asynchronous generation."""
    import torch

    torch.set_num_threads(1)
    base = load_base(args)
    out: dict[str, Any] = {"updates": updates}
    for mode in (False, True):
        a = replace(args, async_mode=mode, max_updates=updates, eval_every=updates, stop_at_target=False,
                    max_staleness=max(args.max_staleness, 1))
        r = train_arm(a, "replay", 0, base)
        out["async" if mode else "sync"] = {
            "seconds_per_update": round(r["wall_seconds"] / r["updates"], 3),
            "generation_seconds": r["generation_seconds"], "learn_seconds": r["learn_seconds"],
            "wall_seconds": r["wall_seconds"], "tokens_generated": r["tokens_generated"],
            "final_accuracy": r["final_accuracy"], "mean_staleness": round(r["mean_staleness"], 3),
        }
    out["speedup"] = round(out["sync"]["seconds_per_update"] / out["async"]["seconds_per_update"], 3)
    return out


def plot(result: dict[str, Any], path: Path) -> None:
    """Held-out accuracy against generated tokens (left) and against wall seconds, evaluation
    excluded (right): one thin line per seed, the arm's mean over seeds at each evaluation bold
    (plotted at the mean cost), the target dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    runs, target = result["runs"], result["summary"]["target_accuracy"]
    colors = {"no_replay": "tab:blue", "replay": "tab:orange"}
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for ax, key, label in ((axes[0], "tokens_generated", "generated completion tokens"),
                           (axes[1], "seconds", "wall seconds (evaluation excluded)")):
        for arm, color in colors.items():
            curves = [r["curve"] for r in runs if r["arm"] == arm]
            for c in curves:
                ax.plot([p[key] for p in c], [p["accuracy"] for p in c], color=color, alpha=0.3, lw=0.8)
            n = min(len(c) for c in curves) if curves else 0
            if n:
                x = np.mean([[p[key] for p in c[:n]] for c in curves], axis=0)
                y = np.mean([[p["accuracy"] for p in c[:n]] for c in curves], axis=0)
                ax.plot(x, y, color=color, lw=2.2, label=f"{arm.replace('_', ' ')} (mean of {len(curves)} seeds)")
        ax.axhline(target, color="gray", ls="--", lw=1, label=f"target {target:g}")
        ax.set_xlabel(label)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("held-out pass rate")
    axes[0].legend(fontsize=8, loc="lower right")
    a = result["args"]
    fig.suptitle(f"GRPO + LoRA on {a['model']}: fresh rollouts vs rollout replay "
                 f"(staleness <= {a['max_staleness']}, reuse <= {a['max_reuse']}, {a['fresh_groups']}/"
                 f"{a['batch_groups']} groups fresh, lr {a['learning_rate']:g})", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    add_dataclass_options(parser, GrpoLmArgs)
    parser.add_argument("--jobs", type=int, default=2, help="worker processes for the comparison (default 2)")
    parser.add_argument("--async-updates", type=int, default=10, help="updates per async timing run (0 = skip)")
    parser.add_argument("--skip-comparison", action="store_true", help="only the async timing")
    parser.add_argument("--json", default="benchmarks/results/grpo_lm.json", help="where the results go")
    parser.add_argument("--plot-only", action="store_true", help="redraw the plot (--json with .png) from --json")
    parser.add_argument("--resummarize", action="store_true", help="with --plot-only: recompute the summary from the runs")
    ns = parser.parse_args()
    if ns.plot_only:
        result = json.loads(Path(ns.json).read_text())
        if ns.resummarize:
            result["summary"] = summarize(result["runs"], result["summary"]["target_accuracy"])
            Path(ns.json).write_text(json.dumps(result, indent=2) + "\n")
            print(format_table(result["summary"]))
        plot(result, Path(ns.json).with_suffix(".png"))
        return
    args = args_from_namespace(GrpoLmArgs, ns)
    check_args(args)
    start = time.perf_counter()
    result: dict[str, Any] = {"args": asdict(args), "jobs": ns.jobs, "machine": f"{platform.machine()}, {os.cpu_count()} CPUs"}
    if not ns.skip_comparison:
        partial = Path(ns.json).with_suffix(".partial.json")
        partial.parent.mkdir(parents=True, exist_ok=True)
        runs = comparison(args, ns.jobs, partial)
        partial.unlink()
        result["summary"] = summarize(runs, args.target)
        result["runs"] = runs
        result["comparison_seconds"] = round(time.perf_counter() - start, 1)
        print(format_table(result["summary"]))
        print(f"comparison took {result['comparison_seconds'] / 60:.1f} min")
    if ns.async_updates > 0:
        t0 = time.perf_counter()
        result["async"] = async_timing(args, ns.async_updates)
        result["async_seconds"] = round(time.perf_counter() - t0, 1)
        a = result["async"]
        print(f"\nreplay arm, {ns.async_updates} updates: sync {a['sync']['seconds_per_update']:.2f} s/update, "
              f"async {a['async']['seconds_per_update']:.2f} s/update (x{a['speedup']:.2f})")
    result["seconds"] = round(time.perf_counter() - start, 1)
    Path(ns.json).parent.mkdir(parents=True, exist_ok=True)
    Path(ns.json).write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {ns.json}")
    if "runs" in result:
        plot(result, Path(ns.json).with_suffix(".png"))
        print(f"wrote {Path(ns.json).with_suffix('.png')}")


if __name__ == "__main__":
    main()
