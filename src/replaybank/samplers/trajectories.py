"""Trajectory sampling: fixed-length slices of episodes that never cross an episode boundary.

The episodes themselves (which episode each stored step belongs to, their priority sums) are kept
by :class:`replaybank.samplers.episodes.EpisodeIndex`, the base class; this module draws from them.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

from ..checks import check_flag, check_int, check_name, check_real
from ..errors import InvalidArgumentError, ReplayBankError
from ..ragged import Ragged
from ..spec import Spec
from .base import View, check_can_sample
from .episodes import EpisodeIndex


class Trajectories(EpisodeIndex):
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
        super().bind(capacity)

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
