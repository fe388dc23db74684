"""A fresh LoRA adapter on the one base model, removed again afterwards: no copy of the base.

Every trained arm and the interference probe get their own adapter, seeded as
:func:`replaybank.llm.train.lora.add_lora` seeds it, on the same base model object; when the
arm is done the adapter layers are taken out again (PEFT's ``unload``: the original modules go
back, the base weights were never touched), so the next arm starts from the same base. A 7B base
in bf16 is about 15 GB: a deep copy per arm would keep two of them resident.

A peer method (:mod:`replaybank.llm.train.peers`) takes LoRA's place when the arm names one; CorDA
rewrites its target weights into residuals, so those are copied first and put back on exit.

The adapter's weights take the base model's dtype (bf16 on a GPU): PEFT keeps them fp32 by
default, which casts every adapter input to fp32 (a copy of every activation that enters a
LoRA layer). On an fp32 base (the CPU) nothing changes.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from replaybank.llm.config import Training
from replaybank.llm.config.schema import PeerName
from replaybank.llm.train.lora import add_lora


@contextmanager
def fresh_adapter(base_model: Any, cfg: Training, peer: PeerName = "none", calibration: Sequence[Any] = ()) -> Iterator[Any]:
    """``base_model`` wrapped with a fresh LoRA (see :func:`add_lora`), or the adapter of ``peer``
    (:func:`.peers.peer_model`, ``calibration`` its prompts), for the ``with`` block.

    On exit the adapter is removed (whatever happened inside) and the base parameters'
    ``requires_grad`` flags (and, for ``corda``, the target weights) are put back, so
    ``base_model`` is again exactly what it was.

    Yields:
        The PEFT model; ``model.get_base_model() is base_model``.
    """
    import torch

    from replaybank.llm.train.peers import peer_model

    flags = [p.requires_grad for p in base_model.parameters()]
    targets = tuple(f"{t}.weight" for t in cfg.lora_target_modules)
    kept = {n: p.detach().clone() for n, p in base_model.named_parameters() if n.endswith(targets)} if peer == "corda" else {}
    model = None
    try:
        model = add_lora(base_model, cfg) if peer == "none" else peer_model(base_model, cfg, peer, calibration)
        yield model
    finally:
        if model is not None:
            model.unload()  # the adapter layers out, the original modules back; nothing merged
        with torch.no_grad():
            for n, p in base_model.named_parameters():
                if n in kept:
                    p.copy_(kept[n])
        for p, flag in zip(base_model.parameters(), flags, strict=True):
            p.requires_grad_(flag)


def adapter_state(model: Any) -> dict[str, Any]:
    """A copy of ``model``'s trainable (adapter) parameters, by name: a fresh adapter's
    initial weights, for :func:`restore_adapter`."""
    return {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}


def restore_adapter(model: Any, state: dict[str, Any]) -> None:
    """Put the trainable parameters saved by :func:`adapter_state` back: a fresh adapter again,
    seeded as :func:`add_lora` seeds it (an arm with ``fresh_adapter = true`` starts every
    generation from it)."""
    import torch

    with torch.no_grad():
        for n, p in model.named_parameters():
            if p.requires_grad:
                p.copy_(state[n])
