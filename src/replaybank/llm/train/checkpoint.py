"""The resumable checkpoint of the LoRA loop: adapter, optimizer, mixer position and torch RNG
(the CPU generator, and the CUDA generator of the model's GPU when it is on one: LoRA dropout
draws from it there), written atomically and read back checked whole.

With them a resumed run sees exactly the data order of an uninterrupted one. The file holds
tensors and plain containers only and is read with ``torch.load(weights_only=True)``, so a
checkpoint from elsewhere cannot run code on load.

Before anything is restored, :func:`check_checkpoint` checks every field against what it is
restored into: the schema version and the set of fields; ``step`` an integer in ``[0, 2**53]``
equal to the number of logged steps; the adapter's tensors exactly the model's (names, shapes),
floating point and finite; the optimizer's groups, parameter ids, hyperparameters and settings
(``lr``, ``betas``, ``eps``, ``weight_decay``, ``capturable``, ...: the run's own, from its config)
and its per-parameter state (the slots this optimizer keeps, each a finite floating-point tensor,
scalar or of its parameter's shape; the step and the second moments >= 0); the mixer position
(plain JSON values, then :func:`replaybank.mixing.check_mixer_state`); the torch generator states
(``uint8`` tensors of the right size); the log's steps, evaluations, tokens and seconds; the
steering (a replay controller's state, :meth:`replaybank.llm.train.steer.Steering.check_state`),
present exactly when the run is steered; the rows of every source the model rewrites between
steps (``selfgen``: :meth:`replaybank.llm.train.selfgen.RefreshedRows.check_state`), present exactly
when the run has such sources. Each failure is a
:class:`~replaybank.errors.ReplayBankError` naming the file and the field.

Example:
    >>> check_checkpoint(Path("ck.pt"), {"schema_version": 7}, None, None, None)
    Traceback (most recent call last):
    ...
    replaybank.errors.ReplayBankError: ck.pt: checkpoint schema_version 7, expected 1
"""

from __future__ import annotations

import inspect
import itertools
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from replaybank.errors import ReplayBankError

if TYPE_CHECKING:
    from collections.abc import Mapping

    from replaybank.llm.train.log import TrainLog
    from replaybank.llm.train.selfgen import RefreshedRows
    from replaybank.llm.train.steer import Steering
    from replaybank.mixing import Mixer

__all__ = [
    "CHECKPOINT_SCHEMA_VERSION", "MAX_STEP", "check_checkpoint", "cuda_rng_state", "load_checkpoint", "model_device",
    "restore_cuda_rng", "save_checkpoint",
]

CHECKPOINT_SCHEMA_VERSION = 1
MAX_STEP = 2**53
_FIELDS = {"schema_version", "step", "adapter", "optimizer", "mixer", "torch_rng", "log"}


def save_checkpoint(
    path: Path, model: Any, opt: Any, mixer: Mixer, log: TrainLog, step: int, steer: Steering | None = None,
    refreshed: Mapping[str, RefreshedRows] | None = None,
) -> None:
    """Write the state after optimizer step ``step`` to ``path``, atomically (read it with
    :func:`load_checkpoint`); with ``steer``, the replay controller's steering too, and with
    ``refreshed``, the rows in force of every source the model rewrites (by source name)."""
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
    if refreshed:
        state["refreshed"] = json.loads(json.dumps({name: r.state_dict() for name, r in refreshed.items()}))
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.parent.is_symlink():  # OUT.partial/<arm>-seedN-genG must be the run's own folder
        raise ReplayBankError(f"{path.parent}: is a symbolic link; a run folder holds its own checkpoints (remove the link)")
    tmp = path.with_suffix(".tmp")
    tmp.unlink(missing_ok=True)  # a leftover, or a link at the name: removed, never written through
    torch.save(state, tmp)
    os.replace(tmp, path)  # atomic: a crash never leaves a half-written checkpoint in place


