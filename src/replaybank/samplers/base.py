"""The sampler protocol, and the view of the buffer a sampler gets."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from ..checks import check_state_keys
from ..errors import EmptyBufferError, ReplayBankError
from ..ragged import Ragged
from ..slots import RingTable, SlotTable
from ..spec import Spec
from ..storage import Storage


@dataclass
class View:
    """What a sampler may look at: the slot table and the storage."""

    table: SlotTable | RingTable
    storage: Storage

    @property
    def next_arrival(self) -> int:
        return self.table.arrivals


@runtime_checkable
class Sampler(Protocol):
    """Chooses slots to read. The buffer calls, in this order: ``bind`` once, then for every
    write ``on_evict`` (slots freed) and ``on_write`` (slots filled), and ``sample`` /
    ``update_priorities`` as asked. All state is in ``state_dict`` for exact resume."""

    can_repeat: bool  # may one batch hold the same item twice?
    uses_priorities: bool
    needs_rows: bool  # does on_write read the written rows?
    needs_time_order: bool  # does it read items in arrival order (a FIFO ring)?
    bytes_per_slot: int  # bookkeeping bytes per slot, checked against memory before binding
    priority_limit: float  # the largest priority extend and update_priorities accept
    length: int | None  # steps per sampled row (trajectory slices); None: one

    def bind(self, capacity: int) -> None: ...

    def check_spec(self, spec: Spec) -> None: ...

    def check_rows(self, rows: dict[str, Any]) -> None: ...

    def on_write(
        self, slots: np.ndarray, rows: dict[str, Any], priorities: np.ndarray | None, view: View
    ) -> None: ...

    def on_write_one(self, slot: int, view: View) -> None: ...

    def on_evict(self, slots: np.ndarray) -> None: ...

    def on_clear(self) -> None: ...

    def sample(
        self, batch_size: int, view: View, rng: np.random.Generator
    ) -> tuple[np.ndarray | Ragged, np.ndarray | None]: ...

    def update_priorities(self, slots: np.ndarray, priorities: np.ndarray) -> None: ...

    def update_checked(self, slots: np.ndarray, priorities: Any) -> bool: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...

    def check_table(self, table: SlotTable | RingTable) -> None: ...


class SamplerBase:
    """Defaults shared by the samplers: no per-write bookkeeping, no priorities, no state."""

    can_repeat = True
    uses_priorities = False
    needs_rows = False
    needs_time_order = False
    bytes_per_slot = 0
    priority_limit = math.inf
    length: int | None = None

    def bind(self, capacity: int) -> None:
        self.capacity = capacity

    def check_spec(self, spec: Spec) -> None:
        """Raise if the buffer's columns lack something this sampler needs (before any write)."""
        return None

    def check_rows(self, rows: dict[str, Any]) -> None:
        """Raise if written row values are ones this sampler refuses (before anything is stored)."""
        return None

    def on_write(
        self, slots: np.ndarray, rows: dict[str, Any], priorities: np.ndarray | None, view: View
    ) -> None:
        return None

    def on_write_one(self, slot: int, view: View) -> None:
        """One item written into ``slot`` by the per-step path (``ReplayBuffer.add`` into a FIFO
        ring, no priority given, for a sampler that reads no rows). By default ``on_write`` of a
        one-slot batch; a sampler may take it without building arrays (``Prioritized``)."""
        self.on_write(np.array([slot], dtype=np.int64), {}, None, view)

    def on_evict(self, slots: np.ndarray) -> None:
        return None

    def on_clear(self) -> None:
        """Start over after ``ReplayBuffer.clear()``: the state a freshly bound sampler has."""
        self.bind(self.capacity)

    def update_priorities(self, slots: np.ndarray, priorities: np.ndarray) -> None:
        raise ReplayBankError(
            f"{type(self).__name__} sampling has no priorities; use Prioritized or PrioritizedReshuffled"
        )

    def update_checked(self, slots: np.ndarray, priorities: Any) -> bool:
        """``update_priorities`` of unchecked priorities in one pass, if this sampler can check
        them as it sets them; False (nothing changed) sends the caller the general way."""
        return False

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        check_state_keys(state, type(self).__name__, ())

    def check_table(self, table: SlotTable | RingTable) -> None:
        """Raise ``ReplayBankError`` if the loaded state disagrees with the restored slot table."""
        return None


def check_can_sample(batch_size: int, view: View, can_repeat: bool, who: str) -> None:
    if view.table.size == 0:
        raise EmptyBufferError("cannot sample from an empty buffer; extend() it first")
    if not can_repeat and batch_size > view.table.size:
        raise ReplayBankError(
            f"batch_size={batch_size} is larger than the {view.table.size} stored items and {who} "
            "never repeats an item within a batch; lower batch_size or use Uniform"
        )


def last_wins(slots: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Drop repeated slots, keeping the value given last for each."""
    if len(slots) < 2:
        return slots, values
    last = len(slots) - 1 - np.unique(slots[::-1], return_index=True)[1]
    return slots[last], values[last]


def uniform_slots(n: int, view: View, rng: np.random.Generator) -> np.ndarray:
    """``n`` occupied slots drawn uniformly with replacement."""
    table = view.table
    if table.dense:
        return rng.integers(0, table.size, size=n)
    occupied = table.occupied()
    return occupied[rng.integers(0, len(occupied), size=n)]
