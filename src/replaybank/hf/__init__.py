"""Rehearsal inside the pipelines people already use: HF ``datasets``, ``Trainer``, torchrun.

* :func:`mix`: domain + rehearsal rows as one ``datasets.IterableDataset`` with an exact rehearsal
  quota in every (global) batch, per-epoch seeded rehearsal slices, resumable.
* :mod:`replaybank.hf.torch`: the same order for plain PyTorch loops, as a torch
  ``IterableDataset`` (:class:`~replaybank.hf.torch.MixedIterableDataset`) or a batch sampler
  (:class:`~replaybank.hf.torch.MixedBatchSampler`), each rank reading its own part.
* :class:`MixPlan`: the order itself (numpy only), for any other loader.

Needs the ``hf`` extra (``pip install "replaybank[hf]"``) for :func:`mix` and torch for
:mod:`replaybank.hf.torch`; this package imports neither until used.
"""

from __future__ import annotations

from replaybank.hf.plan import GlobalBatch, MixError, MixNotBuiltError, MixPlan, resolve_world
from replaybank.hf.stream import mix

__all__ = ["mix", "MixPlan", "GlobalBatch", "MixError", "MixNotBuiltError", "resolve_world"]