def load_checkpoint(
    path: Path, model: Any, opt: Any, mixer: Mixer, log: TrainLog, steer: Steering | None = None,
    refreshed: Mapping[str, RefreshedRows] | None = None,
) -> int:
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
    check_checkpoint(path, state, model, opt, mixer, steer, refreshed)
    _restore(path, state, model, opt, mixer, log)
    if steer is not None:
        steer.load_state_dict(state["steer"])  # checked above, with the rest
    for name, r in (refreshed or {}).items():
        r.load_state_dict(state["refreshed"][name])  # checked above, with the rest
    return int(state["step"])


def _restore(path: Path, state: dict[str, Any], model: Any, opt: Any, mixer: Mixer, log: TrainLog) -> None:
    """Put a checked ``state`` into place; on any failure, put back what was there and raise."""
    import copy

    import torch
    from peft import get_peft_model_state_dict, set_peft_model_state_dict

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
    log.refreshes = list(saved.get("refreshes", []))


def check_checkpoint(
    path: Path, state: Any, model: Any, opt: Any, mixer: Any, steer: Any = None, refreshed: Mapping[str, Any] | None = None,
) -> None:
    """Check a loaded checkpoint ``state`` against ``model``, ``opt`` and ``mixer`` before any of
    them is changed (the fields and their bounds: the module doc); a saved CUDA generator state is
    sized against the GPU the model is on.

    Raises:
        ReplayBankError: naming ``path`` and the first field that does not fit.
    """
    import torch

    from replaybank.mixing import check_mixer_state

    version = state.get("schema_version") if isinstance(state, dict) else None
    if not _is_int(version) or version != CHECKPOINT_SCHEMA_VERSION:
        found = _shown(version) if isinstance(state, dict) else type(state).__name__
        raise ReplayBankError(f"{path}: checkpoint schema_version {found}, expected {CHECKPOINT_SCHEMA_VERSION}")
    expected: dict[str, Any] = {"step": int, "adapter": dict, "optimizer": dict, "mixer": dict, "torch_rng": torch.Tensor, "log": dict}
    for key, kind in expected.items():
        if not isinstance(state.get(key), kind) or (kind is int and isinstance(state[key], bool)):
            raise ReplayBankError(f"{path}: checkpoint field {key!r} is {type(state.get(key)).__name__}, expected {kind.__name__}")
    unknown = sorted(str(k) for k in set(state) - _FIELDS - {"cuda_rng", "steer", "refreshed"})
    if unknown:
        raise ReplayBankError(f"{path}: checkpoint has unknown field {unknown[0]!r}")
    _check_log(path, state["log"])
    for key in ("mixer", "log", "steer", "refreshed"):  # written through JSON: plain values only
        if key in state and not _plain(state[key]):
            raise ReplayBankError(f"{path}: checkpoint field {key!r} holds values that are not plain JSON (numbers, strings, lists)")
    step = state["step"]
    if step < 0:
        raise ReplayBankError(f"{path}: checkpoint step {step} is negative")
    if step > MAX_STEP or step != len(state["log"]["steps"]):
        raise ReplayBankError(
            f"{path}: checkpoint field 'step' is {step if step <= MAX_STEP else 'beyond 2**53'}, but its log holds "
            f"{len(state['log']['steps'])} steps; expected the number of steps taken"
        )
    _check_rng(path, "torch_rng", state["torch_rng"], torch.get_rng_state())
    if "cuda_rng" in state:
        if not isinstance(state["cuda_rng"], torch.Tensor):
            raise ReplayBankError(f"{path}: checkpoint field 'cuda_rng' is {type(state['cuda_rng']).__name__}, expected Tensor")
        device = model_device(model)
        _check_rng(path, "cuda_rng", state["cuda_rng"], torch.cuda.get_rng_state(device) if device.type == "cuda" else None)
    _check_adapter(path, state["adapter"], model)
    _check_optimizer(path, state["optimizer"], opt)
    try:
        check_mixer_state(state["mixer"], mixer)
    except ReplayBankError as exc:
        raise ReplayBankError(f"{path}: checkpoint field 'mixer': {exc}") from None
    _check_steer(path, state.get("steer"), steer)
    _check_refreshed(path, state.get("refreshed"), refreshed or {})


