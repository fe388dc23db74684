"""``replaybank probe``: load the model and data of a config and run the interference probe."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from replaybank.llm.config import Config
from replaybank.llm.data.rows import TokenRows
from replaybank.llm.eval.interference import InterferenceReport, interference


def run_probe(
    cfg: Config, pairs: int | None = None, adapter: str | None = None, log: Callable[[str], None] = print,
    source: str = "corpus",
) -> InterferenceReport:
    """Gradients of domain vs rehearsal batches on the adapter's parameters.

    With ``adapter`` the saved adapter is loaded (trainable); otherwise a fresh LoRA is added
    (seeded; its B matrices start at zero, so the gradient lives on B only). ``source`` picks the
    rehearsal rows: ``corpus`` (the rehearsal corpus) or ``self`` (the base model's own answers,
    synthesized as in ``replaybank run`` and cached): the gradient of the behaviour to keep.

    Raises:
        ValueError: an unknown ``source``.
    """
    if source not in ("corpus", "self"):
        raise ValueError(f"--source {source!r}: expected corpus or self")
    import torch

    from replaybank.llm.data.prepare import prepare
    from replaybank.llm.model import load_model
    from replaybank.llm.recipes.rehearsal import pick_device
    from replaybank.llm.train import add_lora

    t = cfg.training
    from replaybank.llm.recipes.rehearsal import _loadavg, resolve_threads

    torch.set_num_threads(resolve_threads(t.num_threads, _loadavg()))
    model, tokenizer = load_model(t.base_model, pick_device(t.device), log)
    self_rows = None
    if source == "self":
        from replaybank.llm.eval.suite import load_suite
        from replaybank.llm.seed import synthesize_rows

        self_rows, _ = synthesize_rows(model, tokenizer, cfg, load_suite(cfg.data.suite), log)
    if adapter:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, adapter, is_trainable=True)
    else:
        model = add_lora(model, t)
    data = prepare(cfg, tokenizer)
    n_pairs = pairs or cfg.evaluation.probe_pairs
    rng = np.random.default_rng(t.seed)
    domain = data.domain_generations[0]
    pool = self_rows if self_rows is not None else data.rehearsal_pool
    size = max(1, t.batch_size)
    d_batches = [domain.rows(rng.choice(len(domain), min(size, len(domain)), replace=False)) for _ in range(n_pairs)]
    r_batches = [pool.rows(rng.choice(len(pool), min(size, len(pool)), replace=False)) for _ in range(n_pairs)]
    pad_id: Any = tokenizer.pad_token_id
    log(f"probing {n_pairs} batch pairs of {size} rows (domain vs {source})")
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
    from replaybank.llm.eval.interference import flat_grad, summarise
    from replaybank.llm.eval.losses import collate, token_loss_sum

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
