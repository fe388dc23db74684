"""Reading UTF-8 text and JSON Lines files with errors that name ``file:line``.

The one JSONL reader of the project (task files, behaviour suites, corpora, probes); it reads
regular files only (a FIFO or device is refused at once, never waited on). :func:`strict_loads`
is the one strict JSON parser for what a stranger may have written (saved manifests, adapter and
trace files, store bodies, loop state, imported demonstrations). Callers pass
their own :class:`~replaybank.errors.ReplayBankError` subclass as ``error`` so a bad line surfaces
as, say, ``SuiteError``; the default is :class:`JsonlError`. Stdlib only.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from replaybank.errors import ReplayBankError
from replaybank.files import read_regular


class JsonlError(ReplayBankError):
    """A file that cannot be read, is not UTF-8, or has a line that is not a JSON object."""


class RepeatedKeyError(ValueError):
    """A JSON object that names one key twice (``json.loads`` would keep the last silently)."""

    def __init__(self, key: str) -> None:
        super().__init__(f"key {key!r} appears twice")
        self.key = key


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise RepeatedKeyError(key)
        out[key] = value
    return out


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


def _finite(literal: str) -> float:
    value = float(literal)
    if not math.isfinite(value):  # 1e999 parses as inf
        raise ValueError(f"{literal[:20]} is out of range for a float")
    return value


def strict_loads(text: str | bytes, *, finite: bool = True) -> Any:
    """``json.loads`` that refuses what it would otherwise accept quietly: a key repeated in an
    object (:class:`RepeatedKeyError`), and with ``finite`` ``NaN`` / ``Infinity`` and numbers
    that overflow a float (``finite=False`` lets them through to a caller that checks each field
    and names it).

    Example:
        >>> strict_loads('{"a": 1.5}')
        {'a': 1.5}
        >>> strict_loads('{"a": 1, "a": 2}')
        Traceback (most recent call last):
        ...
        replaybank.jsonl.RepeatedKeyError: key 'a' appears twice

    Raises:
        ValueError: any of those, bad JSON (``json.JSONDecodeError``) or bytes that are not UTF-8.
        RecursionError: nesting deeper than the interpreter's stack.
    """
    if isinstance(text, bytes):
        text = text.decode("utf-8")
    if not finite:
        return json.loads(text, object_pairs_hook=_unique_keys)
    return json.loads(text, object_pairs_hook=_unique_keys, parse_constant=_no_constant, parse_float=_finite)


def read_utf8(path: Path, *, error: type[ReplayBankError] = JsonlError) -> str:
    """The whole file decoded as UTF-8.

    Raises:
        error: the file is missing or unreadable, not a regular file (a FIFO, device or folder:
            :func:`~replaybank.files.read_regular`), or not UTF-8 (naming the line and the byte).
    """
    data = read_regular(path, error=error)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise error(
            f"{path}:{line}: not valid UTF-8 (byte 0x{data[exc.start]:02x} at offset {exc.start}); "
            "re-encode the file as UTF-8"
        ) from None


def iter_jsonl(path: Path, *, error: type[ReplayBankError] = JsonlError) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line_number, object)`` for each non-blank line of a JSONL file (numbers from 1).

    The whole file is read and decoded before the first line is yielded.

    Raises:
        error: as :func:`read_utf8`, or ``file:line`` for a line that is not JSON or not a JSON object.

    Example:
        >>> import tempfile
        >>> p = Path(tempfile.mkdtemp()) / "a.jsonl"
        >>> _ = p.write_text('{"x": 1}\\n\\n[2]\\n', encoding="utf-8")
        >>> rows = iter_jsonl(p)
        >>> next(rows)
        (1, {'x': 1})
        >>> next(rows)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        replaybank.jsonl.JsonlError: ...a.jsonl:3: expected a JSON object, got list
    """
    text = read_utf8(path, error=error)
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise error(f"{path}:{number}: malformed JSON ({exc.msg} at column {exc.colno})") from None
        if not isinstance(obj, dict):
            raise error(f"{path}:{number}: expected a JSON object, got {type(obj).__name__}")
        yield number, obj
