"""The LoRA training loop: quota-mixed batches, AdamW, accumulation, clipping, resumable.

Each micro-batch comes from :class:`replaybank.mixing.Mixer` with a fixed rehearsal quota; its rows
are run one source at a time (similar lengths, little padding) and the loss is the token-weighted
mean over every labelled token of the optimizer step. A checkpoint holds the adapter, the optimizer,
the mixer position and the torch RNG, so a resumed run sees exactly the data order of an
uninterrupted one.
"""

from __future__ import annotations

import hashlib
import math
import os
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from replaybank.llm.config import Training
from replaybank.llm.evaluate import collate, token_loss_sum
from replaybank.llm.model import check_target_modules
from replaybank.llm.rows import TokenRows
from replaybank.mixing import Mixer

CHECKPOINT_SCHEMA_VERSION = 1
DOMAIN, REHEARSAL = 0, 1


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


@dataclass
class TrainLog:
    """What one training run did, step by step."""

    steps: list[dict[str, Any]] = field(default_factory=list)
    evals: list[dict[str, Any]] = field(default_factory=list)
    tokens: int = 0
    seconds: float = 0.0
    resumed_from_step: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "steps": self.steps,
            "evals": self.evals,
            "tokens": self.tokens,
            "seconds": round(self.seconds, 3),
            "tokens_per_second": round(self.tokens / self.seconds, 1) if self.seconds else None,
            "resumed_from_step": self.resumed_from_step,
        }


def add_lora(model: Any, cfg: Training) -> Any:
    """Wrap ``model`` with fresh LoRA adapters (seeded by ``cfg.seed``).

    Raises:
        ModelError: when a target module does not exist in the model (the message lists those that do).
    """
    import torch
    from peft import LoraConfig, get_peft_model

    check_target_modules(model, list(cfg.lora_target_modules))
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
    return get_peft_model(model, lora)


def _batch_digest(sources: np.ndarray, rows: np.ndarray) -> str:
    return hashlib.sha256(np.stack([sources, rows]).tobytes()).hexdigest()[:16]


