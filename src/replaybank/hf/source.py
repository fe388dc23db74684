"""The rows' ``source`` column (0 domain, 1 rehearsal) carried through a ``Trainer`` to each step.

A :func:`replaybank.hf.mix` stream marks every row with its source, but a ``Trainer`` does not
hand a loss, a callback or the user the batch's columns: the collator builds the batch (TRL's
drops columns it does not know), and every key of the batch goes to the model's ``forward``,
which refuses one it does not take. :class:`SourceTap` bridges both ends: it wraps the collator so
that each batch carries ``source`` as a tensor, and puts a forward pre-hook on the model that
takes ``source`` out of the call (the model never sees it) and keeps it, with the batch's
``input_ids`` and ``attention_mask``, in :attr:`SourceTap.last`. Attached to a trainer it also
logs ``rehearsal_share`` (rehearsal rows over rows trained since the last log) in the trainer's
own log entries, next to ``loss``.

:class:`~replaybank.hf.kl.KLToBase` uses one (its loss needs the source and the inputs); a script
without the KL term attaches one directly::

    tap = replaybank.hf.SourceTap().attach(trainer)   # remove_unused_columns=False
    trainer.train()                                   # log_history: {"loss", "rehearsal_share", ...}
    tap.last["source"]                                # the last micro-batch's sources
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from replaybank.hf.plan import MixError

__all__ = ["SourceTap", "add_to_log", "check_trainer_like"]


def check_trainer_like(trainer: Any, who: str) -> None:
    """``trainer`` must look like a ``transformers.Trainer`` (``args``, ``model``,
    ``data_collator``, ``log``), so that ``attach(None)`` or ``attach(model)`` fails naming the
    argument instead of an ``AttributeError`` deep in the wiring."""
    missing = [a for a in ("args", "model", "data_collator", "log") if not hasattr(trainer, a)]
    if trainer is None or missing:
        raise MixError(
            f"{who}(trainer={type(trainer).__name__ if trainer is not None else None}): expected a "
            f"transformers Trainer (or TRL SFTTrainer), built before attach; it has no {missing or ['args']}"
        )


def _source_value(value: Any, i: int, column: str) -> int:
    """A row's source: the integer 0 (domain) or 1 (rehearsal); a string, ``None``, a float or a
    bool is refused (``int("1")`` would pass a string column silently)."""
    item = value.item() if hasattr(value, "item") and getattr(value, "ndim", 1) == 0 else value
    if isinstance(item, bool) or not isinstance(item, int) or item not in (0, 1):
        raise MixError(
            f"row {i} of the batch has {column} = {value!r}: expected the integer 0 (domain) or 1 "
            f"(rehearsal), as replaybank.hf.mix writes it; fix the {column!r} column of the dataset"
        )
    return item


class _KeepSource:
    """Collator wrapper: strips the source column from the rows, adds it back as a tensor."""

    def __init__(self, inner: Callable[[list[dict[str, Any]]], Any], column: str) -> None:
        self.inner = inner
        self.column = column

    def __call__(self, features: list[dict[str, Any]]) -> Any:
        import torch

        sources = []
        for i, row in enumerate(features):
            if self.column not in row:
                raise MixError(
                    f"row {i} of the batch has no {self.column!r} column: train on a stream from "
                    "replaybank.hf.mix (it adds the column), keep it with "
                    "TrainingArguments(remove_unused_columns=False), or name your column with "
                    "source_column=..."
                )
            sources.append(_source_value(row[self.column], i, self.column))
        batch = self.inner([{k: v for k, v in row.items() if k != self.column} for row in features])
        batch[self.column] = torch.tensor(sources, dtype=torch.long)
        return batch


def add_to_log(trainer: Any, extra: Callable[[], dict[str, float]]) -> None:
    """Merge ``extra()`` into each of ``trainer``'s training log entries (those with ``loss``).

    Wraps the trainer's ``log`` (Trainer's and TRL's documented place for extra metrics), so the
    numbers reach ``state.log_history``, the console and every ``report_to`` logger in the same
    entry as the step's loss.
    """
    inner = trainer.log

    def log(logs: dict[str, float], *args: Any, **kwargs: Any) -> Any:
        if "loss" in logs:
            logs.update(extra())
        return inner(logs, *args, **kwargs)

    trainer.log = log


class SourceTap:
    """Keep a ``mix`` stream's ``source`` column through the collator to each forward call.

    Args:
        model: the model whose forward gets the batches; None: the trainer's, at :meth:`attach`.
        source_column: the column marking rehearsal rows (1) and domain rows (0).

    Attributes:
        last: ``{"source", "input_ids", "attention_mask"}`` of the last forward call (tensors, or
            None where the call had none).
        paused: while True the hook passes calls through untouched (a second pass on the same
            batch, e.g. the KL term's base model).
    """

    def __init__(self, model: Any = None, *, source_column: str = "source") -> None:
        self.model = model
        self.source_column = source_column
        self.last: dict[str, Any] = {}
        self.paused = False
        self._hook: Any = None
        self._rows = 0
        self._rehearsal = 0

    def _pre_forward(self, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if self.paused:
            return None
        kwargs = dict(kwargs)
        source = kwargs.pop(self.source_column, None)
        self.last = {
            "source": source,
            "input_ids": kwargs.get("input_ids", args[0] if args else None),
            "attention_mask": kwargs.get("attention_mask"),
        }
        if source is not None and module.training:
            self._rows += int(source.numel())
            self._rehearsal += int((source == 1).sum())
        return args, kwargs

    def install(self, model: Any = None) -> SourceTap:
        """Register the forward pre-hook on ``model`` (default: the one given; idempotent)."""
        if model is not None:
            self.model = model
        if self.model is None:
            raise MixError("SourceTap.install needs a model: SourceTap(model) or install(model)")
        if self._hook is None:
            self._hook = self.model.register_forward_pre_hook(self._pre_forward, with_kwargs=True)
        return self

    def remove(self) -> None:
        """Remove the forward pre-hook."""
        if self._hook is not None:
            self._hook.remove()
            self._hook = None

    def collator(
        self, inner: Callable[[list[dict[str, Any]]], Any]
    ) -> Callable[[list[dict[str, Any]]], Any]:
        """``inner`` wrapped so that each batch also carries the rows' source as a tensor."""
        return _KeepSource(inner, self.source_column)

    def share(self) -> dict[str, float]:
        """``{"rehearsal_share": ...}`` of the rows trained since the last call (empty when none)."""
        rows, rehearsal = self._rows, self._rehearsal
        self._rows = self._rehearsal = 0
        return {"rehearsal_share": rehearsal / rows} if rows else {}

    def attach(self, trainer: Any) -> SourceTap:
        """Wire ``trainer`` (a ``Trainer`` or TRL's ``SFTTrainer``): wrap its collator, hook its
        model, log ``rehearsal_share`` with each loss; returns ``self``.

        Raises:
            MixError: ``trainer`` is not a trainer (``None``, a model), ``trainer.args.remove_unused_columns`` is true (Trainer would drop the
                column before the collator), ``trainer.args.packing`` is true (TRL would join
                rows), or the trainer's batch size differs from its ``mix`` stream's
                (:func:`replaybank.hf.check_trainer`).
        """
        from replaybank.hf.trainer_check import check_trainer

        check_trainer_like(trainer, "SourceTap.attach")
        check_trainer(trainer)
        if getattr(trainer.args, "packing", False):
            raise MixError(
                "trainer.args.packing is True: packing joins rows into sequences, so a batch no "
                "longer holds the mix's rows (nor their sources, nor the rehearsal quota); set "
                "packing=False in the SFTConfig"
            )
        if getattr(trainer.args, "remove_unused_columns", False):
            raise MixError(
                "trainer.args.remove_unused_columns is True: Trainer would drop the "
                f"{self.source_column!r} column that marks rehearsal rows; set "
                "remove_unused_columns=False in the TrainingArguments / SFTConfig"
            )
        trainer.data_collator = self.collator(trainer.data_collator)
        self.install(trainer.model if self.model is None else self.model)
        add_to_log(trainer, self.share)
        return self
