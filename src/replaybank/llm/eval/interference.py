"""The gradient-interference probe: does domain training pull against general text?

For a domain batch and a rehearsal batch it takes the gradients ``g_d`` and ``g_r`` of the
token-mean loss with respect to the adapter's parameters and computes their cosine and the
smallest mixing ratio ``alpha`` for which the mixed step still descends on rehearsal text:

    <(1 - alpha) g_d + alpha g_r, g_r> >= 0   <=>   alpha >= -<g_d, g_r> / (|g_r|^2 - <g_d, g_r>)

(``alpha = 0`` when ``<g_d, g_r> >= 0``). Repeated over several batch pairs, the spread shows how
stable the answer is.

These are first-order facts about one step from the adapter's current state (a fresh LoRA: its B
matrices at zero), not a forecast of forgetting after many steps: on the main job's Python-docs
corpus every measured pair agrees (``<g_d, g_r> > 0``) while naive training loses every suite
family. So the probe reports the measured inner products and cosines and how many pairs
conflict, and gives no verdict on whether rehearsal is needed; ``replaybank run`` puts them next to
the forgetting it measures (``metrics.json``: ``probe.comparison``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from replaybank.llm.data.rows import TokenRows
from replaybank.llm.records import Record
from replaybank.llm.runtime import FrozenBf16, short_row_attention


def min_alpha(dot: float, rehearsal_sq_norm: float) -> float:
    """Smallest ``alpha`` in [0, 1] with ``(1 - alpha) * dot + alpha * |g_r|^2 >= 0``.

    Args:
        dot: ``<g_d, g_r>``.
        rehearsal_sq_norm: ``|g_r|^2``.

    Example:
        >>> min_alpha(-1.0, 1.0)
        0.5
        >>> min_alpha(0.3, 1.0)
        0.0
    """
    if rehearsal_sq_norm < 0:
        raise ValueError(f"squared norm must be >= 0, got {rehearsal_sq_norm}")
    if dot >= 0:
        return 0.0
    return float(-dot / (rehearsal_sq_norm - dot))


@dataclass(frozen=True)
class PairResult(Record):
    """One batch pair: the gradients' cosine and inner product, their norms, the pair's minimum alpha."""

    cosine: float
    dot: float
    domain_norm: float
    rehearsal_norm: float
    alpha: float


@dataclass(frozen=True)
class InterferenceReport(Record):
    """Probe result over several batch pairs; written into ``metrics.json`` as it is (a :class:`Record`).

    Attributes:
        pairs: one :class:`PairResult` per batch pair.
        cosine_mean, cosine_std: spread of the cosine similarity.
        alpha_suggested: the largest per-pair minimum alpha (satisfies every pair measured).
        alpha_median: the median per-pair minimum alpha.
        dot_mean: the mean inner product ``<g_d, g_r>``.
        conflicting_pairs: how many pairs had ``<g_d, g_r> < 0`` (a step on the domain batch alone
            raises that rehearsal batch's loss, to first order). A count of measured pairs, not a
            prediction of forgetting (see the module docstring).
    """

    pairs: list[PairResult]
    cosine_mean: float
    cosine_std: float
    alpha_suggested: float
    alpha_median: float
    dot_mean: float
    conflicting_pairs: int

    def measured(self) -> str:
        """One line of what was measured, with no verdict (the run's log line)."""
        return (f"cosine {self.cosine_mean:.4f} +/- {self.cosine_std:.4f}, <g_d, g_r> mean {self.dot_mean:.3g}, "
                f"{self.conflicting_pairs}/{len(self.pairs)} pairs with <g_d, g_r> < 0, "
                f"first-step alpha {self.alpha_suggested:.3f}")

    def summary(self) -> str:
        lines = [f"{'pair':>4} {'cosine':>8} {'<g_d,g_r>':>10} {'alpha':>7}"]
        lines += [f"{i:>4} {p.cosine:>8.4f} {p.dot:>10.3g} {p.alpha:>7.4f}" for i, p in enumerate(self.pairs)]
        lines.append(
            f"cosine {self.cosine_mean:.4f} +/- {self.cosine_std:.4f}; <g_d, g_r> mean {self.dot_mean:.3g}; "
            f"{self.conflicting_pairs} of {len(self.pairs)} pairs conflict (<g_d, g_r> < 0); "
            f"first-step alpha median {self.alpha_median:.4f}, max {self.alpha_suggested:.4f}"
        )
        lines.append("first-order, one step from this adapter: not a forecast of forgetting (docs/llm.md)")
        return "\n".join(lines)


def summarise(grads: Sequence[tuple[np.ndarray, np.ndarray]]) -> InterferenceReport:
    """Turn gradient pairs ``(g_d, g_r)`` (flat float arrays) into an :class:`InterferenceReport`.

    Raises:
        ValueError: with no pairs, or a pair of different shapes.

    Example:
        >>> r = summarise([(np.array([-1.0, 0.0]), np.array([1.0, 0.0]))])
        >>> r.alpha_suggested, r.dot_mean, r.conflicting_pairs
        (0.5, -1.0, 1)
    """
    if not grads:
        raise ValueError("need at least one gradient pair")
    pairs = []
    for i, (gd, gr) in enumerate(grads):
        gd, gr = np.asarray(gd, np.float64), np.asarray(gr, np.float64)
        if gd.shape != gr.shape:
            raise ValueError(f"pair {i}: gradient shapes differ ({gd.shape} vs {gr.shape})")
        dot = float(gd @ gr)
        nd, nr = float(np.linalg.norm(gd)), float(np.linalg.norm(gr))
        cos = dot / (nd * nr) if nd > 0 and nr > 0 else 0.0
        pairs.append(PairResult(cos, dot, nd, nr, min_alpha(dot, nr * nr)))
    cos_arr = np.array([p.cosine for p in pairs])
    alphas = np.array([p.alpha for p in pairs])
    return InterferenceReport(
        pairs,
        float(cos_arr.mean()),
        float(cos_arr.std()),
        float(alphas.max()),
        float(np.median(alphas)),
        float(np.mean([p.dot for p in pairs])),
        int(sum(p.dot < 0 for p in pairs)),
    )


def flat_grad(loss_fn: Callable[[], Any], params: Sequence[Any]) -> np.ndarray:
    """The gradient of ``loss_fn()`` with respect to ``params``, flattened to one numpy array."""
    import torch

    for p in params:
        p.grad = None
    loss_fn().backward()
    out = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in params])
    for p in params:
        p.grad = None
    return out.detach().float().cpu().numpy()


