"""Where items live: columnar arrays in memory, memory-mapped on disk, or ragged (flat + offsets).

A storage owns bytes and nothing else: it writes rows into slots and gathers slots back. Which slot
an item goes to is the admission policy's job; which slots to read is the sampler's.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from .errors import InsufficientMemoryError, ReplayBankError
from .ragged import Ragged
from .spec import ColumnSpec, Spec


@runtime_checkable
class Storage(Protocol):
    """What the buffer needs from a storage."""

    spec: Spec | None
    supports_ragged: bool  # may columns hold variable-length rows?
    copy_on_restore: bool  # restore copies saved arrays (False: adopts them, e.g. mapped files)

    def allocate(self, capacity: int, spec: Spec) -> None: ...

    def write(self, slots: np.ndarray | slice, rows: dict[str, Any]) -> None: ...

    def write_one(self, slot: int, item: dict[str, Any]) -> None: ...

    def read(self, slots: np.ndarray) -> dict[str, np.ndarray | Ragged]: ...

    def column(self, name: str) -> np.ndarray: ...

    @property
    def nbytes(self) -> int: ...

    def export(
        self, high: int, holes: np.ndarray, *, copy: bool = True
    ) -> dict[str, np.ndarray | Ragged]: ...

    def restore(self, capacity: int, spec: Spec, columns: dict[str, Any], high: int) -> None: ...


def available_memory() -> int | None:
    """Bytes the kernel says can be allocated without swapping (MemAvailable), or None if unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _fixed_bytes(capacity: int, spec: Spec) -> dict[str, int]:
    return {name: capacity * col.item_nbytes for name, col in spec.items() if not col.ragged}


def _describe(sizes: dict[str, int]) -> str:
    return ", ".join(f"{name}={n / 2**20:.1f} MiB" for name, n in sizes.items())


_SAFE_STEM = re.compile(r"[A-Za-z0-9_-]{1,64}")


def file_stems(names: Iterable[str]) -> dict[str, str]:
    """File name stem per column: the name itself when it is short and plain (letters, digits,
    ``_``, ``-``), else ``col.<i>`` (``i`` = rank of the name in sorted order). Stems are unique,
    never contain a path separator, and a plain stem never contains a dot, so ``<stem>.npy``,
    ``<stem>.values.npy`` and ``<stem>.offsets.npy`` never collide across columns.

    >>> file_stems(["obs", "../../etc", "a b"])
    {'../../etc': 'col.0', 'a b': 'col.1', 'obs': 'obs'}
    """
    return {
        name: name if _SAFE_STEM.fullmatch(name) else f"col.{i}"
        for i, name in enumerate(sorted(names))
    }


