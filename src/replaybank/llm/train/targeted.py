"""Forgetting-targeted rehearsal: a source's rows drawn by how far their loss has risen over the
base model's, through the core's :class:`~replaybank.ReplayBuffer` and
:class:`~replaybank.Prioritized` sampler.

A recipe with ``sampling = "forgetting"`` (built-in ``rehearsal-targeted``) gives each rehearsal
source a :class:`TargetedRows`. It holds the source's candidate rows (at most ``candidates``, a
seeded choice) in a prioritized buffer, each row's priority the rise of its loss under the model
being trained over the base model's loss on it (``max(loss - base_loss, 0)``), measured again every
``refresh_every`` optimizer steps. The loop asks it for a micro-batch's rows (:meth:`TargetedRows.pick`)
in place of the source's own order, and calls :meth:`TargetedRows.after_step` after every step.

Prioritizing high-loss rows over-indexes on noisy, malformed or outlier rows (a row the base model
cannot predict either: markup, another language, random bytes), so two guards
(:func:`outlier_bound`, :func:`forgetting_priorities`) come first:

* **held out**: a row whose *base* loss lies more than ``outlier_mads`` scaled median absolute
  deviations above the median of the candidates' base losses is never drawn (it is not put in the
  buffer): it was not knowledge the base had, so its rise is no forgetting to repair;
* **capped**: priorities above the ``priority_cap`` quantile of the kept rows' rises are clipped
  to it, so a few rows with huge rises cannot take the whole rehearsal share.

No importance weights are applied (the sampler's ``beta = 0``): the point is to move the rehearsal
distribution towards what is being forgotten. ``benchmarks/outlier_guard.py`` shows what the
guards do on a constructed pool with 10% malformed rows.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from replaybank.llm.data.rows import IGNORE_INDEX, TokenRows

__all__ = ["MAD_SCALE", "TargetedRows", "forgetting_priorities", "outlier_bound", "row_losses", "target_sources"]

#: scales the median absolute deviation to the standard deviation of a normal distribution
MAD_SCALE = 1.4826

#: a row's losses (mean nats per labelled token), one per candidate row index given
Losses = Callable[[np.ndarray], np.ndarray]


def outlier_bound(base_losses: np.ndarray, mads: float) -> float:
    """The largest base loss a row may have and still be drawn: ``median + mads * 1.4826 * MAD``.

    ``inf`` when ``mads`` is ``inf`` or the deviation is 0 (no spread, no outlier).

    Example:
        >>> round(outlier_bound(np.array([1.0, 1.2, 0.8, 1.1, 0.9, 9.0]), 3.5), 3)
        1.828
    """
    losses = np.asarray(base_losses, dtype=np.float64)
    if losses.size == 0 or not np.isfinite(mads):
        return float("inf")
    median = float(np.median(losses))
    mad = float(np.median(np.abs(losses - median)))
    return float("inf") if mad == 0 else median + mads * MAD_SCALE * mad


def forgetting_priorities(losses: np.ndarray, base_losses: np.ndarray, cap: float) -> np.ndarray:
    """Each row's priority: the rise of its loss over the base model's, clipped at the ``cap``
    quantile of the rises (``cap = 1``: no clipping).

    Raises:
        ValueError: ``cap`` outside (0, 1], or arrays of different lengths.

    Example:
        >>> forgetting_priorities(np.array([2.0, 1.0, 3.0, 12.0]), np.array([1.0, 1.5, 1.0, 2.0]), 0.5).tolist()
        [1.0, 0.0, 1.5, 1.5]
    """
    if not 0 < cap <= 1:
        raise ValueError(f"priority cap must be a quantile in (0, 1], got {cap}")
    losses, base = np.asarray(losses, dtype=np.float64), np.asarray(base_losses, dtype=np.float64)
    if losses.shape != base.shape:
        raise ValueError(f"losses {losses.shape} and base losses {base.shape} differ in shape")
    rise = np.maximum(losses - base, 0.0)
    if rise.size == 0 or cap == 1:
        return rise
    return np.minimum(rise, float(np.quantile(rise, cap)))


def row_losses(model: Any, rows: TokenRows, idx: np.ndarray, pad_id: int, *, base: bool = False, batch_rows: int = 16) -> np.ndarray:
    """Mean loss per labelled token of each row ``idx`` of ``rows`` (no gradients); ``base``: of
    the base model (a PEFT model's adapter disabled). A row without labelled tokens gets 0."""
    import contextlib

    import torch
    import torch.nn.functional as F

    from replaybank.llm.eval.losses import collate

    was_training = model.training
    model.eval()
    out = np.zeros(len(idx), dtype=np.float64)
    order = np.argsort(rows.lengths()[idx], kind="stable")  # similar lengths together: little padding
    device = next(model.parameters()).device
    scope = model.disable_adapter() if base else contextlib.nullcontext()
    with torch.no_grad(), scope:
        for start in range(0, len(order), batch_rows):
            part = order[start:start + batch_rows]
            ids, att, labels = (t.to(device) for t in collate(rows.rows(idx[part]), pad_id))
            logits = model(input_ids=ids, attention_mask=att).logits[:, :-1].float()
            target = labels[:, 1:]
            mask = target != IGNORE_INDEX
            nll = F.cross_entropy(logits.transpose(1, 2), target.clamp(min=0), reduction="none") * mask
            out[part] = (nll.sum(1) / mask.sum(1).clamp(min=1)).cpu().numpy()
    model.train(was_training)
    return out


class TargetedRows:
    """One source's rows drawn by forgetting (see the module), for :class:`..loop.Source` ``picker``.

    Args:
        size: rows in the source.
        loss: the current model's losses on candidate rows (by index into the source).
        base_loss: the base model's losses on them (measured once, on the first draw).
        refresh_every: optimizer steps between measurements of ``loss``.
        cap: the priority cap, a quantile in (0, 1].
        outlier_mads: the held-out bound in scaled MADs above the median base loss (``inf``: off).
        candidates: the most rows considered (a seeded choice of the source's rows when it has more).
        seed: seeds the choice of candidates and the sampler.
        eps: added to every priority (the sampler's), so rows not forgotten are still drawn, rarely.

    Raises:
        ValueError: ``cap`` outside (0, 1], ``refresh_every < 1`` or an empty source.

    Example (losses given, no model):
        >>> base = np.array([1.0, 1.0, 1.0, 1.0, 1.1, 0.9, 9.0, 9.5])
        >>> now = base + np.array([0.0, 0.0, 0.0, 2.0, 0.0, 0.0, 5.0, 5.0])
        >>> t = TargetedRows(8, lambda i: now[i], lambda i: base[i], refresh_every=10, cap=1.0, seed=0)
        >>> np.bincount(t.pick(1000), minlength=8).tolist()
        [0, 1, 1, 997, 1, 0, 0, 0]
        >>> t.held_out.tolist()
        [6, 7]
    """

    def __init__(
        self, size: int, loss: Losses, base_loss: Losses, *, refresh_every: int, cap: float,
        outlier_mads: float = 3.5, candidates: int | None = None, seed: int = 0, eps: float = 1e-3,
    ) -> None:
        if size < 1:
            raise ValueError("forgetting-targeted rehearsal needs a source with rows")
        if refresh_every < 1:
            raise ValueError(f"refresh_every must be >= 1, got {refresh_every}")
        if not 0 < cap <= 1:
            raise ValueError(f"priority cap must be a quantile in (0, 1], got {cap}")
        self.loss, self.base_loss = loss, base_loss
        self.refresh_every, self.cap, self.outlier_mads, self.eps = refresh_every, cap, outlier_mads, eps
        self.seed = seed
        rng = np.random.default_rng(seed)
        self.candidates = (np.arange(size) if candidates is None or size <= candidates
                           else np.sort(rng.choice(size, size=candidates, replace=False)))
        self.buffer: Any = None
        self.ids = np.zeros(0, dtype=np.int64)
        self.kept = np.zeros(0, dtype=np.int64)
        self.held_out = np.zeros(0, dtype=np.int64)
        self.base = np.zeros(0)
        self.last: dict[str, Any] = {}

    def _start(self) -> None:
        from replaybank import Prioritized, ReplayBuffer

        base = self.base_loss(self.candidates)
        keep = base <= outlier_bound(base, self.outlier_mads)
        self.kept, self.held_out, self.base = self.candidates[keep], self.candidates[~keep], base[keep]
        sampler = Prioritized(alpha=1.0, beta=0.0, eps=self.eps)
        self.buffer = ReplayBuffer(len(self.kept), sampler=sampler, seed=self.seed)
        self.ids = self.buffer.extend({"row": self.kept}, priorities=np.zeros(len(self.kept)))
        self.refresh()

    def refresh(self) -> dict[str, Any]:
        """Measure the kept rows' losses again and set their priorities; returns what it saw."""
        if self.buffer is None:
            self._start()
            return self.last
        losses = self.loss(self.kept)
        rise = np.maximum(losses - self.base, 0.0)
        priorities = forgetting_priorities(losses, self.base, self.cap)
        self.buffer.update_priorities(self.ids, priorities)
        self.last = {"kept": int(len(self.kept)), "held_out": int(len(self.held_out)),
                     "mean_rise": round(float(rise.mean()), 5), "cap": round(float(priorities.max(initial=0.0)), 5),
                     "capped": int(np.count_nonzero(rise > priorities))}
        return self.last

    def pick(self, n: int) -> np.ndarray:
        """``n`` rows of the source (indices into it), drawn by priority (with replacement)."""
        if self.buffer is None:
            self._start()
        if n == 0:
            return np.zeros(0, dtype=np.int64)
        return np.asarray(self.buffer.sample(n).data["row"], dtype=np.int64)

    def after_step(self, step: int) -> dict[str, Any] | None:
        """After optimizer step ``step``: refresh the priorities every ``refresh_every`` steps
        (returns what the refresh saw, for the step's log), else None."""
        if self.buffer is None or step % self.refresh_every:
            return None
        return self.refresh()


def target_sources(
    sources: Sequence[Any], model: Any, pad_id: int, *, refresh_every: int, cap: float, outlier_mads: float,
    candidates: int, seed: int,
) -> list[Any]:
    """``sources`` (:class:`..loop.Source`) each drawn by forgetting of ``model`` (a PEFT model)."""
    from dataclasses import replace

    def picker(k: int, rows: TokenRows) -> TargetedRows:
        return TargetedRows(
            len(rows), lambda idx: row_losses(model, rows, idx, pad_id),
            lambda idx: row_losses(model, rows, idx, pad_id, base=True),
            refresh_every=refresh_every, cap=cap, outlier_mads=outlier_mads, candidates=candidates, seed=seed + k,
        )

    return [replace(s, picker=picker(k, s.rows), sliced=False) for k, s in enumerate(sources)]
