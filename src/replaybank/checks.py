"""Argument checks shared by the samplers, admission policies and ``nstep``.

Each check names the class and argument in its message and raises ``InvalidTypeError`` for a wrong
type (a ``bool`` is never taken for a number) or ``InvalidArgumentError`` for a wrong value.

>>> check_int(8, "Prioritized", "branching", low=2)
8
>>> check_int(True, "Window", "k", low=1)
Traceback (most recent call last):
...
replaybank.errors.InvalidTypeError: Window(k=True): expected an integer, got bool
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from .errors import InvalidArgumentError, InvalidStateError, InvalidTypeError


def check_int(
    value: Any, who: str, name: str, *, low: int | None = None, high: int | None = None
) -> int:
    """``value`` as an ``int`` in ``[low, high]``; bools, floats and strings are refused."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise InvalidTypeError(
            f"{who}({name}={value!r}): expected an integer, got {type(value).__name__}"
        )
    value = int(value)
    if (low is not None and value < low) or (high is not None and value > high):
        span = f">= {low}" if high is None else f"in [{low}, {high}]"
        raise InvalidArgumentError(f"{who}({name}={value!r}): must be an integer {span}")
    return value


def check_real(
    value: Any,
    who: str,
    name: str,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
) -> float:
    """``value`` as a finite ``float`` in ``[low, high]`` (``(low, high]`` with ``low_open``)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(
        value, (int, float, np.integer, np.floating)
    ):
        raise InvalidTypeError(
            f"{who}({name}={value!r}): expected a real number, got {type(value).__name__}"
        )
    x = float(value)
    too_low = low is not None and (x <= low if low_open else x < low)
    if not math.isfinite(x) or too_low or (high is not None and x > high):
        lo = "" if low is None else (f"> {low}" if low_open else f">= {low}")
        hi = "" if high is None else f"<= {high}"
        span = " and ".join(s for s in (lo, hi) if s)
        raise InvalidArgumentError(
            f"{who}({name}={value!r}): must be a finite number{' ' + span if span else ''}"
        )
    return x


def check_flag(value: Any, who: str, name: str) -> bool:
    """``value`` as a ``bool``; only ``True``/``False`` (and numpy bools) are taken."""
    if not isinstance(value, (bool, np.bool_)):
        raise InvalidTypeError(f"{who}({name}={value!r}): expected True or False")
    return bool(value)


def check_name(value: Any, who: str, name: str) -> str:
    """``value`` as a non-empty ``str`` (a column name)."""
    if not isinstance(value, str) or not value:
        raise InvalidTypeError(f"{who}({name}={value!r}): expected a column name (a non-empty str)")
    return value


# -- state dicts ------------------------------------------------------------------------------------
def check_state_keys(
    state: Any, who: str, required: tuple[str, ...], optional: tuple[str, ...] = ()
) -> None:
    """``state`` must be a mapping holding every key of ``required`` and nothing outside
    ``required + optional``."""
    if not isinstance(state, Mapping):
        raise InvalidStateError(f"{who} state: expected a mapping, got {type(state).__name__}")
    missing = [k for k in required if k not in state]
    if missing:
        raise InvalidStateError(
            f"{who} state: missing key {missing[0]!r} (expected {list(required)})"
        )
    unknown = sorted(str(k) for k in state if k not in required and k not in optional)
    if unknown:
        raise InvalidStateError(
            f"{who} state: unknown key {unknown[0]!r} (expected {list(required)})"
        )


def state_array(
    state: Mapping[str, Any],
    key: str,
    who: str,
    *,
    shape: tuple[int, ...],
    integer: bool = False,
    low: float | None = None,
    high: float | None = None,
) -> np.ndarray:
    """``state[key]`` as an int64 (``integer``) or finite float64 array of ``shape`` whose values
    lie in ``[low, high]``."""
    try:
        arr = np.asarray(state[key])
    except (ValueError, TypeError) as err:
        raise InvalidStateError(f"{who} state[{key!r}]: not an array ({err})") from None
    kinds = "iu" if integer else "iuf"
    # An empty list read back from JSON is float64: its dtype says nothing, so only its shape counts.
    if arr.size == 0 and arr.dtype.kind == "f":
        arr = arr.astype(np.int64)
    if arr.dtype.kind not in kinds or arr.shape != shape:
        raise InvalidStateError(
            f"{who} state[{key!r}]: expected {'integers' if integer else 'numbers'} of shape {shape}, "
            f"got dtype {arr.dtype} shape {arr.shape}"
        )
    out = arr.astype(np.int64 if integer else np.float64)
    if out.size:
        if not integer and not np.isfinite(out).all():
            raise InvalidStateError(f"{who} state[{key!r}]: holds NaN or infinite values")
        if (low is not None and out.min() < low) or (high is not None and out.max() > high):
            raise InvalidStateError(
                f"{who} state[{key!r}]: values must lie in [{low}, {high}], got [{out.min()}, {out.max()}]"
            )
    return out


def state_number(
    state: Mapping[str, Any],
    key: str,
    who: str,
    *,
    integer: bool = False,
    low: float | None = None,
    high: float | None = None,
) -> Any:
    """``state[key]`` as an ``int`` (``integer``) or finite ``float`` in ``[low, high]``."""
    value = state[key]
    try:
        if integer:
            return check_int(
                value,
                f"{who} state",
                key,
                low=None if low is None else int(low),
                high=None if high is None else int(high),
            )
        return check_real(value, f"{who} state", key, low=low, high=high)
    except InvalidArgumentError as err:  # InvalidTypeError included
        raise InvalidStateError(str(err)) from None


# -- state against the restored slot table (the ``check_table`` hooks) ------------------------------
def empty_slots(table: Any) -> np.ndarray:
    """One bool per slot of ``table`` (a ``SlotTable`` or ``RingTable``): True where no item is."""
    return np.asarray(table.ids_of(np.arange(table.capacity, dtype=np.int64)) < 0)


def check_zero_on_empty(values: np.ndarray, table: Any, who: str, key: str) -> None:
    """Every slot that holds no item must have ``values[slot] == 0`` (e.g. priority mass)."""
    bad = empty_slots(table) & (np.asarray(values) != 0)
    if bad.any():
        i = int(np.argmax(bad))
        raise InvalidStateError(
            f"{who} state[{key!r}][{i}] = {values[i]!r}, but slot {i} holds no item (table): "
            "an empty slot must weigh 0"
        )


def check_members_occupied(slots: np.ndarray, table: Any, who: str, key: str) -> None:
    """``slots`` must list every occupied slot of ``table`` exactly once, and nothing else."""
    slots = np.asarray(slots, dtype=np.int64)
    expected = np.flatnonzero(~empty_slots(table))
    if len(slots) != len(expected) or not np.array_equal(np.sort(slots), expected):
        extra = np.setdiff1d(slots, expected)[:5].tolist()
        missing = np.setdiff1d(expected, slots)[:5].tolist()
        raise InvalidStateError(
            f"{who} state[{key!r}]: lists {len(slots)} slots but the table holds {len(expected)} items "
            f"(listed but empty: {extra}, occupied but not listed: {missing})"
        )
