"""The resumable checkpoint of the LoRA loop: adapter, optimizer, mixer position and torch RNG
(the CPU generator, and the CUDA generator of the model's GPU when it is on one: LoRA dropout
draws from it there).

With them a resumed run sees exactly the data order of an uninterrupted one. The file holds
tensors and plain containers only and is read with ``torch.load(weights_only=True)``, so a
checkpoint from elsewhere cannot run code on load.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from replaybank.llm.train.log import TrainLog
    from replaybank.mixing import Mixer

CHECKPOINT_SCHEMA_VERSION = 1


def save_checkpoint(path: Path, model: Any, opt: Any, mixer: Mixer, log: TrainLog, step: int) -> None:
    """Write the state after optimizer step ``step`` to ``path``, atomically (read it with :func:`load_checkpoint`)."""
    import json

    import torch
    from peft import get_peft_model_state_dict

    # Tensors and plain containers only, so that load_checkpoint can read it with weights_only:
    # the mixer position and the log go through JSON (a numpy scalar would be pickled as an object).
    state = {
        "schema_version": CHECKPOINT_SCHEMA_VERSION,
        "step": int(step),
        "adapter": get_peft_model_state_dict(model),
        "optimizer": opt.state_dict(),
        "mixer": json.loads(json.dumps(mixer.state_dict())),
        "torch_rng": torch.get_rng_state(),
        **cuda_rng_state(model_device(model)),
        "log": json.loads(json.dumps(log.to_dict(), default=float)),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)  # atomic: a crash never leaves a half-written checkpoint in place


def load_checkpoint(path: Path, model: Any, opt: Any, mixer: Mixer, log: TrainLog) -> int:
    """Restore a checkpoint written by :func:`save_checkpoint`; returns its optimizer step.

    The file is read with ``torch.load(weights_only=True)``: tensors and plain containers
    (dict, list, str, int, float, bool, None) only, so a checkpoint from elsewhere cannot run code
    on load. Every field is checked before anything is restored.

    Raises:
        ReplayBankError (a ValueError): the file holds anything else (a pickled object), is not a
            checkpoint, has another schema version, or a field of the wrong type.
    """
    import pickle

    import torch
    from peft import set_peft_model_state_dict

    from replaybank.errors import ReplayBankError

    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        raise ReplayBankError(
            f"{path}: refused: the checkpoint holds objects other than tensors and plain containers, "
            f"which are not loaded (weights_only); delete it to restart the arm ({str(exc).splitlines()[0]})"
        ) from None
    except (RuntimeError, EOFError, OSError) as exc:
        raise ReplayBankError(f"{path}: not a readable checkpoint ({exc}); delete it to restart the arm") from None
    if not isinstance(state, dict) or state.get("schema_version") != CHECKPOINT_SCHEMA_VERSION:
        found = state.get("schema_version") if isinstance(state, dict) else type(state).__name__
        raise ReplayBankError(f"{path}: checkpoint schema_version {found!r}, expected {CHECKPOINT_SCHEMA_VERSION}")
    expected: dict[str, Any] = {
        "step": int, "adapter": dict, "optimizer": dict, "mixer": dict, "torch_rng": torch.Tensor, "log": dict,
    }
    for key, kind in expected.items():
        if not isinstance(state.get(key), kind) or (kind is int and isinstance(state[key], bool)):
            raise ReplayBankError(f"{path}: checkpoint field {key!r} is {type(state.get(key)).__name__}, expected {kind.__name__}")
    saved = state["log"]
    log_fields: dict[str, Any] = {"steps": list, "evals": list, "tokens": int, "seconds": (int, float)}
    for key, kinds in log_fields.items():
        if not isinstance(saved.get(key), kinds):
            raise ReplayBankError(f"{path}: checkpoint field 'log.{key}' is {type(saved.get(key)).__name__}")
    if "cuda_rng" in state and not isinstance(state["cuda_rng"], torch.Tensor):
        raise ReplayBankError(f"{path}: checkpoint field 'cuda_rng' is {type(state['cuda_rng']).__name__}, expected Tensor")
    if not all(isinstance(v, torch.Tensor) for v in state["adapter"].values()):
        raise ReplayBankError(f"{path}: checkpoint field 'adapter' holds non-tensor values")
    if state["step"] < 0:
        raise ReplayBankError(f"{path}: checkpoint step {state['step']} is negative")
    set_peft_model_state_dict(model, state["adapter"])
    opt.load_state_dict(state["optimizer"])
    mixer.load_state_dict(state["mixer"])
    torch.set_rng_state(state["torch_rng"])
    restore_cuda_rng(state.get("cuda_rng"), model_device(model))
    log.steps, log.evals = list(saved["steps"]), list(saved["evals"])
    log.tokens, log.seconds = int(saved["tokens"]), float(saved["seconds"])
    return int(state["step"])


def model_device(model: Any) -> Any:
    """The device of ``model``'s first parameter (``cpu`` for a model without parameters)."""
    import torch

    return next((p.device for p in model.parameters()), torch.device("cpu"))


def cuda_rng_state(device: Any) -> dict[str, Any]:
    """``{"cuda_rng": state}`` of ``device``'s CUDA generator; ``{}`` on any other device."""
    import torch

    if getattr(device, "type", None) != "cuda":
        return {}
    return {"cuda_rng": torch.cuda.get_rng_state(device)}


def restore_cuda_rng(state: Any, device: Any) -> None:
    """Put a saved CUDA generator state back on ``device``'s GPU; nothing when either is absent.

    A checkpoint written on a GPU and resumed on the CPU has no CUDA generator to restore (the
    CPU run draws from the CPU generator, which is restored either way).
    """
    import torch

    if state is None or getattr(device, "type", None) != "cuda":
        return
    torch.cuda.set_rng_state(state, device)
