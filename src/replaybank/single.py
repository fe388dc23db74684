"""The single-item write path of ``ReplayBuffer``: ``add(**item)`` and ``extend`` of one row.

Per-step RL loops write one transition at a time, so this path builds no batch arrays: each value
is checked against its column's shape and dtype and handed to ``storage.write_one``. Anything it
cannot take as it is (a missing column, another shape, a dtype that needs a checked cast, ragged
columns) returns None and the caller takes the general path, which raises the precise error.

Python scalars (``reward=1.0``, ``action=1``, ``done=False``) for 0-d columns are the commonest
values and skip numpy entirely: a ``float`` / ``int`` / ``bool`` whose value the column's dtype
holds (the same kind rules as the ``"checked"`` cast: a float into a float column within its
finite range, an int or bool into an int column within its bounds, a bool into a bool column) is
stored as it is, numpy's item assignment making the same conversion ``astype`` would; so is a
numpy scalar of the column's own dtype (``np.float32(1.0)`` into a float32 column). Anything
else (a float into an int column, 1e40 into float32, NaN, 300 into int8) goes the array way below
and meets the same checks as any other value. Measured in ``benchmarks/rl_add.py``.

It also recognises the commonest mistake of a vectorised loop: ``add()`` handed a vector env's
arrays, each with a leading env axis (``obs`` of shape ``(1, 4)``), which would otherwise become
the columns' item shape.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from .errors import InvalidArgumentError
from .spec import Cast, Spec, cast_to

#: Python scalar types a 0-d column takes as they are, and the (inclusive) value range
Scalars = tuple[tuple[type, ...], Any, Any]
#: per column: name, item shape, the shape of one row with its leading axis, dtype, scalars
Plan = tuple[tuple[str, tuple[int, ...], tuple[int, ...], np.dtype[Any], "Scalars | None"], ...]


def scalars(dtype: np.dtype[Any]) -> Scalars | None:
    """Which Python scalars a 0-d column of ``dtype`` stores without numpy, and their range:
    exactly those the ``"checked"`` cast keeps unchanged (None: none, the array path decides).

    >>> scalars(np.dtype("float16"))
    ((<class 'float'>, <class 'int'>, <class 'bool'>), -65504.0, 65504.0)
    >>> scalars(np.dtype("uint8"))
    ((<class 'int'>, <class 'bool'>), 0, 255)
    >>> scalars(np.dtype("bool"))
    ((<class 'bool'>,), False, True)
    """
    if dtype.kind == "f":
        # inf and NaN fail the comparison (the array path decides them), and so does what numpy
        # would not read as an int64 / uint64 (it makes an object array of 2**64, refused)
        top = float(np.finfo(dtype).max)  # Python compares ints with floats exactly
        return (float, int, bool), max(-top, -(2**63)), min(top, 2**64 - 1)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return (int, bool), int(info.min), int(info.max)
    if dtype.kind == "b":
        return (bool,), False, True
    return None


def plan(spec: Spec) -> Plan | None:
    """What ``coerce`` checks, read off the spec once; None when a column is ragged."""
    if any(col.ragged for col in spec.values()):
        return None
    return tuple(
        (name, col.shape, (1, *col.shape), col.dtype, scalars(col.dtype) if col.shape == () else None)
        for name, col in spec.items()
    )


def rows(columns: Plan, values: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """``coerce``'s values as one-row arrays of their columns' dtypes (for a sampler that reads
    the written rows)."""
    return {name: np.asarray(values[name], dtype)[None] for name, _, _, dtype, _ in columns}


def coerce(
    columns: Plan,
    item: Mapping[str, Any],
    castable: dict[tuple[str, np.dtype[Any]], bool],
    cast: Cast,
    *,
    batched: bool,
) -> dict[str, Any] | None:
    """One item's values, each of its column's shape and dtype (or a Python scalar the column
    holds exactly), or None for the general path.

    Args:
        columns: ``plan(spec)`` of the buffer's spec.
        item: column -> value; with ``batched`` each value has a leading axis of length 1.
        castable: a cache of which (column, dtype) pairs convert within their kind.
        cast: the buffer's cast mode.
        batched: True for ``extend`` of one row (values are taken at row 0).

    >>> from replaybank.spec import as_spec
    >>> columns = plan(as_spec({"obs": ((2,), "float32"), "done": ((), "bool")}))
    >>> coerce(columns, {"obs": [0.5, 1.0], "done": False}, {}, "checked", batched=False)["obs"]
    array([0.5, 1. ], dtype=float32)
    >>> coerce(columns, {"obs": [[0.5, 1.0]], "done": [False]}, {}, "checked", batched=False) is None
    True
    """
    if len(item) != len(columns):
        return None
    if batched:
        return _row(columns, item, castable, cast)
    values = {}
    try:
        for name, shape, _, dtype, accepts in columns:
            value = item[name]
            kind = type(value)
            if kind is not np.ndarray:
                if accepts is not None and (
                    kind is dtype.type or (kind in accepts[0] and accepts[1] <= value <= accepts[2])
                ):
                    values[name] = value  # a scalar the column holds as it is: no array built
                    continue
                value = np.asarray(value)
            if value.shape != shape:
                return None
            if value.dtype is not dtype and value.dtype != dtype:
                value = _convert(name, value, dtype, castable, cast)
                if value is None:
                    return None
            values[name] = value
    except (KeyError, TypeError, ValueError):  # missing, unsized, ragged or refused: general path
        return None
    return values


def _row(
    columns: Plan, batch: Mapping[str, Any], castable: dict[tuple[str, np.dtype[Any]], bool], cast: Cast
) -> dict[str, Any] | None:
    # extend() of one row: every value has a leading axis of length 1; row 0 is the item.
    values = {}
    try:
        for name, shape, one, dtype, _ in columns:
            value = batch[name]
            if type(value) is not np.ndarray:
                if len(value) != 1:
                    return None  # a batch of several rows: never converted twice
                value = np.asarray(value)
            if value.shape != one:
                return None
            value = value.reshape(shape)  # row 0 as an array (a 0-d one for scalars)
            if value.dtype is not dtype and value.dtype != dtype:
                value = _convert(name, value, dtype, castable, cast)
                if value is None:
                    return None
            values[name] = value
    except (KeyError, TypeError, ValueError):
        return None
    return values


def _convert(
    name: str,
    value: np.ndarray,
    dtype: np.dtype[Any],
    castable: dict[tuple[str, np.dtype[Any]], bool],
    cast: Cast,
) -> np.ndarray | None:
    key = (name, value.dtype)
    ok = castable.get(key)
    if ok is None:
        ok = castable[key] = cast == "unsafe" or bool(
            np.can_cast(value.dtype, dtype, casting="same_kind")
        )
    if not ok:
        return None
    if value.ndim == 0 and dtype.kind == "f" and value.dtype.kind in "biuf":
        # a float64 reward into float32: one scalar conversion; only an overflow to inf is refused
        with np.errstate(over="ignore"):
            out = np.asarray(dtype.type(value))
        return None if cast == "checked" and np.isinf(out) and not np.isinf(value) else out
    return cast_to(value, dtype, f"column {name!r}", cast)


def refuse_env_axis(spec: Spec | None, item: Mapping[str, Any]) -> None:
    """Raise if ``add(**item)`` looks like a vector env's step: every value with one leading axis
    of the same length ``n`` on top of an item.

    With a known spec that is exact: every column's shape is ``(n, *item shape)``. Before the first
    write (the spec would be inferred from this call) it is a guess: at least two columns, all
    with a leading axis of length ``n``, and either ``n == 1`` or a mix of 1-D columns
    (per-env rewards, actions, done flags) and columns with more axes (observations). Items that
    really are shaped so can be stored by passing ``spec=`` to the buffer, or with ``extend``.

    >>> refuse_env_axis(None, {"obs": np.zeros((1, 4)), "reward": np.zeros(1)})
    Traceback (most recent call last):
    ...
    replaybank.errors.InvalidArgumentError: add() takes one item, but every column has a leading axis of length 1 (obs (1, 4), reward (1,)), as a vector env's step does; store its rows with extend({'obs': ..., ...}) (one item per env), or pass spec= to the buffer if one item really has these shapes
    """
    shapes = {}
    for name, value in item.items():
        shape = np.shape(value) if not isinstance(value, (list, tuple)) else None
        if shape is None:
            try:
                shape = np.asarray(value).shape
            except (ValueError, TypeError):
                return  # ragged input: not an env axis
        shapes[name] = shape
    if not shapes or any(len(s) == 0 for s in shapes.values()):
        return
    n = next(iter(shapes.values()))[0]
    if any(s[0] != n for s in shapes.values()):
        return
    if spec is not None:
        known = all(
            name in spec and not spec[name].ragged and shapes[name][1:] == spec[name].shape
            for name in shapes
        )
        if not known:
            return
    else:
        ndims = {len(s) for s in shapes.values()}
        if len(shapes) < 2 or not (n == 1 or (1 in ndims and len(ndims) > 1)):
            return
    listed = ", ".join(f"{name} {shape}" for name, shape in shapes.items())
    raise InvalidArgumentError(
        f"add() takes one item, but every column has a leading axis of length {n} ({listed}), as a "
        "vector env's step does; store its rows with extend({'obs': ..., ...}) (one item per env), "
        "or pass spec= to the buffer if one item really has these shapes"
    )
