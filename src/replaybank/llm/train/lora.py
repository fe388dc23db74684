"""The LoRA training loop: quota-mixed batches, AdamW, accumulation, clipping, resumable.

Each micro-batch comes from :class:`replaybank.mixing.Mixer` with a fixed quota per source (domain
rows plus any rehearsal sources: corpus, self-synthesized, replay of earlier domains). This module
drives the run: it builds the mixer, draws the rows, and schedules evaluations and checkpoints.
One optimizer step (the token-weighted loss, plus the optional KL-to-base term of
:mod:`replaybank.llm.train.kl`) is :func:`replaybank.llm.train.step.train_step`; a checkpoint
(:mod:`replaybank.llm.train.checkpoint`) holds the adapter, the optimizer, the mixer position and
the torch RNG, so a resumed run sees exactly the data order of an uninterrupted one.
"""

from __future__ import annotations

import hashlib
import math
import os
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from replaybank.llm.config import Training
from replaybank.llm.config.recipe import Project
from replaybank.llm.data.rows import TokenRows
from replaybank.llm.model import check_target_modules, enable_gradient_checkpointing, peft_wrapping
from replaybank.llm.runtime import FrozenBf16, short_row_attention
from replaybank.llm.train.checkpoint import (
    CHECKPOINT_SCHEMA_VERSION,
    load_checkpoint,
    save_checkpoint,
)
from replaybank.llm.train.kl import BaseCache, KLSpec
from replaybank.llm.train.log import TrainLog
from replaybank.llm.train.selfgen import RefreshedRows
from replaybank.llm.train.steer import Steering
from replaybank.llm.train.step import DOMAIN, train_step
from replaybank.mixing import MixBy, Mixer, row_shares

__all__ = [
    "CHECKPOINT_SCHEMA_VERSION", "KLSpec", "RowPicker", "Source", "Steering", "TrainLog", "add_lora", "epoch_slice",
    "train_lora",
]


def epoch_slice(pool_size: int, rows_per_epoch: int, seed: int, epoch: int) -> np.ndarray:
    """The rehearsal rows of one virtual epoch: a seeded (``seed + epoch``) slice of the pool.

    Without replacement when the pool is large enough; otherwise with replacement and a warning.

    Raises:
        ValueError: when the pool is empty or ``rows_per_epoch < 1``.

    Example:
        >>> epoch_slice(10, 3, seed=0, epoch=0).tolist() != epoch_slice(10, 3, seed=0, epoch=1).tolist()
        True
    """
    if pool_size < 1:
        raise ValueError("rehearsal pool is empty")
    if rows_per_epoch < 1:
        raise ValueError(f"rehearsal_rows_per_epoch must be >= 1, got {rows_per_epoch}")
    rng = np.random.default_rng(seed + epoch)
    if pool_size >= rows_per_epoch:
        return rng.choice(pool_size, size=rows_per_epoch, replace=False)
    warnings.warn(
        f"rehearsal pool has {pool_size} rows, fewer than rehearsal_rows_per_epoch="
        f"{rows_per_epoch}; sampling with replacement",
        stacklevel=2,
    )
    return rng.choice(pool_size, size=rows_per_epoch, replace=True)


def add_lora(model: Any, cfg: Training) -> Any:
    """Wrap ``model`` with fresh LoRA adapters (seeded by ``cfg.seed``), with gradient
    checkpointing when ``cfg.gradient_checkpointing``.

    Raises:
        ModelError: when a target module does not exist in the model (the message lists those that
            do), or gradient checkpointing is asked of a model that does not support it.
    """
    import torch
    from peft import LoraConfig, get_peft_model

    check_target_modules(model, list(cfg.lora_target_modules))
    if cfg.gradient_checkpointing:
        enable_gradient_checkpointing(model)
    lora = LoraConfig(
        r=cfg.lora_rank,
        lora_alpha=cfg.lora_alpha,
        lora_dropout=cfg.lora_dropout,
        target_modules=list(cfg.lora_target_modules),
        bias="none",
        task_type="CAUSAL_LM",
    )
    # PEFT initialises adapters from torch's global generator; seeding it here is the only way
    # to make the init reproducible.
    torch.manual_seed(cfg.seed)
    with peft_wrapping():
        peft_model = get_peft_model(model, lora)
    dtype = next(p.dtype for p in model.parameters() if not p.requires_grad)
    if dtype != torch.float32:
        # PEFT keeps adapters fp32 on a bf16 base, which casts every adapter input to fp32 (a
        # copy of every activation entering a LoRA layer); the adapter follows the base instead.
        for p in peft_model.parameters():
            if p.requires_grad:
                p.data = p.data.to(dtype)
    return peft_model


