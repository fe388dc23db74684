"""Slot tables: which item id each slot holds, and how item ids map back to slots.

Item ids are what users see; slots are internal. An id encodes its arrival number and its slot,
``id = (arrival << shift) | slot``, so ids grow strictly with arrival, are never reused, and the
slot of an id is found in O(1) without a dictionary (which would cost ~100 bytes per item). An id
whose slot now holds another id was overwritten. Items that were not admitted get the sentinel slot
``capacity``, which no stored item ever has.

Two tables share one interface: ``SlotTable`` keeps an explicit id per slot (any admission policy);
``RingTable`` is for FIFO admission, where arrival ``a`` always lands in slot ``a % capacity``, so
ids follow from the arrival counter and no per-slot memory is needed at all.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from .errors import ReplayBankError
from .schema import array, fields, integer


class _Ids:
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.shift = int(capacity).bit_length()  # 1 << shift > capacity, so the sentinel fits
        self.mask = (1 << self.shift) - 1
        self.size = 0
        self.high = 0  # one past the highest slot ever filled; occupied == [0, high) when dense
        self.arrivals = 0  # items ever offered

    @property
    def dense(self) -> bool:
        """True when the stored items fill slots ``[0, size)`` exactly (no holes)."""
        return self.size == self.high

    def make_ids(self, arrivals: np.ndarray, slots: np.ndarray) -> np.ndarray:
        return (arrivals << self.shift) | np.where(slots >= 0, slots, self.capacity)

    def slots_of(self, ids: Any) -> tuple[np.ndarray, np.ndarray]:
        """Map ids to slots. Returns ``(slots, live)``: ``live`` is False for ids whose item was
        overwritten, evicted or never admitted. Raises for ids this buffer never issued."""
        ids = np.asarray(ids)
        if ids.dtype.kind not in "iu":
            raise ReplayBankError(f"ids must be integers, got dtype {ids.dtype}")
        ids = ids.astype(np.int64, copy=False).ravel()
        slots = ids & self.mask
        bad = (ids < 0) | (slots > self.capacity) | ((ids >> self.shift) >= self.arrivals)
        if bad.any():
            raise ReplayBankError(
                f"ids {ids[bad][:5].tolist()} were never issued by this buffer (ids come from extend/add/sample)"
            )
        live = slots < self.capacity
        live[live] = self.ids_of(slots[live]) == ids[live]
        return slots, live

    def ids_of(self, slots: np.ndarray) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    remembered: Any = None  # the ids ``remember`` keeps (a ring's only)

    def remember(self, ids: Any, slots: Any) -> None:
        """A ring keeps a sampled batch's ids and slots for ``recall``; a slot table does not."""
        return None

    def recall(self, ids: Any) -> np.ndarray | None:
        """The slots ``remember`` kept for ``ids``, or None (always, in a slot table)."""
        return None

    @property
    def max_arrivals(self) -> int:
        """The most arrivals whose ids still fit in int64."""
        return (2**63 - 1) >> self.shift


