"""The gradient-interference job (``replaybank probe``): does the domain data pull against the rehearsal rows?

Set up (threads, device, model, optional self rows), wrap with a fresh LoRA or a saved adapter,
prepare the data, then compare gradients of domain and rehearsal batches
(:mod:`replaybank.llm.eval.interference`) and return the report.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from replaybank.llm.config import Config
from replaybank.llm.data.prepare import prepare
from replaybank.llm.data.selfsynth import synthesize_rows
from replaybank.llm.eval.interference import InterferenceReport, interference
from replaybank.llm.eval.suite import load_suite
from replaybank.llm.runtime import pick_device, pick_threads
from replaybank.llm.train import add_lora


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

    from replaybank.llm.model import load_model, peft_wrapping

    t = cfg.training
    threads = pick_threads(t.num_threads)
    torch.set_num_threads(threads.threads)
    log(f"torch threads: {threads.threads} ({threads.reason})")
    model, tokenizer = load_model(t.base_model, pick_device(t.device, where=f"{cfg.source}: [training] device"), log)
    self_rows = None
    if source == "self":
        self_rows, _ = synthesize_rows(model, tokenizer, cfg, load_suite(cfg.data.suite), log)
    if adapter:
        from peft import PeftModel

        with peft_wrapping():
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


