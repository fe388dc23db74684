"""``ReplayBuffer``: the one class users hold. It owns ids, locking and the order of calls.

Every write goes: validate -> admission.place -> storage.write -> slot table -> sampler.on_write.
Every read goes: sampler.sample -> storage.read. Nothing is mutated until the whole batch has been
validated, so a bad ``extend`` leaves the buffer exactly as it was.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import buffer_checks
from .admission import Admission, Fifo
from .buffer_state import SCHEMA_VERSION
from .checks import check_int
from .errors import (
    InvalidArgumentError,
    InvalidTypeError,
    ReplayBankError,
)
from .ragged import Ragged
from .samplers.base import Sampler, View
from .samplers.priorities import check_priorities
from .samplers.uniform import Uniform
from .slots import RingTable, SlotTable
from .spec import Cast, Spec, as_spec, cast_to, check_batch, infer_spec
from .storage import ColumnarStorage, Storage

__all__ = ["Batch", "ReplayBuffer", "SCHEMA_VERSION"]

MAX_CAPACITY = 1 << 40  # ids are (arrival << bits(capacity)) | slot in 63 bits


@dataclass
class Batch:
    """A sampled batch: ``data`` (column name -> array, or ``Ragged`` for ragged columns), the
    items' ``ids`` (for ``update_priorities``) and importance ``weights`` (None for unweighted
    samplers). ``batch["obs"]`` is ``batch.data["obs"]``."""

    data: dict[str, np.ndarray | Ragged]
    ids: np.ndarray | Ragged
    weights: np.ndarray | None

    def __getitem__(self, name: str) -> np.ndarray | Ragged:
        return self.data[name]

    def __len__(self) -> int:
        return len(self.ids)


class ReplayBuffer:
    """A replay buffer of named columns with pluggable admission, sampling and storage.

    Args:
        capacity: the most items stored at once.
        sampler: how batches are drawn (default ``Uniform()``); see ``replaybank.samplers``.
        admission: which slot a new item takes (default ``Fifo()``); see ``replaybank.admission``.
        storage: where items live (default ``ColumnarStorage()``, in memory); ``MemmapStorage``
            for on-disk buffers, ``RaggedStorage`` for variable-length rows.
        seed: a non-negative int seeding the buffer's generator, or a ``numpy.random.Generator``
            to use as it is (all randomness comes from it).
        spec: optional ``{name: (shape, dtype)}``; otherwise inferred from the first ``extend``.
        cast: how values of another dtype than their column's are stored. ``"checked"``
            (default): converted within their kind only if every value survives (300 into int8,
            1e40 into float32 or 2**64-1 into int64 are refused, naming the column);
            ``"unsafe"``: numpy's ``astype``, values may wrap or overflow.

    Sampler, admission and storage instances belong to one buffer. ``extend``, ``add``,
    ``sample`` and ``update_priorities`` may be called from several threads.

    >>> buf = ReplayBuffer(1000, seed=0)
    >>> ids = buf.extend({"obs": np.zeros((3, 4), np.float32), "action": np.array([0, 1, 1])})
    >>> len(buf), buf.sample(2).data["obs"].shape
    (3, (2, 4))
    """

    def __init__(
        self,
        capacity: int,
        *,
        sampler: Sampler | None = None,
        admission: Admission | None = None,
        storage: Storage | None = None,
        seed: int | np.random.Generator | None = None,
        spec: Mapping[str, Any] | None = None,
        cast: Cast = "checked",
    ) -> None:
        self._capacity = buffer_checks.positive_int(capacity, "capacity")
        if self._capacity > MAX_CAPACITY:
            raise InvalidArgumentError(
                f"capacity={capacity:,} is above {MAX_CAPACITY:,} (2**40), the most slots an item id can address"
            )
        if not (isinstance(cast, str) and cast in ("checked", "unsafe")):
            raise InvalidArgumentError(f"ReplayBuffer(cast={cast!r}): expected 'checked' or 'unsafe'")
        self._cast: Cast = cast
        self._row_spec: Spec | None = None  # the spec _row_nbytes was computed for
        self._row_nbytes = 0
        self.sampler: Sampler = sampler if sampler is not None else Uniform()
        self.admission: Admission = admission if admission is not None else Fifo()
        self.storage: Storage = storage if storage is not None else ColumnarStorage()
        needs_order = getattr(self.sampler, "needs_time_order", False)
        if needs_order and not self.admission.keeps_time_order:
            raise ReplayBankError(
                f"{type(self.sampler).__name__} needs items in arrival order; use admission=Fifo() "
                f"(got {type(self.admission).__name__})"
            )
        buffer_checks.bookkeeping_memory(self._capacity, self.sampler, self.admission)
        if seed is not None and not isinstance(seed, np.random.Generator):
            check_int(seed, "ReplayBuffer", "seed", low=0)
        self._rng = np.random.default_rng(seed)
        ring = self.admission.keeps_time_order
        self._table: SlotTable | RingTable = (
            RingTable(self._capacity) if ring else SlotTable(self._capacity)
        )
        self._lock = threading.RLock()
        self.admission.bind(self._capacity)
        self.sampler.bind(self._capacity)
        self._view = View(self._table, self.storage)
        self._castable: dict[tuple[str, np.dtype[Any]], bool] = {}
        if spec is not None:
            self.storage.allocate(self._capacity, as_spec(spec))

    # -- properties -----------------------------------------------------------------------------
    @property
    def capacity(self) -> int:
        return self._capacity

    @property
    def spec(self) -> Spec | None:
        return self.storage.spec

    def __len__(self) -> int:
        return self._table.size

    def __repr__(self) -> str:
        cols = ", ".join(self.spec or {})
        return (
            f"ReplayBuffer({len(self)}/{self._capacity}, columns=[{cols}], sampler={type(self.sampler).__name__}, "
            f"admission={type(self.admission).__name__}, storage={type(self.storage).__name__})"
        )

    # -- writing --------------------------------------------------------------------------------
    def extend(
        self, columns: Mapping[str, Any], *, priorities: Any = None, groups: Any = None
    ) -> np.ndarray:
        """Add a batch of items, one row per item in every column.

        Args:
            columns: column name -> array-like with a leading item axis (for ragged columns in a
                ``RaggedStorage``: a list of arrays).
            priorities: optional per-item priorities for prioritized samplers (finite, >= 0).
            groups: per-item integer group ids, required by ``GroupBalanced`` and ``Window``.

        Returns:
            int64 ids, one per input row, strictly increasing and never reused. Rows the admission
            policy did not keep still get an id; ``contains(ids)`` says which are stored.

        Raises:
            ReplayBankError: unknown, missing or mis-shaped columns, bad dtypes, bad priorities or
                groups. Nothing is stored when it raises.
        """
        with self._lock:
            spec = self.spec
            if spec is None:
                spec = infer_spec(columns, ragged=getattr(self.storage, "supports_ragged", False))
            n, rows = check_batch(spec, columns, self._cast)
            self.sampler.check_spec(spec)
            buffer_checks.rows(self.sampler, rows)
            prio = buffer_checks.priorities(self.sampler, priorities, n)
            grp = buffer_checks.groups(self.admission, groups, n)
            buffer_checks.id_space(self._table, self._capacity, n)
            if n == 0:
                return np.zeros(0, dtype=np.int64)
            if self.spec is None:
                self.storage.allocate(self._capacity, spec)
            return self._write(n, rows, prio, grp)

    def add(self, **item: Any) -> int:
        """Add one item given as keyword arguments (``buf.add(obs=o, action=a, reward=r)``).

        For priorities or groups use ``extend`` with a batch of one. Returns the item's id.
        """
        fast = self._add_fast(item)
        if fast is not None:
            return fast
        batch = {
            k: [v] if isinstance(v, (list, Ragged)) else np.asarray(v)[None]
            for k, v in item.items()
        }
        return int(self.extend(batch)[0])

    def _add_fast(self, item: dict[str, Any]) -> int | None:
        """The common RL case (FIFO, fixed columns, all present and well-formed) without building
        batch arrays; anything else returns None and takes the general path, which also raises
        the precise error."""
        spec = self.spec
        place_one = getattr(self.admission, "place_one", None)
        if spec is None or place_one is None or len(item) != len(spec):
            return None
        values = {}
        for name, col in spec.items():
            if col.ragged or name not in item:
                return None
            value = np.asarray(item[name])
            if value.shape != col.shape:
                return None
            if value.dtype != col.dtype:
                key = (name, value.dtype)
                ok = self._castable.get(key)
                if ok is None:
                    ok = self._castable[key] = self._cast == "unsafe" or bool(
                        np.can_cast(value.dtype, col.dtype, casting="same_kind")
                    )
                if not ok:
                    return None
                value = cast_to(value, col.dtype, f"column {name!r}", self._cast)
            values[name] = value
        rows = {k: v[None] for k, v in values.items()} if self.sampler.needs_rows else {}
        buffer_checks.rows(self.sampler, rows)
        with self._lock:
            buffer_checks.id_space(self._table, self._capacity, 1)
            slot = place_one()
            arrival = self._table.arrivals
            self.storage.write_one(slot, values)
            index = np.array([slot], dtype=np.int64)
            item_id = (arrival << self._table.shift) | slot
            self._table.fill(index, np.array([item_id]), arrival + 1)
            self.sampler.on_write(index, rows, None, self._view)
            return item_id

    def _write(
        self, n: int, rows: dict[str, Any], prio: np.ndarray | None, groups: np.ndarray | None
    ) -> np.ndarray:
        first = self._table.arrivals
        placement = self.admission.place(n, groups, self._rng)
        slots = placement.slots
        ids = self._table.make_ids(first + np.arange(n, dtype=np.int64), slots)
        keep = None if placement.run is not None else self._kept(slots)
        if keep is not None:
            rows = {
                k: [v[i] for i in keep] if isinstance(v, list) else v[keep] for k, v in rows.items()
            }
            slots = slots[keep]
            prio = None if prio is None else prio[keep]
        if len(placement.evict):
            self._table.evict(placement.evict)
            self.sampler.on_evict(placement.evict)
        self.storage.write(placement.run if placement.run is not None else slots, rows)
        self._table.fill(slots, ids if keep is None else ids[keep], first + n)
        self.sampler.on_write(slots, rows, prio, self._view)
        return ids

    @staticmethod
    def _kept(slots: np.ndarray) -> np.ndarray | None:
        """Indices of the items that end up stored (admitted, and not displaced later in the same
        batch), or None when that is all of them."""
        if len(slots) == 1:
            return None if slots[0] >= 0 else np.zeros(0, dtype=np.int64)
        admitted = np.flatnonzero(slots >= 0)
        # last occurrence of each slot wins: unique over the reversed order finds it
        last = admitted[::-1][np.unique(slots[admitted][::-1], return_index=True)[1]]
        if len(last) == len(slots):
            return None
        return np.sort(last)

    # -- reading --------------------------------------------------------------------------------
    def sample(self, batch_size: int) -> Batch:
        """Draw a batch; see the sampler for the distribution.

        Raises:
            EmptyBufferError: nothing is stored yet.
            ReplayBankError: ``batch_size`` is not positive, or exceeds the stored items for a
                sampler that never repeats an item within a batch.
        """
        batch_size = buffer_checks.positive_int(batch_size, "batch_size")
        if self.spec is not self._row_spec:  # per-row bytes, computed once per spec
            self._row_nbytes, self._row_spec = buffer_checks.row_nbytes(self.spec, self.sampler), self.spec
        buffer_checks.batch_memory(batch_size, self._row_nbytes)
        with self._lock:
            slots, weights = self.sampler.sample(batch_size, self._view, self._rng)
            if isinstance(slots, Ragged):  # whole episodes: every column comes back ragged
                flat = self.storage.read(slots.values)
                data: dict[str, np.ndarray | Ragged] = {
                    k: v if isinstance(v, Ragged) else Ragged(v, slots.offsets)
                    for k, v in flat.items()
                }
                return Batch(data, Ragged(self._table.ids_of(slots.values), slots.offsets), weights)
            return Batch(self.storage.read(slots), self._table.ids_of(slots), weights)

    def update_priorities(self, ids: Any, priorities: Any) -> int:
        """Set new priorities for sampled items (e.g. |TD error|).

        Ids whose item has since been overwritten or evicted are skipped. Returns how many ids
        were applied. Raises ``ReplayBankError`` for ids this buffer never issued, for priorities
        that are NaN, infinite or negative, or when the sampler has no priorities.
        """
        try:
            ids = np.asarray(ids.values if isinstance(ids, Ragged) else ids)
        except (ValueError, TypeError) as err:
            raise InvalidTypeError(f"update_priorities: ids must be integers ({err})") from None
        if ids.dtype.kind not in "iu":
            raise InvalidTypeError(f"update_priorities: ids must be integers, got dtype {ids.dtype}")
        limit = getattr(self.sampler, "priority_limit", np.inf)
        p = check_priorities(priorities, ids.size, limit=limit)
        with self._lock:
            slots, live = self._table.slots_of(ids)
            applied = int(np.count_nonzero(live))
            if applied < len(live):  # the common case, every id still stored, needs no masking
                slots, p = slots[live], p[live]
            # repeated ids are passed on in order: samplers apply them so the last one wins
            self.sampler.update_priorities(slots, p)
            return applied

    def contains(self, ids: Any) -> np.ndarray:
        """Boolean per id: is that item still stored?"""
        with self._lock:
            return self._table.slots_of(ids)[1]

    def get(self, ids: Any) -> dict[str, np.ndarray | Ragged]:
        """The stored rows of ``ids`` (all must still be stored)."""
        with self._lock:
            slots, live = self._table.slots_of(ids)
            if not live.all():
                raise ReplayBankError(
                    f"ids {np.asarray(ids).ravel()[~live][:5].tolist()} are no longer stored"
                )
            return self.storage.read(slots)

    # -- state ----------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue exactly: data, slot table, sampler, admission, RNG.

        A consistent snapshot taken under the lock: every array is a copy, so later writes do
        not change it. Fixed columns hold the rows of slots ``[0, table.high)``, zeros for empty
        slots; ragged columns are ``Ragged`` rows of the same slots.
        """
        from .buffer_state import snapshot

        return snapshot(self)

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore a ``state_dict`` into a buffer built with the same capacity and components.

        Every part is checked before anything changes (see ``replaybank.buffer_state``).

        Raises:
            ReplayBankError: a missing, unknown or invalid key, named in the message; the buffer
                is unchanged.
        """
        from .buffer_state import restore

        restore(self, state)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the buffer to directory ``path`` atomically (see ``replaybank.persist``)."""
        from .persist import save

        save(self, path)

    @classmethod
    def load(
        cls,
        path: str | os.PathLike[str],
        *,
        mmap: bool | None = None,
        directory: str | os.PathLike[str] | None = None,
    ) -> ReplayBuffer:
        """Load a buffer written by ``save``, after checking every checksum and every field.

        Args:
            path: the directory ``save`` wrote.
            mmap: map fixed columns copy-on-write from the saved files instead of reading them
                into RAM (the save is never modified; pages written later become private
                memory). ``None`` (default): map when the buffer was saved from a
                ``MemmapStorage``, read otherwise.
            directory: come back as ``MemmapStorage(directory)``: the columns are copied into
                ``directory`` and mapped read-write there, like the buffer that was saved.

        Raises:
            CorruptSaveError: the save is incomplete, altered, or not a save this replaybank
                wrote; the message names the file and key. See ``replaybank.persist``.
        """
        from .persist import load

        return load(path, cls, mmap=mmap, directory=directory)
