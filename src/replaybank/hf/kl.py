"""KL to the base model on rehearsal rows, as a ``Trainer`` / ``SFTTrainer`` ``compute_loss_func``.

The term itself is the main job's (:mod:`replaybank.llm.train.kl`: :func:`kl_to_base`, forward
``KL(p_base || p_adapted)`` times ``T**2`` summed over positions, and :func:`base_logits_at`, the
base logits from the PEFT model's ``disable_adapter()`` with no gradient, the base pass run on the
rows that hold KL positions only (the rehearsal rows: 1 of 8 at ratio 0.1) and the LM head on the
KL positions only); this module only wires it into Trainer's loss hook.

**What the loss is.** For one micro-batch with ``n`` labelled next-token positions and ``k``
KL positions (the labelled positions of rehearsal rows, ``source == 1``; with ``on="all"`` also
the prompt positions of domain rows: :func:`replaybank.llm.train.kl.kl_mask`, the main job's rule)::

    loss = ce_sum / N  +  weight * (kl_sum / k) * (n / N)

``ce_sum`` is the cross-entropy summed over the labelled positions and ``N`` is Trainer's
``num_items_in_batch`` (the labelled positions of the whole optimizer step, over accumulation
steps and ranks) or ``n`` when Trainer gives none. With one micro-batch per step on one process
(``N == n``) this is the main job's objective exactly: token-mean cross-entropy plus ``weight``
times the mean KL per rehearsal position. With accumulation or several ranks the KL part is the
labelled-token-weighted mean of the micro-batches' mean KL, which is why it is scaled by ``n / N``
like the cross-entropy (Trainer multiplies the loss by the number of ranks when it averages tokens
across devices, and does not divide it by the accumulation steps again). With
``rehearsal_ce=False`` (self-distillation, the ``self-distill`` recipe) ``ce_sum`` leaves out the
rehearsal rows' positions while ``n`` and ``N`` still count them, as in the main job's step
(:mod:`replaybank.llm.train.step`): the rehearsal rows train through the KL term only and the
domain's gradient keeps its scale.

**How the rows' source reaches the loss.** ``compute_loss_func`` sees only the model's outputs and
the labels, so :meth:`KLToBase.attach` (1) wraps the trainer's collator so that each batch carries
the rows' ``source`` column as a tensor, and (2) registers a forward pre-hook on the model that
takes ``source`` (and keeps ``input_ids`` / ``attention_mask``) out of the forward call's
arguments before the model sees them (both by :class:`~replaybank.hf.source.SourceTap`). Trainer
must keep the column: ``remove_unused_columns=False``.

**What is logged.** Each of the trainer's loss entries (``state.log_history``, the console, every
``report_to`` logger) also gets ``ce`` (the micro-batches' mean cross-entropy since the last log),
``kl`` (their mean KL per rehearsal position, micro-batches with rehearsal positions only) and
``rehearsal_share`` (rehearsal rows over rows trained since the last log).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from replaybank.hf.plan import MixError
from replaybank.hf.source import SourceTap, add_to_log, check_trainer_like
from replaybank.llm.config.recipe import Recipe
from replaybank.llm.data.rows import IGNORE_INDEX
from replaybank.llm.train.kl import base_logits_at, kl_mask, kl_to_base

#: the KL term's weight and temperature whose loss stays finite (the recipe's kl_to_base and
#: kl_temperature bounds): a weight of 1e308 or a temperature of 1e-300 (0 in float32) gives a NaN
#: loss on the first rehearsal row
MAX_WEIGHT = 1000.0
TEMPERATURE_RANGE = (0.01, 100.0)


def _check_number(name: str, value: Any, *, positive: bool, high: float, low: float = 0.0) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise MixError(f"{name} must be a finite number, got {value!r}")
    if value < 0 or (positive and value == 0):
        raise MixError(f"{name} must be {'> 0' if positive else '>= 0'}, got {value!r}")
    if not low <= value <= high:
        raise MixError(
            f"{name} = {value!r}: must lie in [{low:g}, {high:g}]; outside it the KL term's loss "
            "overflows (float32) and training gets a NaN loss"
        )
    return float(value)


class KLToBase:
    """``compute_loss_func``: completion cross-entropy plus ``weight`` x KL to the base on rehearsal rows.

    Args:
        model: the PEFT model being trained (its ``disable_adapter()`` gives the base model).
        weight: weight of the KL term (in ``[0, 1000]``; 0 leaves the plain token-mean cross-entropy).
        temperature: softmax temperature of both distributions (in ``[0.01, 100]``).
        source_column: the column marking rehearsal rows (1) and domain rows (0).
        on: ``"rehearsal"``: KL on the rehearsal rows' labelled positions; ``"all"``: also on the
            domain rows' prompt positions.
        rehearsal_ce: False: the rehearsal rows get no cross-entropy, only the KL term (needs
            ``weight > 0``).

    Attributes:
        last: ``{"ce": ..., "kl": ..., "kl_positions": ...}`` of the last micro-batch (the KL is
            the mean per rehearsal position, ``None`` when the batch had none).

    Raises:
        MixError: (a ``ValueError``) naming the argument: a model without ``disable_adapter``
            (not a PEFT model), a negative or non-finite ``weight``, ``temperature <= 0``, an
            unknown ``on``, ``rehearsal_ce=False`` with ``weight == 0``.

    Use ``KLToBase(model, 0.1).attach(trainer)`` after building the trainer (see :meth:`attach`),
    or ``KLToBase.from_recipe(model, replaybank.hf.recipe("self-distill"))``.
    """

    def __init__(
        self, model: Any, weight: float, *, temperature: float = 1.0, source_column: str = "source",
        on: str = "rehearsal", rehearsal_ce: bool = True,
    ) -> None:
        if not hasattr(model, "disable_adapter"):
            raise MixError(
                f"model is a {type(model).__name__}, not a PEFT model: the base distribution comes "
                "from its disable_adapter(); wrap it with peft.get_peft_model first"
            )
        self.model = model
        self.weight = _check_number("weight", weight, positive=False, high=MAX_WEIGHT)
        self.temperature = _check_number("temperature", temperature, positive=True, low=TEMPERATURE_RANGE[0],
                                         high=TEMPERATURE_RANGE[1])
        if on not in ("rehearsal", "all"):
            raise MixError(f'on must be "rehearsal" or "all", got {on!r}')
        if not rehearsal_ce and self.weight == 0:
            raise MixError(
                "rehearsal_ce=False trains the rehearsal rows through the KL term only, and weight=0 turns "
                "it off (they would train nothing); give a weight > 0 or rehearsal_ce=True"
            )
        self.on = on
        self.rehearsal_ce = bool(rehearsal_ce)
        self.source_column = source_column
        self.tap = SourceTap(model, source_column=source_column)
        self.last: dict[str, Any] = {}
        self._sums = {"ce": 0.0, "ce_n": 0, "kl": 0.0, "kl_n": 0}

    @classmethod
    def from_recipe(cls, model: Any, recipe: Recipe | str, *, source_column: str = "source") -> KLToBase:
        """The KL term of a rehearsal recipe (:func:`replaybank.hf.recipe`, or its name): its
        ``kl_to_base`` weight, ``kl_temperature``, ``kl_on`` and ``rehearsal_ce``.

        Raises:
            MixError: as the constructor; ConfigError: an unknown recipe name.
        """
        from replaybank.hf.recipe import recipe as named

        spec = named(recipe) if isinstance(recipe, str) else recipe
        return cls(model, spec.kl_to_base, temperature=spec.kl_temperature, source_column=source_column,
                   on=spec.kl_on, rehearsal_ce=spec.rehearsal_ce)

    # -- wiring -------------------------------------------------------------------------------

    def install(self) -> KLToBase:
        """Register the forward pre-hook on the model (idempotent); :meth:`attach` calls it."""
        self.tap.install()
        return self

    def remove(self) -> None:
        """Remove the forward pre-hook."""
        self.tap.remove()

    def collator(self, inner: Callable[[list[dict[str, Any]]], Any]) -> Callable[[list[dict[str, Any]]], Any]:
        """``inner`` wrapped so that each batch also carries the rows' source as a tensor."""
        return self.tap.collator(inner)

    def means(self) -> dict[str, float]:
        """``{"ce": ..., "kl": ...}``: the micro-batches' mean cross-entropy and mean KL per
        rehearsal position since the last call (``kl`` only when a micro-batch had rehearsal
        positions); what :meth:`attach` logs with each loss."""
        sums, self._sums = self._sums, {"ce": 0.0, "ce_n": 0, "kl": 0.0, "kl_n": 0}
        out = {"ce": sums["ce"] / sums["ce_n"]} if sums["ce_n"] else {}
        if sums["kl_n"]:
            out["kl"] = sums["kl"] / sums["kl_n"]
        return out

    def attach(self, trainer: Any) -> Any:
        """Make ``trainer`` (a ``Trainer`` or ``SFTTrainer``) train with this loss; returns it.

        Sets ``trainer.compute_loss_func``, wraps ``trainer.data_collator`` with :meth:`collator`,
        installs the model hook and adds ``ce``, ``kl`` (:meth:`means`) and ``rehearsal_share``
        (:class:`~replaybank.hf.source.SourceTap`) to each of the trainer's loss log entries.

        Raises:
            MixError: when ``trainer.args.remove_unused_columns`` is true (Trainer would drop the
                source column), the trainer does not train this loss's model, or its batch size
                differs from its ``mix`` stream's (:func:`replaybank.hf.check_trainer`).
        """
        check_trainer_like(trainer, "KLToBase.attach")
        if trainer.model is not self.model:
            raise MixError(
                "the trainer trains another model than KLToBase(model, ...) was given: pass the "
                "same PEFT model to both"
            )
        self.tap.attach(trainer)
        trainer.compute_loss_func = self
        add_to_log(trainer, self.means)
        return self

    # -- the loss -----------------------------------------------------------------------------

    def __call__(self, outputs: Any, labels: Any, num_items_in_batch: Any = None) -> Any:
        """The loss of one micro-batch (see the module docstring for the formula).

        Raises:
            MixError: when no labels or no source column reached the loss, or their batch sizes
                differ from the logits'.
        """
        import torch
        import torch.nn.functional as F

        logits = outputs["logits"] if isinstance(outputs, dict) else outputs.logits
        if labels is None:
            raise MixError("KLToBase got no labels: the batches need a 'labels' column")
        source = self.tap.last.get("source")
        if source is None:
            raise MixError(
                f"no {self.source_column!r} column reached the model's forward: call "
                "KLToBase(...).attach(trainer) (it installs the hook and wraps the collator) and "
                "set remove_unused_columns=False"
            )
        if source.shape[0] != logits.shape[0] or labels.shape[0] != logits.shape[0]:
            raise MixError(
                f"batch sizes differ: logits {logits.shape[0]}, labels {labels.shape[0]}, "
                f"{self.source_column!r} {source.shape[0]}"
            )
        target = labels[:, 1:]
        mask = target != IGNORE_INDEX
        n = int(mask.sum())
        rehearsal = source.to(mask.device) == 1
        ce_mask = mask if self.rehearsal_ce else mask & ~rehearsal[:, None]
        ce_sum = F.cross_entropy(logits[:, :-1][ce_mask].float(), target[ce_mask], reduction="sum")
        total = n if num_items_in_batch is None else float(num_items_in_batch)
        total = max(total, 1.0)
        loss = ce_sum / total
        ids = self.tap.last["input_ids"]
        att = self.tap.last["attention_mask"]
        if att is None:
            att = torch.ones_like(labels)
        where = kl_mask(labels, att.to(mask.device), rehearsal, self.on)
        k = int(where.sum())
        self.last = {"ce": float(ce_sum.detach()) / max(int(ce_mask.sum()), 1), "kl": None, "kl_positions": k}
        if self.weight > 0 and k > 0:
            self.tap.paused = True  # the base pass (rehearsal rows only) is not a training batch
            try:
                base = base_logits_at(self.model, ids, att, where)
            finally:
                self.tap.paused = False
            kl_sum = kl_to_base(logits[:, :-1][where], base, self.temperature)
            self.last["kl"] = float(kl_sum.detach()) / k
            loss = loss + self.weight * (kl_sum / k) * (n / total)
        if self.model.training:
            self._sums["ce"] += self.last["ce"]
            self._sums["ce_n"] += 1
            if self.last["kl"] is not None:
                self._sums["kl"] += self.last["kl"]
                self._sums["kl_n"] += 1
        return loss
