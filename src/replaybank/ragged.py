"""``Ragged``: a batch of variable-length rows as one flat array plus offsets (no Python objects)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from .errors import InvalidArgumentError, InvalidTypeError


@dataclass(frozen=True)
class Ragged:
    """Rows ``values[offsets[i]:offsets[i+1]]`` for ``i < len(self)``.

    >>> r = Ragged(np.array([1, 2, 3, 4, 5]), np.array([0, 3, 5]))
    >>> r[1], r.lengths
    (array([4, 5]), array([3, 2]))
    >>> r.pad(0)
    array([[1, 2, 3],
           [4, 5, 0]])
    """

    values: np.ndarray
    offsets: np.ndarray

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> np.ndarray:
        return self.values[self.offsets[i] : self.offsets[i + 1]]

    def __iter__(self) -> Iterator[np.ndarray]:
        return (self[i] for i in range(len(self)))

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def to_list(self) -> list[np.ndarray]:
        return list(self)

    def pad(self, value: Any, length: int | None = None) -> np.ndarray:
        """Right-pad every row to ``length`` (default: the longest row) with ``value``."""
        lengths = self.lengths
        width = int(lengths.max(initial=0)) if length is None else int(length)
        out = np.full((len(self), width, *self.values.shape[1:]), value, dtype=self.values.dtype)
        keep = np.minimum(lengths, width)
        rows = np.repeat(np.arange(len(self)), keep)
        cols = np.arange(int(keep.sum())) - np.repeat(np.cumsum(keep) - keep, keep)
        src = np.repeat(self.offsets[:-1], keep) + cols
        out[rows, cols] = self.values[src]
        return out

    def checked(self, where: str) -> Ragged:
        """``self`` when its parts make rows, else an error naming ``where``: ``values`` an array
        with a leading axis, ``offsets`` a 1-D integer array running from 0 to ``len(values)``
        without decreasing (a float or bool offset is refused, not truncated). Input that a buffer
        stores (``extend``) is checked this way; a ``Ragged`` the buffer builds needs no check.

        >>> Ragged(np.array([1, 2]), np.array([0, 3])).checked("columns['t']")
        Traceback (most recent call last):
        ...
        replaybank.errors.InvalidArgumentError: columns['t'].offsets = [0, 3]: must run from 0 to 2 (the number of values) without decreasing
        """
        values, offsets = np.asarray(self.values), np.asarray(self.offsets)
        if values.ndim < 1:
            raise InvalidArgumentError(f"{where}.values: expected an array with a leading axis, got shape {values.shape}")
        if offsets.ndim != 1 or offsets.dtype.kind not in "iu" or len(offsets) < 1:
            raise InvalidTypeError(
                f"{where}.offsets: expected a non-empty 1-D integer array, got dtype {offsets.dtype} shape {offsets.shape}"
            )
        if offsets[0] != 0 or offsets[-1] != len(values) or (np.diff(offsets) < 0).any():
            shown = offsets[:8].tolist() + (["..."] if len(offsets) > 8 else [])
            raise InvalidArgumentError(
                f"{where}.offsets = {shown}: must run from 0 to {len(values)} (the number of values) "
                "without decreasing"
            )
        return self

    @classmethod
    def from_rows(cls, rows: list[np.ndarray]) -> Ragged:
        lengths = np.fromiter((len(r) for r in rows), dtype=np.int64, count=len(rows))
        offsets = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        values = np.concatenate(rows) if rows else np.zeros(0)
        return cls(values, offsets)