class _RaggedColumn:
    """Variable-length rows of one column: a growable flat pool plus (start, length) per slot.

    Overwritten rows leave garbage in the pool; it is compacted when garbage outweighs live data,
    so the pool stays within about 2x the live bytes.
    """

    def __init__(self, capacity: int, col: ColumnSpec) -> None:
        self.col = col
        self.starts = np.zeros(capacity, dtype=np.int64)
        self.lengths = np.zeros(capacity, dtype=np.int64)
        self.pool = np.empty((1024, *col.shape), dtype=col.dtype)
        self.used = 0  # elements of pool in use (live + garbage)
        self.live = 0  # elements of pool that belong to stored rows

    @property
    def nbytes(self) -> int:
        return self.pool.nbytes + self.starts.nbytes + self.lengths.nbytes

    def write(self, slots: np.ndarray, rows: list[np.ndarray]) -> None:
        lengths = np.fromiter((len(r) for r in rows), dtype=np.int64, count=len(rows))
        total = int(lengths.sum())
        self.live -= int(self.lengths[slots].sum())  # overwritten rows become garbage
        self.lengths[slots] = 0
        if self.used + total > len(self.pool):
            if self.used - self.live > self.live:
                self._compact()
            if self.used + total > len(self.pool):
                grown = np.empty(
                    (max(2 * len(self.pool), self.used + total), *self.col.shape), self.col.dtype
                )
                grown[: self.used] = self.pool[: self.used]
                self.pool = grown
        if total:
            self.pool[self.used : self.used + total] = np.concatenate(rows)
        starts = self.used + np.cumsum(lengths) - lengths
        self.starts[slots] = starts
        self.lengths[slots] = lengths
        self.used += total
        self.live += total

    def _compact(self) -> None:
        live = np.flatnonzero(self.lengths)
        packed = self.gather(live)
        self.pool[: len(packed.values)] = packed.values
        self.starts[live] = packed.offsets[:-1]
        self.used = len(packed.values)

    def gather(self, slots: np.ndarray, holes: np.ndarray | None = None) -> Ragged:
        """The rows of ``slots``; positions listed in ``holes`` come back empty."""
        lengths = self.lengths[slots]
        if holes is not None and len(holes):
            lengths[holes] = 0
        offsets = np.zeros(len(slots) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        # index of every element: its row's start plus its position inside the row
        idx = np.repeat(self.starts[slots] - offsets[:-1], lengths) + np.arange(offsets[-1])
        return Ragged(self.pool[idx], offsets)


class ColumnarStorage:
    """Preallocated numpy arrays, one per column, in memory (the default).

    The memory needed is checked against what the machine has available before allocating, so a
    too-large buffer fails at construction with the bytes it needs, not hours later with an OOM kill.

    >>> s = ColumnarStorage()
    >>> s.allocate(4, {"x": ColumnSpec((2,), np.dtype("float32"))})
    >>> s.write(np.array([0, 1]), {"x": np.ones((2, 2), np.float32)})
    >>> s.read(np.array([1]))["x"]
    array([[1., 1.]], dtype=float32)
    """

    supports_ragged = False

    def __init__(self, *, check_memory: bool = True) -> None:
        if not isinstance(check_memory, bool):
            raise ReplayBankError(
                f"{type(self).__name__}(check_memory={check_memory!r}): expected True or False"
            )
        self.spec: Spec | None = None
        self.check_memory = check_memory
        # restore() copies saved arrays into fresh memory; False adopts them as they are (used to
        # keep memory-mapped saves mapped instead of reading them into RAM)
        self.copy_on_restore = True
        self._fixed: dict[str, np.ndarray] = {}
        self._ragged: dict[str, _RaggedColumn] = {}

    def allocate(self, capacity: int, spec: Spec) -> None:
        ragged = [name for name, col in spec.items() if col.ragged]
        if ragged and not self.supports_ragged:
            raise ReplayBankError(
                f"column(s) {ragged} are ragged (variable-length rows); use storage=RaggedStorage()"
            )
        sizes = _fixed_bytes(capacity, spec)
        self._check(sizes)
        self.spec = dict(spec)
        self._fixed = {
            name: self._array(name, capacity, col) for name, col in spec.items() if not col.ragged
        }
        self._ragged = {
            name: _RaggedColumn(capacity, col) for name, col in spec.items() if col.ragged
        }

    def _check(self, sizes: dict[str, int]) -> None:
        need = sum(sizes.values())
        have = available_memory() if self.check_memory else None
        if have is not None and need > have:
            raise InsufficientMemoryError(
                f"this buffer needs {need:,} bytes ({_describe(sizes)}) but only {have:,} bytes of memory "
                "are available; lower the capacity or use storage=MemmapStorage(path) to keep it on disk"
            )

    def _array(self, name: str, capacity: int, col: ColumnSpec) -> np.ndarray:
        # zeros, not empty: a slot never written holds zeros, never bytes of freed memory (calloc
        # maps zero pages lazily, so this costs nothing until a page is written)
        return np.zeros((capacity, *col.shape), dtype=col.dtype)

    def write(self, slots: np.ndarray | slice, rows: dict[str, Any]) -> None:
        """Write ``rows`` into ``slots`` (unique indices, or a slice for a consecutive run)."""
        for name, arr in self._fixed.items():
            arr[slots] = rows[name]
        if self._ragged:
            index = np.arange(slots.start, slots.stop) if isinstance(slots, slice) else slots
            for name, rag in self._ragged.items():
                rag.write(index, rows[name])

    def write_one(self, slot: int, item: dict[str, Any]) -> None:
        for name, arr in self._fixed.items():
            arr[slot] = item[name]

    def read(self, slots: np.ndarray) -> dict[str, np.ndarray | Ragged]:
        out: dict[str, np.ndarray | Ragged] = {}
        flat = slots.ravel()
        for name, arr in self._fixed.items():
            got = arr.take(flat, axis=0)
            out[name] = got.reshape(slots.shape + got.shape[1:]) if slots.ndim > 1 else got
        for name, rag in self._ragged.items():
            out[name] = rag.gather(flat)
        return out

    def column(self, name: str) -> np.ndarray:
        if name not in self._fixed:
            raise ReplayBankError(
                f"no fixed-shape column {name!r}; columns are {sorted(self.spec or {})}"
            )
        return self._fixed[name]

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self._fixed.values()) + sum(
            r.nbytes for r in self._ragged.values()
        )

    def export(
        self, high: int, holes: np.ndarray, *, copy: bool = True
    ) -> dict[str, np.ndarray | Ragged]:
        """What to persist of slots ``[0, high)``, where ``holes`` lists the empty ones among them.

        Fixed columns: rows ``[0, high)``; with ``copy=True`` a copy with the holes zeroed, with
        ``copy=False`` a view of the live arrays (the caller holds the buffer's lock while reading
        it and clears the holes itself). Ragged columns: ``Ragged`` rows, empty for holes.
        """
        out: dict[str, np.ndarray | Ragged] = {}
        for name, arr in self._fixed.items():
            rows = arr[:high]
            if copy:
                rows = np.array(rows)
                rows[holes] = 0
            out[name] = rows
        slots = np.arange(high, dtype=np.int64)
        for name, rag in self._ragged.items():
            out[name] = rag.gather(slots, holes)
        return out

    def restore(self, capacity: int, spec: Spec, columns: dict[str, Any], high: int) -> None:
        """Rebuild from ``export(high, ...)`` output after checking it fits ``spec`` and
        ``capacity``: every column present, no other; fixed columns with ``high`` to ``capacity``
        rows of exactly the spec's dtype and item shape; ragged columns with ``high`` rows whose
        offsets run from 0 to the number of values, never decreasing. Raises ``ReplayBankError``
        naming the column; nothing changes unless every check passes.

        With ``copy_on_restore = False`` fixed columns (which must then have ``capacity`` rows,
        e.g. memory-mapped saved files) are adopted as they are instead of copied.
        """
        check_columns(capacity, spec, columns, high, full=not self.copy_on_restore)
        if self.copy_on_restore:
            self.allocate(capacity, spec)
            for name, arr in self._fixed.items():
                rows = columns[name]
                arr[: len(rows)] = rows
        else:
            self.spec = dict(spec)
            self._fixed = {name: columns[name] for name, col in spec.items() if not col.ragged}
            self._ragged = {
                name: _RaggedColumn(capacity, col) for name, col in spec.items() if col.ragged
            }
        slots = np.arange(high, dtype=np.int64)
        for name, rag in self._ragged.items():
            rag.write(slots, columns[name].to_list())


