"""Training: the LoRA loop with quota-mixed sources (:mod:`.loop`) and the KL-to-base term (:mod:`.kl`)."""

from __future__ import annotations

from replaybank.llm.train.loop import KLSpec, Source, TrainLog, add_lora, epoch_slice, train_lora

__all__ = ["KLSpec", "Source", "TrainLog", "add_lora", "epoch_slice", "train_lora"]
