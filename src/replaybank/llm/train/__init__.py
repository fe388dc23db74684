"""Training: the LoRA loop with quota-mixed sources (:mod:`.lora`), one optimizer step (:mod:`.step`),
its resumable checkpoint (:mod:`.checkpoint`), the KL-to-base term (:mod:`.kl`) and the steering of
its mixture by a replay controller (:mod:`.steer`)."""

from __future__ import annotations

from replaybank.llm.train.kl import KLSpec
from replaybank.llm.train.lora import Source, TrainLog, add_lora, epoch_slice, train_lora
from replaybank.llm.train.steer import Steering

__all__ = ["KLSpec", "Source", "Steering", "TrainLog", "add_lora", "epoch_slice", "train_lora"]
