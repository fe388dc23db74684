"""``replaybank probe``: load the model and data of a config and run the interference probe."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from replaybank.llm.config import Config
from replaybank.llm.probe import InterferenceReport, interference
from replaybank.llm.rows import TokenRows


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


def probe_sources(
    model: Any, pad_id: int, domain: TokenRows, sources: dict[str, TokenRows], *, pairs: int, batch_size: int, seed: int,
) -> dict[str, InterferenceReport]:
    """The interference probe of one domain against several rehearsal sources, on the same domain batches.

    Each pair's domain gradient is computed once and compared with one batch of every source, so the
    sources are judged on identical domain batches.

    Returns:
        ``{source name: InterferenceReport}``.

    Raises:
        ValueError: when the model has no trainable parameters or a source is empty.
    """
    from replaybank.llm.evaluate import collate, token_loss_sum
    from replaybank.llm.probe import flat_grad, summarise

    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError("model has no trainable parameters; wrap it with LoRA first")
    for name, rows in sources.items():
        if len(rows) == 0:
            raise ValueError(f"probe source {name!r} has no rows")

    def loss_of(rows: list[tuple[np.ndarray, np.ndarray]]) -> Any:
        def fn() -> Any:
            ids, att, labels = collate(rows, pad_id)
            loss, n = token_loss_sum(model, ids, att, labels)
            return loss / max(n, 1)
        return fn

    rng = np.random.default_rng(seed)
    grads: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {name: [] for name in sources}
    for _ in range(pairs):
        d_rows = domain.rows(rng.choice(len(domain), min(batch_size, len(domain)), replace=False))
        g_d = flat_grad(loss_of(d_rows), params)
        for name, rows in sources.items():
            r_rows = rows.rows(rng.choice(len(rows), min(batch_size, len(rows)), replace=False))
            grads[name].append((g_d, flat_grad(loss_of(r_rows), params)))
    return {name: summarise(pairs_) for name, pairs_ in grads.items()}