def interference(
    model: Any,
    pad_id: int,
    domain_batches: Sequence[Sequence[tuple[np.ndarray, np.ndarray]]],
    rehearsal_batches: Sequence[Sequence[tuple[np.ndarray, np.ndarray]]],
) -> InterferenceReport:
    """Probe a LoRA model on paired batches of tokenized rows (see module docstring)."""
    from replaybank.llm.eval.losses import collate, token_loss_sum

    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError("model has no trainable parameters; wrap it with LoRA first")

    def loss_of(rows: Sequence[tuple[np.ndarray, np.ndarray]]) -> Callable[[], Any]:
        def fn() -> Any:
            ids, att, labels = collate(list(rows), pad_id)
            loss, n = token_loss_sum(model, ids, att, labels)
            return loss / max(n, 1)
        return fn

    grads = [
        (flat_grad(loss_of(d), params), flat_grad(loss_of(r), params))
        for d, r in zip(domain_batches, rehearsal_batches, strict=True)
    ]
    return summarise(grads)


def probe_sources(
    model: Any, pad_id: int, domain: TokenRows, sources: dict[str, TokenRows], *, pairs: int, batch_size: int, seed: int,
    precision: str = "fp32",
) -> dict[str, InterferenceReport]:
    """The interference probe of one domain against several rehearsal sources, on the same domain batches.

    Each pair's domain gradient is computed once and compared with one batch of every source, so the
    sources are judged on identical domain batches. ``precision`` is the arithmetic of the training
    step the probe speaks for (``[training] precision``; its CPU fast paths included).

    Returns:
        ``{source name: InterferenceReport}``.

    Raises:
        ValueError: when the model has no trainable parameters or a source is empty.
    """
    from replaybank.llm.eval.losses import collate, token_loss_sum

    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError("model has no trainable parameters; wrap it with LoRA first")
    for name, rows in sources.items():
        if len(rows) == 0:
            raise ValueError(f"probe source {name!r} has no rows")

    casts = FrozenBf16(model, precision)

    def loss_of(rows: list[tuple[np.ndarray, np.ndarray]]) -> Any:
        def fn() -> Any:
            ids, att, labels = collate(rows, pad_id)
            with casts, short_row_attention(model, ids.shape[1]):
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
