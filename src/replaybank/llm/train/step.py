"""One optimizer step of the LoRA loop: the loss over its micro-batches, backward, clipping, AdamW.

The loss is the token-weighted mean over every labelled token of the step (whatever source or
micro-batch it is in), plus the optional KL-to-base term (:mod:`replaybank.llm.train.kl`)
averaged over its positions. With ``KLSpec.rehearsal_ce = False`` the rehearsal rows' tokens
leave the cross-entropy's numerator but stay in its denominator, so the domain's gradient has
the same scale either way and only the rehearsal rows' cross-entropy is removed. The rows of
every source share forward passes, sorted by length and cut in two when that pads much less
(:func:`by_length`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from replaybank.llm.data.rows import IGNORE_INDEX
from replaybank.llm.eval.losses import collate, logits_at
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
    rows_per_pass: int | None = None,
    agem: bool = False,
) -> tuple[dict[str, Any], float]:
    """Accumulate the gradients of ``groups`` and take one optimizer step.

    Args:
        model, opt, params: the PEFT model, its AdamW optimizer and the trainable parameters.
        groups: ``(source, rows)``; source ``DOMAIN`` (0) is the domain, the others index
            ``names``. Rows of every source share forward passes (:func:`by_length`).
        names: the name of every source, domain first (keys of the per-source log fields).
        pad_id: token id used for padding.
        device: where the model is.
        kl: the optional KL-to-base term.
        max_grad_norm: gradient clipping norm (0 = off).
        base_cache: where the KL term's base pass is kept per row (:class:`BaseCache`); None runs
            the base pass every time.
        rows_per_pass: the most rows one forward pass holds (the loop's micro-batch size); None:
            every row of the step.
        agem: project the domain rows' gradient against the rehearsal rows' (:mod:`.agem`): the
            rehearsal rows' passes run first, then the domain's; the step's log says whether the
            projection acted (``projected``; None without rehearsal rows).

    Returns:
        The step's log fields (losses, rows, tokens and labelled tokens per source, mean KL) and
        its unrounded loss.
    """
    import torch

    n_label = sum(int((lab[1:] != -100).sum()) for _, rows in groups for _, lab in rows)
    n_kl = sum(_kl_positions(s, rows, kl) for s, rows in groups)
    loss_sum = [0.0] * len(names)
    label_tokens = [0] * len(names)
    row_count = [0] * len(names)
    for source, rows in groups:
        row_count[source] += len(rows)
        label_tokens[source] += sum(int((lab[1:] != IGNORE_INDEX).sum()) for _, lab in rows)
    n_tokens = sum(len(ids) for _, rows in groups for ids, _ in rows)
    rehearsal_tokens = sum(len(ids) for s, rows in groups if s != DOMAIN for ids, _ in rows)
    kl_total = 0.0
    tagged = [(s, row) for s, rows in groups for row in rows]
    # A-GEM: the rehearsal rows' gradient first, the reference the domain's is projected against
    phases = [[t for t in tagged if t[0] != DOMAIN], [t for t in tagged if t[0] == DOMAIN]] if agem else [tagged]
    reference = None
    parts = []
    for k, phase in enumerate(phases):
        parts += [(k, part) for part in by_length(phase, rows_per_pass=rows_per_pass)]
    for k, part in parts:
        if k == 1 and reference is None and phases[0]:
            reference = take_reference(params)
        sources = torch.tensor([s for s, _ in part])
        ids, att, labels = collate([row for _, row in part], pad_id)
        counts = (sources == DOMAIN) if kl is not None and not kl.rehearsal_ce else torch.ones_like(sources, dtype=torch.bool)
        ce, ce_rows, kl_sum = _pass_loss(model, ids.to(device), att.to(device), labels.to(device), sources != DOMAIN,
                                         counts, kl, base_cache)  # fmt: skip
        obj = ce / max(n_label, 1)
        if kl_sum is not None and kl is not None:
            obj = obj + kl.weight * kl_sum / max(n_kl, 1)
            kl_total += float(kl_sum.detach())
        obj.backward()
        for s, value in zip(sources.tolist(), ce_rows.tolist(), strict=True):
            loss_sum[s] += value
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


Tagged = list[tuple[int, tuple[np.ndarray, np.ndarray]]]


def by_length(rows: Tagged, keep: float = 0.8, rows_per_pass: int | None = None) -> list[Tagged]:
    """A step's rows (``(source, row)``, every source together) in forward passes of similar length.

    The rows are sorted by length and dealt into passes of at most ``rows_per_pass`` rows; each
    of those is cut in two where the padded positions of the two passes are fewest, when that
    pads at most ``keep`` of one pass's positions. The step's sums are the same either way
    (every term is a sum over rows, normalised by the whole step's counts), so sources share
    passes: the main job's self-distill batch (4 domain rows of 57-82 tokens, 4 self rows of
    40-130) runs in two passes instead of one for the domain and two for the self rows.

    Example:
        >>> import numpy as np
        >>> rows = [(s, (np.zeros(n), np.zeros(n))) for s, n in ((0, 66), (0, 70), (1, 40), (1, 130), (1, 120))]
        >>> [[(s, len(r[0])) for s, r in part] for part in by_length(rows)]
        [[(1, 40), (0, 66), (0, 70)], [(1, 120), (1, 130)]]
    """
    ordered = sorted(rows, key=lambda row: len(row[1][0]))
    size = rows_per_pass or len(ordered) or 1
    out: list[Tagged] = []
    for start in range(0, len(ordered), size):
        chunk = ordered[start : start + size]
        lengths = [len(ids) for _, (ids, _) in chunk]
        n = len(lengths)
        if n < 2:
            out.append(chunk)
            continue
        cut = min(range(1, n), key=lambda k: k * lengths[k - 1] + (n - k) * lengths[-1])
        if cut * lengths[cut - 1] + (n - cut) * lengths[-1] > keep * n * lengths[-1]:
            out.append(chunk)
        else:
            out += [chunk[:cut], chunk[cut:]]
    return out


def _kl_positions(source: int, rows: list[tuple[np.ndarray, np.ndarray]], kl: KLSpec | None) -> int:
    if kl is None or kl.weight <= 0:
        return 0
    if source != DOMAIN:
        return sum(int((lab[1:] != IGNORE_INDEX).sum()) for _, lab in rows)
    if kl.on == "all":
        return sum(int((lab[1:] == IGNORE_INDEX).sum()) for _, lab in rows)
    return 0


def _pass_loss(
    model: Any, ids: Any, att: Any, labels: Any, rehearsal: Any, counts: Any, kl: KLSpec | None,
    base_cache: BaseCache | None,
) -> tuple[Any, Any, Any]:
    """One forward pass over rows of any sources: the cross-entropy sum over the labelled
    positions of the rows whose cross-entropy ``counts`` (with gradient), every row's
    cross-entropy sum (for the log, no gradient), and the KL sum (or None).

    Rows learnt through the KL term only (``counts`` false) measure their cross-entropy without
    a gradient."""
    import torch
    import torch.nn.functional as F

    target = labels[:, 1:]
    ce_mask = target != IGNORE_INDEX
    klm = None if kl is None or kl.weight <= 0 else kl_mask(labels, att, rehearsal, kl.on)
    if klm is not None and not bool(klm.any()):
        klm = None
    union = ce_mask if klm is None else ce_mask | klm
    logits = logits_at(model, ids, att, union)
    row_at = torch.arange(ids.shape[0], device=ids.device)[:, None].expand_as(union)[union]
    labelled = ce_mask[union]
    goal = target[union]
    graded = labelled & counts.to(ids.device)[row_at]
    free = labelled & ~graded
    ce_rows = torch.zeros(ids.shape[0], dtype=torch.float32, device=ids.device)
    ce = F.cross_entropy(logits[graded], goal[graded], reduction="none")
    ce_rows.index_add_(0, row_at[graded], ce.detach())
    if bool(free.any()):
        with torch.no_grad():
            ce_free = F.cross_entropy(logits[free], goal[free], reduction="none")
        ce_rows.index_add_(0, row_at[free], ce_free)
    if klm is None or kl is None:
        return ce.sum(), ce_rows, None
    base = base_cache.logits_at(model, ids, att, klm) if base_cache is not None else base_logits_at(model, ids, att, klm)
    pick = klm[union]
    adapted = logits if bool(pick.all()) else logits[pick]
    return ce.sum(), ce_rows, kl_to_base(adapted, base, kl.temperature)
