"""Checks for state that comes from outside: a saved manifest, or a ``state_dict`` handed back.

Each check takes the value and ``where`` (its key path, e.g. ``"table.size"``), returns the value in
its canonical Python/numpy type, and raises ``ReplayBankError`` (a ``ValueError``) whose message
starts with that key path, so the caller can prefix the file it came from. Nothing is coerced
silently: ``3.0`` is not an integer, ``True`` is not a number, a missing or unknown key is an error.

>>> integer(3, "table.size", 0, 10)
3
>>> integer(True, "table.size", 0, 10)
Traceback (most recent call last):
...
replaybank.errors.ReplayBankError: table.size = True: expected an integer in [0, 10]
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from .errors import ReplayBankError

INT64_MAX = 2**63 - 1


def fields(
    value: Any, where: str, required: Iterable[str], optional: Iterable[str] = ()
) -> Mapping[str, Any]:
    """``value`` must be a mapping with exactly the ``required`` keys plus any of ``optional``."""
    required, optional = list(required), list(optional)
    if not isinstance(value, Mapping):
        raise ReplayBankError(
            f"{where}: expected an object with keys {sorted(required)}, got {type(value).__name__}"
        )
    for key in required:
        if key not in value:
            raise ReplayBankError(
                f"{where}.{key}: missing (expected keys {sorted(required + optional)})"
            )
    allowed = set(required) | set(optional)
    for key in value:
        if key not in allowed:
            raise ReplayBankError(
                f"{where}.{key}: unknown key (expected keys {sorted(required + optional)})"
            )
    return value


def mapping(value: Any, where: str) -> Mapping[str, Any]:
    """``value`` must be a mapping with string keys (any keys)."""
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise ReplayBankError(
            f"{where}: expected an object with string keys, got {type(value).__name__}"
        )
    return value


def integer(value: Any, where: str, lo: int = 0, hi: int = INT64_MAX) -> int:
    """An integer in ``[lo, hi]`` (bools and floats are refused)."""
    if (
        isinstance(value, (bool, np.bool_))
        or not isinstance(value, (int, np.integer))
        or not lo <= value <= hi
    ):
        raise ReplayBankError(f"{where} = {value!r}: expected an integer in [{lo}, {hi}]")
    return int(value)


def real(value: Any, where: str, lo: float = -np.inf, hi: float = np.inf) -> float:
    """A finite number in ``[lo, hi]`` (integers accepted, bools refused)."""
    if (
        isinstance(value, (bool, np.bool_))
        or not isinstance(value, (int, float, np.integer, np.floating))
        or not np.isfinite(value)
        or not lo <= value <= hi
    ):
        raise ReplayBankError(f"{where} = {value!r}: expected a finite number in [{lo}, {hi}]")
    return float(value)


def boolean(value: Any, where: str) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise ReplayBankError(f"{where} = {value!r}: expected true or false")
    return bool(value)


def text(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise ReplayBankError(f"{where} = {value!r}: expected a string")
    return value


def array(
    value: Any,
    where: str,
    dtype: Any,
    shape: tuple[int | None, ...] | None = None,
) -> np.ndarray:
    """A numpy array of exactly ``dtype`` whose shape matches ``shape`` (``None`` = any length)."""
    want = np.dtype(dtype)
    if not isinstance(value, np.ndarray):
        raise ReplayBankError(f"{where}: expected an array of {want}, got {type(value).__name__}")
    if value.dtype != want:
        raise ReplayBankError(f"{where}: dtype {value.dtype}, expected {want}")
    if shape is not None and (
        value.ndim != len(shape)
        or any(s is not None and s != d for s, d in zip(shape, value.shape))
    ):
        expected = "(" + ", ".join("n" if s is None else str(s) for s in shape) + ")"
        raise ReplayBankError(f"{where}: shape {value.shape}, expected {expected}")
    return value


BIT_GENERATORS = ("PCG64", "PCG64DXSM", "Philox", "SFC64", "MT19937")
_FLAGS = ("has_uint32", "has_gauss")  # 0 or 1


def rng(value: Any, where: str) -> np.random.Generator:
    """A generator restored from ``bit_generator.state``: the bit generator must be one of numpy's
    (``BIT_GENERATORS``), the state must have exactly the keys, integer leaves and array shapes
    that numpy's own state has, and numpy must accept it.

    >>> g = rng(np.random.default_rng(0).bit_generator.state, "rng")
    >>> int(g.integers(100)) == int(np.random.default_rng(0).integers(100))
    True
    """
    name = mapping(value, where).get("bit_generator")
    if name not in BIT_GENERATORS:
        raise ReplayBankError(
            f"{where}.bit_generator = {name!r}: expected one of {list(BIT_GENERATORS)}"
        )
    bit_generator = getattr(np.random, name)()
    _like(value, bit_generator.state, where)
    try:
        bit_generator.state = value
    except (ValueError, TypeError, KeyError, OverflowError) as err:
        raise ReplayBankError(f"{where}: numpy refuses this {name} state ({err})") from err
    return np.random.Generator(bit_generator)


def _like(value: Any, template: Any, where: str) -> None:
    """``value`` has the structure of ``template``: same keys, same array dtypes and shapes,
    non-negative integers where the template has integers."""
    if isinstance(template, Mapping):
        fields(value, where, list(template))
        for key, sub in template.items():
            _like(value[key], sub, f"{where}.{key}")
    elif isinstance(template, np.ndarray):
        array(value, where, template.dtype, template.shape)
    elif isinstance(template, str):
        if value != template:
            raise ReplayBankError(f"{where} = {value!r}: expected {template!r}")
    else:
        top = 1 if where.rsplit(".", 1)[-1] in _FLAGS else 2**256
        integer(value, where, 0, top)