def train_lora(
    model: Any,
    pad_id: int,
    domain: TokenRows,
    rehearsal: TokenRows | None,
    cfg: Training,
    share: float,
    checkpoint_dir: Path | None = None,
    on_eval: Callable[[int], dict[str, float]] | None = None,
    eval_points: int = 1,
    desc: str = "train",
    max_steps: int | None = None,
) -> TrainLog:
    """Train the LoRA-wrapped ``model`` in place.

    Args:
        model: a PEFT model (see :func:`add_lora`).
        pad_id: token id used for padding.
        domain: tokenized domain rows (the epoch source).
        rehearsal: the tokenized rehearsal pool, or ``None`` for the naive arm.
        cfg: the ``[training]`` section.
        share: rehearsal share of every micro-batch (0 for naive).
        checkpoint_dir: where ``checkpoint.pt`` lives; resumed from when present.
        on_eval: called with the optimizer step at ``eval_points`` evenly spaced steps.
        eval_points: how many evaluations, the last after the final step.
        desc: progress bar label.
        max_steps: stop after this many optimizer steps (a budget for tests and interruptions).

    Returns:
        The :class:`TrainLog`.
    """
    import torch
    from tqdm.auto import tqdm

    if share > 0 and (rehearsal is None or len(rehearsal) == 0):
        raise ValueError("a rehearsal share > 0 needs a non-empty rehearsal pool")
    slice_size = cfg.rehearsal_rows_per_epoch
    shares = [1.0 - share, share] if share > 0 else [1.0]
    sizes = [len(domain), slice_size] if share > 0 else [len(domain)]
    mixer = Mixer(sizes, shares, cfg.batch_size, seed=cfg.seed)
    per_epoch = mixer.batches_per_epoch()
    steps_per_epoch = math.ceil(per_epoch / cfg.gradient_accumulation_steps)
    total_steps = steps_per_epoch * cfg.num_train_epochs
    eval_at = {round(total_steps * (k + 1) / eval_points) for k in range(eval_points)}
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.learning_rate, weight_decay=cfg.weight_decay)
    log = TrainLog()
    step = 0
    ckpt = checkpoint_dir / "checkpoint.pt" if checkpoint_dir else None
    if ckpt is not None and ckpt.is_file():
        step = _load_checkpoint(ckpt, model, opt, mixer, log)
        log.resumed_from_step = step
    device = next(model.parameters()).device
    model.train()
    bar = tqdm(total=total_steps, initial=step, desc=desc, unit="step", dynamic_ncols=True, leave=False)
    start = time.perf_counter() - log.seconds
    slices: dict[int, np.ndarray] = {}

    def rows_of(source: int, idx: np.ndarray, epoch: int) -> list[tuple[np.ndarray, np.ndarray]]:
        if source == DOMAIN:
            return domain.rows(idx)
        if rehearsal is None:  # unreachable: share > 0 without a pool is rejected above
            raise ValueError("rehearsal rows requested but no rehearsal pool given")
        if epoch not in slices:
            slices.clear()
            slices[epoch] = epoch_slice(len(rehearsal), slice_size, cfg.seed, epoch)
        return rehearsal.rows(slices[epoch][idx])

    stop = False
    while mixer.state_dict()["epoch"] < cfg.num_train_epochs and not stop:
        epoch = mixer.state_dict()["epoch"]
        pending: list[Any] = []
        for mb in mixer.epoch(epoch):
            pending.append(mb)
            if len(pending) < cfg.gradient_accumulation_steps and mb.step < per_epoch - 1:
                continue
            groups = [
                (s, rows_of(s, mb.rows_of(s), epoch)) for mb in pending for s in range(len(shares))
                if mb.rows_of(s).size
            ]
            n_label = sum(int((lab[1:] != -100).sum()) for _, rows in groups for _, lab in rows)
            sums = {DOMAIN: [0.0, 0], REHEARSAL: [0.0, 0]}
            n_tokens = rehearsal_tokens = 0
            for source, rows in groups:
                ids, att, labels = collate(rows, pad_id)
                loss_sum, n = token_loss_sum(model, ids.to(device), att.to(device), labels.to(device))
                (loss_sum / max(n_label, 1)).backward()
                sums[source][0] += float(loss_sum.detach())
                sums[source][1] += n
                n_tokens += int(att.sum())
                rehearsal_tokens += int(att.sum()) if source == REHEARSAL else 0
            if cfg.max_grad_norm > 0:
                torch.nn.utils.clip_grad_norm_(params, cfg.max_grad_norm)
            opt.step()
            opt.zero_grad(set_to_none=True)
            step += 1
            log.tokens += n_tokens
            log.seconds = time.perf_counter() - start
            total_loss = (sums[DOMAIN][0] + sums[REHEARSAL][0]) / max(n_label, 1)
            entry = {
                "step": step,
                "epoch": epoch,
                "loss": round(total_loss, 5),
                "domain_loss": round(sums[DOMAIN][0] / sums[DOMAIN][1], 5) if sums[DOMAIN][1] else None,
                "rehearsal_loss": round(sums[REHEARSAL][0] / sums[REHEARSAL][1], 5) if sums[REHEARSAL][1] else None,
                "rows": sum(len(rows) for _, rows in groups),
                "rehearsal_rows": sum(len(rows) for s, rows in groups if s == REHEARSAL),
                "tokens": n_tokens,
                "rehearsal_tokens": rehearsal_tokens,
                "batch": _batch_digest(
                    np.concatenate([m.source for m in pending]), np.concatenate([m.index for m in pending])
                ),
            }
            log.steps.append(entry)
            pending = []
            bar.set_postfix(loss=f"{total_loss:.3f}", tok_s=f"{log.tokens / max(log.seconds, 1e-9):.0f}", refresh=False)
            bar.update(1)
            if on_eval is not None and step in eval_at:
                result = dict(on_eval(step))
                result["step"] = step
                log.evals.append(result)
                start = time.perf_counter() - log.seconds  # evaluation time is not training time
            if ckpt is not None and cfg.save_every and step % cfg.save_every == 0:
                _save_checkpoint(ckpt, model, opt, mixer, log, step)
            if max_steps is not None and step >= max_steps:
                stop = True
                break
    bar.close()
    return log


