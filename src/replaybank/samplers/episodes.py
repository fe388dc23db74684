"""Episode bookkeeping of the trajectory sampler: which episode each stored step belongs to.

:class:`EpisodeIndex` keeps, per episode, where it starts (its first step's arrival number) and how
many steps were written to it, and per slot the episode of the step stored there; with a priority,
also each step's priority (or reward) and every episode's sum of them, with a sum tree over the
episodes' weights. It is updated on every write, in a few integers per episode and one per step,
and saved and restored with the buffer. :class:`replaybank.samplers.Trajectories` samples slices
from it.
"""

from __future__ import annotations

import os
from typing import Any, Literal

import numpy as np

from ..checks import check_state_keys, check_zero_on_empty, state_array, state_number
from ..errors import InvalidArgumentError, InvalidStateError
from .base import SamplerBase, View, last_wins
from .priorities import leaf_limit
from .sumtree import make_pair


class EpisodeIndex(SamplerBase):
    """The episodes of a ``Fifo`` ring, kept up to date on every write: the base of ``Trajectories``.

    The sampler options it reads (annotated below) are set by the subclass's constructor.
    """

    length: int | None  # slice length (None: whole episodes); episodes shorter weigh 0
    priority: Literal["td", "return"] | None
    alpha: float
    eps: float
    done_key: str
    reward_key: str
    max_priority: float

    def bind(self, capacity: int) -> None:
        """Allocate the per-slot and per-episode arrays of a ring of ``capacity`` slots."""
        self.capacity = capacity
        # Per-episode arrays are indexed by episode % n_keys. The stored episodes and the open one
        # are at most capacity + 1 consecutive numbers, so with capacity + 1 keys a key is reused
        # only once its old episode is entirely overwritten (with capacity keys, capacity stored
        # one-step episodes lost the oldest when the next one opened).
        self.n_keys = n = capacity + 1
        self.episode = np.zeros(capacity, dtype=np.int64)  # episode number of each slot's step
        self.ep_start = np.zeros(n, dtype=np.int64)  # arrival of an episode's first step
        self.ep_len = np.zeros(n, dtype=np.int64)  # steps written to the episode so far
        self.current = 0  # episode the next step belongs to
        self.next_arrival = 0
        self.accept = 1.0  # running acceptance rate of uniform start draws
        if self.priority is not None:
            self.step_value = np.zeros(capacity)  # per-step priority or reward
            self.ep_value = np.zeros(n)  # sum of step_value over the episode's stored steps
            self.ep_stored = np.zeros(n, dtype=np.int64)
            self.tree = make_pair(n)  # sum to draw episodes, min to normalise weights
        self.leaf_limit = leaf_limit(n)
        self._td_fast = _td_kernel() if self.priority == "td" else None
        # a step's priority (or reward) is at most this, so episode sums stay finite
        self.value_limit = float(np.finfo(np.float64).max) / max(capacity, 1) / 2
        if self.priority == "td":
            with np.errstate(over="ignore"):
                top = np.float64(self.leaf_limit) ** (1.0 / self.alpha) if self.alpha else np.inf
            self.priority_limit = float(min(top * (1 - 1e-12) - self.eps, self.value_limit))
            if not self.priority_limit >= self.max_priority:
                raise InvalidArgumentError(
                    f"Trajectories(alpha={self.alpha!r}, eps={self.eps!r}): a new step's priority 1.0 would "
                    f"weigh (priority + eps) ** alpha = inf in a buffer of {capacity:,} slots; lower alpha or eps"
                )

    # -- bookkeeping on write -------------------------------------------------------------------
    def on_write(
        self, slots: np.ndarray, rows: dict[str, Any], priorities: np.ndarray | None, view: View
    ) -> None:
        n = len(slots)
        if n == 0:
            return
        first_arrival = int(view.next_arrival) - n
        if first_arrival != self.next_arrival:
            # One extend larger than the capacity: its head was overwritten inside the call and
            # every older step with it, so the kept steps start a fresh episode.
            if self.ep_len[self.current % self.n_keys]:
                self.current += 1
            self.ep_len[self.current % self.n_keys] = 0
        done = np.asarray(rows[self.done_key], dtype=bool)
        if self.priority is not None:
            self._forget(slots, view)
        episode = self.current + np.concatenate(([0], np.cumsum(done[:-1])))
        keys = episode % self.n_keys
        starts = np.flatnonzero(
            np.concatenate(([self.ep_len[self.current % self.n_keys] == 0], done[:-1]))
        )
        self.ep_start[keys[starts]] = first_arrival + starts
        self.ep_len[keys[starts]] = 0
        if self.priority is not None:  # a key is reused only once its old episode is gone
            self.ep_value[keys[starts]] = 0.0
            self.ep_stored[keys[starts]] = 0
        uniq, counts = np.unique(keys, return_counts=True)
        self.ep_len[uniq] += counts
        self.episode[slots] = episode
        self.current = int(episode[-1] + done[-1])
        if done[-1]:
            self.ep_len[self.current % self.n_keys] = 0
        self.next_arrival = first_arrival + n
        if self.priority is not None:
            if self.priority == "td":
                values = priorities if priorities is not None else np.full(n, self.max_priority)
                if priorities is not None and n:
                    self.max_priority = max(self.max_priority, float(priorities.max()))
            else:
                values = (
                    np.asarray(rows[self.reward_key], dtype=np.float64).reshape(n, -1).sum(axis=1)
                )
            self.step_value[slots] = values
            np.add.at(self.ep_value, keys, values)
            np.add.at(self.ep_stored, keys, 1)
            self._refresh(uniq)

    def _forget(self, slots: np.ndarray, view: View) -> None:
        """Remove the steps being overwritten from their episodes' priority sums. The table
        already holds the new ids, so "held a step before" comes from the arrival count: a FIFO
        ring has filled slots [0, min(arrivals, capacity))."""
        old = slots[slots < min(self.next_arrival, self.capacity)]
        if len(old):
            keys = self.episode[old] % self.n_keys
            np.subtract.at(self.ep_value, keys, self.step_value[old])
            np.subtract.at(self.ep_stored, keys, 1)
            self._refresh(np.unique(keys))

    def _refresh(self, keys: np.ndarray) -> None:
        stored = self.ep_stored[keys]
        if self.priority == "td":
            # a sum of >= 0 priorities after subtractions can round to -1e-17: that is 0
            value = np.maximum(self.ep_value[keys] / np.maximum(stored, 1), 0.0)
        else:
            value = np.maximum(self.ep_value[keys], 0.0)
        with np.errstate(over="ignore"):
            # capped so the tree's total stays finite (only returns above ~1e300 ** (1/alpha) hit it)
            weight = np.minimum((value + self.eps) ** self.alpha, self.leaf_limit)
        self.tree.update(keys, np.where(stored >= (self.length or 1), weight, 0.0))

    def update_priorities(self, slots: np.ndarray, priorities: np.ndarray) -> None:
        if self.priority != "td":
            super().update_priorities(slots, priorities)
            return
        slots, priorities = np.ravel(slots), np.ravel(priorities)  # a batch's own ids are (trajectories, length)
        if self._td_fast is not None:  # the numpy steps below in one compiled pass
            keys, top = self._td_fast(
                np.ascontiguousarray(slots, dtype=np.int64), np.ascontiguousarray(priorities, dtype=np.float64),
                self.episode, self.n_keys, self.step_value, self.ep_value,
            )
            self.max_priority = max(self.max_priority, float(top))
            self._refresh(keys)
            return
        slots, priorities = last_wins(slots, priorities)
        keys = self.episode[slots] % self.n_keys
        np.add.at(self.ep_value, keys, priorities - self.step_value[slots])
        self.step_value[slots] = priorities
        if len(priorities):
            self.max_priority = max(self.max_priority, float(priorities.max()))
        self._refresh(np.unique(keys))

    # -- state ----------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {
            "episode": self.episode,
            "ep_start": self.ep_start,
            "ep_len": self.ep_len,
            "current": self.current,
            "next_arrival": self.next_arrival,
            "accept": self.accept,
            "max_priority": self.max_priority,
        }
        if self.priority is not None:
            state.update(
                step_value=self.step_value, ep_value=self.ep_value, ep_stored=self.ep_stored
            )
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore ``state_dict()``; every entry is checked before anything changes.

        Raises:
            InvalidStateError: a missing or unknown key, or a value of the wrong type, shape or
                range.
        """
        who, cap, keys_shape = "Trajectories", (self.capacity,), (self.n_keys,)
        keys = ("episode", "ep_start", "ep_len", "current", "next_arrival", "accept", "max_priority")
        extra = ("step_value", "ep_value", "ep_stored") if self.priority is not None else ()
        check_state_keys(state, who, keys + extra)
        next_arrival = state_number(state, "next_arrival", who, integer=True, low=0)
        current = state_number(state, "current", who, integer=True, low=0, high=max(next_arrival, 0))
        episode = state_array(state, "episode", who, shape=cap, integer=True, low=0, high=current)
        ep_start = state_array(
            state, "ep_start", who, shape=keys_shape, integer=True, low=0, high=next_arrival
        )
        ep_len = state_array(state, "ep_len", who, shape=keys_shape, integer=True, low=0)
        accept = state_number(state, "accept", who, low=0.0, high=1.0)
        limit = self.priority_limit if self.priority == "td" else float(np.finfo(np.float64).max)
        max_priority = state_number(state, "max_priority", who, low=0.0, high=limit)
        if self.priority is not None:
            span = self.value_limit * self.capacity
            low = 0.0 if self.priority == "td" else -self.value_limit
            step_value = state_array(state, "step_value", who, shape=cap, low=low, high=self.value_limit)
            ep_value = state_array(state, "ep_value", who, shape=keys_shape, low=-span, high=span)
            ep_stored = state_array(
                state, "ep_stored", who, shape=keys_shape, integer=True, low=0, high=self.capacity
            )
        self.episode[:], self.ep_start[:], self.ep_len[:] = episode, ep_start, ep_len
        self.current, self.next_arrival = current, next_arrival
        self.accept, self.max_priority = accept, max_priority
        if self.priority is not None:
            self.step_value[:] = step_value
            self.ep_value[:] = ep_value
            self.ep_stored[:] = ep_stored
            self._refresh(np.arange(self.n_keys))

    def check_table(self, table: Any) -> None:
        """The arrival counter must be the table's; TD priorities must be >= 0 (episode sums up to
        rounding) and 0 on empty slots."""
        who = "Trajectories"
        if self.next_arrival != table.arrivals:
            raise InvalidStateError(
                f"{who} state['next_arrival'] = {self.next_arrival}, but table.arrivals = "
                f"{table.arrivals}: the two count the same steps"
            )
        if self.priority != "td":
            return
        check_zero_on_empty(self.step_value, table, who, "step_value")
        # a sum of priorities >= 0 after subtractions may round a little below 0, never further
        tol = 1e-9 * max(1.0, float(self.step_value.sum()))
        bad = self.ep_value < -tol
        if bad.any():
            i = int(np.argmax(bad))
            raise InvalidStateError(
                f"{who} state['ep_value'][{i}] = {self.ep_value[i]!r}: an episode's sum of TD "
                "priorities cannot be negative"
            )


def _td_kernel() -> Any:
    """The compiled TD update (``_numba_episodes.td_update``), or None without numba or when
    ``REPLAYBANK_KERNELS=numpy`` asks for the numpy fallback."""
    if os.environ.get("REPLAYBANK_KERNELS", "").lower() == "numpy":
        return None
    try:
        from ._numba_episodes import td_update
    except ImportError:
        return None
    return td_update
