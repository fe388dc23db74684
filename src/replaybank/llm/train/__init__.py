"""Training: the LoRA loop with quota-mixed sources (:mod:`.loop`), one optimizer step (:mod:`.step`),
its resumable checkpoint (:mod:`.checkpoint`) and the KL-to-base term (:mod:`.kl`)."""

from __future__ import annotations

from replaybank.llm.train.kl import KLSpec
from replaybank.llm.train.loop import Source, TrainLog, add_lora, epoch_slice, train_lora

__all__ = ["KLSpec", "Source", "TrainLog", "add_lora", "epoch_slice", "train_lora"]
