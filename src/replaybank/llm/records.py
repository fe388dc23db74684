"""How a results record is written to JSON and read back: :class:`Record`, :class:`ResultsError`.

A record's fields are its JSON object: :meth:`Record.to_json` writes a field under its own name
(``None`` fields marked :func:`omitted` are left out, and so are fields holding :data:`ABSENT`,
for keys whose null is a value of its own; a field with :data:`FLAT` metadata is written into its
parent's object), and :meth:`Record.from_json` reads the same object back, checking every
key it needs and raising :class:`ResultsError` with the path of the first bad key.
"""

from __future__ import annotations

import dataclasses
import enum
import types
import typing
from dataclasses import field
from typing import Any, TypeVar, Union

from replaybank.errors import ReplayBankError

__all__ = ["ABSENT", "FLAT", "Absent", "JsonObject", "Record", "ResultsError", "absent", "flat_optional", "omitted"]

JsonObject = dict[str, object]
"""A JSON object another module owns (config, data manifest, training log, ...), passed through as is."""

R = TypeVar("R", bound="Record")


class ResultsError(ReplayBankError):
    """A results file (``metrics.json``, a seed's or an arm's results) does not hold what it should."""


def omitted() -> Any:
    """A field left out of the JSON object when it is None (and None when the key is missing)."""
    return field(default=None, metadata={"omit": True})


class Absent(enum.Enum):
    """The value of a field whose key the object does not hold, where null is a value of its own."""

    ABSENT = "absent"


ABSENT = Absent.ABSENT


def absent() -> Any:
    """A field left out of the JSON object when it holds :data:`ABSENT` (and :data:`ABSENT` when the
    key is missing); unlike :func:`omitted`, None is written as null."""
    return field(default=ABSENT)


FLAT = {"flat": True}
"""Metadata of a record field whose keys are written into the parent's object:
``field(metadata=FLAT)`` (a plain ``field`` call, so type checkers see it has no default)."""


def flat_optional() -> Any:
    """A :data:`FLAT` field that is None when its first key is missing from the object."""
    return field(default=None, metadata=FLAT)


class Record:
    """A frozen dataclass that is one JSON object of a results file."""

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {}
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if f.metadata.get("flat"):
                if value is not None:
                    out.update(value.to_json())
            elif value is ABSENT:
                continue
            elif value is not None or not f.metadata.get("omit"):
                out[f.name] = _encode(value)
        return out

    @classmethod
    def from_json(cls: type[R], data: object, where: str = "results") -> R:
        """Read one object back; ``where`` names it in errors (``metrics.json: arms.naive``).

        Raises:
            ResultsError: ``data`` is not an object, or a key is missing or holds the wrong type.
        """
        if not isinstance(data, dict):
            raise ResultsError(f"{where}: expected a JSON object, got {_show(data)}")
        hints = typing.get_type_hints(cls)
        values: dict[str, object] = {}
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            tp = hints[f.name]
            if f.metadata.get("flat"):
                sub = _record_type(tp)
                first = dataclasses.fields(sub)[0].name  # type: ignore[arg-type]
                values[f.name] = sub.from_json(data, where) if first in data or not _is_optional(tp) else None
            elif f.name in data:
                values[f.name] = _decode(tp, data[f.name], _child(where, f.name))
            elif f.metadata.get("omit"):
                values[f.name] = None
            elif f.default is ABSENT:
                values[f.name] = ABSENT
            else:
                raise ResultsError(f"{where}: missing key {f.name!r}")
        return cls(**values)


def _encode(value: object) -> object:
    if isinstance(value, Record):
        return value.to_json()
    if isinstance(value, (list, tuple)):
        return [_encode(v) for v in value]
    if isinstance(value, dict):
        return {k: _encode(v) for k, v in value.items()}
    return value


def _child(where: str, key: str) -> str:
    """``metrics.json: arms`` for a key of the file's own object, ``...: arms.naive`` below it."""
    return f"{where}.{key}" if ": " in where else f"{where}: {key}"


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _is_optional(tp: object) -> bool:
    return typing.get_origin(tp) in (Union, types.UnionType) and type(None) in typing.get_args(tp)


def _record_type(tp: object) -> type[Record]:
    args = [a for a in typing.get_args(tp) if a is not type(None)] if _is_optional(tp) else [tp]
    pick = args[0]
    if not (isinstance(pick, type) and issubclass(pick, Record)):
        raise TypeError(f"results.py: a flat field must hold a record, not {pick!r}")  # a bug here, not in a file
    return pick


def _decode(tp: object, value: object, where: str) -> object:
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None) and a is not Absent]
        if value is None and type(None) in typing.get_args(tp):
            return None
        if len(args) == 1:
            return _decode(args[0], value, where)
        # a union of several types: the first that reads the value, else the last one's error
        for arg in args[:-1]:
            try:
                return _decode(arg, value, where)
            except ResultsError:
                continue
        return _decode(args[-1], value, where)
    if tp is object:
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ResultsError(f"{where}: expected a number, got {_show(value)}")
        return value  # an int stays an int: the file is written back byte for byte
    if tp in (int, str, bool):
        if not isinstance(value, tp) or (tp is int and isinstance(value, bool)):  # type: ignore[arg-type]
            kind = {int: "an integer", str: "a string", bool: "true or false"}[tp]  # type: ignore[index]
            raise ResultsError(f"{where}: expected {kind}, got {_show(value)}")
        return value
    if origin is list:
        if not isinstance(value, list):
            raise ResultsError(f"{where}: expected a list, got {_show(value)}")
        (item,) = typing.get_args(tp)
        return [_decode(item, v, f"{where}[{k}]") for k, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise ResultsError(f"{where}: expected a JSON object, got {_show(value)}")
        _, item = typing.get_args(tp)
        return {str(k): _decode(item, v, _child(where, str(k))) for k, v in value.items()}
    if isinstance(tp, type) and issubclass(tp, Record):
        return tp.from_json(value, where)
    raise TypeError(f"results.py: no reader for the type {tp!r} at {where}")  # a bug here, not in the file
