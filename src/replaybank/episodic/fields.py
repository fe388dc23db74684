"""Field checks for episodes as they are recorded and as they are read back.

Each check takes the value and ``where`` (e.g. ``"episode 3 (task 't1'): generation"``) and
returns the value in its plain Python type, or raises ``InvalidTypeError`` (wrong type; a ``bool``
is never a number) or ``InvalidArgumentError`` (out of range, not finite, not UTF-8), both
``ReplayBankError`` subclasses. numpy scalars are taken and turned into Python ones (SQLite and
JSON take nothing else). Pure stdlib + numpy; no episode types here, so both ``episode`` and
``store`` can use them.

>>> integer(3, "generation", low=0)
3
>>> integer("abc", "episode 0 (task 't'): generation")
Traceback (most recent call last):
...
replaybank.errors.InvalidTypeError: episode 0 (task 't'): generation 'abc' is not an integer (str)
"""

from __future__ import annotations

import math
import reprlib
from collections.abc import Mapping
from typing import Any

import numpy as np

from replaybank.errors import InvalidArgumentError, InvalidTypeError

#: SQLite's INTEGER range: every stored integer (generation, seed, ids) must fit it
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
#: how deep an episode's fields may nest (lists, tuples, mappings): an episode is 3 deep
#: (``context[i]["content"]``, ``verdict.credit[key]``); anything deeper is refused before any
#: other check reads, prints or stores it
MAX_DEPTH = 8

_SHOW = reprlib.Repr()
_SHOW.maxlevel, _SHOW.maxstring, _SHOW.maxother = 2, 80, 80
_SHOW.maxlist = _SHOW.maxtuple = _SHOW.maxdict = _SHOW.maxset = 4


def show(value: Any) -> str:
    """``repr(value)`` for a message, bounded: a string or number as is, a container at most
    two levels and a few items deep (``repr`` of a deeply nested value would recurse without end)."""
    if isinstance(value, (str, int, float, bool, np.generic)) or value is None:
        return repr(value)
    return _SHOW.repr(value)


def nesting(value: Any, where: str, limit: int = MAX_DEPTH) -> None:
    """Refuse ``value`` if lists, tuples or mappings nest in it deeper than ``limit`` levels
    (a reference cycle counts as endless nesting); iterative, so any depth is reported, never a
    ``RecursionError``.

    >>> nesting({"a": [1]}, "x")
    """
    stack: list[tuple[Any, int, str]] = [(value, 0, where)]
    while stack:
        node, depth, path = stack.pop()
        if isinstance(node, Mapping):
            children = [(v, f"{path}.{k}" if isinstance(k, str) and k.isidentifier() else f"{path}[{show(k)}]")
                        for k, v in node.items()]
        elif isinstance(node, (list, tuple)):
            children = [(v, f"{path}[{i}]") for i, v in enumerate(node)]
        else:
            continue
        if depth >= limit:
            raise InvalidArgumentError(
                f"{path}: nested deeper than {limit} levels of lists or mappings; an episode's "
                "fields are text, numbers and flat lists or mappings of them (context: a list of "
                "{'role': str, 'content': str} messages)"
            )
        stack.extend((child, depth + 1, p) for child, p in children)


def integer(value: Any, where: str, *, low: int = INT64_MIN, high: int = INT64_MAX) -> int:
    """An ``int`` (or numpy integer) in ``[low, high]``."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise InvalidTypeError(f"{where} {show(value)} is not an integer ({type(value).__name__})")
    if not low <= int(value) <= high:
        raise InvalidArgumentError(f"{where} {show(value)} is not an integer in [{low}, {high}]")
    return int(value)


def optional_integer(value: Any, where: str, **bounds: int) -> int | None:
    return None if value is None else integer(value, where, **bounds)


def real(value: Any, where: str, *, low: float = -math.inf, high: float = math.inf) -> float:
    """A finite real number (int, float or numpy scalar) in ``[low, high]``."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise InvalidTypeError(f"{where} {show(value)} is not a number ({type(value).__name__})")
    x = float(value)
    if not math.isfinite(x):
        raise InvalidArgumentError(f"{where} {show(value)} is not a finite number")
    if not low <= x <= high:
        raise InvalidArgumentError(f"{where} {show(value)} is not in [{low:g}, {high:g}]")
    return x


def flag(value: Any, where: str) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise InvalidTypeError(f"{where} {show(value)} is not True or False ({type(value).__name__})")
    return bool(value)


def text(value: Any, where: str) -> str:
    """A ``str`` that UTF-8 can encode (no lone surrogates: SQLite and sha256 need the bytes)."""
    if not isinstance(value, str):
        raise InvalidTypeError(f"{where} {show(value)} is not a string ({type(value).__name__})")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as err:
        raise InvalidArgumentError(f"{where}: not encodable as UTF-8 ({err.reason} at {err.start})") from None
    return str(value)


def optional_text(value: Any, where: str) -> str | None:
    return None if value is None else text(value, where)


def items(value: Any, where: str) -> list[Any]:
    """A list or tuple (a string is not a sequence of items here)."""
    if not isinstance(value, (list, tuple)):
        raise InvalidTypeError(f"{where} {show(value)} is not a list ({type(value).__name__})")
    return list(value)


def record(value: Any, where: str) -> Mapping[str, Any]:
    """A mapping (a JSON object)."""
    if not isinstance(value, Mapping):
        raise InvalidTypeError(f"{where} {show(value)} is not a mapping ({type(value).__name__})")
    return value


def required(d: Mapping[str, Any], key: str, where: str) -> Any:
    if key not in d:
        raise InvalidArgumentError(f"{where}: missing key {key!r}")
    return d[key]
