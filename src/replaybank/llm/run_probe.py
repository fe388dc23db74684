"""``replaybank probe``: load the model and data of a config and run the interference probe."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from replaybank.llm.config import Config
from replaybank.llm.probe import InterferenceReport, interference


def run_probe(cfg: Config, pairs: int | None = None, adapter: str | None = None, log: Callable[[str], None] = print) -> InterferenceReport:
    """Gradients of domain vs rehearsal batches on the adapter's parameters.

    With ``adapter`` the saved adapter is loaded (trainable); otherwise a fresh LoRA is added
    (seeded; its B matrices start at zero, so the gradient lives on B only).
    """
    import torch

    from replaybank.llm.data_prep import prepare
    from replaybank.llm.model import load_model
    from replaybank.llm.run import pick_device
    from replaybank.llm.train import add_lora

    t = cfg.training
    from replaybank.llm.run import _loadavg, resolve_threads

    torch.set_num_threads(resolve_threads(t.num_threads, _loadavg()))
    model, tokenizer = load_model(t.base_model, pick_device(t.device), log)
    if adapter:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, adapter, is_trainable=True)
    else:
        model = add_lora(model, t)
    data = prepare(cfg, tokenizer)
    n_pairs = pairs or cfg.evaluation.probe_pairs
    rng = np.random.default_rng(t.seed)
    domain = data.domain_generations[0]
    pool = data.rehearsal_pool
    size = max(1, t.batch_size)
    d_batches = [domain.rows(rng.choice(len(domain), min(size, len(domain)), replace=False)) for _ in range(n_pairs)]
    r_batches = [pool.rows(rng.choice(len(pool), min(size, len(pool)), replace=False)) for _ in range(n_pairs)]
    pad_id: Any = tokenizer.pad_token_id
    log(f"probing {n_pairs} batch pairs of {size} rows")
    return interference(model, int(pad_id), d_batches, r_batches)
