"""The experiment: every arm over every seed, measured where it matters, then the report.

Order of calls (one job per step; the modules named do the work):

1. validate the config, refuse to touch an earlier run's output without ``force``, pick the
   device, load the base model and tokenizer (:mod:`replaybank.llm.model`);
2. prepare the general-capability suite once: the base model's answers are generated and cached
   (:func:`replaybank.llm.eval.suite.prepare_suite`), plus the held-out general text;
3. per seed (``training.seed + k``):
   a. :func:`replaybank.llm.data_prep.prepare` the corpus pool, held-out sets, domain data, probe;
   b. synthesize the ``self`` rehearsal rows when an arm uses them
      (:func:`replaybank.llm.data.selfsynth.synthesize`, base model, cached per seed);
   c. check that no training text contains a suite prompt;
   d. measure ``base``; on the first seed, probe gradient interference per rehearsal source;
   e. train and measure every other arm through every generation (:mod:`replaybank.llm.arms`);
4. aggregate the arms over seeds (:mod:`replaybank.llm.seeds`), check the targets, write
   ``metrics.json``, ``report.md``, ``behaviour.png`` and ``losses.png`` (:mod:`replaybank.llm.report`).

Everything is written into ``OUT.partial/`` and renamed to ``OUT`` at the very end, so an
interrupted run never leaves an output folder that looks complete; a rerun with the same config
resumes the arms' checkpoints from ``OUT.partial/``. An existing ``OUT`` (or leftovers of a run
with another config) is only replaced with ``force``.
"""

from __future__ import annotations

import copy
import dataclasses
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
from replaybank.llm.arms import train_arm
from replaybank.llm.config import Config
from replaybank.llm.data_prep import Prepared, prepare
from replaybank.llm.evaluate import mean_loss, probe_score
from replaybank.llm.measure import EvalContext, domain_row, flatten, measure_losses
from replaybank.llm.report import (
    METRICS_SCHEMA_VERSION,
    build_metrics,
    write_outputs,
)
from replaybank.llm.rows import TokenRows, encode_pair, token_rows
from replaybank.llm.seeds import aggregate

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


def with_seed(cfg: Config, seed: int) -> Config:
    """A copy of ``cfg`` with ``[training] seed = seed`` (explicit keys kept)."""
    out = copy.deepcopy(cfg)
    out.training = dataclasses.replace(cfg.training, seed=seed)
    return out


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


