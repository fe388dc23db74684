"""One seed of the experiment: suite sample, data, self rows, base, probe, every trained arm.

:func:`run_seed` is what :func:`replaybank.llm.recipes.rehearsal.run_experiment` calls per seed (in-process, or
in a worker process with ``--jobs``); it writes ``seeds/seed<N>.json`` into the partial output
folder and reads it back instead of rerunning a seed an interrupted run already finished.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from replaybank.errors import ReplayBankError
from replaybank.llm.arms import train_arm
from replaybank.llm.config import Config
from replaybank.llm.data.prepare import Prepared, prepare
from replaybank.llm.data.rows import TokenRows, encode_pair, token_rows
from replaybank.llm.eval.losses import mean_loss, probe_score
from replaybank.llm.eval.measure import EvalContext, domain_row, flatten, measure_losses

Log = Callable[[str], None]


def with_seed(cfg: Config, seed: int) -> Config:
    """A copy of ``cfg`` with ``[training] seed = seed`` (explicit keys kept)."""
    out = copy.deepcopy(cfg)
    out.training = dataclasses.replace(cfg.training, seed=seed)
    return out


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
    self_rows, self_manifest = synthesize_rows(base_model, tokenizer, scfg, items, log) if uses_self else (None, None)
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


def synthesize_rows(model: Any, tokenizer: Any, cfg: Config, suite: list[Any], log: Log) -> tuple[TokenRows, dict[str, Any]]:
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
    from replaybank.llm.recipes.probe import probe_sources
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
