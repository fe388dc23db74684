"""Admission policies: which slot each incoming item takes, and which stored items make way.

An admission policy only decides placement; the buffer does the writing. ``place`` returns one slot
per incoming item (``-1`` = not admitted) and the slots to free first. Within one call, items are
placed in order, so a later item may take the slot an earlier one just got (it then wins).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

from .checks import check_int, check_members_occupied, check_state_keys, state_array, state_number
from .errors import InvalidStateError, ReplayBankError


@dataclass
class Placement:
    slots: np.ndarray  # int64, one per incoming item, -1 where not admitted
    evict: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    run: slice | None = None  # set when every item is admitted into consecutive slots


@runtime_checkable
class Admission(Protocol):
    requires_groups: bool
    keeps_time_order: bool  # slot == arrival index modulo capacity (what trajectory sampling needs)
    bytes_per_slot: int  # bookkeeping bytes per slot, checked against memory before binding

    def bind(self, capacity: int) -> None: ...

    def place(self, n: int, groups: np.ndarray | None, rng: np.random.Generator) -> Placement: ...

    def place_one(self) -> int: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...

    def check_table(self, table: Any) -> None: ...


class AdmissionBase:
    """Defaults shared by the admission policies: no per-slot bookkeeping, batches only."""

    bytes_per_slot = 0

    def place_one(self) -> int:
        """The slot of one more item, for a policy that places single items without arrays
        (the buffer's per-step path takes it only where a policy overrides this)."""
        raise ReplayBankError(f"{type(self).__name__} admission places items in batches only")

    def check_table(self, table: Any) -> None:
        """Raise ``ReplayBankError`` if the loaded state disagrees with the restored slot table."""
        return None


class Fifo(AdmissionBase):
    """Ring buffer: item ``t`` of the stream goes to slot ``t % capacity``; the oldest is overwritten."""

    requires_groups = False
    keeps_time_order = True

    def __init__(self) -> None:
        self.capacity = 0
        self.count = 0  # items placed so far

    def bind(self, capacity: int) -> None:
        self.capacity = capacity

    def place(self, n: int, groups: np.ndarray | None, rng: np.random.Generator) -> Placement:
        start = self.count % self.capacity
        self.count += n
        if start + n <= self.capacity:  # no wrap: a plain slice write, no index arrays needed
            return Placement(
                np.arange(start, start + n, dtype=np.int64), run=slice(start, start + n)
            )
        return Placement((start + np.arange(n, dtype=np.int64)) % self.capacity)

    def place_one(self) -> int:
        slot = self.count % self.capacity
        self.count += 1
        return slot

    def state_dict(self) -> dict[str, Any]:
        return {"count": self.count}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        check_state_keys(state, "Fifo", ("count",))
        self.count = state_number(state, "count", "Fifo", integer=True, low=0)


class Reservoir(AdmissionBase):
    """Reservoir sampling (Vitter's Algorithm R): after ``t`` items, each is stored with probability
    ``capacity / t``, independently of when it came. Vectorised: one random draw per batch.
    """

    requires_groups = False
    keeps_time_order = False

    def __init__(self) -> None:
        self.capacity = 0
        self.seen = 0

    def bind(self, capacity: int) -> None:
        self.capacity = capacity

    def place(self, n: int, groups: np.ndarray | None, rng: np.random.Generator) -> Placement:
        index = self.seen + np.arange(n, dtype=np.int64)  # position of each item in the stream
        slots = index.copy()
        full = index >= self.capacity
        if full.any():
            draw = rng.integers(0, index[full] + 1)  # uniform on [0, t]
            slots[full] = np.where(draw < self.capacity, draw, -1)
        self.seen += n
        return Placement(slots)

    def state_dict(self) -> dict[str, Any]:
        return {"seen": self.seen}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        check_state_keys(state, "Reservoir", ("seen",))
        self.seen = state_number(state, "seen", "Reservoir", integer=True, low=0)


class _Members:
    """Slots per group with O(1) add, remove and random pick (a list plus each slot's position)."""

    def __init__(self, capacity: int) -> None:
        self.group_of = np.full(capacity, -1, dtype=np.int64)
        self.position = np.zeros(capacity, dtype=np.int64)
        self.slots: dict[int, list[int]] = {}

    def add(self, slot: int, group: int) -> None:
        members = self.slots.setdefault(group, [])
        self.group_of[slot] = group
        self.position[slot] = len(members)
        members.append(slot)

    def remove(self, slot: int) -> int:
        group = int(self.group_of[slot])
        members = self.slots[group]
        i, last = int(self.position[slot]), members[-1]
        members[i] = last
        self.position[last] = i
        members.pop()
        self.group_of[slot] = -1
        return group

    def count(self, group: int) -> int:
        return len(self.slots.get(group, ()))

    def state_dict(self) -> dict[str, Any]:
        # The list order matters: random picks index into it, so exact resume needs it verbatim.
        return {str(g): np.asarray(s, dtype=np.int64) for g, s in self.slots.items()}

    @staticmethod
    def check_state(state: Any, who: str, capacity: int) -> dict[int, np.ndarray]:
        """Group -> member slots, checked: integer group keys, slots in range, no slot twice."""
        if not isinstance(state, Mapping):
            raise InvalidStateError(f"{who} state['members']: expected a mapping, got {type(state).__name__}")
        members: dict[int, np.ndarray] = {}
        for key in state:
            try:
                group = int(key)
            except (TypeError, ValueError):
                raise InvalidStateError(f"{who} state['members']: group key {key!r} is not an integer") from None
            n = len(np.asarray(state[key]).reshape(-1))
            members[group] = state_array(
                state, key, f"{who} members", shape=(n,), integer=True, low=0, high=capacity - 1
            )
        every = np.concatenate([np.zeros(0, np.int64), *members.values()])
        if len(np.unique(every)) != len(every):
            raise InvalidStateError(f"{who} state['members']: a slot is listed twice")
        return members

    def check_table(self, table: Any, who: str) -> None:
        """The member slots must be exactly the slots ``table`` holds items in."""
        every = [np.asarray(s, dtype=np.int64) for s in self.slots.values()]
        check_members_occupied(np.concatenate([np.zeros(0, np.int64), *every]), table, who, "members")

    def load_state_dict(self, state: dict[int, np.ndarray]) -> None:
        self.group_of[:] = -1
        self.slots = {}
        for group, slots in state.items():
            for slot in slots.tolist():
                self.add(int(slot), group)


def _check_groups(groups: np.ndarray | None, who: str) -> np.ndarray:
    if groups is None:
        raise ReplayBankError(
            f"{who} admission needs groups=: pass one integer group id per item to extend()"
        )
    return groups


class GroupBalanced(AdmissionBase):
    """An equal share of the capacity per group (class, task, generation), a reservoir inside each.

    When the buffer is full, an item of a group holding fewer than the largest group's count takes
    a random slot of the largest group; an item of a largest group replaces a random member of its
    own group with probability ``stored / seen`` (class-balanced reservoir sampling, Chrysakis &
    Moens 2020). Groups thus converge to ``capacity // n_groups`` each, and each group's stored
    items are a uniform sample of that group's stream.
    """

    bytes_per_slot = 16

    requires_groups = True
    keeps_time_order = False

    def __init__(self) -> None:
        self.capacity = 0
        self.size = 0
        self.seen: dict[int, int] = {}
        self.members: _Members | None = None

    def bind(self, capacity: int) -> None:
        self.capacity = capacity
        self.members = _Members(capacity)

    def place(self, n: int, groups: np.ndarray | None, rng: np.random.Generator) -> Placement:
        groups = _check_groups(groups, "GroupBalanced")
        members = self.members
        if members is None:
            raise ReplayBankError("GroupBalanced is not bound to a buffer")
        slots = np.full(n, -1, dtype=np.int64)
        for k, g in enumerate(groups.tolist()):
            seen = self.seen[g] = self.seen.get(g, 0) + 1
            if self.size < self.capacity:
                slot = self.size
                self.size += 1
            else:
                largest = max(members.slots, key=lambda h: (members.count(h), -h))
                if members.count(g) < members.count(largest):
                    pool = members.slots[largest]
                    slot = pool[int(rng.integers(len(pool)))]
                else:
                    j = int(rng.integers(seen))
                    if j >= members.count(g):
                        continue
                    slot = members.slots[g][j]
                members.remove(slot)
            members.add(slot, g)
            slots[k] = slot
        return Placement(slots)

    def group_counts(self) -> dict[int, int]:
        members = self.members
        return {} if members is None else {g: len(s) for g, s in members.slots.items() if s}

    def state_dict(self) -> dict[str, Any]:
        members = self.members.state_dict() if self.members is not None else {}
        return {
            "size": self.size,
            "seen": {str(g): c for g, c in self.seen.items()},
            "members": members,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        who = "GroupBalanced"
        if self.members is None:
            raise ReplayBankError("GroupBalanced is not bound to a buffer")
        check_state_keys(state, who, ("size", "seen", "members"))
        size = state_number(state, "size", who, integer=True, low=0, high=self.capacity)
        if not isinstance(state["seen"], Mapping):
            raise InvalidStateError(f"{who} state['seen']: expected a mapping of group -> items seen")
        seen = {}
        for key in state["seen"]:
            try:
                group = int(key)
            except (TypeError, ValueError):
                raise InvalidStateError(f"{who} state['seen']: group key {key!r} is not an integer") from None
            seen[group] = state_number(state["seen"], key, f"{who} seen", integer=True, low=0)
        members = _Members.check_state(state["members"], who, self.capacity)
        stored = sum(len(m) for m in members.values())
        if stored != size or any(len(m) > seen.get(g, 0) for g, m in members.items()):
            raise InvalidStateError(
                f"{who} state: {stored} member slots for size {size}, or a group holding more items than it has seen"
            )
        self.size, self.seen = size, seen
        self.members.load_state_dict(members)

    def check_table(self, table: Any) -> None:
        """The member slots must be the slots the restored table holds items in."""
        if self.members is not None:
            self.members.check_table(table, "GroupBalanced")


class Window(AdmissionBase):
    """Keep only the items of the last ``k`` groups (e.g. generations), oldest-first within capacity.

    Groups are identified by their first arrival: when an item of a new group makes more than ``k``
    groups present, every item of the earliest-arrived group is evicted. Inside the window, free
    slots are used first, then the oldest item is overwritten.
    """

    bytes_per_slot = 32

    requires_groups = True
    keeps_time_order = False

    def __init__(self, k: int) -> None:
        self.k = check_int(k, "Window", "k", low=1)  # the groups to keep
        self.capacity = 0
        self.order: deque[int] = deque()  # group ids present, by first arrival
        self.free: list[int] = []
        self.queue: deque[tuple[int, int]] = deque()  # (stamp, slot) by arrival, with stale entries
        self.stamp = np.zeros(0, dtype=np.int64)
        self.clock = 0
        self.members: _Members | None = None

    def bind(self, capacity: int) -> None:
        self.capacity = capacity
        self.free = list(range(capacity - 1, -1, -1))
        self.stamp = np.full(capacity, -1, dtype=np.int64)
        self.members = _Members(capacity)

    def _release(self, members: _Members, slot: int) -> None:
        members.remove(slot)
        self.stamp[slot] = -1

    def place(self, n: int, groups: np.ndarray | None, rng: np.random.Generator) -> Placement:
        groups = _check_groups(groups, "Window")
        members = self.members
        if members is None:
            raise ReplayBankError("Window is not bound to a buffer")
        slots = np.full(n, -1, dtype=np.int64)
        evicted: list[int] = []
        placed: dict[int, int] = {}  # slot -> the item of this call that holds it now
        for i, g in enumerate(groups.tolist()):
            if g not in self.order:
                self.order.append(g)
                while len(self.order) > self.k:
                    old = self.order.popleft()
                    for slot in list(members.slots.get(old, ())):
                        self._release(members, slot)
                        self.free.append(slot)
                        evicted.append(slot)
                        if slot in placed:  # an item of this call, evicted with its group
                            slots[placed.pop(slot)] = -1
            if self.free:
                slot = self.free.pop()
            else:
                while (
                    True
                ):  # oldest live entry; stale ones (slot since released/reused) are skipped
                    stamp, slot = self.queue.popleft()
                    if self.stamp[slot] == stamp:
                        break
                self._release(members, slot)
            members.add(slot, g)
            self.stamp[slot] = self.clock
            self.queue.append((self.clock, slot))
            self.clock += 1
            if slot in placed:  # an earlier item of this call held it: that one is gone
                slots[placed[slot]] = -1
            slots[i] = slot
            placed[slot] = i
        # a slot freed, refilled and freed again in one call is evicted once
        return Placement(slots, np.unique(np.asarray(evicted, dtype=np.int64)))

    def state_dict(self) -> dict[str, Any]:
        live = [(s, slot) for s, slot in self.queue if self.stamp[slot] == s]
        return {
            "order": list(self.order),
            "free": np.asarray(self.free, dtype=np.int64),
            "queue": np.asarray(live, dtype=np.int64).reshape(-1, 2),
            "clock": self.clock,
            "members": self.members.state_dict() if self.members is not None else {},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        who = "Window"
        members = self.members
        if members is None:
            raise ReplayBankError("Window is not bound to a buffer")
        check_state_keys(state, who, ("order", "free", "queue", "clock", "members"))
        clock = state_number(state, "clock", who, integer=True, low=0)
        n_order = len(np.asarray(state["order"]).reshape(-1))
        order = state_array(state, "order", who, shape=(n_order,), integer=True).tolist()
        n_free = len(np.asarray(state["free"]).reshape(-1))
        free = state_array(state, "free", who, shape=(n_free,), integer=True, low=0, high=self.capacity - 1)
        n_queue = np.asarray(state["queue"]).size // 2
        queue = state_array(state, "queue", who, shape=(n_queue, 2), integer=True, low=0)
        groups = _Members.check_state(state["members"], who, self.capacity)
        live = np.concatenate([np.zeros(0, np.int64), *groups.values()])
        if (
            len(set(order)) != len(order)
            or len(order) > self.k
            or not {g for g, m in groups.items() if len(m)} <= set(order)
            or len(np.unique(np.concatenate([free, live]))) != len(free) + len(live)
            or len(free) + len(live) != self.capacity
            or sorted(queue[:, 1].tolist()) != sorted(live.tolist())
            or (len(queue) and (queue[:, 0].max() >= clock or (np.diff(queue[:, 0]) <= 0).any()))
        ):
            raise InvalidStateError(
                f"{who} state: order, free slots, queue and members disagree (each slot must be free or held "
                f"by one of at most k={self.k} groups, and queued once with a stamp below clock={clock})"
            )
        self.order = deque(order)
        self.free = free.tolist()
        self.clock = clock
        self.stamp[:] = -1
        self.queue = deque()
        members.load_state_dict(groups)
        for stamp, slot in queue.tolist():
            self.stamp[slot] = stamp
            self.queue.append((stamp, slot))

    def check_table(self, table: Any) -> None:
        """The member slots must be the slots the restored table holds items in."""
        if self.members is not None:
            self.members.check_table(table, "Window")
