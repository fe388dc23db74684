"""``MixSpec``: the options that fix a mixed stream's order, held once and checked when built.

:func:`replaybank.hf.mix`, :class:`~replaybank.hf.torch.MixedIterableDataset` and
:class:`~replaybank.hf.torch.MixedBatchSampler` all take one, so the same spec gives the same
order in each of them; what only one reader needs (its rank, its columns) stays with that reader.
"""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass
from typing import Any, Literal

import numpy as np

from replaybank.hf.plan import (
    MixBy,
    MixError,
    MixPlan,
    check_mix_by,
    check_ratio,
    per_rank_batch,
    row_ratio,
)
from replaybank.hf.recipe import share
from replaybank.llm.config.recipe import Recipe

__all__ = ["MixSpec"]


def _int_field(name: str, value: Any, minimum: int, *, optional: bool = True) -> None:
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise MixError(f"MixSpec.{name} must be an int, got {value!r} ({type(value).__name__})")
    if value < minimum:
        raise MixError(f"MixSpec.{name} must be >= {minimum}, got {value}")


@dataclass(frozen=True)
class MixSpec:
    """How domain and rehearsal rows are mixed: the share, the batch, the seed, the epochs.

    The mixing options are one record rather than keywords of each reader because the three
    readers (:func:`replaybank.hf.mix`, :class:`~replaybank.hf.torch.MixedIterableDataset`,
    :class:`~replaybank.hf.torch.MixedBatchSampler`) must agree on them to give the same order:
    build the spec once, pass it to whichever reader the loop needs, and a bad option is refused
    here, naming its field, before any data is opened.

    Args:
        ratio: rehearsal share of every global batch, in ``[0, 1)``; the one positional field.
        recipe: instead of ``ratio`` and ``mix_by``: a rehearsal recipe
            (:func:`replaybank.hf.recipe`, or its name, e.g. ``"self-distill"``), whose ``ratio``
            and ``mix_by`` are used (its KL term goes to :meth:`replaybank.hf.KLToBase.from_recipe`).
        mix_by: ``"rows"`` (the default): ``ratio`` is the rehearsal share of every batch's rows.
            ``"tokens"``: ``ratio`` is the rehearsal share of the labelled tokens (the tokens of
            the loss: ``labels`` entries other than -100, else ``input_ids`` length). It becomes a
            row share by the main job's rule (:func:`replaybank.hf.plan.row_ratio`, from each
            source's mean labelled tokens per row) and every batch holds that row share's exact
            quota; the token share is ``ratio`` in expectation. Rows are never picked by their
            length, so the rehearsal sample is not biased toward short or long rows.
        batch_size: rows per rank per step (``per_device_train_batch_size``).
        global_batch_size: instead of ``batch_size``: rows per step over all ranks.
        seed: seed of every permutation and slice (required).
        world_size: number of ranks, or ``"auto"`` (torch.distributed when initialised, else
            ``WORLD_SIZE``).
        rows_per_epoch: size of each epoch's seeded rehearsal slice, or ``None`` to cycle the pool.
        epochs: stop after this many epochs; ``None`` for an endless stream.

    Raises:
        MixError: (a ``ValueError``) naming the field: neither or both of ``ratio`` and
            ``recipe``, a ratio outside ``[0, 1)``, a ``mix_by`` other than rows / tokens, neither
            or both batch sizes, a batch size, seed, world size, ``rows_per_epoch`` or ``epochs``
            that is not an int in range, a world size that does not divide ``global_batch_size``.

    Example:
        >>> MixSpec(0.25, batch_size=4, seed=0).share()
        (0.25, 'rows')
        >>> MixSpec(recipe="self-distill", batch_size=4, seed=0).share()
        (0.5, 'rows')
        >>> MixSpec(0.25, batch_size=0, seed=0)
        Traceback (most recent call last):
        ...
        replaybank.hf.plan.MixError: MixSpec.batch_size must be >= 1, got 0
    """

    ratio: float | None = None
    _: KW_ONLY
    recipe: Recipe | str | None = None
    mix_by: MixBy | None = None
    batch_size: int | None = None
    global_batch_size: int | None = None
    seed: int
    world_size: int | Literal["auto"] = "auto"
    rows_per_epoch: int | None = None
    epochs: int | None = None

    def __post_init__(self) -> None:
        ratio, mix_by = self.share()
        try:
            check_mix_by(mix_by)
            check_ratio(ratio)
        except MixError as exc:  # the checks name the field: "ratio must be ...", "mix_by must be ..."
            raise MixError(f"MixSpec.{exc}") from None
        _int_field("batch_size", self.batch_size, 1)
        _int_field("global_batch_size", self.global_batch_size, 1)
        _int_field("seed", self.seed, 0, optional=False)
        if self.world_size != "auto":
            _int_field("world_size", self.world_size, 1, optional=False)
        _int_field("rows_per_epoch", self.rows_per_epoch, 1)
        _int_field("epochs", self.epochs, 1)
        if self.world_size != "auto":
            per_rank_batch(self.batch_size, self.global_batch_size, int(self.world_size))
        elif (self.batch_size is None) == (self.global_batch_size is None):
            per_rank_batch(self.batch_size, self.global_batch_size, 1)

    def share(self) -> tuple[float, MixBy]:
        """``(ratio, mix_by)``: the given ones (``mix_by`` default ``"rows"``), or the recipe's.

        Raises:
            MixError: neither ``ratio`` nor ``recipe``, or both.
        """
        return share(self.ratio, self.mix_by, self.recipe)

    def plan(
        self, n_domain: int, n_rehearsal: int, world_size: int, tokens_per_row: Any = None
    ) -> MixPlan:
        """The order for ``n_domain`` domain and ``n_rehearsal`` rehearsal rows over ``world_size`` ranks.

        Args:
            n_domain, n_rehearsal: rows in each source.
            world_size: the resolved number of ranks (``"auto"`` already read).
            tokens_per_row: ``(mean labelled tokens per domain row, per rehearsal row)``, needed
                with ``mix_by="tokens"`` when there are rehearsal rows.

        Raises:
            MixError: a world size that does not divide ``global_batch_size``, missing
                ``tokens_per_row``, or the sizes :class:`~replaybank.hf.plan.MixPlan` refuses.
        """
        ratio, mix_by = self.share()
        if n_rehearsal:
            ratio = row_ratio(ratio, mix_by, tokens_per_row)
        return MixPlan(
            n_domain,
            n_rehearsal,
            ratio,
            batch_size=per_rank_batch(self.batch_size, self.global_batch_size, world_size),
            seed=self.seed,
            world_size=world_size,
            rows_per_epoch=self.rows_per_epoch,
            epochs=self.epochs,
        )
