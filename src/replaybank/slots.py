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

from typing import Any

import numpy as np

from .errors import ReplayBankError


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
        self.ids[:] = np.asarray(state["ids"])
        self.size = int(state["size"])
        self.high = int(state["high"])
        self.arrivals = int(state["arrivals"])
        self._occupied = None


class RingTable(_Ids):
    """FIFO admission: arrival ``a`` is in slot ``a % capacity``; ids are computed, not stored."""

    def fill(self, slots: np.ndarray, ids: np.ndarray, arrivals: int) -> None:
        self.arrivals = arrivals
        self.size = self.high = min(arrivals, self.capacity)

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
        slots = ids & self.mask
        arrival = ids >> self.shift
        if len(ids) and (
            ids.min() < 0
            or arrival.max() >= self.arrivals
            or not (arrival % self.capacity == slots).all()
        ):
            return super().slots_of(ids)  # the general path names the ids that were never issued
        return slots, arrival >= self.arrivals - self.size

    def ids_of(self, slots: np.ndarray) -> np.ndarray:
        slots = np.asarray(slots, dtype=np.int64)
        last = self.arrivals - 1
        arrival = last - (last - slots) % self.capacity  # the latest arrival that went to this slot
        return np.where(slots < self.size, (arrival << self.shift) | slots, -1)

    def state_dict(self) -> dict[str, Any]:
        return {"arrivals": self.arrivals}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.fill(np.zeros(0, np.int64), np.zeros(0, np.int64), int(state["arrivals"]))
