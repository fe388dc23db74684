"""A-GEM on the LoRA parameters: the domain gradient projected so it does not oppose the rehearsal rows'.

With ``project = "agem"`` (built-in ``rehearsal-agem``) one optimizer step of the LoRA loop
(:func:`replaybank.llm.train.step.train_step`) runs its rehearsal rows first and keeps their
gradient ``g_r`` (every trainable parameter, flattened: :func:`take_reference`), then runs the
domain rows for the domain gradient ``g``. When ``g . g_r < 0`` (the domain step would raise the
rehearsal rows' loss, to first order) ``g`` is replaced by its projection
``g - (g . g_r / g_r . g_r) g_r`` (:func:`agem_project`), whose inner product with ``g_r`` is 0. The
step then applies ``g + g_r``: the rehearsal rows still train with the recipe's share, as in
every rehearsal arm (Chaudhry et al. 2019's A-GEM applies ``g`` alone; its memory is only a
reference). Whether the projection acted is logged per step (``projected``) and its share over a
run in the training log (``projected_share``).
"""

from __future__ import annotations

from typing import Any

__all__ = ["agem_project", "apply_projection", "take_reference"]


def agem_project(g: Any, g_ref: Any) -> tuple[Any, bool]:
    """``g`` projected so that its inner product with ``g_ref`` is not negative, and whether it
    was changed. Works on 1-D numpy arrays and torch tensors alike.

    Example:
        >>> import numpy as np
        >>> g, acted = agem_project(np.array([1.0, -2.0]), np.array([0.0, 1.0]))
        >>> g.tolist(), acted
        ([1.0, 0.0], True)
        >>> agem_project(np.array([1.0, 2.0]), np.array([0.0, 1.0]))[1]
        False
    """
    dot = float((g * g_ref).sum())
    ref_sq = float((g_ref * g_ref).sum())
    if dot >= 0 or ref_sq == 0:
        return g, False
    return g - (dot / ref_sq) * g_ref, True


def take_reference(params: list[Any]) -> Any:
    """The gradient accumulated so far in ``params`` (flattened, a copy), which is then cleared."""
    import torch

    flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1).float() for p in params])
    for p in params:
        p.grad = None
    return flat


def apply_projection(params: list[Any], g_ref: Any) -> bool:
    """Set ``params``' gradients to the projected domain gradient (theirs now) plus ``g_ref``;
    returns whether the projection acted."""
    import torch

    g = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1).float() for p in params])
    g, acted = agem_project(g, g_ref)
    total = g + g_ref
    start = 0
    for p in params:
        n = p.numel()
        p.grad = total[start:start + n].view_as(p).to(p.dtype)
        start += n
    return acted
