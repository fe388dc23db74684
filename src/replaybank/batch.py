"""What ``ReplayBuffer.sample`` hands back: the ``Batch``, and the output conversions a training
loop asks for once (per-column dtypes, torch tensors on a device) instead of after every call.

Conversions touch only the sampled copy, never what is stored. torch is imported here, lazily, and
only when ``as_tensors="torch"`` is asked for, so ``import replaybank`` stays numpy-only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from .errors import InvalidArgumentError, InvalidTypeError
from .ragged import Ragged
from .slots import RingTable, SlotTable
from .spec import Spec, check_dtype
from .storage import Storage

__all__ = ["AsTensors", "Batch", "check_names", "check_output", "check_sample_dtypes", "finish", "read"]

AsTensors = Literal["torch"]


@dataclass
class Batch:
    """A sampled batch: ``data`` (column name -> array, ``Ragged`` for ragged columns, or a torch
    tensor with ``as_tensors="torch"``), the items' ``ids`` (int64 numpy, for
    ``update_priorities``) and importance ``weights`` (None for unweighted samplers; float32, a
    tensor with ``as_tensors``). ``batch["obs"]`` is ``batch.data["obs"]``."""

    data: dict[str, Any]
    ids: np.ndarray | Ragged
    weights: Any

    def __getitem__(self, name: str) -> Any:
        return self.data[name]

    def __len__(self) -> int:
        return len(self.ids)


def read(
    storage: Storage, table: SlotTable | RingTable, slots: np.ndarray | Ragged, weights: Any
) -> Batch:
    """The batch of the sampled ``slots``: ``Ragged`` slots (whole episodes) make every column
    ragged with the same offsets."""
    if isinstance(slots, Ragged):
        flat = storage.read(slots.values)
        data = {k: v if isinstance(v, Ragged) else Ragged(v, slots.offsets) for k, v in flat.items()}
        return Batch(data, Ragged(table.ids_of(slots.values), slots.offsets), weights)
    return Batch(storage.read(slots), table.ids_of(slots), weights)


def check_sample_dtypes(raw: Mapping[str, Any] | None) -> dict[str, np.dtype[Any]]:
    """``ReplayBuffer(sample_dtypes=...)`` as ``{column: numpy dtype}`` (bool or numeric only).

    >>> check_sample_dtypes({"reward": "float32", "done": np.float32})
    {'reward': dtype('float32'), 'done': dtype('float32')}
    >>> check_sample_dtypes({"done": "U3"})
    Traceback (most recent call last):
    ...
    replaybank.errors.InvalidArgumentError: sample_dtypes['done'] = 'U3': sampled columns convert to bool or numeric dtypes only
    """
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise InvalidTypeError(
            f"sample_dtypes must be a mapping of column name -> dtype, got {type(raw).__name__}"
        )
    out: dict[str, np.dtype[Any]] = {}
    for name, value in raw.items():
        if not isinstance(name, str):
            raise InvalidTypeError(f"sample_dtypes: column names must be strings, got {name!r}")
        dt = check_dtype(value, f"sample_dtypes[{name!r}]")
        if dt.kind not in "biufc":
            raise InvalidArgumentError(
                f"sample_dtypes[{name!r}] = {value!r}: sampled columns convert to bool or numeric dtypes only"
            )
        out[name] = dt
    return out


def check_names(dtypes: Mapping[str, np.dtype[Any]], spec: Spec | None) -> None:
    """Refuse ``sample_dtypes`` naming a column the buffer does not have (once the spec is known)."""
    if spec is None:
        return
    unknown = sorted(set(dtypes) - set(spec))
    if unknown:
        raise InvalidArgumentError(
            f"sample_dtypes names column(s) {unknown} this buffer does not have; its columns are {sorted(spec)}"
        )


def torch_module() -> Any:
    """The ``torch`` module, or an ``ImportError`` naming the extra that brings it."""
    try:
        import torch
    except ImportError as err:
        raise ImportError(
            "sample(as_tensors='torch') needs torch: pip install 'replaybank[torch]' "
            f"(or any torch >= 2.1) ({err})"
        ) from err
    return torch


def check_output(as_tensors: Any, device: Any) -> tuple[Any, Any]:
    """``(torch module or None, torch.device or None)`` for ``sample(as_tensors=, device=)``,
    checked before anything is sampled (a refused call leaves the sampler as it was)."""
    if as_tensors is None:
        if device is not None:
            raise InvalidArgumentError(
                f"sample(device={device!r}) needs as_tensors='torch' (numpy batches have no device)"
            )
        return None, None
    if as_tensors != "torch":
        raise InvalidArgumentError(f"sample(as_tensors={as_tensors!r}): expected None or 'torch'")
    torch = torch_module()
    if device is None:
        return torch, None
    try:
        return torch, torch.device(device)
    except (RuntimeError, TypeError) as err:
        raise InvalidArgumentError(f"sample(device={device!r}): not a torch device ({err})") from None


def _tensor(torch: Any, value: np.ndarray, device: Any, where: str) -> Any:
    try:
        out = torch.from_numpy(np.ascontiguousarray(value))
    except TypeError as err:
        raise InvalidTypeError(
            f"{where}: dtype {value.dtype} has no torch tensor type ({err}); "
            "declare a sample_dtypes entry for it"
        ) from None
    return out if device is None else out.to(device)


def finish(
    batch: Batch, dtypes: Mapping[str, np.dtype[Any]], torch: Any, device: Any
) -> Batch:
    """``batch`` with ``dtypes`` applied (numpy's ``astype``, like ``tensor.float()``) and, when
    ``torch`` is the torch module, every column and the weights as tensors on ``device``.

    >>> b = Batch({"done": np.array([True, False])}, np.array([0, 1]), None)
    >>> finish(b, {"done": np.dtype("float32")}, None, None).data["done"]
    array([1., 0.], dtype=float32)
    """
    data: dict[str, Any] = {}
    for name, value in batch.data.items():
        dt = dtypes.get(name)
        if isinstance(value, Ragged):
            if torch is not None:
                raise InvalidArgumentError(
                    f"sample(as_tensors='torch'): column {name!r} is ragged (rows of different lengths); "
                    "sample it as numpy and pad it (Ragged.pad)"
                )
            data[name] = value if dt is None else Ragged(value.values.astype(dt), value.offsets)
            continue
        if dt is not None and value.dtype != dt:
            value = value.astype(dt)
        data[name] = value if torch is None else _tensor(torch, value, device, f"column {name!r}")
    weights = batch.weights
    if torch is not None and weights is not None:
        weights = _tensor(torch, weights, device, "weights")
    return Batch(data, batch.ids, weights)
