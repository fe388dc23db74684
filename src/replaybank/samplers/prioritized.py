"""Prioritized replay (Schaul et al. 2016) and its random-reshuffling variant (RR-M)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..checks import (
    check_int,
    check_real,
    check_state_keys,
    check_zero_on_empty,
    state_array,
    state_number,
)
from ..errors import InvalidArgumentError, InvalidStateError, InvalidTypeError, ReplayBankError
from .base import SamplerBase, View, check_can_sample
from .sumtree import make_pair


# Every leaf of a sum tree stays below this share of the largest float, so the total of
# ``capacity`` leaves stays finite.
def leaf_limit(capacity: int) -> float:
    """The largest scaled priority ``(p + eps) ** alpha`` one slot may hold in a tree of
    ``capacity`` leaves (so their total stays below the largest float64)."""
    return float(np.finfo(np.float64).max) / max(int(capacity), 1) / 2


def check_priorities(
    priorities: Any, n: int, where: str = "priorities", limit: float = np.inf
) -> np.ndarray:
    """Validate priorities: a finite, non-negative real number per item (at most ``limit``).

    Raises ``InvalidTypeError`` for strings, complex or object values, ``InvalidArgumentError``
    for a wrong count, NaN, infinite, negative or too large values; the message names ``where``.
    """
    try:
        p = np.asarray(priorities)
    except (ValueError, TypeError) as err:  # ragged nested lists
        raise InvalidTypeError(f"{where}: expected {n} real numbers, got {_brief(priorities)} ({err})") from None
    if p.dtype.kind not in "iuf":
        raise InvalidTypeError(
            f"{where}: expected real numbers, got dtype {p.dtype} ({_brief(priorities)}); "
            "complex, bool, string and object values are refused"
        )
    p = p.astype(np.float64, copy=False)
    if p.ndim == 0:
        p = np.full(n, float(p))
    if p.shape != (n,):
        raise InvalidArgumentError(f"{where}: expected {n} values (one per item), got shape {p.shape}")
    # two reductions cover NaN (min is NaN), -inf and negatives (min < 0) and +inf / too large (max)
    if n and not (p.min() >= 0 and p.max() <= limit):
        bad = ~(p >= 0) | ~(p <= limit)
        i = int(np.argmax(bad))
        if np.isfinite(p[i]) and p[i] >= 0:
            raise InvalidArgumentError(
                f"{where}[{i}] = {p[i]!r} is above {limit:.6g}, the largest priority this sampler can hold "
                "(larger ones would overflow its sum tree); rescale the priorities"
            )
        raise InvalidArgumentError(f"{where}[{i}] = {p[i]!r}: priorities must be finite and >= 0")
    return p


def _brief(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


class Prioritized(SamplerBase):
    """Proportional prioritized sampling.

    ``P(i) = p_i^alpha / sum_k p_k^alpha`` with ``p_i = priority_i + eps``; batches are stratified
    (one draw from each of ``batch_size`` equal slices of the total mass, which lowers variance
    without changing ``P``). Importance weights are ``(N * P(i))^-beta`` divided by the largest
    weight any stored item could get, ``(N * min_k P(k))^-beta``, so they lie in (0, 1] (a weight
    below float32's smallest normal number is rounded up to it, never to 0). New items get the
    largest priority seen so far, so each is likely to be replayed at least once. ``beta`` may be
    changed between calls (e.g. annealed towards 1).

    Args:
        alpha: priority exponent, finite and >= 0 (0 is uniform).
        beta: importance-weight exponent, finite and >= 0.
        eps: added to every priority, finite and >= 0.
        branching: children per sum-tree node, an integer in [2, 1024].

    Raises:
        InvalidTypeError, InvalidArgumentError: a parameter of the wrong type or out of range.
        Priorities above ``priority_limit`` are refused by ``extend`` and ``update_priorities``:
        their powered values would overflow the tree's total.

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
        who = type(self).__name__
        self.alpha = check_real(alpha, who, "alpha", low=0.0)
        self.beta = beta
        self.eps = check_real(eps, who, "eps", low=0.0)
        self.branching = check_int(branching, who, "branching", low=2, high=1024)
        self.max_priority = 1.0

    @property
    def beta(self) -> float:
        return self._beta

    @beta.setter
    def beta(self, value: float) -> None:
        self._beta = check_real(value, type(self).__name__, "beta", low=0.0)

    def bind(self, capacity: int) -> None:
        self.capacity = capacity
        self.priority_limit = self._limit(capacity)
        if not self.priority_limit >= self.max_priority:
            raise InvalidArgumentError(
                f"{type(self).__name__}(alpha={self.alpha!r}, eps={self.eps!r}): a new item's priority "
                f"{self.max_priority} would weigh (priority + eps) ** alpha = inf in a buffer of {capacity:,} "
                "slots; lower alpha or eps"
            )
        self.trees = make_pair(capacity, branching=self.branching)  # sum and min over p^alpha

    def _limit(self, capacity: int) -> float:
        """The largest priority whose ``(p + eps) ** alpha`` fits a leaf (``leaf_limit``)."""
        if self.alpha == 0:
            return float(np.finfo(np.float64).max)
        with np.errstate(over="ignore"):
            top = np.float64(leaf_limit(capacity)) ** (1.0 / self.alpha) * (1 - 1e-12)
        return float(min(top, np.finfo(np.float64).max)) - self.eps

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

    def mass(self) -> float:
        """Total sampling mass ``sum_i (p_i + eps) ** alpha`` over the stored items, 0.0 when none
        is stored: ``P(i)`` is item ``i``'s share of it. A sharded buffer splits each batch over its
        shards in proportion to their masses.

        Raises:
            ReplayBankError: the sampler is not bound to a buffer yet.

        >>> from replaybank import ReplayBuffer
        >>> buf = ReplayBuffer(4, sampler=Prioritized(alpha=1.0, eps=0.0), seed=0)
        >>> buf.sampler.mass(), buf.sampler.min_mass()
        (0.0, inf)
        >>> _ = buf.extend({"x": np.arange(3)}, priorities=[2.0, 0.5, 5.0])
        >>> buf.sampler.mass(), buf.sampler.min_mass()
        (7.5, 0.5)
        """
        return float(self._bound_trees("mass").total)

    def min_mass(self) -> float:
        """The smallest positive per-item mass ``min_i (p_i + eps) ** alpha`` over the stored
        items, ``inf`` when no stored item has mass (empty, or all priorities 0 with ``eps=0``).
        Importance weights are normalised by it: the item that has it gets weight 1.

        Raises:
            ReplayBankError: the sampler is not bound to a buffer yet.
        """
        return float(self._bound_trees("min_mass").minimum)

    def _bound_trees(self, what: str) -> Any:
        trees = getattr(self, "trees", None)
        if trees is None:
            raise ReplayBankError(
                f"{type(self).__name__}.{what}(): the sampler is not bound to a buffer yet; "
                "pass it to ReplayBuffer(..., sampler=...) first"
            )
        return trees

    def state_dict(self) -> dict[str, Any]:
        return {
            "priorities": self.trees.leaves.copy(),
            "max_priority": self.max_priority,
            "beta": self.beta,
        }

    _state_keys: tuple[str, ...] = ("priorities", "max_priority", "beta")

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore ``state_dict()``; every entry is checked before anything changes.

        Raises:
            InvalidStateError: a missing or unknown key, or a value of the wrong type, shape or
                range (scaled priorities must be finite, >= 0 and fit the tree).
        """
        who = type(self).__name__
        check_state_keys(state, who, self._state_keys, self._legacy_keys)
        scaled = state_array(
            state, "priorities", who, shape=(self.capacity,), low=0.0, high=leaf_limit(self.capacity)
        )
        max_priority = state_number(state, "max_priority", who, low=0.0, high=self.priority_limit)
        beta = state_number(state, "beta", who, low=0.0)
        self._load_extra(state, scaled)
        self.trees.load(scaled)
        self.max_priority = max_priority
        self.beta = beta

    _legacy_keys: tuple[str, ...] = ()

    def check_table(self, table: Any) -> None:
        """Slots that hold no item must have no priority mass (else ``sample`` draws them)."""
        check_zero_on_empty(self.trees.leaves, table, type(self).__name__, "priorities")

    def _load_extra(self, state: dict[str, Any], scaled: np.ndarray) -> None:
        """Subclasses check and apply their own entries here (before the trees are loaded)."""
        return None


class PrioritizedReshuffled(Prioritized):
    """Prioritized sampling with random reshuffling by masking (RR-M, Fujita 2025, arXiv 2503.02269).

    With-replacement prioritized sampling lets an item be drawn far more (or less) often than its
    probability says. RR-M keeps each item's draw count at its expected count:

    * expected count: ``E_i`` accrues ``batch_size * P_t(i)`` at every sample call ``t`` (computed
      lazily: a global accumulator of ``batch_size / total_mass`` times the item's scaled priority,
      re-anchored whenever that priority changes);
    * masking: an item is eligible for a draw only while its draw count ``C_i <= E_i``. Draws come
      from ``P`` restricted to the eligible items, kept in a second sum tree: stratified over its
      mass, and a draw that would take an item past ``E_i + 1`` is redrawn from the tree with
      that item masked. A masked item returns to the tree at the call where ``E_i`` reaches
      ``C_i`` (a min tree over those moments finds them). If no stored item is eligible (possible
      only after evictions or priorities set to zero), the accumulator advances to the first
      such moment, as if calls had passed.

    Guarantee (tested): at every moment ``C_i <= E_i + 1`` for every item, so no item is ever
    drawn more than one draw ahead of its expected count; with a fixed set of items and
    priorities ``sum_i C_i = sum_i E_i`` after each call, so each item's long-run frequency is
    exactly ``P(i)``. An item whose expected count grows by more than one per call (``batch_size
    * P(i) > 1``) is drawn several times in one batch, as plain PER would; otherwise a batch holds
    an item twice only while it is catching up on draws it is owed.

    With uniform priorities this is an epoch-like scheme: once drawn, an item waits about
    ``N / batch_size`` calls before it can be drawn again. Importance weights are those of
    ``Prioritized``, ``(N * P(i))^-beta`` normalised by the largest possible weight: ``P`` is the
    frequency each item is actually drawn with over time (masking shifts draws between calls, not
    their long-run share).
    """

    bytes_per_slot = 17 + 24 + 18  # trees, count/base/anchor, the mask tree

    # Counts are integers and expected counts reals: "C <= E" is taken as C <= E + TOL, and a
    # masked item's due time aims at E = C - TOL / 2, so rounding never flips a decision back.
    TOL = 1e-6

    def bind(self, capacity: int) -> None:
        super().bind(capacity)
        self.count = np.zeros(capacity)
        self.base = np.zeros(capacity)  # expected count at the anchor
        self.anchor = np.zeros(capacity)  # value of the accumulator at the anchor
        self.accumulated = 0.0  # sum over calls of batch_size / total_mass
        self.calls = 0
        # The mask tree: its sum leaves hold the scaled priority of eligible items (what draws
        # come from), its min leaves the due time of masked ones (the accumulator value at which
        # E reaches C). The kernels' default branching: its updates are the hot part here.
        self.mask = make_pair(capacity)

    def _expected(self, slots: np.ndarray) -> np.ndarray:
        return self.base[slots] + self.trees.leaves[slots] * (self.accumulated - self.anchor[slots])

    def _reanchor(self, slots: np.ndarray) -> None:
        self.base[slots] = self._expected(slots)
        self.anchor[slots] = self.accumulated

    def _due(self, slots: np.ndarray) -> np.ndarray:
        with np.errstate(divide="ignore"):  # a masked item with priority 0 is due never (inf)
            return self.anchor[slots] + (
                self.count[slots] - self.TOL / 2 - self.base[slots]
            ) / self.trees.leaves[slots]

    def _sync(self, slots: np.ndarray, only_masked: bool = False) -> None:
        """Put ``slots`` in the mask tree's sum (eligible) or, if ahead of their expected count,
        in its min (due times); ``only_masked`` skips the ones that are still eligible."""
        masked = self.count[slots] > self._expected(slots) + self.TOL
        if only_masked:
            slots, masked = slots[masked], masked[masked]
        if len(slots):
            sums = np.where(masked, 0.0, self.trees.leaves[slots])
            self.mask.update_pair(slots, sums, np.where(masked, self._due(slots), 0.0))

    def on_write(
        self, slots: np.ndarray, rows: dict[str, Any], priorities: np.ndarray | None, view: View
    ) -> None:
        super().on_write(slots, rows, priorities, view)
        self.count[slots] = 0.0
        self.base[slots] = 0.0
        self.anchor[slots] = self.accumulated
        self._sync(slots)

    def on_evict(self, slots: np.ndarray) -> None:
        super().on_evict(slots)
        self.mask.update_pair(slots, np.zeros(len(slots)), np.zeros(len(slots)))

    def update_priorities(self, slots: np.ndarray, priorities: np.ndarray) -> None:
        self._reanchor(slots)
        super().update_priorities(slots, priorities)
        self._sync(slots)  # repeated slots get the same values: harmless

    def sample(
        self, batch_size: int, view: View, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        check_can_sample(batch_size, view, True, "PrioritizedReshuffled")
        self._check_mass()
        self.accumulated += batch_size / self.trees.total
        self.calls += 1
        self._unmask()
        found: list[np.ndarray] = []
        need, stratified = batch_size, True
        while need:
            total = self.mask.total
            if not total > 0:  # nothing eligible: let time pass until something is
                due = self.mask.minimum
                if not np.isfinite(due):  # every item is masked with priority 0: cannot happen
                    raise ReplayBankError("PrioritizedReshuffled: no stored item can be drawn")
                self.accumulated = max(self.accumulated, due)
                self._unmask()
                continue
            u = rng.random(need)
            mass = (np.arange(need) + u) * (total / need) if stratified else u * total
            candidates = self.mask.find(mass)
            stratified = False
            ok = self._accept(candidates)
            found.append(candidates[ok])
            need -= int(ok.sum())
            self._sync(candidates, only_masked=True)  # items now ahead of E leave the draw
        slots = found[0] if len(found) == 1 else np.concatenate(found)
        return slots, self.trees.weights(slots, self.beta)

    def _unmask(self) -> None:
        back = self.mask.below(self.accumulated)
        if len(back):
            self.mask.update_pair(back, self.trees.leaves[back], np.zeros(len(back)))

    def _accept(self, candidates: np.ndarray) -> np.ndarray:
        """Accept candidate draws in order, each while its item's count is <= its expected count
        (the k-th candidate of an item passes iff ``C + k <= E``); counts the accepted ones."""
        order = np.argsort(candidates, kind="stable")
        ranked = candidates[order]
        index = np.arange(len(ranked))
        first = np.ones(len(ranked), dtype=bool)
        first[1:] = ranked[1:] != ranked[:-1]
        rank = index - np.maximum.accumulate(np.where(first, index, 0))
        ok = np.empty(len(candidates), dtype=bool)
        ok[order] = self.count[ranked] + rank <= self._expected(ranked) + self.TOL
        np.add.at(self.count, candidates[ok], 1.0)
        return ok

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state.update(
            count=self.count,
            base=self.base,
            anchor=self.anchor,
            accumulated=self.accumulated,
            calls=self.calls,
        )
        return state

    _state_keys = (*Prioritized._state_keys, "count", "base", "anchor", "accumulated", "calls")
    _legacy_keys = ("stamp",)  # saves before the exact RR-M kept a per-slot stamp; not needed now

    def _load_extra(self, state: dict[str, Any], scaled: np.ndarray) -> None:
        who, shape = type(self).__name__, (self.capacity,)
        count = state_array(state, "count", who, shape=shape, low=0.0)
        base = state_array(state, "base", who, shape=shape, low=0.0)
        accumulated = state_number(state, "accumulated", who, low=0.0)
        anchor = state_array(state, "anchor", who, shape=shape, low=0.0, high=accumulated)
        calls = state_number(state, "calls", who, integer=True, low=0)
        if (count != np.round(count)).any():
            raise InvalidStateError(f"{who} state['count']: draw counts must be whole numbers")
        self.count[:], self.base[:], self.anchor[:] = count, base, anchor
        self.accumulated, self.calls = accumulated, calls

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self._sync(np.arange(self.capacity))
