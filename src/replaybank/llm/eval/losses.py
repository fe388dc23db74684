"""Teacher-forced losses: completion-only cross-entropy on held-out rows, batched by length.

``general_loss`` and ``domain_loss`` are token-weighted mean cross-entropies (nats per labelled
token) over held-out rows. The general-skill probe (:mod:`replaybank.llm.eval.skill_probe`) is the
fraction of probe items whose answer the model reproduces exactly under greedy decoding (checked in
one teacher-forced pass: every answer token must be the argmax at its position).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from replaybank.llm.data.rows import IGNORE_INDEX, TokenRows
from replaybank.llm.runtime import Precision


def collate(rows: Sequence[tuple[np.ndarray, np.ndarray]], pad_id: int) -> tuple[Any, Any, Any]:
    """Right-pad rows into ``(input_ids, attention_mask, labels)`` tensors."""
    import torch

    width = max(len(a) for a, _ in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    labels = torch.full((len(rows), width), IGNORE_INDEX, dtype=torch.long)
    att = torch.zeros((len(rows), width), dtype=torch.long)
    for i, (a, b) in enumerate(rows):
        ids[i, : len(a)] = torch.from_numpy(a)
        labels[i, : len(b)] = torch.from_numpy(b)
        att[i, : len(a)] = 1
    return ids, att, labels


def fast_head(model: Any) -> tuple[Any, Any] | None:
    """``(decoder, lm_head)`` when logits are a plain projection of the decoder output, so the head
    can run on labelled positions only (the vocabulary projection is a large share of a small
    model); None otherwise (soft-capped or scaled logits)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    config = getattr(base, "config", None)
    if config is None or getattr(config, "final_logit_softcapping", None) or getattr(config, "logit_scale", None):
        return None
    decoder = getattr(base, getattr(base, "base_model_prefix", ""), None)
    head = base.get_output_embeddings() if hasattr(base, "get_output_embeddings") else None
    if decoder is None or head is None:
        return None
    return decoder, head


def logits_at(model: Any, ids: Any, att: Any, mask: Any) -> Any:
    """Next-token logits (float32) at the positions where ``mask`` (shape of ``ids[:, :-1]``) is true."""
    fast = fast_head(model)
    if fast is not None:
        decoder, head = fast
        hidden = decoder(input_ids=ids, attention_mask=att).last_hidden_state[:, :-1]
        return head(hidden[mask]).float()
    return model(input_ids=ids, attention_mask=att).logits[:, :-1][mask].float()


def token_loss_sum(model: Any, ids: Any, att: Any, labels: Any) -> tuple[Any, int]:
    """Sum of next-token cross-entropy over labelled positions, and their count.

    Returns:
        ``(loss_sum, n_tokens)``; ``loss_sum`` is a scalar tensor that carries gradients.
    """
    import torch.nn.functional as F

    ids, att, labels = (t.to(next(model.parameters()).device) for t in (ids, att, labels))
    target = labels[:, 1:]
    mask = target != IGNORE_INDEX
    loss = F.cross_entropy(logits_at(model, ids, att, mask), target[mask], reduction="sum")
    return loss, int(mask.sum())


def length_batches(lengths: np.ndarray, max_tokens: int, max_rows: int) -> list[np.ndarray]:
    # Sorted by length, so each padded batch wastes little; at most max_tokens padded positions.
    order = np.argsort(lengths, kind="stable")
    batches: list[np.ndarray] = []
    start = 0
    while start < order.size:
        end = start + 1
        while end < order.size and end - start < max_rows and (end - start + 1) * lengths[order[end]] <= max_tokens:
            end += 1
        batches.append(order[start:end])
        start = end
    return batches


def mean_loss(
    model: Any, rows: TokenRows, pad_id: int, max_tokens: int = 2048, max_rows: int = 16, precision: Precision = "fp32",
) -> float:
    """Token-weighted mean loss of ``model`` on ``rows`` (no gradients; model put in eval mode).

    ``precision`` is the arithmetic (:func:`replaybank.llm.runtime.resolve_precision`): ``bf16``
    (or ``auto`` on a CPU with bfloat16 units) runs the matmuls in bfloat16 (about 2x faster there;
    losses move by about 0.01 nats), so compare only losses measured at one precision.

    Raises:
        ValueError: when ``rows`` has no labelled token.
    """
    import torch

    from replaybank.llm.runtime import FrozenBf16

    if rows.label_tokens() == 0:
        raise ValueError("no labelled tokens to evaluate")
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    with torch.no_grad(), FrozenBf16(model, precision):
        for idx in length_batches(rows.lengths(), max_tokens, max_rows):
            ids, att, labels = collate(rows.rows(idx), pad_id)
            loss, n = token_loss_sum(model, ids, att, labels)
            total += float(loss)
            count += n
    model.train(was_training)
    return total / count


