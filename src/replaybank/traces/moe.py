"""A tiny Mixture-of-Experts language model trained here, offline, so traces come from real routing.

``train_moe`` trains a byte-level Mixtral-shaped model (default 4 layers, 16 experts, top-2,
hidden 128) on the training part of the documentation corpus (``workloads.prose_split``) for a
wall-clock budget on one CPU thread, with the router's load-balancing loss, and saves it with
``save_pretrained`` (safetensors) plus ``training.json`` (steps, losses, held-out loss, seconds).
``load_or_train`` returns the cached model of a given spec, training it first when it is absent
(the cache folder is named by a digest of the spec). torch and transformers are imported lazily.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ReplayBankError
from .workloads import VOCAB, encode, prose_split

DEFAULT_CACHE = (
    Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "replaybank" / "moe"
)


@dataclass(frozen=True)
class MoeSpec:
    """The model and its training: everything that names a cached checkpoint."""

    layers: int = 4
    experts: int = 16
    top_k: int = 2
    hidden: int = 128
    expert_hidden: int = 128
    heads: int = 4
    seq_len: int = 128
    batch: int = 16
    lr: float = 3e-3
    aux_loss: float = 0.01
    seconds: float = 420.0
    seed: int = 0

    def digest(self) -> str:
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:12]


def build_model(spec: MoeSpec) -> Any:
    """A randomly initialised ``MixtralForCausalLM`` of ``spec`` (seeded)."""
    import torch
    from transformers import MixtralConfig, MixtralForCausalLM

    torch.manual_seed(spec.seed)
    config = MixtralConfig(
        vocab_size=VOCAB,
        hidden_size=spec.hidden,
        intermediate_size=spec.expert_hidden,
        num_hidden_layers=spec.layers,
        num_attention_heads=spec.heads,
        num_key_value_heads=spec.heads,
        num_local_experts=spec.experts,
        num_experts_per_tok=spec.top_k,
        max_position_embeddings=4 * spec.seq_len,
        router_aux_loss_coef=spec.aux_loss,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
    )
    return MixtralForCausalLM(config)


def _stream(texts: tuple[str, ...]) -> np.ndarray:
    return np.array([b for t in texts for b in encode(t + "\n")], dtype=np.int64)


def _batch(data: np.ndarray, spec: MoeSpec, rng: np.random.Generator) -> Any:
    import torch

    starts = rng.integers(0, len(data) - spec.seq_len - 1, size=spec.batch)
    return torch.from_numpy(np.stack([data[s : s + spec.seq_len] for s in starts]))


def train_moe(spec: MoeSpec, out: Path, *, log_every: int = 50) -> dict[str, Any]:
    """Train ``spec`` for ``spec.seconds`` of wall-clock time on one thread; save to ``out``.

    Returns the training record written to ``out/training.json``.
    """
    import torch

    torch.set_num_threads(1)
    train, held = prose_split()
    data, held_data = _stream(train.texts), _stream(held.texts)
    model = build_model(spec)
    opt = torch.optim.AdamW(model.parameters(), lr=spec.lr, weight_decay=0.01, betas=(0.9, 0.95))
    rng = np.random.default_rng(spec.seed)
    losses: list[tuple[int, float, float]] = []
    start = time.perf_counter()
    step = 0
    model.train()
    while (elapsed := time.perf_counter() - start) < spec.seconds:
        frac = elapsed / spec.seconds  # warm-up over the first 5%, then cosine to 10%
        scale = min(1.0, frac / 0.05) * (0.1 + 0.45 * (1 + math.cos(math.pi * frac)))
        for group in opt.param_groups:
            group["lr"] = spec.lr * scale
        x = _batch(data, spec, rng)
        res = model(input_ids=x, labels=x, output_router_logits=True)
        opt.zero_grad(set_to_none=True)
        res.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        if step % log_every == 0:
            losses.append((step, round(elapsed, 1), round(float(res.loss.detach()), 4)))
    record = {
        "spec": asdict(spec),
        "steps": step,
        "seconds": round(time.perf_counter() - start, 1),
        "tokens_seen": step * spec.batch * spec.seq_len,
        "train_bytes": int(len(data)),
        "losses": losses,
        "heldout_loss_bytes": _heldout_loss(model, held_data, spec),
        "parameters": sum(p.numel() for p in model.parameters()),
    }
    tmp = out.with_name(out.name + ".partial")
    model.save_pretrained(tmp)
    (tmp / "training.json").write_text(json.dumps(record, indent=1))
    tmp.rename(out)
    return record


def _heldout_loss(model: Any, data: np.ndarray, spec: MoeSpec) -> float:
    """Mean next-byte cross-entropy (nats) on 16 fixed held-out windows."""
    import torch

    model.eval()
    with torch.no_grad():
        x = _batch(data, spec, np.random.default_rng(1234))
        return float(model(input_ids=x, labels=x).loss)


def load_or_train(spec: MoeSpec, cache: Path = DEFAULT_CACHE) -> tuple[Any, dict[str, Any]]:
    """``(model, training record)`` of ``spec``: loaded from ``cache/<digest>`` or trained there.

    Raises:
        ReplayBankError: the cache entry exists but is not a regular folder with its files.
    """
    from transformers import MixtralForCausalLM

    folder = Path(cache) / f"mixtral-{spec.digest()}"
    if not folder.exists():
        folder.parent.mkdir(parents=True, exist_ok=True)
        train_moe(spec, folder)
    if folder.is_symlink() or not folder.is_dir() or not (folder / "training.json").is_file():
        raise ReplayBankError(
            f"{folder}: not a trained checkpoint (a folder with training.json); delete it to retrain"
        )
    record = json.loads((folder / "training.json").read_text())
    model = MixtralForCausalLM.from_pretrained(folder, use_safetensors=True)
    model.eval()
    return model, record