class SlotTable(_Ids):
    """An explicit id per slot (``-1`` = empty): works with every admission policy."""

    def __init__(self, capacity: int) -> None:
        super().__init__(capacity)
        self.ids = np.full(capacity, -1, dtype=np.int64)
        self._occupied: np.ndarray | None = None

    def fill(self, slots: np.ndarray, ids: np.ndarray, arrivals: int) -> None:
        """Record ``ids`` in ``slots`` (slots unique); ``arrivals`` is the new arrival count."""
        self.size += int(np.count_nonzero(self.ids[slots] < 0))
        self.ids[slots] = ids
        if len(slots):
            self.high = max(self.high, int(slots.max()) + 1)
        self.arrivals = arrivals
        self._occupied = None

    def evict(self, slots: np.ndarray) -> None:
        self.size -= int(np.count_nonzero(self.ids[slots] >= 0))
        self.ids[slots] = -1
        self._occupied = None

    def occupied(self) -> np.ndarray:
        """Occupied slots in increasing order (cached until the next change)."""
        if self._occupied is None:
            self._occupied = (
                np.arange(self.size, dtype=np.int64)
                if self.dense
                else np.flatnonzero(self.ids[: self.high] >= 0)
            )
        return self._occupied

    def ids_of(self, slots: np.ndarray) -> np.ndarray:
        return self.ids[slots]

    def state_dict(self) -> dict[str, Any]:
        return {"ids": self.ids, "size": self.size, "high": self.high, "arrivals": self.arrivals}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore ``state_dict`` output after checking it is a table this buffer could have made:
        every id is -1 or encodes its own slot and an arrival before ``arrivals``, no arrival
        twice, ``size`` counts the ids, no id at or above ``high``. Raises ``ReplayBankError``
        naming the key; nothing changes unless every check passes."""
        fields(state, "table", ("ids", "size", "high", "arrivals"))
        ids = array(state["ids"], "table.ids", np.int64, (self.capacity,))
        arrivals = integer(state["arrivals"], "table.arrivals", 0, self.max_arrivals)
        size = integer(state["size"], "table.size", 0, min(self.capacity, arrivals))
        high = integer(state["high"], "table.high", size, self.capacity)
        live = ids >= 0
        slot = np.arange(self.capacity, dtype=np.int64)
        bad = (ids < -1) | (live & (((ids & self.mask) != slot) | ((ids >> self.shift) >= arrivals)))
        if bad.any():
            i = int(np.argmax(bad))
            raise ReplayBankError(
                f"table.ids[{i}] = {int(ids[i])}: not an id of slot {i} issued before arrival {arrivals}"
            )
        if int(live.sum()) != size:
            raise ReplayBankError(f"table.size = {size}, but table.ids holds {int(live.sum())} ids")
        if live[high:].any():
            raise ReplayBankError(f"table.high = {high}, but slot {high + int(np.argmax(live[high:]))} holds an id")
        if len(np.unique(ids[live] >> self.shift)) != size:
            raise ReplayBankError("table.ids: two slots hold items of the same arrival")
        self.ids[:] = ids
        self.size, self.high, self.arrivals = size, high, arrivals
        self._occupied = None


def kept(slots: np.ndarray) -> np.ndarray | None:
    """Indices of a placement's items that end up stored (admitted, and not displaced later in
    the same batch), or None when that is all of them.

    >>> kept(np.array([3, -1, 3, 4]))
    array([2, 3])
    """
    if len(slots) == 1:
        return None if slots[0] >= 0 else np.zeros(0, dtype=np.int64)
    admitted = np.flatnonzero(slots >= 0)
    # last occurrence of each slot wins: unique over the reversed order finds it
    last = admitted[::-1][np.unique(slots[admitted][::-1], return_index=True)[1]]
    if len(last) == len(slots):
        return None
    return np.sort(last)


def _ring_kernels() -> Any:
    """The compiled maps of ``_ring_kernels`` (None without numba, or when REPLAYBANK_KERNELS=numpy
    asks for the numpy fallback, as for the sum trees)."""
    if os.environ.get("REPLAYBANK_KERNELS", "").lower() == "numpy":
        return None
    try:
        from . import _ring_kernels
    except ImportError:
        return None
    return _ring_kernels


class RingTable(_Ids):
    """FIFO admission: arrival ``a`` is in slot ``a % capacity``; ids are computed, not stored.

    ``base`` is the first arrival of the current fill: 0, or after ``restart`` (``clear()``) a
    multiple of the capacity, so that arrival ``base`` lands in slot 0 and the stored items again
    fill slots ``[0, size)``.
    """

    def __init__(self, capacity: int) -> None:
        super().__init__(capacity)
        self.base = 0
        self._kernels = _ring_kernels()

    def fill(self, slots: np.ndarray, ids: np.ndarray, arrivals: int) -> None:
        self.advance(arrivals)

    def advance(self, arrivals: int) -> None:
        """``fill`` without slots (a ring's slots follow from the arrival count)."""
        self.arrivals = arrivals
        size = arrivals - self.base
        self.size = self.high = size if size < self.capacity else self.capacity

    def restart(self, base: int) -> None:
        """Empty the ring; the next arrival is ``base`` (a multiple of the capacity, not below
        ``arrivals``), so no id issued before is issued again."""
        if base % self.capacity or base < self.arrivals:
            raise ReplayBankError(f"RingTable.restart({base}): not a multiple of {self.capacity} >= {self.arrivals}")
        self.base = base
        self.fill(np.zeros(0, np.int64), np.zeros(0, np.int64), base)

    def evict(self, slots: np.ndarray) -> None:
        if len(slots):
            raise ReplayBankError("a FIFO ring never evicts")

    def occupied(self) -> np.ndarray:
        return np.arange(self.size, dtype=np.int64)

    def slots_of(self, ids: Any) -> tuple[np.ndarray, np.ndarray]:
        # Specialised for the hot path of update_priorities: the slot of arrival a is a % capacity,
        # and an item is live while it is among the last `size` arrivals.
        ids = np.asarray(ids)
        if ids.dtype.kind not in "iu":
            raise ReplayBankError(f"ids must be integers, got dtype {ids.dtype}")
        ids = ids.astype(np.int64, copy=False).ravel()
        if self._kernels is not None:
            slots, live, ok = self._kernels.ring_slots(
                ids, self.shift, self.mask, self.capacity, self.arrivals, self.size
            )
            return (slots, live) if ok else super().slots_of(ids)
        slots = ids & self.mask
        arrival = ids >> self.shift
        if len(ids) and (
            ids.min() < 0
            or arrival.max() >= self.arrivals
            or not (arrival % self.capacity == slots).all()
        ):
            return super().slots_of(ids)  # the general path names the ids that were never issued
        return slots, arrival >= self.arrivals - self.size

    def remember(self, ids: Any, slots: Any) -> None:
        """Keep the sampled ``ids`` (int64, made read-only) and their ``slots``: ``recall(ids)``
        gives the slots back without checking the ids while nothing is written."""
        if isinstance(ids, np.ndarray) and isinstance(slots, np.ndarray):
            ids.flags.writeable = False  # the ids cannot change, so neither can their slots
            self.remembered, self._recall = ids, (slots, self.arrivals, self.size)

    def recall(self, ids: Any) -> np.ndarray | None:
        """The slots of the ids last ``remember``-ed, all still stored, if ``ids`` is that array
        and nothing was written or cleared since (in a ring, the arrival count and the size
        decide which ids are stored); else None (``slots_of`` decides)."""
        if ids is not self.remembered:
            return None
        slots, arrivals, size = self._recall
        return slots if arrivals == self.arrivals and size == self.size else None

    def ids_of(self, slots: np.ndarray) -> np.ndarray:
        slots = np.asarray(slots, dtype=np.int64)
        if self._kernels is not None:
            flat = np.ascontiguousarray(slots).reshape(-1)
            ids = self._kernels.ring_ids(flat, self.shift, self.capacity, self.arrivals, self.size)
            return ids.reshape(slots.shape)  # type: ignore[no-any-return]
        last = self.arrivals - 1
        arrival = last - (last - slots) % self.capacity  # the latest arrival that went to this slot
        return np.where(slots < self.size, (arrival << self.shift) | slots, -1)

    def state_dict(self) -> dict[str, Any]:
        # "base" only after a clear(), so saves of buffers never cleared read as they always did
        return {"arrivals": self.arrivals, "base": self.base} if self.base else {"arrivals": self.arrivals}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        fields(state, "table", ("arrivals",), ("base",))
        arrivals = integer(state["arrivals"], "table.arrivals", 0, self.max_arrivals)
        base = integer(state.get("base", 0), "table.base", 0, arrivals)
        if base % self.capacity:
            raise ReplayBankError(f"table.base = {base}: not a multiple of the capacity {self.capacity}")
        self.base = base
        self.fill(np.zeros(0, np.int64), np.zeros(0, np.int64), arrivals)
