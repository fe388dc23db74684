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

from replaybank.llm.train.checkpoint_check import CHECKPOINT_SCHEMA_VERSION, check_checkpoint

if TYPE_CHECKING:
    from replaybank.llm.train.log import TrainLog
    from replaybank.llm.train.steer import Steering
    from replaybank.mixing import Mixer


def save_checkpoint(
    path: Path, model: Any, opt: Any, mixer: Mixer, log: TrainLog, step: int, steer: Steering | None = None,
) -> None:
    """Write the state after optimizer step ``step`` to ``path``, atomically (read it with
    :func:`load_checkpoint`); with ``steer``, the replay controller's steering too."""
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
    if steer is not None:
        state["steer"] = json.loads(json.dumps(steer.state_dict()))
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.parent.is_symlink():  # OUT.partial/<arm>-seedN-genG must be the run's own folder
        from replaybank.errors import ReplayBankError

        raise ReplayBankError(f"{path.parent}: is a symbolic link; a run folder holds its own checkpoints (remove the link)")
    tmp = path.with_suffix(".tmp")
    tmp.unlink(missing_ok=True)  # a leftover, or a link at the name: removed, never written through
    torch.save(state, tmp)
    os.replace(tmp, path)  # atomic: a crash never leaves a half-written checkpoint in place


def load_checkpoint(path: Path, model: Any, opt: Any, mixer: Mixer, log: TrainLog, steer: Steering | None = None) -> int:
    """Restore a checkpoint written by :func:`save_checkpoint`; returns its optimizer step.

    The file is read with ``torch.load(weights_only=True)``: tensors and plain containers
    (dict, list, str, int, float, bool, None) only, so a checkpoint from elsewhere cannot run code
    on load. All or nothing: every field is checked against the model, optimizer and mixer it is
    restored into before any of them is changed (:func:`check_checkpoint`), and a restore that
    still fails puts back what it had changed.

    Raises:
        ReplayBankError (a ValueError): the file holds anything else (a pickled object), is not a
            checkpoint, has another schema version, or a field that does not fit (the message
            names the file and the field).
    """
    import pickle

    import torch

    from replaybank.errors import ReplayBankError
    from replaybank.files import open_regular

    try:  # a link or FIFO at the checkpoint's name is refused, not followed or waited on
        with open_regular(path, error=ReplayBankError, follow_links=False, what="checkpoint") as f:
            state = torch.load(f, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        raise ReplayBankError(
            f"{path}: refused: the checkpoint holds objects other than tensors and plain containers, "
            f"which are not loaded (weights_only); delete it to restart the arm ({str(exc).splitlines()[0]})"
        ) from None
    except (RuntimeError, EOFError, OSError, ValueError) as exc:
        raise ReplayBankError(f"{path}: not a readable checkpoint ({exc}); delete it to restart the arm") from None
    except RecursionError:
        raise ReplayBankError(f"{path}: not a readable checkpoint (nested too deep); delete it to restart the arm") from None
    check_checkpoint(path, state, model, opt, mixer, steer)
    _restore(path, state, model, opt, mixer, log)
    if steer is not None:
        steer.load_state_dict(state["steer"])  # checked above, with the rest
    return int(state["step"])


def _restore(path: Path, state: dict[str, Any], model: Any, opt: Any, mixer: Mixer, log: TrainLog) -> None:
    """Put a checked ``state`` into place; on any failure, put back what was there and raise."""
    import copy

    import torch
    from peft import get_peft_model_state_dict, set_peft_model_state_dict

    from replaybank.errors import ReplayBankError

    device = model_device(model)
    before = {
        "adapter": {k: v.detach().clone() for k, v in get_peft_model_state_dict(model).items()},
        "optimizer": copy.deepcopy(opt.state_dict()), "mixer": mixer.state_dict(),
        "torch_rng": torch.get_rng_state(), **cuda_rng_state(device),
    }
    saved, done = state["log"], []
    try:
        for name, restore in (
            ("optimizer", lambda s: opt.load_state_dict(s["optimizer"])),
            ("mixer", lambda s: mixer.load_state_dict(s["mixer"])),
            ("torch_rng", lambda s: torch.set_rng_state(s["torch_rng"])),
            ("cuda_rng", lambda s: restore_cuda_rng(s.get("cuda_rng"), device)),
            ("adapter", lambda s: set_peft_model_state_dict(model, s["adapter"])),
        ):
            field = name
            restore(state)
            done.append(restore)
    except Exception as exc:  # checked first, so unexpected: leave everything as it was
        for undo in done:
            undo(before)
        raise ReplayBankError(f"{path}: checkpoint field {field!r} could not be restored ({exc}); delete it to restart the arm") from None
    log.steps, log.evals = list(saved["steps"]), list(saved["evals"])
    log.tokens, log.seconds = int(saved["tokens"]), float(saved["seconds"])


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