def _batch_digest(sources: np.ndarray, rows: np.ndarray) -> str:
    return hashlib.sha256(np.stack([sources, rows]).tobytes()).hexdigest()[:16]


class RowPicker(Protocol):
    """Which rows of a source a micro-batch gets, in place of the source's own order
    (:class:`replaybank.llm.train.targeted.TargetedRows`)."""

    def pick(self, n: int) -> np.ndarray:
        """``n`` row indices into the source."""
        ...

    def after_step(self, step: int) -> dict[str, Any] | None:
        """Called after every optimizer step; what it returns (if anything) goes into the step's log."""
        ...


@dataclass(frozen=True)
class Source:
    """A rehearsal source mixed into the domain batches.

    Attributes:
        name: ``corpus``, ``self``, ``replay`` (or any label for the logs).
        rows: its tokenized rows.
        share: its target share of every batch (of rows, or of labelled tokens with
            ``mix_by="tokens"``).
        sliced: draw each virtual epoch's rows from a seeded slice of ``rehearsal_rows_per_epoch``
            rows (the form of the rehearsal-corpus method, docs/llm.md, used for the corpus);
            otherwise cycle over every row.
        picker: draws the source's rows instead (its ``sliced`` is then ignored); the loop calls
            its ``after_step`` after every optimizer step.
        refresh: rows the model being trained rewrites between steps (``selfgen``,
            :class:`~replaybank.llm.train.selfgen.RefreshedRows`); its ``rows`` are drawn, and
            ``rows`` above is only their number and mean length at the start.
    """

    name: str
    rows: TokenRows
    share: float
    sliced: bool = False
    picker: RowPicker | None = None
    refresh: RefreshedRows | None = None


def _mean_label_tokens(rows: TokenRows) -> float:
    return rows.label_tokens() / max(len(rows), 1)


