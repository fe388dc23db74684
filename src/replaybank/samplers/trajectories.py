"""Trajectory sampling: fixed-length slices of episodes that never cross an episode boundary."""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

from ..checks import (
    check_flag,
    check_int,
    check_name,
    check_real,
    check_state_keys,
    check_zero_on_empty,
    state_array,
    state_number,
)
from ..errors import InvalidArgumentError, InvalidStateError, ReplayBankError
from ..ragged import Ragged
from ..spec import Spec
from .base import SamplerBase, View, check_can_sample, last_wins
from .prioritized import leaf_limit
from .sumtree import make_pair


class Trajectories(SamplerBase):
    """Samples ``batch_size`` slices of ``length`` consecutive steps, each inside one episode, or
    with ``length=None`` whole episodes (their stored steps), returned as ``Ragged`` columns.

    Episodes are the runs of steps between ``done`` flags in arrival order (the buffer must use
    ``Fifo`` admission, one episode stream per buffer; write a step with ``done=True`` to close an
    episode). A batch's data has shape ``(batch_size, length, ...)``; with ``reverse=True`` each
    slice runs backwards in time (last step first), which propagates value from episode ends
    towards their starts in fewer updates (Trajectory-level Replay).

    Cost is proportional to ``batch_size * length`` and independent of the buffer size: slice
    starts are drawn uniformly and rejected when the episode ends too soon (bookkeeping is a few
    integers per episode and one per step, updated on write).

    ``priority`` picks episodes non-uniformly, then a uniform start inside the chosen episode:

    * ``None``: every valid slice start equally likely;
    * ``"td"``: episode weight = (mean of its steps' priorities)^alpha; step priorities come from
      ``extend(..., priorities=)`` and ``update_priorities`` (e.g. |TD error|);
    * ``"return"``: episode weight = max(sum of the ``reward_key`` column over the episode, 0)
      + eps, raised to alpha (shift rewards to be non-negative if they are not).

    With a priority, ``Batch.weights`` holds per-slice importance weights ``(N_e * P(e))^-beta``
    (``N_e`` episodes that can be drawn) divided by the largest weight any of them could get,
    ``(N_e * min_e P(e))^-beta``, as ``Prioritized`` normalises: weights lie in (0, 1] and do not
    depend on what else the batch holds.

    Raises:
        InvalidTypeError, InvalidArgumentError: a parameter of the wrong type or out of range; at
            ``extend``, a ``done`` value other than True/False/0/1, or (``"return"``) a
            non-finite reward.
    """

    bytes_per_slot = 32  # episode per slot, start and length per episode (+ priority sums)

    needs_time_order = True
    needs_rows = True

    def __init__(
        self,
        length: int | None,
        reverse: bool = False,
        *,
        priority: Literal["td", "return"] | None = None,
        alpha: float = 0.6,
        beta: float = 0.4,
        eps: float = 1e-6,
        done_key: str = "done",
        reward_key: str = "reward",
    ) -> None:
        who = "Trajectories"
        if length is not None:
            length = check_int(length, who, "length", low=1)
        if not (priority is None or (isinstance(priority, str) and priority in ("td", "return"))):
            raise InvalidArgumentError(
                f"Trajectories(priority={priority!r}): expected None, 'td' or 'return'"
            )
        self.length = length
        self.reverse = check_flag(reverse, who, "reverse")
        self.priority = priority
        self.alpha = check_real(alpha, who, "alpha", low=0.0)
        self.beta = beta
        self.eps = check_real(eps, who, "eps", low=0.0)
        self.done_key = check_name(done_key, who, "done_key")
        self.reward_key = check_name(reward_key, who, "reward_key")
        self.uses_priorities = priority == "td"
        self.max_priority = 1.0

    @property
    def beta(self) -> float:
        return self._beta

    @beta.setter
    def beta(self, value: float) -> None:
        self._beta = check_real(value, "Trajectories", "beta", low=0.0)

    def bind(self, capacity: int) -> None:
        if self.length is not None and self.length > capacity:
            raise InvalidArgumentError(
                f"Trajectories(length={self.length}): slices longer than the buffer's capacity "
                f"{capacity} can never be stored; lower length"
            )
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

    def check_spec(self, spec: Spec) -> None:
        done = spec.get(self.done_key)
        if done is None or done.shape != () or done.ragged or done.dtype.kind not in "biuf":
            raise ReplayBankError(
                f"Trajectories needs a scalar boolean (or 0/1) {self.done_key!r} column marking episode "
                f"ends (or pass done_key=); columns are {sorted(spec)}"
            )
        reward = spec.get(self.reward_key)
        numeric = reward is not None and not reward.ragged and reward.dtype.kind in "biuf"
        if self.priority == "return" and not numeric:
            raise ReplayBankError(
                f"Trajectories(priority='return') needs a numeric {self.reward_key!r} column (or pass "
                "reward_key=)"
            )

    def check_rows(self, rows: dict[str, Any]) -> None:
        """Refuse a batch before it is stored: ``done`` must be booleans (or numbers 0/1: 0.5 is
        not an episode end) and, for return priorities, rewards finite and not so large that an
        episode's return would overflow."""
        done = np.asarray(rows[self.done_key])
        if done.dtype != bool and done.size:
            bad = (done != 0) & (done != 1)
            if bad.any():
                i = int(np.argmax(bad))
                raise InvalidArgumentError(
                    f"column {self.done_key!r}[{i}] = {done[i]!r}: episode ends must be True/False (or 0/1)"
                )
        if self.priority == "return" and len(done):
            reward = np.asarray(rows[self.reward_key], dtype=np.float64)
            ok = (np.abs(reward) <= self.value_limit).reshape(len(reward), -1).all(axis=1)
            if not ok.all():
                i = int(np.argmin(ok))
                raise InvalidArgumentError(
                    f"column {self.reward_key!r}[{i}]: rewards must be finite and within +-{self.value_limit:.6g} "
                    "for return priorities (episode returns are summed from them)"
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
        slots, priorities = last_wins(slots, priorities)
        keys = self.episode[slots] % self.n_keys
        np.add.at(self.ep_value, keys, priorities - self.step_value[slots])
        self.step_value[slots] = priorities
        if len(priorities):
            self.max_priority = max(self.max_priority, float(priorities.max()))
        self._refresh(np.unique(keys))

    # -- sampling -------------------------------------------------------------------------------
    def _valid(self, starts: np.ndarray, view: View) -> np.ndarray:
        arrival = view.table.ids_of(starts) >> view.table.shift
        key = self.episode[starts] % self.n_keys
        if self.length is None:  # whole episodes: a start is an episode's oldest stored step
            oldest = view.next_arrival - view.table.size
            return arrival == np.maximum(self.ep_start[key], oldest)
        return self.ep_len[key] - (arrival - self.ep_start[key]) >= self.length

    def sample(
        self, batch_size: int, view: View, rng: np.random.Generator
    ) -> tuple[np.ndarray | Ragged, np.ndarray | None]:
        check_can_sample(batch_size, view, True, "Trajectories")
        weights = None
        if self.priority is None:
            starts = self._uniform_starts(batch_size, view, rng)
        else:
            starts, weights = self._prioritized_starts(batch_size, view, rng)
        if self.length is None:
            return self._episodes(starts, view), weights
        offsets = np.arange(self.length)
        if self.reverse:
            offsets = offsets[::-1]
        return (starts[:, None] + offsets) % self.capacity, weights

    def _episodes(self, starts: np.ndarray, view: View) -> Ragged:
        """The stored steps of each start's episode, as ragged rows of slots."""
        key = self.episode[starts] % self.n_keys
        first = view.table.ids_of(starts) >> view.table.shift
        lengths = self.ep_start[key] + self.ep_len[key] - first
        offsets = np.zeros(len(starts) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        step = np.arange(offsets[-1]) - np.repeat(offsets[:-1], lengths)
        if self.reverse:
            step = np.repeat(lengths - 1, lengths) - step
        return Ragged((np.repeat(first, lengths) + step) % self.capacity, offsets)

    def _uniform_starts(self, batch_size: int, view: View, rng: np.random.Generator) -> np.ndarray:
        size = view.table.size
        found: list[np.ndarray] = []
        need = batch_size
        for _ in range(16):
            draws = int(need / max(self.accept, 0.05) * 1.25) + 8
            cand = rng.integers(0, size, size=draws)
            ok = self._valid(cand, view)
            self.accept = 0.9 * self.accept + 0.1 * float(ok.mean())
            found.append(cand[ok][:need])
            need -= len(found[-1])
            if need == 0:
                return np.concatenate(found)
        # Valid starts are rare (episodes mostly shorter than the slice): enumerate them once.
        every = np.arange(size)
        valid = every[self._valid(every, view)]
        if len(valid) == 0:
            raise ReplayBankError(
                f"no stored episode has {self.length} consecutive steps yet; add more steps or lower length"
            )
        found.append(valid[rng.integers(0, len(valid), size=need)])
        return np.concatenate(found)

    def _prioritized_starts(
        self, batch_size: int, view: View, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        total = self.tree.total
        if total <= 0:
            raise ReplayBankError(
                f"no stored episode has {self.length} consecutive steps yet; add more steps or lower length"
            )
        keys = self.tree.find((np.arange(batch_size) + rng.random(batch_size)) / batch_size * total)
        # valid starts of episode k: stored steps whose slice ends inside the episode
        oldest = view.next_arrival - view.table.size
        first = np.maximum(self.ep_start[keys], oldest)
        if self.length is None:
            arrival = first
        else:
            span = self.ep_start[keys] + self.ep_len[keys] - self.length - first + 1
            arrival = first + (rng.random(batch_size) * span).astype(np.int64)
        # (N_e * P(e))^-beta over the largest weight any episode could get, (N_e * min P)^-beta,
        # as Prioritized does: a weight means the same whatever else the batch holds
        return arrival % self.capacity, self.tree.weights(keys, self.beta)

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
        limit = getattr(self, "priority_limit", np.finfo(np.float64).max)
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
