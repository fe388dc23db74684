"""Prioritized replay (Schaul et al. 2016) and its random-reshuffling variant (RR-M)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import ReplayBankError
from .base import SamplerBase, View, check_can_sample
from .sumtree import make_pair


def check_priorities(priorities: Any, n: int, where: str = "priorities") -> np.ndarray:
    """Validate priorities: a finite, non-negative float per item."""
    p = np.asarray(priorities, dtype=np.float64)
    if p.ndim == 0:
        p = np.full(n, float(p))
    if p.shape != (n,):
        raise ReplayBankError(f"{where}: expected {n} values (one per item), got shape {p.shape}")
    # two reductions cover NaN (min is NaN), -inf and negatives (min < 0) and +inf (max)
    if n and not (p.min() >= 0 and np.isfinite(p.max())):
        bad = ~np.isfinite(p) | (p < 0)
        i = int(np.argmax(bad))
        raise ReplayBankError(f"{where}[{i}] = {p[i]!r}: priorities must be finite and >= 0")
    return p


class Prioritized(SamplerBase):
    """Proportional prioritized sampling.

    ``P(i) = p_i^alpha / sum_k p_k^alpha`` with ``p_i = priority_i + eps``; batches are stratified
    (one draw from each of ``batch_size`` equal slices of the total mass, which lowers variance
    without changing ``P``). Importance weights are ``(N * P(i))^-beta`` divided by the largest
    weight any stored item could get, ``(N * min_k P(k))^-beta``, so they lie in (0, 1]. New items
    get the largest priority seen so far, so each is likely to be replayed at least once. ``beta``
    may be changed between calls (e.g. annealed towards 1).

    >>> from replaybank import ReplayBuffer
    >>> buf = ReplayBuffer(4, sampler=Prioritized(alpha=1.0, beta=1.0, eps=0.0), seed=0)
    >>> ids = buf.extend({"x": np.arange(4)}, priorities=[1.0, 1.0, 1.0, 5.0])
    >>> b = buf.sample(4)
    >>> b.data["x"], b.weights
    (array([1, 2, 3, 3]), array([1. , 1. , 0.2, 0.2], dtype=float32))
    """

    bytes_per_slot = 17  # sum and min trees (float64 leaves, 1/31 more for inner nodes)

    uses_priorities = True

    def __init__(
        self, alpha: float = 0.6, beta: float = 0.4, eps: float = 1e-6, *, branching: int = 32
    ) -> None:
        for name, value in (("alpha", alpha), ("beta", beta), ("eps", eps)):
            if not np.isfinite(value) or value < 0:
                raise ReplayBankError(f"Prioritized({name}={value!r}): must be finite and >= 0")
        self.alpha = float(alpha)
        self.beta = float(beta)
        self.eps = float(eps)
        self.branching = branching
        self.max_priority = 1.0

    def bind(self, capacity: int) -> None:
        self.capacity = capacity
        self.trees = make_pair(capacity, branching=self.branching)  # sum and min over p^alpha

    def _set(self, slots: np.ndarray, priorities: np.ndarray) -> None:
        self.trees.update(slots, (priorities + self.eps) ** self.alpha)

    def on_write(
        self, slots: np.ndarray, rows: dict[str, Any], priorities: np.ndarray | None, view: View
    ) -> None:
        if priorities is None:
            priorities = np.full(len(slots), self.max_priority)
        elif len(priorities):
            self.max_priority = max(self.max_priority, float(priorities.max()))
        self._set(slots, priorities)

    def on_evict(self, slots: np.ndarray) -> None:
        self.trees.update(slots, np.zeros(len(slots)))

    def update_priorities(self, slots: np.ndarray, priorities: np.ndarray) -> None:
        if len(priorities):
            self.max_priority = max(self.max_priority, float(priorities.max()))
        self._set(slots, priorities)

    def sample(
        self, batch_size: int, view: View, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        check_can_sample(batch_size, view, True, "Prioritized")
        self._check_mass()
        slots, weights = self.trees.stratified(rng.random(batch_size), self.beta)
        return slots, weights

    def _check_mass(self) -> None:
        if self.trees.total <= 0:
            raise ReplayBankError(
                "all stored priorities are zero (with eps=0); nothing can be sampled"
            )

    def probabilities(self) -> np.ndarray:
        """P(i) for every slot (zeros for empty slots)."""
        return self.trees.leaves / self.trees.total

    def state_dict(self) -> dict[str, Any]:
        return {
            "priorities": self.trees.leaves.copy(),
            "max_priority": self.max_priority,
            "beta": self.beta,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        scaled = np.asarray(state["priorities"], dtype=np.float64)
        self.trees.load(scaled)
        self.max_priority = float(state["max_priority"])
        self.beta = float(state["beta"])


class PrioritizedReshuffled(Prioritized):
    """Prioritized sampling with random reshuffling by masking (RR-M, Fujita 2025, arXiv 2503.02269).

    With-replacement prioritized sampling lets an item be drawn far more (or less) often than its
    probability says. RR-M keeps each item's draw count close to its expected count:

    * expected count: ``E_i`` accrues ``batch_size * P_t(i)`` at every sample call ``t`` (computed
      lazily: a global accumulator of ``batch_size / total_mass`` times the item's scaled priority,
      re-anchored whenever that priority changes);
    * masking: an item is eligible only while its draw count ``C_i <= E_i``; a draw landing on an
      ineligible item, or repeating an item already taken in this batch, is redrawn (up to 8
      times, then accepted as is so sampling never stalls). The first try of draw ``j`` is
      stratified (slice ``j`` of the mass), redraws are independent.

    With uniform priorities this is an epoch-like scheme: once drawn, an item waits about
    ``N / batch_size`` calls before it can be drawn again. Importance weights are those of
    ``Prioritized`` (the masked distribution has the same expected counts).
    """

    bytes_per_slot = 17 + 32  # trees plus count, base, anchor and a per-call stamp

    can_repeat = False
    rounds = 8

    def bind(self, capacity: int) -> None:
        super().bind(capacity)
        self.count = np.zeros(capacity)
        self.base = np.zeros(capacity)  # expected count at the anchor
        self.anchor = np.zeros(capacity)  # value of the accumulator at the anchor
        self.accumulated = 0.0  # sum over calls of batch_size / total_mass
        self.stamp = np.full(capacity, -1, dtype=np.int64)  # last call that drew the slot
        self.calls = 0

    def _expected(self, slots: np.ndarray) -> np.ndarray:
        return self.base[slots] + self.trees.leaves[slots] * (self.accumulated - self.anchor[slots])

    def _reanchor(self, slots: np.ndarray) -> None:
        self.base[slots] = self._expected(slots)
        self.anchor[slots] = self.accumulated

    def on_write(
        self, slots: np.ndarray, rows: dict[str, Any], priorities: np.ndarray | None, view: View
    ) -> None:
        super().on_write(slots, rows, priorities, view)
        self.count[slots] = 0.0
        self.base[slots] = 0.0
        self.anchor[slots] = self.accumulated

    def update_priorities(self, slots: np.ndarray, priorities: np.ndarray) -> None:
        self._reanchor(slots)
        super().update_priorities(slots, priorities)

    def sample(
        self, batch_size: int, view: View, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        check_can_sample(batch_size, view, False, "PrioritizedReshuffled")
        self._check_mass()
        self.accumulated += batch_size / self.trees.total
        self.calls += 1
        if hasattr(self.trees, "masked_draws"):  # compiled: one pass, each draw retried in place
            u = rng.random(batch_size * (self.rounds + 1))
            slots = self.trees.masked_draws(
                u,
                self.rounds,
                self.count,
                self.base,
                self.anchor,
                self.accumulated,
                self.stamp,
                self.calls,
            )
            return slots, self.trees.weights(slots, self.beta)
        slots, _ = self.trees.stratified(rng.random(batch_size), self.beta)
        for _ in range(self.rounds):
            first = np.zeros(batch_size, dtype=bool)
            first[np.unique(slots, return_index=True)[1]] = True
            ok = first & (self.count[slots] <= self._expected(slots))
            if ok.all():
                break
            redo = ~ok
            slots[redo] = self.trees.find(rng.random(int(redo.sum())) * self.trees.total)
        np.add.at(self.count, slots, 1.0)
        return slots, self.trees.weights(slots, self.beta)

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state.update(
            count=self.count,
            base=self.base,
            anchor=self.anchor,
            accumulated=self.accumulated,
            stamp=self.stamp,
            calls=self.calls,
        )
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.count[:] = state["count"]
        self.base[:] = state["base"]
        self.anchor[:] = state["anchor"]
        self.accumulated = float(state["accumulated"])
        self.stamp[:] = state["stamp"]
        self.calls = int(state["calls"])
