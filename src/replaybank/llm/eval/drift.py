"""The early warning: KL(base || adapter) on held-out domain rows, and how it ranks with retention.

Forgetting tracks how far the adapted model's distribution has moved from the base model's on the
new task's own prompts (Shenfeld et al., 2025, "RL's Razor"). :func:`domain_kl` measures that at
every evaluation point of a trained arm, cheaply (two teacher-forced passes over the held-out rows
of the domain being trained, no generation); :func:`early_warning` then asks whether it warned:
across the arms (and seeds) of a run, the Spearman rank correlation (:func:`..frontier.spearman`) between the
last logged KL and the final suite retention, its minimum over the checker-scored families and
its mean (``open`` alone when no checker-scored family has one). A working warning gives a negative correlation (more drift, less kept).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from replaybank.llm.data.rows import TokenRows
from replaybank.llm.eval.frontier import spearman
from replaybank.llm.eval.losses import collate, length_batches, logits_at
from replaybank.llm.eval.suite import CHECKED_FAMILIES
from replaybank.llm.results import ArmResult, EarlyWarning, WarningPoint
from replaybank.llm.runtime import FrozenBf16, Precision

if TYPE_CHECKING:
    from replaybank.llm.train.kl import BaseCache

__all__ = ["domain_kl", "early_warning"]


def domain_kl(
    model: Any, rows: TokenRows, pad_id: int, max_tokens: int = 2048, max_rows: int = 16, precision: Precision = "fp32",
    base: BaseCache | None = None,
) -> float:
    """Mean ``KL(p_base || p_adapter)`` per token (nats) over every prompt and answer token of ``rows``.

    The next-token distributions at every position whose next token is a real one (not padding) are
    compared, the base's from the same PEFT model under ``model.disable_adapter()`` (no copy of
    the model). Temperature 1; the same direction as the KL-to-base training term
    (:func:`..train.kl.kl_to_base`). A fresh LoRA (B = 0) gives 0.

    With ``base``, the base model's last hidden states on these rows are kept there
    (:class:`..train.kl.BaseCache`): the base never changes, so every later evaluation point and
    every later arm of the seed projects the kept states instead of running the base again.

    Raises:
        ValueError: when ``rows`` is empty.
    """
    import torch

    from replaybank.llm.train.kl import kl_to_base

    if len(rows) == 0:
        raise ValueError("no held-out domain rows to measure the KL on")
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    with torch.no_grad(), FrozenBf16(model, precision):
        for idx in length_batches(rows.lengths(), max_tokens, max_rows):
            ids, att, _ = collate(rows.rows(idx), pad_id)
            ids, att = ids.to(next(model.parameters()).device), att.to(next(model.parameters()).device)
            mask = att[:, 1:].bool()  # positions predicting a prompt or answer token
            adapted = logits_at(model, ids, att, mask)
            if base is not None:
                reference = base.logits_at(model, ids, att, mask)
            else:
                with model.disable_adapter():
                    reference = logits_at(model, ids, att, mask)
            total += float(kl_to_base(adapted, reference))
            count += int(mask.sum())
    model.train(was_training)
    return total / max(count, 1)


def early_warning(per_seed: Sequence[Mapping[str, ArmResult]], seeds: Sequence[int]) -> EarlyWarning:
    """One point per trained arm and seed (the last logged KL, the final retention's minimum and
    mean over the checker-scored families) and the Spearman correlation of the KL with each.

    As in :func:`.measure.suite_retention`, ``open`` (agreement with the base's wording) counts only
    when no checker-scored family has a retention. Arms without a logged KL, without a retention, or served through a router (``unrouted`` set:
    the KL is the adapter's, the retention the routed model's) are left out.

    Example:
        >>> from replaybank.llm.results import ArmTraining, CurvePoint, Losses, SuiteScore
        >>> def arm(kl, ret):
        ...     point = CurvePoint(4, 0, Losses(1.0, 1.0, 1.0, [1.0]), domain_kl=kl)
        ...     training = ArmTraining(0.0, None, None, [], [point], [], None)
        ...     suite = SuiteScore({}, 0.0, {"code": ret, "arithmetic": 1.0}, {}, [])
        ...     return ArmResult(point.losses, 1.0, 0.0, suite, None, None, training=training)
        >>> w = early_warning([{"a": arm(0.1, 0.9), "b": arm(0.5, 0.4), "c": arm(0.3, 0.7)}], [0])
        >>> w.n, w.spearman_min, w.spearman_mean, w.points[1].retention_mean
        (3, -1.0, -1.0, 0.7)
    """
    points: list[WarningPoint] = []
    for seed, arms in zip(seeds, per_seed, strict=True):
        for name, result in arms.items():
            curve = result.training.curve if result.training is not None else []
            kl = curve[-1].domain_kl if curve else None
            known = {f: float(v) for f, v in result.suite.retention.items() if v is not None}
            kept = [v for f, v in known.items() if f in CHECKED_FAMILIES] or list(known.values())
            if kl is None or not kept or result.unrouted is not None:
                continue
            points.append(WarningPoint(arm=name, seed=seed, kl=round(kl, 6), retention_min=round(min(kept), 4),
                                       retention_mean=round(float(np.mean(kept)), 4)))
    kls = [p.kl for p in points]

    def ranked(retention: list[float]) -> float | None:
        rho = spearman(kls, retention, min_points=3)
        return None if rho is None else round(rho, 4)

    return EarlyWarning(points=points, n=len(points), spearman_min=ranked([p.retention_min for p in points]),
                        spearman_mean=ranked([p.retention_mean for p in points]))
