"""The experiment: every arm over every seed, measured where it matters, then the report.

Order of calls (one job per step; the modules named do the work):

1. validate the config, refuse to touch an earlier run's output without ``force``, pick the
   device, load the base model and tokenizer (:mod:`replaybank.llm.model`);
2. prepare the general-capability suite once: the base model's answers are generated and cached
   (:func:`replaybank.llm.eval.suite.prepare_suite`), plus the held-out general text;
3. per seed (``training.seed + k``; :func:`replaybank.llm.seed.run_seed`, in worker processes with ``jobs``):
   a. :func:`replaybank.llm.data.prepare.prepare` the corpus pool, held-out sets, domain data, probe;
   b. synthesize the ``self`` rehearsal rows when an arm uses them
      (:func:`replaybank.llm.data.selfsynth.synthesize`, base model, cached per seed);
   c. check that no training text contains a suite prompt;
   d. measure ``base``; on the first seed, probe gradient interference per rehearsal source;
   e. train and measure every other arm through every generation (:mod:`replaybank.llm.arms`);
4. aggregate the arms over seeds (:mod:`replaybank.llm.report.seeds`), check the targets, write
   ``metrics.json``, ``report.md``, ``behaviour.png`` and ``losses.png`` (:mod:`replaybank.llm.report.metrics`).

Everything is written into ``OUT.partial/`` and renamed to ``OUT`` at the very end, so an
interrupted run never leaves an output folder that looks complete; a rerun with the same config
resumes the arms' checkpoints from ``OUT.partial/``. An existing ``OUT`` (or leftovers of a run
with another config) is only replaced with ``force``.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from replaybank.errors import ReplayBankError
from replaybank.llm.config import Config
from replaybank.llm.eval.measure import flatten
from replaybank.llm.report.metrics import (
    METRICS_SCHEMA_VERSION,
    build_metrics,
    write_outputs,
)
from replaybank.llm.report.seeds import aggregate
from replaybank.llm.seed import run_seed

Log = Callable[[str], None]


class OutputError(ReplayBankError):
    """The output folder cannot be used."""


def resolve_threads(setting: int, load: float | None) -> int:
    """Torch CPU threads for ``num_threads = setting`` (0 = auto).

    Auto uses every CPU on an idle machine and 1 thread otherwise: with other processes running,
    multi-threaded torch slowed the 2-CPU development machine 5-13x (threads wait for each other
    while one is descheduled), while 1 thread kept about 120 tokens/s of LoRA training.

    Example:
        >>> resolve_threads(3, 5.0), resolve_threads(0, 4.0)
        (3, 1)
    """
    if setting > 0:
        return setting
    cpus = os.cpu_count() or 1
    return cpus if load is not None and load < 0.5 else 1


def pick_device(setting: str) -> str:
    import torch

    if setting == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if setting == "cuda" and not torch.cuda.is_available():
        raise ValueError("[training] device = 'cuda' but no CUDA device is available")
    return setting


def check_out_dir(out: Path, force: bool) -> None:
    """Refuse an ``out`` that holds anything unless ``force`` (and never a folder that is not a run).

    Raises:
        OutputError: ``out`` is a non-empty folder of something else (always), or an earlier run
            (without ``force``).
    """
    if not out.exists():
        return
    if not out.is_dir():
        raise OutputError(f"{out}: exists and is not a folder; choose another --out")
    if not any(out.iterdir()):
        return
    if not (out / "metrics.json").is_file():
        raise OutputError(f"{out}: exists and is not a replaybank run folder (no metrics.json); choose another --out")
    if not force:
        raise OutputError(f"{out}: holds an earlier run's output; pass --force to replace it, or choose another --out")


def _partial_dir(out: Path, cfg: Config, n_seeds: int, force: bool) -> Path:
    partial = out.with_name(out.name + ".partial")
    key = hashlib.sha256(json.dumps([cfg.to_dict(), n_seeds], sort_keys=True).encode()).hexdigest()
    stamp = partial / "config.sha256"
    if partial.exists() and (not stamp.is_file() or stamp.read_text().strip() != key):
        if not force:
            raise OutputError(
                f"{partial}: leftovers of an interrupted run with another config; rerun that config to resume "
                "it, or pass --force to discard them"
            )
        shutil.rmtree(partial)
    partial.mkdir(parents=True, exist_ok=True)
    stamp.write_text(key)
    return partial


def run_experiment(
    cfg: Config, out: Path | None = None, log: Log = print, max_steps: int | None = None,
    *, seeds: int | None = None, force: bool = False, jobs: int = 1,
) -> dict[str, Any]:
    """Run every configured arm over every seed and write the report; returns the metrics dict.

    Args:
        cfg: a validated config.
        out: output folder (default ``cfg.output.out_dir``).
        log: where progress lines go.
        max_steps: optional cap on optimizer steps per arm and generation (smoke tests).
        seeds: number of seeds (default ``[evaluation] seeds``); seed ``k`` is ``training.seed + k``.
        force: replace an earlier run's output folder (and discard leftovers of another config).
        jobs: run seeds in this many worker processes (each loads the model; one torch thread each).

    Raises:
        ConfigError, CorpusError, ModelError, SuiteError, OutputError: bad input, before any
            training starts. ReplayBankError: self-synthesis that yields no usable row.
    """
    import torch

    from replaybank.llm.eval.suite import general_text_rows, load_suite
    from replaybank.llm.model import check_target_modules, load_model

    wall0 = time.perf_counter()
    load_start = _loadavg()
    if load_start is not None and load_start > (os.cpu_count() or 1):
        log(f"note: load average {load_start} on {os.cpu_count()} CPUs; other processes will slow this run")
    out = Path(out if out is not None else cfg.output.out_dir)
    check_out_dir(out, force)
    n_seeds = seeds if seeds is not None else cfg.evaluation.seeds
    if n_seeds < 1:
        raise OutputError(f"--seeds {n_seeds}: need at least one seed")
    t = cfg.training
    items = load_suite(cfg.data.suite)  # bad suite files fail before the model loads
    torch.set_num_threads(resolve_threads(t.num_threads, load_start))
    device = pick_device(t.device)
    timings: dict[str, float] = {}

    t0 = time.perf_counter()
    base_model, tokenizer = load_model(t.base_model, device, log)
    check_target_modules(base_model, list(t.lora_target_modules))
    timings["model_load"] = time.perf_counter() - t0

    general_text = general_text_rows(tokenizer, t.max_seq_length)
    partial = _partial_dir(out, cfg, n_seeds, force)

    per_seed: list[dict[str, dict[str, Any]]] = []
    probes: dict[str, Any] = {}
    manifests: list[dict[str, Any]] = []
    suites: list[dict[str, Any]] = []
    n_jobs = min(max(1, jobs), n_seeds)
    if n_jobs > 1:
        results = _parallel_seeds(cfg, n_seeds, n_jobs, partial, log, max_steps)
    else:
        results = [
            run_seed(cfg, k, base_model, tokenizer, items, general_text, partial=partial, log=log, max_steps=max_steps)
            for k in range(n_seeds)
        ]
    for k, res in enumerate(results):
        per_seed.append(res["arms"])
        manifests.append(res["manifest"])
        suites.append(res["suite"])
        probes = res["probes"] if k == 0 else probes
        timings.update(res["timings"])

    agg = aggregate([{a: flatten(r) for a, r in arms.items()} for arms in per_seed])
    metrics = build_metrics(cfg, per_seed, agg, probes, manifests, suites)
    metrics["environment"] = {**_environment(device), "loadavg_1min_start": load_start, "loadavg_1min_end": _loadavg()}
    metrics["timings"] = {key: round(v, 2) for key, v in timings.items()}
    metrics["seeds"] = [t.seed + k for k in range(n_seeds)]
    metrics["schema_version"] = METRICS_SCHEMA_VERSION
    metrics["wall_seconds"] = round(time.perf_counter() - wall0, 2)
    write_outputs(partial, metrics)  # metrics.json last: its presence marks a complete run
    for leftover in partial.glob("*/checkpoint.pt"):
        leftover.unlink()
    for empty in partial.iterdir():
        if empty.is_dir() and not any(empty.iterdir()):
            empty.rmdir()
    (partial / "config.sha256").unlink()
    if out.exists():
        shutil.rmtree(out)  # only reached with force (check_out_dir) or for an empty folder
    partial.rename(out)
    log(f"wrote {out / 'report.md'}, {out / 'metrics.json'} and plots in {metrics['wall_seconds']:.1f} s")
    return metrics


def _parallel_seeds(cfg: Config, n_seeds: int, jobs: int, partial: Path, log: Log, max_steps: int | None) -> list[dict[str, Any]]:
    """Seeds in ``jobs`` worker processes (spawned; each loads the model, one torch thread)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    log(f"running {n_seeds} seeds in {jobs} processes")
    with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = [pool.submit(_seed_worker, cfg, k, partial, max_steps) for k in range(n_seeds)]
        return [f.result() for f in futures]


def _seed_worker(cfg: Config, k: int, partial: Path, max_steps: int | None) -> dict[str, Any]:
    import sys

    import torch

    from replaybank.llm.eval.suite import general_text_rows, load_suite
    from replaybank.llm.model import load_model

    torch.set_num_threads(1)

    def log(message: str) -> None:
        print(f"[seed {cfg.training.seed + k}] {message}", file=sys.stderr, flush=True)

    model, tokenizer = load_model(cfg.training.base_model, pick_device(cfg.training.device), log)
    items = load_suite(cfg.data.suite)
    general_text = general_text_rows(tokenizer, cfg.training.max_seq_length)
    return run_seed(cfg, k, model, tokenizer, items, general_text, partial=partial, log=log, max_steps=max_steps)


def _loadavg() -> float | None:
    # Other processes on a small machine change the timings a lot; the report says how busy it was.
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def _environment(device: str) -> dict[str, Any]:
    import peft
    import torch
    import transformers

    return {
        "device": device,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "peft": peft.__version__,
        "python": platform.python_version(),
        "threads": torch.get_num_threads(),
        "machine": platform.machine(),
    }