def _check_refreshed(path: Path, saved: Any, refreshed: Mapping[str, Any]) -> None:
    if saved is None and not refreshed:
        return
    mine = sorted(refreshed)
    theirs = sorted(map(str, saved)) if isinstance(saved, dict) else None
    if theirs != mine:
        held = "no rewritten rows" if saved is None else f"rewritten rows of {theirs}"
        raise ReplayBankError(f"{path}: checkpoint holds {held}, but this run rewrites {mine or 'none'} (a checkpoint "
                              "of another recipe); delete it to restart the arm")
    for name in mine:
        try:
            refreshed[name].check_state(saved[name])
        except ReplayBankError as exc:
            raise ReplayBankError(f"{path}: checkpoint field 'refreshed.{name}': {exc}") from None


def _check_steer(path: Path, saved: Any, steer: Any) -> None:
    if saved is None and steer is None:
        return
    if steer is None:
        raise ReplayBankError(f"{path}: checkpoint field 'steer': a run steered by a replay controller, but this run has "
                              "none (a checkpoint of another recipe); delete it to restart the arm")
    if saved is None:
        raise ReplayBankError(f"{path}: checkpoint has no field 'steer', but this run is steered by a "
                              f"{steer.controller.name} controller (a checkpoint of another recipe); delete it to restart the arm")
    try:
        steer.check_state(saved)
    except ReplayBankError as exc:
        raise ReplayBankError(f"{path}: checkpoint field 'steer': {exc}") from None


def _check_log(path: Path, saved: dict[str, Any]) -> None:
    log_fields: dict[str, Any] = {"steps": list, "evals": list, "tokens": int, "seconds": (int, float)}
    for key, kinds in log_fields.items():
        if not isinstance(saved.get(key), kinds) or isinstance(saved.get(key), bool):
            raise ReplayBankError(f"{path}: checkpoint field 'log.{key}' is {type(saved.get(key)).__name__}")
    if not 0 <= saved["tokens"] < 2**63:
        raise ReplayBankError(f"{path}: checkpoint field 'log.tokens' is out of range, expected an integer >= 0")
    secs = saved["seconds"]
    if not ((0 <= secs < 2**63) if isinstance(secs, int) else (math.isfinite(secs) and secs >= 0)):
        raise ReplayBankError(f"{path}: checkpoint field 'log.seconds' is {saved['seconds']!r}, expected a finite number >= 0")
    for k, entry in enumerate(saved["steps"]):
        if not isinstance(entry, dict) or not _is_int(entry.get("step")) or entry["step"] != k + 1:
            raise ReplayBankError(f"{path}: checkpoint field 'log.steps[{k}]' is not the record of step {k + 1}")
    for k, entry in enumerate(saved["evals"]):
        at = entry.get("step") if isinstance(entry, dict) else None
        if not isinstance(at, int) or isinstance(at, bool) or not 0 <= at <= len(saved["steps"]):
            raise ReplayBankError(f"{path}: checkpoint field 'log.evals[{k}]' is not an evaluation at a logged step")
    refreshes = saved.get("refreshes", [])
    if not isinstance(refreshes, list):
        raise ReplayBankError(f"{path}: checkpoint field 'log.refreshes' is {type(refreshes).__name__}, expected list")
    for k, entry in enumerate(refreshes):
        at = entry.get("step") if isinstance(entry, dict) else None
        if not isinstance(at, int) or isinstance(at, bool) or not 0 <= at <= len(saved["steps"]) or not isinstance(entry.get("source"), str) or not all(
            isinstance(entry.get(key), (int, float)) and not isinstance(entry.get(key), bool) for key in ("seconds", "train_seconds")
        ):
            raise ReplayBankError(f"{path}: checkpoint field 'log.refreshes[{k}]' is not a rewrite after a logged step")