def _save_checkpoint(path: Path, model: Any, opt: Any, mixer: Mixer, log: TrainLog, step: int) -> None:
    import json

    import torch
    from peft import get_peft_model_state_dict

    # Tensors and plain containers only, so that _load_checkpoint can read it with weights_only:
    # the mixer position and the log go through JSON (a numpy scalar would be pickled as an object).
    state = {
        "schema_version": CHECKPOINT_SCHEMA_VERSION,
        "step": int(step),
        "adapter": get_peft_model_state_dict(model),
        "optimizer": opt.state_dict(),
        "mixer": json.loads(json.dumps(mixer.state_dict())),
        "torch_rng": torch.get_rng_state(),
        "log": json.loads(json.dumps(log.to_dict(), default=float)),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)  # atomic: a crash never leaves a half-written checkpoint in place


def _load_checkpoint(path: Path, model: Any, opt: Any, mixer: Mixer, log: TrainLog) -> int:
    """Restore a checkpoint written by :func:`_save_checkpoint`; returns its optimizer step.

    The file is read with ``torch.load(weights_only=True)``: tensors and plain containers
    (dict, list, str, int, float, bool, None) only, so a checkpoint from elsewhere cannot run code
    on load. Every field is checked before anything is restored.

    Raises:
        ReplayBankError (a ValueError): the file holds anything else (a pickled object), is not a
            checkpoint, has another schema version, or a field of the wrong type.
    """
    import pickle

    import torch
    from peft import set_peft_model_state_dict

    from replaybank.errors import ReplayBankError

    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        raise ReplayBankError(
            f"{path}: refused: the checkpoint holds objects other than tensors and plain containers, "
            f"which are not loaded (weights_only); delete it to restart the arm ({str(exc).splitlines()[0]})"
        ) from None
    except (RuntimeError, EOFError, OSError) as exc:
        raise ReplayBankError(f"{path}: not a readable checkpoint ({exc}); delete it to restart the arm") from None
    if not isinstance(state, dict) or state.get("schema_version") != CHECKPOINT_SCHEMA_VERSION:
        found = state.get("schema_version") if isinstance(state, dict) else type(state).__name__
        raise ReplayBankError(f"{path}: checkpoint schema_version {found!r}, expected {CHECKPOINT_SCHEMA_VERSION}")
    expected: dict[str, Any] = {
        "step": int, "adapter": dict, "optimizer": dict, "mixer": dict, "torch_rng": torch.Tensor, "log": dict,
    }
    for key, kind in expected.items():
        if not isinstance(state.get(key), kind) or (kind is int and isinstance(state[key], bool)):
            raise ReplayBankError(f"{path}: checkpoint field {key!r} is {type(state.get(key)).__name__}, expected {kind.__name__}")
    saved = state["log"]
    log_fields: dict[str, Any] = {"steps": list, "evals": list, "tokens": int, "seconds": (int, float)}
    for key, kinds in log_fields.items():
        if not isinstance(saved.get(key), kinds):
            raise ReplayBankError(f"{path}: checkpoint field 'log.{key}' is {type(saved.get(key)).__name__}")
    if not all(isinstance(v, torch.Tensor) for v in state["adapter"].values()):
        raise ReplayBankError(f"{path}: checkpoint field 'adapter' holds non-tensor values")
    if state["step"] < 0:
        raise ReplayBankError(f"{path}: checkpoint step {state['step']} is negative")
    set_peft_model_state_dict(model, state["adapter"])
    opt.load_state_dict(state["optimizer"])
    mixer.load_state_dict(state["mixer"])
    torch.set_rng_state(state["torch_rng"])
    log.steps, log.evals = list(saved["steps"]), list(saved["evals"])
    log.tokens, log.seconds = int(saved["tokens"]), float(saved["seconds"])
    return int(state["step"])
