"""Column specifications: the name, per-item shape and dtype of every column in a buffer.

A spec is fixed at the first ``extend`` (inferred from the data) or given up front. Every later
write is checked against it before anything is stored, so a bad batch never half-lands.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from .errors import InvalidArgumentError, InvalidTypeError, ReplayBankError


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


def _checked_spec(name: str, shape: tuple[int, ...], dtype: np.dtype[Any], ragged: bool = False) -> ColumnSpec:
    """The inferred spec of column ``name``, held to the rules a load applies (``check_dtype``,
    ``check_shape``), so ``extend`` never stores what ``save`` could not write or ``load`` read."""
    try:
        return ColumnSpec(
            check_shape(shape, f"column {name!r} shape"), check_dtype(dtype, f"column {name!r} dtype"), ragged
        )
    except ReplayBankError as err:
        raise InvalidTypeError(f"extend: {err}") from None


def infer_spec(columns: Mapping[str, Any], *, ragged: bool) -> Spec:
    """Infer a spec from the first batch handed to ``extend``.

    With ``ragged=False`` every column must be array-like with a leading batch axis. With
    ``ragged=True`` (a ``RaggedStorage``) columns given as lists of 1-D+ arrays become ragged.
    """
    from .ragged import Ragged

    spec: Spec = {}
    for name, value in columns.items():
        if ragged and is_ragged_input(value):
            if isinstance(value, Ragged):
                value = value.checked(f"columns[{name!r}]")
                if len(value) == 0:
                    raise InvalidArgumentError(f"ragged column {name!r}: no rows to infer its spec from")
            first = _as_array(value[0], f"ragged column {name!r}, row 0")
            if first.ndim == 0:
                raise ReplayBankError(f"ragged column {name!r}: rows must be arrays, got a scalar")
            spec[name] = _checked_spec(name, first.shape[1:], first.dtype, ragged=True)
            continue
        arr = _as_array(value, f"column {name!r}")
        if arr.ndim == 0:
            raise ReplayBankError(
                f"column {name!r}: expected a batch (leading axis = items), got a scalar; use add() for one item"
            )
        if arr.dtype == object:
            raise ReplayBankError(
                f"column {name!r}: could not form a fixed-shape array (rows of different lengths?); "
                "use RaggedStorage for variable-length rows"
            )
        spec[name] = _checked_spec(name, arr.shape[1:], arr.dtype)
    if not spec:
        raise ReplayBankError("extend() needs at least one column")
    return spec


Cast = Literal["checked", "unsafe"]


def check_batch(
    spec: Spec, columns: Mapping[str, Any], cast: Cast = "checked"
) -> tuple[int, dict[str, Any]]:
    """Validate one ``extend`` batch against ``spec`` and return ``(n_items, coerced columns)``.

    Fixed columns become arrays of the spec's dtype, ragged columns lists of arrays. With
    ``cast="checked"`` (the default) a value is converted only within its kind (int to int, float
    to float, int or bool to float, bool to int) and only if it survives: integers must fit the
    column's range, finite floats must stay finite (rounding to the nearest float32 is kept), so
    300 never becomes 44 in an int8 column nor 1e40 inf in a float32 one. ``cast="unsafe"`` is
    numpy's ``astype``: any conversion, values may wrap or overflow. Nothing is stored here, so a
    failure leaves the buffer untouched.

    Raises:
        InvalidTypeError: a column that cannot be stored as its dtype (float into int, strings).
        InvalidArgumentError: unknown, missing or mis-shaped columns, or a value that would change.
    """
    from .ragged import Ragged

    missing = sorted(set(spec) - set(columns))
    unknown = sorted(set(columns) - set(spec))
    if unknown:
        raise InvalidArgumentError(
            f"unknown column(s) {unknown}; this buffer's columns are {sorted(spec)}"
        )
    if missing:
        raise InvalidArgumentError(
            f"missing column(s) {missing}; every extend must give all of {sorted(spec)}"
        )
    out: dict[str, Any] = {}
    n: int | None = None
    for name, col in spec.items():
        value = columns[name]
        if col.ragged:
            rows = value.checked(f"columns[{name!r}]").to_list() if isinstance(value, Ragged) else list(value)
            arrays = []
            for i, row in enumerate(rows):
                arr = _as_array(row, f"ragged column {name!r}, row {i}")
                if arr.ndim < 1 or arr.shape[1:] != col.shape:
                    raise InvalidArgumentError(
                        f"ragged column {name!r}, row {i}: shape {arr.shape} does not fit (length, *{col.shape})"
                    )
                arrays.append(cast_to(arr, col.dtype, f"ragged column {name!r}, row {i}", cast))
            value_n = len(arrays)
            out[name] = arrays
        else:
            arr = _as_array(value, f"column {name!r}")
            if arr.shape[1:] != col.shape or arr.ndim != len(col.shape) + 1:
                raise InvalidArgumentError(
                    f"column {name!r}: got shape {arr.shape}, expected (n, {', '.join(map(str, col.shape))})"
                    if col.shape
                    else f"column {name!r}: got shape {arr.shape}, expected (n,)"
                )
            out[name] = cast_to(arr, col.dtype, f"column {name!r}", cast)
            value_n = arr.shape[0]
        if n is None:
            n = value_n
        elif value_n != n:
            raise InvalidArgumentError(
                f"column {name!r} has {value_n} rows but an earlier column has {n}; all columns need the same count"
            )
    return int(n or 0), out


def _as_array(value: Any, where: str) -> np.ndarray:
    try:
        return np.asarray(value)
    except (ValueError, TypeError) as err:  # ragged nested lists, unconvertible objects
        raise InvalidTypeError(
            f"{where}: could not form a fixed-shape array ({err}); rows of different lengths "
            "need RaggedStorage"
        ) from None


def cast_to(arr: np.ndarray, dtype: np.dtype[Any], where: str, cast: Cast = "checked") -> np.ndarray:
    """``arr`` as ``dtype``; with ``cast="checked"`` only when every value survives (see
    ``check_batch``). Costs nothing when the dtypes already match.

    >>> cast_to(np.array([1, 2]), np.dtype(np.int8), "column 'a'")
    array([1, 2], dtype=int8)
    >>> cast_to(np.array([300]), np.dtype(np.int8), "column 'a'")
    Traceback (most recent call last):
    ...
    replaybank.errors.InvalidArgumentError: column 'a'[0] = 300 does not fit int8 (range -128..127); pass cast="unsafe" to ReplayBuffer to store it anyway (it would change)
    """
    if arr.dtype == dtype:
        return arr
    if cast == "unsafe":
        try:
            with np.errstate(over="ignore", invalid="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore", np.exceptions.ComplexWarning)  # asked for
                return arr.astype(dtype)
        except (ValueError, TypeError) as err:
            raise InvalidTypeError(f"{where}: dtype {arr.dtype} cannot be stored as {dtype} ({err})") from None
    src, dst = arr.dtype.kind, dtype.kind
    integers = src in "biu" and dst in "iu"  # any int -> int whose values fit
    floats = (src in "biuf" and dst == "f") or (src in "biufc" and dst == "c")
    same_kind = src == dst and src not in "Ob"  # strings, bytes, dates: values must round-trip
    if not (integers or floats or same_kind):
        raise InvalidTypeError(
            f"{where}: dtype {arr.dtype} cannot be stored as {dtype} without changing meaning; "
            f"convert it explicitly (e.g. arr.astype({dtype.name!r}))"
        )
    if arr.size == 0 or np.can_cast(arr.dtype, dtype, casting="safe"):
        return arr.astype(dtype)
    if integers:
        info = np.iinfo(dtype)
        low, high = arr.min(), arr.max()
        if int(low) < info.min or int(high) > info.max:
            i = int(np.argmax((arr < info.min) | (arr > info.max)))
            return _refuse(arr, i, where, f"does not fit {dtype} (range {info.min}..{info.max})")
        return arr.astype(dtype)
    with np.errstate(over="ignore", invalid="ignore"):
        out = arr.astype(dtype)
    if floats:
        if np.isinf(out).any():  # only finite values that overflowed: +-inf stays +-inf
            grew = np.isinf(out) & ~np.isinf(arr)
            if grew.any():
                i = int(np.argmax(grew))
                limit = np.finfo(dtype).max
                return _refuse(arr, i, where, f"overflows {dtype} (largest {limit:.6g}) to inf")
        return out
    same = out.astype(arr.dtype) == arr
    if not same.all():
        return _refuse(arr, int(np.argmin(same)), where, f"would change when stored as {dtype}")
    return out


def _refuse(arr: np.ndarray, flat: int, where: str, why: str) -> np.ndarray:
    index = np.unravel_index(flat, arr.shape) if arr.ndim else ()
    at = "" if arr.ndim == 0 else str(list(index)) if arr.ndim > 1 else f"[{index[0]}]"
    raise InvalidArgumentError(
        f"{where}{at} = {arr[index].item()!r} {why}; pass cast=\"unsafe\" to ReplayBuffer to store it anyway "
        "(it would change)"
    )