def _check_rng(path: Path, key: str, got: Any, reference: Any) -> None:
    import torch

    if got.dtype != torch.uint8 or got.dim() != 1 or (reference is not None and got.shape != reference.shape):
        size = "" if reference is None else f" of {reference.numel()} bytes"
        raise ReplayBankError(f"{path}: checkpoint field {key!r} is a {got.dtype} tensor of shape {tuple(got.shape)}, "
                              f"expected a generator state (uint8{size})")


def _check_adapter(path: Path, saved: dict[str, Any], model: Any) -> None:
    import torch
    from peft import get_peft_model_state_dict

    if not all(isinstance(v, torch.Tensor) for v in saved.values()):
        raise ReplayBankError(f"{path}: checkpoint field 'adapter' holds non-tensor values")
    mine = get_peft_model_state_dict(model)
    extra, missing = sorted(set(saved) - set(mine)), sorted(set(mine) - set(saved))
    if extra or missing:
        what = f"tensors not in this model's adapter: {extra[:2]}" if extra else f"{len(missing)} tensors missing: {missing[:2]}"
        raise ReplayBankError(f"{path}: checkpoint field 'adapter' has {what}")
    for name, ref in mine.items():
        got = saved[name]
        if tuple(got.shape) != tuple(ref.shape) or not got.is_floating_point():
            raise ReplayBankError(f"{path}: checkpoint field 'adapter.{name}' is {got.dtype} {tuple(got.shape)}, "
                                  f"this model's is {ref.dtype} {tuple(ref.shape)}")
        if not bool(torch.isfinite(got).all()):
            raise ReplayBankError(f"{path}: checkpoint field 'adapter.{name}' holds NaN or infinite values")


def _check_optimizer(path: Path, saved: dict[str, Any], opt: Any) -> None:
    mine = opt.state_dict()
    groups, states = saved.get("param_groups"), saved.get("state")
    if set(saved) != {"state", "param_groups"} or not isinstance(groups, list) or not isinstance(states, dict):
        raise ReplayBankError(f"{path}: checkpoint field 'optimizer' is not an optimizer state (state, param_groups)")
    if len(groups) != len(mine["param_groups"]):
        raise ReplayBankError(f"{path}: checkpoint field 'optimizer.param_groups' has {len(groups)} groups, this run's optimizer "
                              f"{len(mine['param_groups'])}")
    ids: list[Any] = []
    for k, (got, own) in enumerate(zip(groups, mine["param_groups"], strict=True)):
        where = f"optimizer.param_groups[{k}]"
        if not isinstance(got, dict):
            raise ReplayBankError(f"{path}: checkpoint field '{where}' is {_shown(got)}, expected an object")
        params = got.get("params")
        if not isinstance(params, list) or len(params) != len(own["params"]) or not all(_is_int(i) for i in params):
            raise ReplayBankError(f"{path}: checkpoint field '{where}.params' does not list this run's {len(own['params'])} parameters")
        if set(got) != set(own):
            odd = sorted(str(key) for key in set(got) ^ set(own))[0]
            raise ReplayBankError(f"{path}: checkpoint field '{where}' {'lacks' if odd in own else 'has an unknown'} key {odd!r}")
        for key, value in own.items():  # the run's own hyperparameters and settings (from its config)
            if key != "params" and not _same(got[key], value):
                raise ReplayBankError(f"{path}: checkpoint field '{where}.{key}' is {_shown(got[key])}, this run's optimizer "
                                      f"has {value!r}")
        ids += params
    if len(set(ids)) != len(ids):
        raise ReplayBankError(f"{path}: checkpoint field 'optimizer.param_groups' lists a parameter twice")
    shapes = dict(zip(ids, (tuple(p.shape) for p in itertools.chain.from_iterable(g["params"] for g in opt.param_groups)),
                      strict=True))
    slots = _slots(opt)
    for pid, entry in states.items():
        if pid not in shapes or not isinstance(entry, dict):
            raise ReplayBankError(f"{path}: checkpoint field 'optimizer.state' has an entry {_shown(pid)} for no parameter")
        if set(entry) != set(slots):
            raise ReplayBankError(f"{path}: checkpoint field 'optimizer.state[{pid}]' holds {sorted(map(str, entry))}, "
                                  f"this optimizer keeps {sorted(slots)}")
        for key, value in entry.items():
            _check_slot(path, f"optimizer.state[{pid}].{key}", value, shapes[pid], slots[key])


