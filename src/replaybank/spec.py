"""Column specifications: the name, per-item shape and dtype of every column in a buffer.

A spec is fixed at the first ``extend`` (inferred from the data) or given up front. Every later
write is checked against it before anything is stored, so a bad batch never half-lands.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .errors import ReplayBankError


@dataclass(frozen=True)
class ColumnSpec:
    """One column: per-item ``shape`` and ``dtype``; ``ragged`` columns hold a variable-length
    first axis per item (e.g. token sequences), with ``shape`` giving the trailing fixed axes."""

    shape: tuple[int, ...]
    dtype: np.dtype[Any]
    ragged: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"shape": list(self.shape), "dtype": self.dtype.str, "ragged": self.ragged}

    @classmethod
    def from_json(cls, data: Any, where: str = "spec") -> ColumnSpec:
        """Rebuild from ``to_json`` output, validating every field (this reads saved files).

        Raises:
            ReplayBankError: a missing or unknown key, a shape that is not a list of non-negative
                integers, a dtype that is not plain numeric, bool or fixed-width text, or a
                ``ragged`` that is not a bool; the message starts with ``where`` and the key.
        """
        from .schema import boolean, fields, text

        fields(data, where, ("shape", "dtype", "ragged"))
        return cls(
            check_shape(data["shape"], f"{where}.shape"),
            check_dtype(text(data["dtype"], f"{where}.dtype"), f"{where}.dtype"),
            boolean(data["ragged"], f"{where}.ragged"),
        )

    @property
    def item_nbytes(self) -> int:
        """Bytes one item of a fixed column takes (for ragged: one element of the flat axis)."""
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize


Spec = dict[str, ColumnSpec]

MAX_ITEM_ELEMENTS = 2**40  # per item of a column: far above any real use


def check_dtype(dtype: Any, where: str) -> np.dtype[Any]:
    """A column dtype: bool, integer, float, complex, or fixed-width bytes/str, never object,
    void or structured (those could hide pickled or unchecked data).

    >>> check_dtype("<f4", "spec.obs.dtype")
    dtype('float32')
    >>> check_dtype("|O", "spec.obs.dtype")
    Traceback (most recent call last):
    ...
    replaybank.errors.ReplayBankError: spec.obs.dtype = '|O': columns hold bool, integer, float, complex or fixed-width bytes/str values; object, void and structured dtypes are refused
    """
    try:
        dt = np.dtype(dtype)
    except (TypeError, ValueError) as err:
        raise ReplayBankError(f"{where} = {dtype!r}: not a numpy dtype ({err})") from err
    if (
        dt.kind not in "biufcSU"
        or dt.fields is not None
        or dt.subdtype is not None
        or dt.itemsize == 0
    ):
        raise ReplayBankError(
            f"{where} = {dtype!r}: columns hold bool, integer, float, complex or fixed-width bytes/str "
            "values; object, void and structured dtypes are refused"
        )
    return dt


def check_shape(shape: Any, where: str) -> tuple[int, ...]:
    """A per-item shape: a list or tuple of at most 32 non-negative integers."""
    if not isinstance(shape, (list, tuple)) or len(shape) > 32:
        raise ReplayBankError(
            f"{where} = {shape!r}: expected a list of at most 32 non-negative integers"
        )
    dims = []
    for d in shape:
        if isinstance(d, (bool, np.bool_)) or not isinstance(d, (int, np.integer)) or d < 0:
            raise ReplayBankError(f"{where} = {shape!r}: dimension {d!r} is not a non-negative integer")
        dims.append(int(d))
    if int(np.prod(dims, dtype=object)) > MAX_ITEM_ELEMENTS:
        raise ReplayBankError(f"{where} = {shape!r}: an item of this shape would exceed 2**40 elements")
    return tuple(dims)


def as_spec(raw: Mapping[str, Any]) -> Spec:
    """Normalise a user spec: values may be ``ColumnSpec`` or ``(shape, dtype)`` tuples.

    >>> as_spec({"obs": ((4,), "float32")})["obs"]
    ColumnSpec(shape=(4,), dtype=dtype('float32'), ragged=False)
    """
    if not isinstance(raw, Mapping):
        raise ReplayBankError(f"spec must be a mapping of column name -> (shape, dtype), got {raw!r}")
    spec: Spec = {}
    for name, value in raw.items():
        if not isinstance(name, str):
            raise ReplayBankError(f"spec: column names must be strings, got {name!r}")
        if isinstance(value, ColumnSpec):
            value = (value.shape, value.dtype, value.ragged)
        if not (isinstance(value, tuple) and len(value) in (2, 3)):
            raise ReplayBankError(
                f"spec for column {name!r} must be a ColumnSpec or (shape, dtype[, ragged]), got {value!r}"
            )
        ragged = value[2] if len(value) == 3 else False
        if not isinstance(ragged, (bool, np.bool_)):
            raise ReplayBankError(f"spec for column {name!r}: ragged must be True or False, got {ragged!r}")
        spec[name] = ColumnSpec(
            check_shape(value[0], f"spec[{name!r}] shape"),
            check_dtype(value[1], f"spec[{name!r}] dtype"),
            bool(ragged),
        )
    if not spec:
        raise ReplayBankError("spec must name at least one column")
    return spec


def is_ragged_input(value: Any) -> bool:
    """In a ``RaggedStorage``, a column passed as a ``Ragged`` or as a list/tuple of rows that
    are themselves arrays or lists is ragged; a numpy array is always a fixed column."""
    from .ragged import Ragged

    if isinstance(value, Ragged):
        return True
    if isinstance(value, np.ndarray) or not isinstance(value, Sequence) or len(value) == 0:
        return False
    return all(np.ndim(row) >= 1 for row in value)


def infer_spec(columns: Mapping[str, Any], *, ragged: bool) -> Spec:
    """Infer a spec from the first batch handed to ``extend``.

    With ``ragged=False`` every column must be array-like with a leading batch axis. With
    ``ragged=True`` (a ``RaggedStorage``) columns given as lists of 1-D+ arrays become ragged.
    """
    spec: Spec = {}
    for name, value in columns.items():
        if ragged and is_ragged_input(value):
            first = np.asarray(value[0])
            if first.ndim == 0:
                raise ReplayBankError(f"ragged column {name!r}: rows must be arrays, got a scalar")
            spec[name] = ColumnSpec(first.shape[1:], first.dtype, ragged=True)
            continue
        arr = np.asarray(value)
        if arr.ndim == 0:
            raise ReplayBankError(
                f"column {name!r}: expected a batch (leading axis = items), got a scalar; use add() for one item"
            )
        if arr.dtype == object:
            raise ReplayBankError(
                f"column {name!r}: could not form a fixed-shape array (rows of different lengths?); "
                "use RaggedStorage for variable-length rows"
            )
        spec[name] = ColumnSpec(arr.shape[1:], arr.dtype)
    if not spec:
        raise ReplayBankError("extend() needs at least one column")
    return spec


def check_batch(spec: Spec, columns: Mapping[str, Any]) -> tuple[int, dict[str, Any]]:
    """Validate one ``extend`` batch against ``spec`` and return ``(n_items, coerced columns)``.

    Fixed columns become arrays of the spec's dtype (casting only within a kind, e.g. float64 to
    float32, never float to int); ragged columns become lists of arrays. Nothing is stored here,
    so a failure leaves the buffer untouched.
    """
    from .ragged import Ragged

    missing = sorted(set(spec) - set(columns))
    unknown = sorted(set(columns) - set(spec))
    if unknown:
        raise ReplayBankError(
            f"unknown column(s) {unknown}; this buffer's columns are {sorted(spec)}"
        )
    if missing:
        raise ReplayBankError(
            f"missing column(s) {missing}; every extend must give all of {sorted(spec)}"
        )
    out: dict[str, Any] = {}
    n: int | None = None
    for name, col in spec.items():
        value = columns[name]
        if col.ragged:
            rows = value.to_list() if isinstance(value, Ragged) else list(value)
            arrays = []
            for i, row in enumerate(rows):
                arr = np.asarray(row)
                if arr.ndim < 1 or arr.shape[1:] != col.shape:
                    raise ReplayBankError(
                        f"ragged column {name!r}, row {i}: shape {arr.shape} does not fit (length, *{col.shape})"
                    )
                arrays.append(_cast(arr, col.dtype, name))
            value_n = len(arrays)
            out[name] = arrays
        else:
            arr = np.asarray(value)
            if arr.shape[1:] != col.shape or arr.ndim != len(col.shape) + 1:
                raise ReplayBankError(
                    f"column {name!r}: got shape {arr.shape}, expected (n, {', '.join(map(str, col.shape))})"
                    if col.shape
                    else f"column {name!r}: got shape {arr.shape}, expected (n,)"
                )
            out[name] = _cast(arr, col.dtype, name)
            value_n = arr.shape[0]
        if n is None:
            n = value_n
        elif value_n != n:
            raise ReplayBankError(
                f"column {name!r} has {value_n} rows but an earlier column has {n}; all columns need the same count"
            )
    return int(n or 0), out


def _cast(arr: np.ndarray, dtype: np.dtype[Any], name: str) -> np.ndarray:
    if arr.dtype == dtype:
        return arr
    if arr.size == 0 or np.can_cast(arr.dtype, dtype, casting="same_kind"):
        return arr.astype(dtype, copy=False)
    raise ReplayBankError(
        f"column {name!r}: dtype {arr.dtype} cannot be stored as {dtype} without changing meaning; "
        f"convert it explicitly (e.g. arr.astype({dtype.name!r}))"
    )