def check_columns(capacity: int, spec: Spec, columns: Any, high: int, *, full: bool) -> None:
    """Raise ``ReplayBankError`` unless ``columns`` is what ``restore`` accepts (see there);
    ``full``: fixed columns must have exactly ``capacity`` rows."""
    from .schema import array, fields

    fields(columns, "columns", list(spec))
    for name, col in spec.items():
        where = f"columns[{name!r}]"
        value = columns[name]
        if not col.ragged:
            rows = array(value, where, col.dtype, (None, *col.shape))
            if not (capacity if full else high) <= len(rows) <= capacity:
                need = f"{capacity} (the capacity)" if full else f"{high} to {capacity}"
                raise ReplayBankError(f"{where}: {len(rows)} rows, expected {need}")
            continue
        if not isinstance(value, Ragged):
            raise ReplayBankError(f"{where}: expected Ragged rows, got {type(value).__name__}")
        array(value.values, f"{where}.values", col.dtype, (None, *col.shape))
        offsets = array(value.offsets, f"{where}.offsets", np.int64, (high + 1,))
        if offsets[0] != 0 or offsets[-1] != len(value.values) or (np.diff(offsets) < 0).any():
            raise ReplayBankError(
                f"{where}.offsets: must run from 0 to {len(value.values)} (the number of values) "
                "without decreasing"
            )


class RaggedStorage(ColumnarStorage):
    """In-memory storage that also accepts ragged columns (lists of variable-length rows).

    Ragged rows live in one flat array per column with a start and length per slot, never as
    Python objects; fixed columns are stored as in ``ColumnarStorage``.
    """

    supports_ragged = True


class MemmapStorage(ColumnarStorage):
    """Columns as ``.npy`` files memory-mapped from ``directory``: buffers larger than RAM.

    The OS pages data in and out; only the pages a sample touches need to be resident.
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        if not isinstance(directory, (str, os.PathLike)) or not str(directory):
            raise ReplayBankError(
                f"MemmapStorage(directory={directory!r}): expected a directory path (str or Path)"
            )
        if "\0" in os.fspath(directory):
            raise ReplayBankError(
                f"MemmapStorage(directory={os.fspath(directory)!r}): a path cannot hold a NUL byte"
            )
        super().__init__(check_memory=False)
        self.directory = Path(directory)
        if self.directory.exists() and not self.directory.is_dir():
            raise ReplayBankError(
                f"MemmapStorage(directory={str(directory)!r}): exists and is not a directory"
            )

    def _check(self, sizes: dict[str, int]) -> None:
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as err:  # a file on the way, no permission, a read-only disk
            raise ReplayBankError(
                f"MemmapStorage(directory={str(self.directory)!r}): cannot create it ({err.strerror or err}); "
                "choose a directory this process can write"
            ) from None
        need = sum(sizes.values())
        free = shutil.disk_usage(self.directory).free
        if need > free:
            raise InsufficientMemoryError(
                f"this buffer needs {need:,} bytes on disk ({_describe(sizes)}) but {self.directory} "
                f"has {free:,} bytes free; lower the capacity or choose another directory"
            )

    def allocate(self, capacity: int, spec: Spec) -> None:
        self._stems = file_stems(spec)
        super().allocate(capacity, spec)

    def _array(self, name: str, capacity: int, col: ColumnSpec) -> np.ndarray:
        path = self.directory / f"{self._stems[name]}.npy"
        return np.lib.format.open_memmap(
            path, mode="w+", dtype=col.dtype, shape=(capacity, *col.shape)
        )

    def flush(self) -> None:
        for arr in self._fixed.values():
            if isinstance(arr, np.memmap):
                arr.flush()