def train_lora(
    model: Any,
    pad_id: int,
    domain: TokenRows,
    cfg: Training,
    checkpoint_dir: Path | None = None,
    on_eval: Callable[[int], dict[str, float]] | None = None,
    eval_points: int = 1,
    desc: str = "train",
    max_steps: int | None = None,
    *,
    sources: Sequence[Source] = (),
    mix_by: MixBy = "rows",
    kl: KLSpec | None = None,
    steer: Steering | None = None,
    project: Project = "none",
    epoch_source: str = "domain",
    on_step: Callable[[int, int], None] | None = None,
) -> TrainLog:
    """Train the LoRA-wrapped ``model`` in place.

    Args:
        model: a PEFT model (see :func:`add_lora`).
        pad_id: token id used for padding.
        domain: tokenized domain rows (the epoch source).
        cfg: the ``[training]`` section.
        checkpoint_dir: where ``checkpoint.pt`` lives; resumed from when present.
        on_eval: called with the optimizer step at ``eval_points`` evenly spaced steps.
        eval_points: how many evaluations, the last after the final step.
        desc: progress bar label.
        max_steps: stop after this many optimizer steps (a budget for tests and interruptions).
        sources: rehearsal sources, each with its share; none (the default) trains on domain rows
            alone (the naive arm).
        mix_by: ``rows``: the shares are shares of the rows of every batch; ``tokens``: shares of
            the labelled tokens (of the loss), converted to row quotas by
            :func:`replaybank.mixing.row_shares` from each source's mean labelled tokens per row.
        kl: the optional KL-to-base term.
        steer: a replay controller steering the shares (:class:`~replaybank.llm.train.steer.Steering`,
            over ``sources`` by name; their ``share`` is then unused): measured before the first
            step, after every evaluation point and after the last step, each time setting the
            mixer's shares for the steps that follow. Its state goes into the checkpoint.
        project: ``agem``: every step projects the domain rows' gradient so it does not oppose
            the rehearsal rows' (:mod:`replaybank.llm.train.agem`).
        epoch_source: the name ``domain`` goes by in the log (the control arm trains its rehearsal rows
            there, with no domain row).
        on_step: called after every optimizer step (before its evaluation, if any) with the step and
            the last step this call trains to (``max_steps`` counted); it must not change the model
            (:class:`~replaybank.llm.train.snapshots.Snapshots` copies the adapter there).

    A source with ``refresh`` has its rows rewritten by ``model`` before the first step (unless
    resumed) and after every step its ``due`` names but the last, after that step's evaluation; the time spent
    is recorded per rewrite in ``TrainLog.refreshes`` and left out of ``TrainLog.seconds`` (like
    evaluations), and the rows in force go into the checkpoint.

    Returns:
        The :class:`TrainLog`; every step records rows and labelled tokens per source, so the
        effective loss share of each source is measured, not assumed.

    Raises:
        ValueError: a source with a share but no rows, shares summing to 1 or more, a refreshed
            source that is sliced, or a refresh that changes the number of rows.
    """
    import torch
    from tqdm.auto import tqdm

    sources = [s for s in sources if s.share > 0 or (steer is not None and len(s.rows))]
    if steer is not None and [s.name for s in sources] != steer.trained:
        raise ValueError(f"steered sources {steer.trained} differ from the sources with rows {[s.name for s in sources]}")
    for s in sources:
        if len(s.rows) == 0:
            raise ValueError(f"rehearsal source {s.name!r} has a share of {s.share} but no rows")
        if s.refresh is not None and s.sliced:
            raise ValueError(f"rehearsal source {s.name!r} is refreshed and sliced; a refreshed source cycles over its rows")
    refreshed = {s.name: s.refresh for s in sources if s.refresh is not None}
    total_share = sum(s.share for s in sources) if steer is None else 0.0
    if total_share >= 1:
        raise ValueError(f"rehearsal shares sum to {total_share}; they must leave room for domain rows (< 1)")
    slice_size = cfg.rehearsal_rows_per_epoch
    names = [epoch_source] + [s.name for s in sources]
    targets = [1.0 - total_share] + [s.share for s in sources]
    per_row = [_mean_label_tokens(domain)] + [_mean_label_tokens(s.rows) for s in sources]
    if steer is not None:
        steer.attach(mix_by, per_row)
    shares = (row_shares(targets, mix_by, per_row) if steer is None else steer.row_shares()).tolist()
    sizes = [len(domain)] + [slice_size if s.sliced and s.picker is None else len(s.rows) for s in sources]
    mixer = Mixer(sizes, shares, cfg.batch_size, seed=cfg.seed)
    per_epoch = mixer.batches_per_epoch()
    steps_per_epoch = math.ceil(per_epoch / cfg.gradient_accumulation_steps)
    total_steps = steps_per_epoch * cfg.num_train_epochs
    eval_at = {round(total_steps * (k + 1) / eval_points) for k in range(eval_points)}
    last_step = total_steps if max_steps is None else min(total_steps, max_steps)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.learning_rate, weight_decay=cfg.weight_decay)
    log = TrainLog()
    step = 0
    ckpt = checkpoint_dir / "checkpoint.pt" if checkpoint_dir else None
    if ckpt is not None and os.path.lexists(ckpt):  # anything there is loaded or refused, never skipped
        step = load_checkpoint(ckpt, model, opt, mixer, log, steer, refreshed)
        log.resumed_from_step = step
    if steer is not None:
        steer.begin()  # the losses where this run starts (a resumed run has them already)
    base_cache = BaseCache() if kl is not None and kl.weight > 0 else None
    if step == 0:  # the rows the first steps train on (a resumed run has them from its checkpoint)
        _refresh(0, model, sources, log, base_cache)
    device = next(model.parameters()).device
    model.train()
    bar = tqdm(total=total_steps, initial=step, desc=desc, unit="step", dynamic_ncols=True, leave=False)
    start = time.perf_counter() - log.seconds
    slices: dict[tuple[int, int], np.ndarray] = {}
    casts = FrozenBf16(model, cfg.precision)  # [training] precision; the base's bf16 copies made once

    def rows_of(source: int, idx: np.ndarray, epoch: int) -> list[tuple[np.ndarray, np.ndarray]]:
        if source == DOMAIN:
            return domain.rows(idx)
        src = sources[source - 1]
        if src.picker is not None:
            return src.rows.rows(src.picker.pick(idx.size))
        if src.refresh is not None:
            return src.refresh.rows.rows(idx)
        if not src.sliced:
            return src.rows.rows(idx)
        if (source, epoch) not in slices:
            slices[(source, epoch)] = epoch_slice(len(src.rows), slice_size, cfg.seed, epoch)
        return src.rows.rows(slices[(source, epoch)][idx])

    stop = False
    while mixer.state_dict()["epoch"] < cfg.num_train_epochs and not stop:
        epoch = mixer.state_dict()["epoch"]
        pending: list[Any] = []
        for mb in mixer.epoch(epoch):
            pending.append(mb)
            if len(pending) < cfg.gradient_accumulation_steps and mb.step < per_epoch - 1:
                continue
            groups = [
                (s, rows_of(s, mb.rows_of(s), epoch)) for mb in pending for s in range(len(names))
                if mb.rows_of(s).size
            ]
            width = max(len(ids) for _, rows in groups for ids, _ in rows)
            with casts, short_row_attention(model, width):  # bf16 matmuls on AMX CPUs; LoRA weights stay fp32
                stats, total_loss = train_step(model, opt, params, groups, names, pad_id, device, kl, cfg.max_grad_norm, base_cache,
                                               rows_per_pass=cfg.batch_size, agem=project == "agem")
            step += 1
            log.tokens += stats["tokens"]
            log.seconds = time.perf_counter() - start
            digest = _batch_digest(
                np.concatenate([m.source for m in pending]), np.concatenate([m.index for m in pending])
            )
            entry = {"step": step, "epoch": epoch, **stats, "batch": digest}
            remeasured = {s.name: seen for s in sources if s.picker is not None and (seen := s.picker.after_step(step))}
            if remeasured:
                entry["refresh"] = remeasured
            log.steps.append(entry)
            pending = []
            bar.set_postfix(loss=f"{total_loss:.3f}", tok_s=f"{log.tokens / max(log.seconds, 1e-9):.0f}", refresh=False)
            bar.update(1)
            if on_step is not None:
                on_step(step, last_step)
                start = time.perf_counter() - log.seconds  # nor is the hook's time
            if step in eval_at:
                _evaluate(step, on_eval, steer, mixer, log)
                start = time.perf_counter() - log.seconds  # evaluation time is not training time
            if step < total_steps and _refresh(step, model, sources, log, base_cache):  # none after the last step
                start = time.perf_counter() - log.seconds  # nor is generating rows
            if ckpt is not None and cfg.save_every and step % cfg.save_every == 0:
                save_checkpoint(ckpt, model, opt, mixer, log, step, steer, refreshed)
            if max_steps is not None and step >= max_steps:
                stop = True
                break
    bar.close()
    if steer is not None and steer.trajectory[-1]["step"] != step:
        _evaluate(step, on_eval, steer, mixer, log)  # the last update reads where this run ended
    return log


