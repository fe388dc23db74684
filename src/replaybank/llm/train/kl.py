"""The KL-to-base term: keep the adapted model's next-token distribution near the base model's.

Direction and positions (one definition, used by the training loop and by
:class:`replaybank.hf.kl.KLToBase`, the same term as a ``Trainer`` / ``SFTTrainer`` loss):

* **Direction**: ``KL(p_base || p_adapted)`` (forward KL, base as the target), the same direction
  as knowledge distillation and ASFT's anchor: its gradient with respect to the adapted logits is
  ``softmax(z / T) - softmax(z_base / T)`` (times ``T``), so it pulls the adapted model toward
  every token the base model finds likely (mass covering), not only toward its argmax.
* **Temperature**: both distributions are ``softmax(logits / T)``; the value is multiplied by
  ``T**2`` so the gradient's scale does not shrink with ``T`` (Hinton et al., 2015).
* **Positions**: the positions the caller passes; in training these are the completion tokens of
  rehearsal rows (the labelled positions) and, with ``kl_on = "all"``, also the prompt positions
  of domain rows. The result is summed over positions; the loop divides by their count.
* **Base logits** come from the same model under ``model.disable_adapter()`` with no gradient, so
  no second copy of the model is held in memory. The base model never changes during LoRA
  training, so :class:`BaseCache` keeps its last hidden state at each row's KL positions (576
  floats a position for SmolLM2-135M): a rehearsal row seen again costs the vocabulary projection
  only, not a base pass through every layer.

Example (a two-token vocabulary: base ``(1/2, 1/2)``, adapted ``(3/4, 1/4)``;
``KL = 1/2 ln(2/3) + 1/2 ln 2 = 1/2 ln(4/3)``):

    >>> import math, torch
    >>> base = torch.tensor([[0.0, 0.0]])
    >>> adapted = torch.tensor([[math.log(3.0), 0.0]])
    >>> round(float(kl_to_base(adapted, base)), 6), round(0.5 * math.log(4 / 3), 6)
    (0.143841, 0.143841)
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from replaybank.llm.data.rows import IGNORE_INDEX

if TYPE_CHECKING:
    from replaybank.llm.config.recipe import Recipe


@dataclass(frozen=True)
class KLSpec:
    """The KL-to-base term of a training run: weight, temperature, positions."""

    weight: float
    temperature: float = 1.0
    on: Literal["rehearsal", "all"] = "rehearsal"
    rehearsal_ce: bool = True
    """False: rehearsal rows enter the loss through this term only, not through cross-entropy
    (self-distillation: the base model's distribution on those answers is kept as it is instead
    of being sharpened toward the one answer written down)."""

    @classmethod
    def from_recipe(cls, recipe: Recipe) -> KLSpec | None:
        """The KL term of a rehearsal recipe (:class:`replaybank.llm.config.Recipe`), or None
        when its ``kl_to_base`` is 0.

        Example:
            >>> from replaybank.llm.config.recipe import builtin
            >>> KLSpec.from_recipe(builtin("self-distill"))
            KLSpec(weight=3.0, temperature=1.0, on='rehearsal', rehearsal_ce=False)
            >>> KLSpec.from_recipe(builtin("rehearsal-self")) is None
            True
        """
        if recipe.kl_to_base <= 0:
            return None
        return cls(recipe.kl_to_base, recipe.kl_temperature, recipe.kl_on, recipe.rehearsal_ce)


def kl_mask(labels: Any, attention_mask: Any, rehearsal: Any, on: str = "rehearsal") -> Any:
    """Where the KL term applies, over the next-token positions ``labels[:, 1:]``.

    The completion (labelled) positions of rehearsal rows; with ``on = "all"`` also the prompt
    positions (unlabelled, not padding) of the other rows. One rule for the training loop
    (:mod:`replaybank.llm.train.step`, a whole micro-batch of one source) and
    :class:`replaybank.hf.kl.KLToBase` (rows marked by a source column).

    Args:
        labels: ``(rows, length)`` token labels, ``-100`` where there is no target.
        attention_mask: ``(rows, length)``, 0 on padding.
        rehearsal: ``(rows,)`` bool tensor, True for rehearsal rows.
        on: ``"rehearsal"`` or ``"all"``.

    Returns:
        A ``(rows, length - 1)`` bool tensor.

    Example:
        >>> import torch
        >>> labels = torch.tensor([[-100, -100, 5, 6], [-100, -100, 7, 8]])
        >>> att = torch.ones(2, 4, dtype=torch.long)
        >>> kl_mask(labels, att, torch.tensor([True, False])).int().tolist()
        [[0, 1, 1], [0, 0, 0]]
        >>> kl_mask(labels, att, torch.tensor([True, False]), "all").int().tolist()
        [[0, 1, 1], [1, 0, 0]]
    """
    target = labels[:, 1:]
    labelled = target != IGNORE_INDEX
    row = rehearsal.to(labelled.device)[:, None]
    mask = labelled & row
    if on == "all":
        mask = mask | (~labelled & (attention_mask[:, 1:] > 0) & ~row)
    return mask


def kl_to_base(logits: Any, base_logits: Any, temperature: float = 1.0) -> Any:
    """``T**2 * sum over positions of KL(softmax(base/T) || softmax(logits/T))``.

    Args:
        logits: adapted model logits, shape ``(positions, vocab)``; carries gradients.
        base_logits: base model logits at the same positions (no gradient needed).
        temperature: ``T > 0``.

    Returns:
        A scalar tensor (sum over positions; 0 for zero positions).

    Raises:
        ValueError: when the shapes differ or ``temperature <= 0``.
    """

    if temperature <= 0:
        raise ValueError(f"kl temperature must be > 0, got {temperature}")
    if tuple(logits.shape) != tuple(base_logits.shape):
        raise ValueError(f"logits {tuple(logits.shape)} and base logits {tuple(base_logits.shape)} differ in shape")
    if logits.numel() == 0:
        return logits.sum() * 0.0
    return _kl_function().apply(logits, base_logits.detach(), float(temperature))


@functools.cache
def _kl_function() -> Any:
    """:func:`kl_to_base`'s forward and backward in three vocabulary-sized buffers.

    The gradient with respect to the adapted logits is known in closed form,
    ``T * (softmax(z / T) - softmax(z_base / T))``, so the forward pass computes it in place and
    keeps it, instead of autograd keeping every intermediate of two log-softmaxes (on the
    self-distill arm's 4 rows x 63 answer tokens x 49,152 vocabulary entries, one buffer is 49 MB).
    """
    import torch

    class KLToBase(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, logits: Any, base_logits: Any, temperature: float) -> Any:
            with torch.no_grad():
                log_p = torch.log_softmax(logits.float() / temperature, dim=-1)
                log_q = torch.log_softmax(base_logits.float() / temperature, dim=-1)
                q = log_q.exp()
                value = log_q.sub_(log_p).mul_(q).sum() * (temperature * temperature)
                grad = log_p.exp_().sub_(q).mul_(temperature)
            ctx.save_for_backward(grad)
            ctx.logits_dtype = logits.dtype
            return value

        @staticmethod
        def backward(ctx: Any, g: Any) -> Any:
            (grad,) = ctx.saved_tensors
            return (grad * g).to(ctx.logits_dtype), None, None

    return KLToBase


def base_logits_at(model: Any, ids: Any, att: Any, mask: Any) -> Any:
    """Logits of the base model (adapter disabled, no gradient) at ``mask`` positions.

    The base pass runs on the rows that hold a ``mask`` position only (in a mixed batch, the
    rehearsal rows: 1 of 8 at ratio 0.1), in the same row-major order as ``logits[mask]``.

    Raises:
        ValueError: when ``model`` has no ``disable_adapter`` (not a PEFT model).
    """
    import torch

    from replaybank.llm.eval.losses import logits_at

    if not hasattr(model, "disable_adapter"):
        raise ValueError("kl_to_base needs a PEFT model (its base distribution comes from disable_adapter())")
    rows = mask.any(dim=1)
    if not bool(rows.all()):
        ids, att, mask = ids[rows], att[rows], mask[rows]
    with torch.no_grad(), model.disable_adapter():
        return logits_at(model, ids, att, mask)


class BaseCache:
    """The base model's last hidden states at each row's KL positions, computed once per row.

    In LoRA training the base model (the adapter disabled) never changes, and rehearsal rows come
    back every epoch (the self-distill arm visits each of its 96 rows about 5 times), so a row's
    base pass through every layer is needed once: later visits project the kept hidden states
    onto the vocabulary only. A missing row is run alone, unpadded, so what is kept does not
    depend on which rows shared its batch (a resumed run gets the same values as one that never
    stopped). Kept per row: ``positions x hidden_size`` floats (about 14 MB for the 96 self rows
    of SmolLM2-135M), keyed by the row's tokens and positions.

    Models whose logits are not a plain projection of the last hidden state (soft-capped or
    scaled logits) are not cached: :meth:`logits_at` is :func:`base_logits_at` for them.
    """

    def __init__(self) -> None:
        self._hidden: dict[bytes, Any] = {}
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._hidden)

    def forget(self, rows: Sequence[tuple[np.ndarray, np.ndarray]], keep: Sequence[tuple[np.ndarray, np.ndarray]] = ()) -> int:
        """Drop what is kept for the rehearsal rows ``rows`` (KL on their labelled positions) that
        are not among ``keep``: rows a refresh replaced (:mod:`.selfgen`) are never seen again.

        Returns:
            How many entries were dropped.
        """
        kept = {_rehearsal_key(ids, labels) for ids, labels in keep}
        gone = {_rehearsal_key(ids, labels) for ids, labels in rows} - kept
        before = len(self._hidden)
        for key in gone:
            self._hidden.pop(key, None)
        return before - len(self._hidden)

    def logits_at(self, model: Any, ids: Any, att: Any, mask: Any) -> Any:
        """The same logits as :func:`base_logits_at` (row-major over ``mask``), from kept hidden states.

        Raises:
            ValueError: when ``model`` has no ``disable_adapter`` (not a PEFT model).
        """
        import torch

        from replaybank.llm.eval.losses import fast_head

        if not hasattr(model, "disable_adapter"):
            raise ValueError("kl_to_base needs a PEFT model (its base distribution comes from disable_adapter())")
        fast = fast_head(model)
        if fast is None:
            return base_logits_at(model, ids, att, mask)
        decoder, head = fast
        hidden = []
        with torch.no_grad(), model.disable_adapter():
            for r in range(ids.shape[0]):
                if not bool(mask[r].any()):
                    continue
                n = int(att[r].sum())
                key = _row_key(ids[r, :n].cpu().numpy(), mask[r, : n - 1].cpu().numpy())
                kept = self._hidden.get(key)
                if kept is None:
                    self.misses += 1
                    out = decoder(input_ids=ids[r : r + 1, :n], attention_mask=att[r : r + 1, :n]).last_hidden_state
                    kept = out[0, : n - 1][mask[r, : n - 1]].detach().clone()
                    self._hidden[key] = kept
                else:
                    self.hits += 1
                hidden.append(kept)
            if not hidden:
                return base_logits_at(model, ids, att, mask)
            return head(torch.cat(hidden)).float()


def _row_key(ids: np.ndarray, positions: np.ndarray) -> bytes:
    # one unpadded row's tokens and its KL positions over ids[1:]
    return np.asarray(ids, dtype=np.int64).tobytes() + np.asarray(positions, dtype=bool).tobytes()


def _rehearsal_key(ids: np.ndarray, labels: np.ndarray) -> bytes:
    # a rehearsal row's KL positions are its labelled ones (kl_mask)
    return _row_key(ids, np.asarray(labels)[1:] != IGNORE_INDEX)
