"""The slot table: which item id each slot holds, and how items ids map back to slots.

Item ids are what users see; slots are internal. An id encodes its arrival number and its slot,
``id = (arrival << shift) | slot``, so ids grow strictly with arrival, are never reused, and the
slot of an id is found in O(1) without a dictionary (which would cost ~100 bytes per item). An id
whose slot now holds another id was overwritten. Items that were not admitted get the sentinel slot
``capacity``, which no stored item ever has.
"""

from __future__ import annotations

import numpy as np

from .errors import ReplayBankError


class SlotTable:
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.shift = int(capacity).bit_length()  # 1 << shift > capacity, so the sentinel fits
        self.mask = (1 << self.shift) - 1
        self.ids = np.full(capacity, -1, dtype=np.int64)
        self.size = 0
        self.high = 0  # one past the highest slot ever filled; occupied == [0, high) when dense
        self._occupied: np.ndarray | None = None

    @property
    def dense(self) -> bool:
        """True when the stored items fill slots ``[0, size)`` exactly (no holes)."""
        return self.size == self.high

    def make_ids(self, arrivals: np.ndarray, slots: np.ndarray) -> np.ndarray:
        return (arrivals << self.shift) | np.where(slots >= 0, slots, self.capacity)

    def fill(self, slots: np.ndarray, ids: np.ndarray) -> None:
        """Record ``ids`` in ``slots`` (slots unique)."""
        self.size += int(np.count_nonzero(self.ids[slots] < 0))
        self.ids[slots] = ids
        if len(slots):
            self.high = max(self.high, int(slots.max()) + 1)
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

    def slots_of(self, ids: np.ndarray, *, next_arrival: int) -> tuple[np.ndarray, np.ndarray]:
        """Map ids to slots. Returns ``(slots, live)``: ``live`` is False for ids whose item was
        overwritten, evicted or never admitted. Raises for ids this buffer never issued."""
        ids = np.asarray(ids)
        if ids.dtype.kind not in "iu":
            raise ReplayBankError(f"ids must be integers, got dtype {ids.dtype}")
        ids = ids.astype(np.int64, copy=False).ravel()
        slots = ids & self.mask
        bad = (ids < 0) | (slots > self.capacity) | ((ids >> self.shift) >= next_arrival)
        if bad.any():
            raise ReplayBankError(
                f"ids {ids[bad][:5].tolist()} were never issued by this buffer (ids come from extend/add/sample)"
            )
        live = slots < self.capacity
        live[live] = self.ids[slots[live]] == ids[live]
        return slots, live

    def state_dict(self) -> dict[str, object]:
        return {"ids": self.ids, "size": self.size, "high": self.high}

    def load_state_dict(self, state: dict[str, object]) -> None:
        self.ids[:] = np.asarray(state["ids"])
        self.size = int(state["size"])  # type: ignore[call-overload]
        self.high = int(state["high"])  # type: ignore[call-overload]
        self._occupied = None