def _slots(opt: Any) -> dict[str, int | None]:
    """What this optimizer keeps per parameter: ``{name: 0 (a scalar tensor), 1 (a tensor of the
    parameter's shape), None (a number)}``, from one step of the same class on a throwaway parameter."""
    import torch

    probe = torch.zeros(2, 3, requires_grad=True)
    takes = inspect.signature(type(opt)).parameters
    skip = ("params", "foreach", "fused", "capturable", "differentiable")
    other = type(opt)([probe], **{k: v for k, v in opt.defaults.items() if k in takes and k not in skip})
    probe.grad = torch.ones_like(probe)
    other.step()
    kept = other.state[probe]
    return {k: (None if not isinstance(v, torch.Tensor) else 0 if v.dim() == 0 else 1) for k, v in kept.items()}


def _check_slot(path: Path, where: str, value: Any, shape: tuple[int, ...], kind: int | None) -> None:
    import torch

    if kind is None:
        if not (_is_int(value) or (isinstance(value, float) and math.isfinite(value))):
            raise ReplayBankError(f"{path}: checkpoint field '{where}' is {_shown(value)}, expected a finite number")
        return
    if not isinstance(value, torch.Tensor) or not value.is_floating_point():
        raise ReplayBankError(f"{path}: checkpoint field '{where}' is {_shown(value)}, expected a floating-point tensor")
    want = () if kind == 0 else shape
    if tuple(value.shape) != want:
        raise ReplayBankError(f"{path}: checkpoint field '{where}' has shape {tuple(value.shape)}, expected {want}")
    # the step count and second moments (exp_avg_sq, max_exp_avg_sq: the square root is taken) are >= 0
    signed = not where.endswith((".step", "_sq", ".square_avg"))
    if not bool(torch.isfinite(value).all()) or (not signed and bool((value < 0).any())):
        raise ReplayBankError(f"{path}: checkpoint field '{where}' holds values that are not finite"
                              + ("" if signed else " and >= 0"))


def _shown(v: Any) -> str:
    import torch

    if isinstance(v, torch.Tensor):
        return f"a {v.dtype} tensor of shape {tuple(v.shape)}"
    if isinstance(v, (dict, list, tuple)) or (isinstance(v, int) and abs(v) >= 2**63):
        return f"a {type(v).__name__}"
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


def _plain(v: Any, depth: int = 0) -> bool:
    """Whether ``v`` is what JSON gives back: dicts with string keys, lists, strings, finite
    numbers, booleans and None, at most 32 deep."""
    if depth > 32:
        return False
    if isinstance(v, dict):
        return all(isinstance(k, str) and _plain(x, depth + 1) for k, x in v.items())
    if isinstance(v, list):
        return all(_plain(x, depth + 1) for x in v)
    if isinstance(v, float):
        return math.isfinite(v)
    return v is None or isinstance(v, (str, int, bool))


def _same(a: Any, b: Any) -> bool:
    if isinstance(b, (tuple, list)):
        return isinstance(a, (tuple, list)) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and abs(v) < 2**63


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