def run_seed(
    cfg: Config, k: int, base_model: Any, tokenizer: Any, items: list[Any], general_text: TokenRows, *,
    partial: Path, log: Log, max_steps: int | None,
) -> dict[str, Any]:
    """Seed ``training.seed + k``: suite sample, data, self rows, base, (probe), every trained arm.

    A seed already finished in ``partial`` (``seeds/seed<N>.json`` of an interrupted run with the
    same config) is read back instead of rerun.

    Returns:
        ``{"arms", "manifest", "suite", "probes", "timings"}``.
    """
    from replaybank.llm.eval.suite import prepare_suite
    from replaybank.llm.model import cache_dir

    t, ev = cfg.training, cfg.evaluation
    seed = t.seed + k
    label = f"seed{seed}"
    done = partial / "seeds" / f"{label}.json"
    if done.is_file():
        log(f"{label}: finished in an earlier, interrupted run; read back from {done}")
        return dict(json.loads(done.read_text(encoding="utf-8")))
    specs = cfg.arm_specs()
    trained = [a for a in ev.arms if a != "base"]
    scfg = with_seed(cfg, seed)
    timings: dict[str, float] = {}
    pad_id = int(tokenizer.pad_token_id)
    t0 = time.perf_counter()
    suite = prepare_suite(
        base_model, tokenizer, sample_suite(items, ev.suite_per_family, seed), cache_dir=cache_dir() / "suite",
        batch_size=ev.generation_batch_size, desc=f"suite {label}: base answers",
    )
    log(f"suite {label}: {len(suite.items)} items kept of {len(items)} ({suite.base['n']}); "
        f"base leakage {suite.base['leakage']:.3f}")
    timings[f"suite_{label}"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    data = prepare(scfg, tokenizer)
    share, how = scfg.effective_mixing_ratio(len(data.domain_generations[0]))
    _check_overlaps(items, data)
    uses_self = any("self" in specs[a].source for a in trained)
    self_rows, self_manifest = _self_rows(base_model, tokenizer, scfg, items, log) if uses_self else (None, None)
    timings[f"data_{label}"] = time.perf_counter() - t0
    log(
        f"{label}: {len(data.rehearsal_pool)} corpus passages, {len(self_rows) if self_rows else 0} self rows, "
        f"domain train {data.manifest['domain_train_rows']}, eval {[len(r) for r in data.domain_eval_records]}; "
        f"corpus share {share:.4f} ({how})"
    )
    ctx = EvalContext(tokenizer, pad_id, data, suite, general_text, ev.max_new_tokens, ev.generation_batch_size, self_rows)
    t0 = time.perf_counter()
    arms: dict[str, dict[str, Any]] = {"base": _measure_base(base_model, ctx, label)}
    ctx.baseline = arms["base"]["matrix_row"]
    timings[f"base_{label}"] = time.perf_counter() - t0
    probes: dict[str, Any] = {}
    if k == 0 and ev.probe_sources and trained:
        t0 = time.perf_counter()
        probes = _probe_sources(base_model, ctx, scfg, log)
        timings["probe"] = time.perf_counter() - t0
    for arm in trained:
        spec = specs[arm]
        ratio = share if spec.source and arm not in cfg.arms else spec.ratio
        t0 = time.perf_counter()
        arms[arm] = train_arm(arm, spec, ratio, base_model, ctx, scfg, partial=partial, log=log,
                              max_steps=max_steps, seed_label=label)
        timings[f"{arm}_{label}"] = time.perf_counter() - t0
        log(f"{arm} {label}: " + ", ".join(f"{key} {v:.3f}" for key, v in flatten(arms[arm]).items()))
    result = {
        "arms": arms,
        "manifest": {"seed": seed, "share": share, "how": how, "data": data.manifest, "self": self_manifest},
        "suite": {"seed": seed, **suite.manifest, "ids": [i.id for i in suite.items], "dropped_ids": suite.dropped},
        "probes": probes,
        "timings": timings,
    }
    _write_seed(partial, label, result)
    return result


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


def sample_suite(items: list[Any], per_family: int, seed: int) -> list[Any]:
    """A seeded sample of at most ``per_family`` items of each family, in suite order (0 = all items).

    Each seed evaluates its own sample, so a multi-seed run covers more of the suite and its spread
    includes the item sampling.

    Example:
        >>> from types import SimpleNamespace as I
        >>> items = [I(id=str(k), family="code" if k % 2 else "conversation") for k in range(10)]
        >>> [i.id for i in sample_suite(items, 2, seed=0)] == [i.id for i in sample_suite(items, 2, seed=0)]
        True
        >>> len(sample_suite(items, 2, seed=0)), len(sample_suite(items, 0, seed=0))
        (4, 10)
    """
    if per_family <= 0:
        return list(items)
    import numpy as np

    rng = np.random.default_rng([seed, 8])
    keep: set[int] = set()
    for fam in dict.fromkeys(i.family for i in items):
        idx = [k for k, i in enumerate(items) if i.family == fam]
        keep.update(int(k) for k in rng.permutation(idx)[:per_family])
    return [i for k, i in enumerate(items) if k in keep]


def _measure_base(model: Any, ctx: EvalContext, label: str) -> dict[str, Any]:
    losses = measure_losses(model, ctx)
    probe = probe_score(model, ctx.tokenizer, ctx.data.probe, ctx.pad_id)
    row = domain_row(model, ctx, f"base {label}")
    out = {
        **losses,
        "probe_score": probe["exact_match"],
        "probe_logprob": probe["answer_logprob"],
        # The base answers were generated (or read from the cache) once; the base keeps all it has.
        "suite": {**ctx.suite.base, "retention": {f: 1.0 if v > 0 else None for f, v in ctx.suite.base["families"].items()}},
        "domain": {k: row[-1][k] for k in ("exact_match", "call_score", "n")},
        "matrix_row": row,
        "matrix": {"R": [[float(c["exact_match"]) for c in row]]},  # the forward-transfer baseline row
    }
    if ctx.self_rows is not None:
        out["self_loss"] = mean_loss(model, ctx.self_rows, ctx.pad_id)
    return out


def _check_overlaps(suite: Any, data: Prepared) -> None:
    """No training text of this seed may contain any suite prompt (the whole suite, not the sample)."""
    from replaybank.llm.eval.suite import check_no_overlap

    check_no_overlap(suite, data.rehearsal_texts, "rehearsal corpus")
    for g, recs in enumerate(data.domain_train_records):
        texts = [str(r.get("prompt", r.get("text", ""))) for r in recs]
        check_no_overlap(suite, texts, f"domain training data of generation {g}")


def _self_rows(model: Any, tokenizer: Any, cfg: Config, suite: list[Any], log: Log) -> tuple[TokenRows, dict[str, Any]]:
    """Self-synthesized rehearsal rows of ``cfg.training.seed`` (cached), checked against the suite."""
    from replaybank.llm.data.selfsynth import synthesize
    from replaybank.llm.eval.suite import check_no_overlap
    from replaybank.llm.model import cache_dir

    t, d = cfg.training, cfg.data
    rows, manifest = synthesize(
        model, tokenizer, seed=t.seed, n_rows=d.self_rows, cache_dir=cache_dir() / "selfsynth",
        prompts=d.self_prompts, exclude=[i.prompt for i in suite], batch_size=cfg.evaluation.generation_batch_size,
    )
    if not rows:
        raise ReplayBankError(
            f"self-synthesis from {d.self_prompts!r} (seed {t.seed}) yielded no usable row; "
            "check the prompt pool or raise [data] self_rows"
        )
    check_no_overlap(suite, [r["prompt"] + "\n" + r["response"] for r in rows], f"self-synthesized rows ({d.self_prompts})")
    log(f"self rows: {len(rows)} ({manifest.get('cache', 'generated')})")
    return token_rows([encode_pair(tokenizer, r["prompt"], r["response"], t.max_seq_length) for r in rows]), manifest


def _probe_sources(base_model: Any, ctx: EvalContext, cfg: Config, log: Log) -> dict[str, Any]:
    """Gradient interference of the domain against each rehearsal source, on a fresh LoRA."""
    from replaybank.llm.run_probe import probe_sources
    from replaybank.llm.train import add_lora

    sources = {"corpus": ctx.data.rehearsal_pool}
    if ctx.self_rows is not None:
        sources["self"] = ctx.self_rows
    model = add_lora(copy.deepcopy(base_model), cfg.training)
    reports = probe_sources(
        model, ctx.pad_id, ctx.data.domain_generations[0], sources,
        pairs=cfg.evaluation.probe_pairs, batch_size=cfg.training.batch_size, seed=cfg.training.seed,
    )
    for name, rep in reports.items():
        log(f"probe {name}: cosine {rep.cosine_mean:.4f} +/- {rep.cosine_std:.4f}, alpha {rep.alpha_suggested:.3f}, "
            f"needed {rep.rehearsal_needed}")
    return {name: rep.to_dict() for name, rep in reports.items()}


def _write_seed(partial: Path, label: str, result: dict[str, Any]) -> None:
    """Per-seed details (every measurement and generated answer) in ``seeds/<label>.json``, atomically."""
    folder = partial / "seeds"
    folder.mkdir(exist_ok=True)
    tmp = folder / f".{label}.json.tmp"
    tmp.write_text(json.dumps(result, indent=1, sort_keys=True, default=str), encoding="utf-8")
    os.replace(tmp, folder / f"{label}.json")


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
