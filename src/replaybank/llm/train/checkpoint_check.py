"""A loaded checkpoint's fields checked against what they are restored into, before any is.

:func:`check_checkpoint` is the first half of :func:`replaybank.llm.train.checkpoint.load_checkpoint`:
the schema version and the set of fields; ``step`` an integer in ``[0, 2**53]`` equal to the
number of logged steps; the adapter's tensors exactly the model's (names, shapes), floating point
and finite; the optimizer's groups, parameter ids, hyperparameters and settings (``lr``,
``betas``, ``eps``, ``weight_decay``, ``capturable``, ...: the run's own, from its config) and its
per-parameter state (the slots this optimizer keeps, each a finite floating-point tensor, scalar
or of its parameter's shape; the step and the second moments >= 0); the mixer position (plain
JSON values, then :func:`replaybank.mixing.check_mixer_state`); the torch generator states
(``uint8`` tensors of the right size); the log's steps, evaluations, tokens and seconds; the
steering (a replay controller's state, :meth:`replaybank.llm.train.steer.Steering.check_state`),
present exactly when the run is steered. Each
failure is a :class:`~replaybank.errors.ReplayBankError` naming the file and the field.

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
from pathlib import Path
from typing import Any

from replaybank.errors import ReplayBankError

__all__ = ["CHECKPOINT_SCHEMA_VERSION", "MAX_STEP", "check_checkpoint"]

CHECKPOINT_SCHEMA_VERSION = 1
MAX_STEP = 2**53
_FIELDS = {"schema_version", "step", "adapter", "optimizer", "mixer", "torch_rng", "log"}


def check_checkpoint(path: Path, state: Any, model: Any, opt: Any, mixer: Any, steer: Any = None) -> None:
    """Check a loaded checkpoint ``state`` against ``model``, ``opt`` and ``mixer`` (see the module
    doc); a saved CUDA generator state is sized against the GPU the model is on.

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
    unknown = sorted(str(k) for k in set(state) - _FIELDS - {"cuda_rng", "steer"})
    if unknown:
        raise ReplayBankError(f"{path}: checkpoint has unknown field {unknown[0]!r}")
    _check_log(path, state["log"])
    for key in ("mixer", "log", "steer"):  # written through JSON: plain values only
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
        device = next((p.device for p in model.parameters()), torch.device("cpu"))
        _check_rng(path, "cuda_rng", state["cuda_rng"], torch.cuda.get_rng_state(device) if device.type == "cuda" else None)
    _check_adapter(path, state["adapter"], model)
    _check_optimizer(path, state["optimizer"], opt)
    try:
        check_mixer_state(state["mixer"], mixer)
    except ReplayBankError as exc:
        raise ReplayBankError(f"{path}: checkpoint field 'mixer': {exc}") from None
    _check_steer(path, state.get("steer"), steer)


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
