"""The batch-size check between a :func:`replaybank.hf.mix` stream and the trainer that reads it.

``mix`` cuts its stream into batches of ``batch_size`` rows per rank that each hold the exact
quota; a trainer that takes another number of rows per step cuts across them, and the quota
holds for no trainer batch (``MixSpec(batch_size=8)`` under ``per_device_train_batch_size=4``: half
the batches get the rehearsal row, half get none). Nothing in the stream can see the trainer's
batch size, so the check runs where the two meet: :meth:`replaybank.hf.KLToBase.attach` calls
:func:`check_trainer`, and a script without ``KLToBase`` calls it once before ``train()``.
"""

from __future__ import annotations

from typing import Any

from replaybank.hf.plan import MixError

__all__ = ["check_trainer"]


def check_trainer(trainer: Any) -> None:
    """Raise if ``trainer``'s batches would not line up with its ``mix`` stream's batches.

    ``trainer`` is a ``transformers.Trainer`` (or TRL's ``SFTTrainer``); a train dataset that is
    not a ``mix`` stream is not checked. The trainer's rows per step are
    ``args.train_batch_size`` per process (``per_device_train_batch_size`` times the GPUs one
    process drives), over ``args.world_size`` processes, or in all with accelerate's
    ``split_batches``.

    Raises:
        MixError: the stream was built for another per-rank batch, global batch or world size;
            the message names both sides.

    Example:
        >>> from types import SimpleNamespace
        >>> stream = SimpleNamespace(_replaybank_mix={"batch_size": 8, "world_size": 1, "rank": -1})
        >>> args = SimpleNamespace(train_batch_size=4, world_size=1, per_device_train_batch_size=4)
        >>> check_trainer(SimpleNamespace(train_dataset=stream, args=args))
        Traceback (most recent call last):
        ...
        replaybank.hf.plan.MixError: replaybank.hf.mix was built for 8 rows per rank per step (batch_size=8), but the trainer takes 4 (per_device_train_batch_size=4): its batches would cut across the mix's and the rehearsal quota would hold for none of them; give mix the trainer's batch size
    """
    info = getattr(getattr(trainer, "train_dataset", None), "_replaybank_mix", None)
    if info is None:
        return
    args = trainer.args
    per_process = int(args.train_batch_size)
    world = int(getattr(args, "world_size", 1) or 1)
    split = bool(getattr(getattr(args, "accelerator_config", None), "split_batches", False))
    per_rank = per_process // world if split else per_process
    if info["rank"] < 0 and info["world_size"] != world:
        raise MixError(
            f"replaybank.hf.mix was built for world_size={info['world_size']}, but the trainer runs "
            f"on {world} processes: each global batch would be dealt to the wrong ranks; build mix "
            "under the same launcher (world_size='auto') or pass the trainer's world size"
        )
    if info["batch_size"] != per_rank:
        per_device = getattr(args, "per_device_train_batch_size", per_process)
        raise MixError(
            f"replaybank.hf.mix was built for {info['batch_size']} rows per rank per step "
            f"(batch_size={info['batch_size']}), but the trainer takes {per_rank} "
            f"(per_device_train_batch_size={per_device}{', split_batches' if split else ''}): its "
            "batches would cut across the mix's and the rehearsal quota would hold for none of them; "
            "give mix the trainer's batch size"
        )
