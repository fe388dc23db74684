"""One optimizer step of the LoRA loop: the loss over its micro-batches, backward, clipping, AdamW.

The loss is the token-weighted mean over every labelled token of the step (whatever source or
micro-batch it is in), plus the optional KL-to-base term (:mod:`replaybank.llm.train.kl`)
averaged over its positions. With ``KLSpec.rehearsal_ce = False`` the rehearsal rows' tokens
leave the cross-entropy's numerator but stay in its denominator, so the domain's gradient has
the same scale either way and only the rehearsal rows' cross-entropy is removed. Rows are run
one source at a time, in two passes when their lengths differ enough (:func:`by_length`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from replaybank.llm.data.rows import IGNORE_INDEX
from replaybank.llm.eval.losses import collate, logits_at, token_loss_sum
from replaybank.llm.train.agem import apply_projection, take_reference
from replaybank.llm.train.kl import BaseCache, KLSpec, base_logits_at, kl_mask, kl_to_base

DOMAIN, REHEARSAL = 0, 1

Rows = list[tuple[np.ndarray, np.ndarray]]


def train_step(
    model: Any,
    opt: Any,
    params: list[Any],
    groups: list[tuple[int, Rows]],
    names: list[str],
    pad_id: int,
    device: Any,
    kl: KLSpec | None,
    max_grad_norm: float,
    base_cache: BaseCache | None = None,
    agem: bool = False,
) -> tuple[dict[str, Any], float]:
    """Accumulate the gradients of ``groups`` and take one optimizer step.

    Args:
        model, opt, params: the PEFT model, its AdamW optimizer and the trainable parameters.
        groups: ``(source, rows)`` per forward pass; source ``DOMAIN`` (0) is the domain, the
            others index ``names``.
        names: the name of every source, domain first (keys of the per-source log fields).
        pad_id: token id used for padding.
        device: where the model is.
        kl: the optional KL-to-base term.
        max_grad_norm: gradient clipping norm (0 = off).
        base_cache: where the KL term's base pass is kept per row (:class:`BaseCache`); None runs
            the base pass every time.
        agem: project the domain rows' gradient against the rehearsal rows' (:mod:`.agem`); the
            step's log then says whether it acted (``projected``; None without rehearsal rows).

    Returns:
        The step's log fields (losses, rows, tokens and labelled tokens per source, mean KL) and
        its unrounded loss.
    """
    import torch

    if agem:  # the rehearsal rows first: their gradient is the reference the domain's is projected against
        groups = sorted(groups, key=lambda group: group[0] == DOMAIN)
    groups = by_length(groups)
    reference = None
    n_label = sum(int((lab[1:] != -100).sum()) for _, rows in groups for _, lab in rows)
    n_kl = sum(_kl_positions(s, rows, kl) for s, rows in groups)
    loss_sum = [0.0] * len(names)
    label_tokens = [0] * len(names)
    row_count = [0] * len(names)
    n_tokens = rehearsal_tokens = 0
    kl_total = 0.0
    for source, rows in groups:
        if agem and source == DOMAIN and reference is None and any(s != DOMAIN for s, _ in groups):
            reference = take_reference(params)
        ids, att, labels = collate(rows, pad_id)
        ce_counts = source == DOMAIN or kl is None or kl.rehearsal_ce
        ce, n, kl_sum = _group_loss(model, ids.to(device), att.to(device), labels.to(device), source, kl, base_cache, ce_counts)
        obj = (ce if ce_counts else ce * 0.0) / max(n_label, 1)
        if kl_sum is not None and kl is not None:
            obj = obj + kl.weight * kl_sum / max(n_kl, 1)
            kl_total += float(kl_sum.detach())
        obj.backward()
        loss_sum[source] += float(ce.detach())
        label_tokens[source] += n
        row_count[source] += len(rows)
        n_tokens += int(att.sum())
        rehearsal_tokens += int(att.sum()) if source != DOMAIN else 0
    projected = apply_projection(params, reference) if reference is not None else None
    if max_grad_norm > 0:
        torch.nn.utils.clip_grad_norm_(params, max_grad_norm)
    opt.step()
    opt.zero_grad(set_to_none=True)
    total_loss = sum(loss_sum) / max(n_label, 1)
    reh_sum, reh_n = sum(loss_sum[1:]), sum(label_tokens[1:])
    fields = {
        "loss": round(total_loss, 5),
        "domain_loss": round(loss_sum[DOMAIN] / label_tokens[DOMAIN], 5) if label_tokens[DOMAIN] else None,
        "rehearsal_loss": round(reh_sum / reh_n, 5) if reh_n else None,
        "rows": sum(row_count),
        "rehearsal_rows": sum(row_count[1:]),
        "tokens": n_tokens,
        "rehearsal_tokens": rehearsal_tokens,
        "source_rows": dict(zip(names, row_count, strict=True)),
        "label_tokens": dict(zip(names, label_tokens, strict=True)),
        "kl": round(kl_total / n_kl, 6) if kl is not None and n_kl else None,
    }
    if agem:
        fields["projected"] = projected
    return fields, total_loss


def by_length(groups: list[tuple[int, Rows]], keep: float = 0.8) -> list[tuple[int, Rows]]:
    """Each source's rows in one forward pass, or in two when that pads much less.

    The rows are sorted by length and cut where the padded positions of the two passes are
    fewest; the cut is taken when they are at most ``keep`` of one pass's. The step's sums are
    the same either way (every term is a sum over rows, normalised by the whole step's counts).
    The main job's self-distill batch pads 4 self rows of 40-130 tokens to the longest: about
    576 positions for 406 tokens, 443 when cut in two.

    Example:
        >>> import numpy as np
        >>> rows = [(np.zeros(n), np.zeros(n)) for n in (120, 40, 50, 130)]
        >>> [[len(r[0]) for r in part] for _, part in by_length([(1, rows)])]
        [[40, 50], [120, 130]]
    """
    out: list[tuple[int, Rows]] = []
    for source, rows in groups:
        lengths = sorted(len(ids) for ids, _ in rows)
        n = len(lengths)
        if n < 2:
            out.append((source, rows))
            continue
        cut = min(range(1, n), key=lambda k: k * lengths[k - 1] + (n - k) * lengths[-1])
        if cut * lengths[cut - 1] + (n - cut) * lengths[-1] > keep * n * lengths[-1]:
            out.append((source, rows))
            continue
        ordered = sorted(rows, key=lambda row: len(row[0]))
        out += [(source, ordered[:cut]), (source, ordered[cut:])]
    return out


def _kl_mask(source: int, labels: Any, att: Any, kl: KLSpec | None) -> Any:
    # Positions (of labels[:, 1:]) where the KL term applies, or None.
    import torch

    if kl is None or kl.weight <= 0 or (source == DOMAIN and kl.on != "all"):
        return None
    rehearsal = torch.full((labels.shape[0],), source != DOMAIN, dtype=torch.bool)
    return kl_mask(labels, att, rehearsal, kl.on)


def _kl_positions(source: int, rows: list[tuple[np.ndarray, np.ndarray]], kl: KLSpec | None) -> int:
    if kl is None or kl.weight <= 0:
        return 0
    if source != DOMAIN:
        return sum(int((lab[1:] != IGNORE_INDEX).sum()) for _, lab in rows)
    if kl.on == "all":
        return sum(int((lab[1:] == IGNORE_INDEX).sum()) for _, lab in rows)
    return 0


def _group_loss(
    model: Any, ids: Any, att: Any, labels: Any, source: int, kl: KLSpec | None, base_cache: BaseCache | None,
    ce_counts: bool,
) -> tuple[Any, int, Any]:
    """Cross-entropy sum over labelled positions, their count, and the KL sum (or None).

    With ``ce_counts`` false (rows learnt through the KL term only) the cross-entropy is measured
    for the log without a gradient."""
    import torch
    import torch.nn.functional as F

    target = labels[:, 1:]
    ce_mask = target != IGNORE_INDEX
    kl_mask = _kl_mask(source, labels, att, kl)
    if kl_mask is None or kl is None or not bool(kl_mask.any()):
        loss, n = token_loss_sum(model, ids, att, labels)
        return loss, n, None
    union = ce_mask | kl_mask
    logits = logits_at(model, ids, att, union)
    with torch.set_grad_enabled(ce_counts and torch.is_grad_enabled()):
        ce = F.cross_entropy(logits[ce_mask[union]], target[ce_mask], reduction="sum")
    base = base_cache.logits_at(model, ids, att, union) if base_cache is not None else base_logits_at(model, ids, att, union)
    pick = kl_mask[union]
    if not bool(pick.all()):
        logits, base = logits[pick], base[pick]
    return ce, int(ce_mask.sum()), kl_to_base(logits, base, kl.temperature)