def _refresh(step: int, model: Any, sources: Sequence[Source], log: TrainLog, base_cache: BaseCache | None) -> bool:
    """Rewrite the rows of every source whose refresh is due after ``step``; whether any was."""
    done = False
    for s in sources:
        if s.refresh is None or not s.refresh.due(step):
            continue
        before = s.refresh.rows
        t0 = time.perf_counter()
        counts = s.refresh.refresh(model, step)
        seconds = time.perf_counter() - t0
        after = s.refresh.rows
        if len(after) != len(before):
            raise ValueError(f"refreshing source {s.name!r} after step {step} gave {len(after)} rows, not {len(before)}")
        if base_cache is not None:  # replaced rows never come back: their kept base states go
            base_cache.forget(before.rows(np.arange(len(before))), keep=after.rows(np.arange(len(after))))
        trained = sum(r["train_seconds"] for r in log.refreshes if r["source"] == s.name)
        log.refreshes.append({"source": s.name, "step": step, "seconds": round(seconds, 3),
                              "train_seconds": round(max(log.seconds - trained, 0.0), 3), **counts})
        done = True
    return done


def _evaluate(
    step: int, on_eval: Callable[[int], dict[str, float]] | None, steer: Steering | None, mixer: Mixer, log: TrainLog,
) -> None:
    """An evaluation point: the caller's evaluation (logged), then the steering's update."""
    if on_eval is not None:
        result = dict(on_eval(step))
        result["step"] = step
        log.evals.append(result)
    if steer is not None:
        steer.observe(step, mixer)
