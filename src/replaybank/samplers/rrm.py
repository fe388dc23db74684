"""Prioritized sampling with random reshuffling by masking (RR-M): the expected-count bookkeeping
and the masked draws. The plain prioritized sampler it extends is :mod:`.per`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..checks import state_array, state_number
from ..errors import InvalidStateError, ReplayBankError
from .base import SamplerBase, View, check_can_sample
from .per import Prioritized
from .sumtree import _compiled_tree, make_pair


def _lane_tree() -> Any:
    """``LaneTree`` (both pairs of trees in one compiled array), or None for the numpy fallback
    (numba absent, or ``REPLAYBANK_KERNELS=numpy``)."""
    if _compiled_tree() is None:
        return None
    try:
        from ._numba_lanes import LaneTree
    except ImportError:
        return None
    return LaneTree


def _compiled(mask: Any) -> Any:
    """The compiled RR-M steps when the mask is a ``LaneTree``'s, else None (numpy path)."""
    try:
        from . import _numba_rrm
        from ._numba_lanes import LanePair
    except ImportError:
        return None
    return _numba_rrm if isinstance(mask, LanePair) else None


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

    bytes_per_slot = 17 + 24 + 18  # trees, count/base/anchor, the mask (one 4-lane tree compiled)

    # Counts are integers and expected counts reals: "C <= E" is taken as C <= E + TOL, and a
    # masked item's due time aims at E = C - TOL / 2, so rounding never flips a decision back.
    TOL = 1e-6

    # numpy fallback: draws walk the mask tree, so the main tree's nodes are not cached (the
    # compiled path keeps both in one tree and ignores the hint)
    _cold_updates = True

    _torch_trees = False  # the mask tree and the compiled lanes are numpy/numba only

    def _make_trees(self, capacity: int) -> Any:
        # compiled: one tree with four lanes per node (``_numba_lanes``), so the lines a draw
        # walks are the ones the refreshes of the mask and of the priorities then rewrite
        lanes = _lane_tree()
        if lanes is None:
            self.mask = make_pair(capacity, branching=self.branching)
            return make_pair(capacity, branching=self.branching)
        both = lanes(capacity, branching=self.branching)
        self.mask = both.mask
        return both.trees

    def bind(self, capacity: int) -> None:
        super().bind(capacity)
        # count, base and anchor of one item side by side: a draw reads all three, and this way
        # they are one cache miss rather than three (the names are strided views of the columns)
        self._per_item = np.zeros((capacity, 3))
        self.count = self._per_item[:, 0]
        self.base = self._per_item[:, 1]  # expected count at the anchor
        self.anchor = self._per_item[:, 2]  # value of the accumulator at the anchor
        self.accumulated = 0.0  # sum over calls of batch_size / total_mass
        self.calls = 0
        # The mask (made by _make_trees): its sum leaves hold the scaled priority of eligible
        # items (what draws come from), its min leaves the due time of masked ones (the
        # accumulator value at which E reaches C).
        self._fast = _compiled(self.mask)
        # compiled: the LaneTree, whose ``stale`` leaves a draw leaves for the update to refresh
        self._lanes: Any = self.mask.owner if self._fast is not None else None

    def _expected(self, slots: np.ndarray) -> np.ndarray:
        return self.base[slots] + self.trees.leaves[slots] * (self.accumulated - self.anchor[slots])

    def _reanchor(self, slots: np.ndarray) -> None:
        if self._fast is not None:
            self._fast.reanchor(slots, self.mask.tree, self.base, self.anchor, self.accumulated)
            return
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
        if self._fast is not None:
            m = self.mask
            self._fast.sync(
                m.tree, m.offsets, m.k, np.ascontiguousarray(slots, dtype=np.int64), only_masked,
                self.count, self.base, self.anchor, self.accumulated, self.TOL,
            )
            return
        masked = self.count[slots] > self._expected(slots) + self.TOL
        if only_masked:
            slots, masked = slots[masked], masked[masked]
        if len(slots):
            sums = np.where(masked, 0.0, self.trees.leaves[slots])
            self.mask.update_pair(slots, sums, np.where(masked, self._due(slots), 0.0))

    # every write goes through on_write, which also resets the item's draw counts
    on_write_one = SamplerBase.on_write_one

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
        if self._fast is not None:  # the three steps below in one compiled pass
            m, p, lanes = self.mask, np.ascontiguousarray(priorities, dtype=np.float64), self._lanes
            top = self._fast.update(
                m.tree, m.offsets, m.k, lanes.stale, np.ascontiguousarray(slots, dtype=np.int64),
                (p + self.eps) ** self.alpha, p, self.count, self.base, self.anchor,
                self.accumulated, self.TOL,
            )
            lanes.stale = lanes.stale[:0]
            if top > self.max_priority:
                self.max_priority = float(top)
            return
        self._reanchor(slots)
        super().update_priorities(slots, priorities)
        self._sync(slots)  # repeated slots get the same values: harmless

    def sample(
        self, batch_size: int, view: View, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        check_can_sample(batch_size, view, True, "PrioritizedReshuffled")
        self.accumulated += batch_size / self._check_mass()
        self.calls += 1
        found: list[np.ndarray] = []
        need, stratified = batch_size, True
        u: np.ndarray | None = None
        if self._fast is not None:  # unmask and a first round (all of a batch, mostly): one call
            m, u, lanes = self.mask, rng.random(batch_size), self._lanes
            drawn, accepted, ratios, lanes.stale = self._fast.first_round(
                m.tree, m.offsets, m.k, m.capacity, lanes.stale, u, self.count, self.base,
                self.anchor, self.accumulated, self.TOL,
            )
            if len(accepted) == batch_size:
                return accepted, self._fast.weights(ratios, self.beta)
            if drawn:  # else nothing was eligible, and u waits for the round below
                found.append(accepted)
                need, stratified, u = need - len(accepted), False, None
        else:
            self._unmask()
        while need:
            total = self.mask.total
            if not total > 0:  # nothing eligible: let time pass until something is
                due = self.mask.minimum
                if not np.isfinite(due):  # every item is masked with priority 0: cannot happen
                    raise ReplayBankError("PrioritizedReshuffled: no stored item can be drawn")
                self.accumulated = max(self.accumulated, due)
                self._unmask()
                continue
            u = rng.random(need) if u is None else u
            if self._fast is not None:  # the masses and the three steps below in one call
                m, lanes = self.mask, self._lanes
                accepted, lanes.stale = self._fast.draw(
                    m.tree, m.offsets, m.k, lanes.stale, u, stratified,
                    self.count, self.base, self.anchor, self.accumulated, self.TOL,
                )
                found.append(accepted)
                need -= len(accepted)
                stratified, u = False, None
                continue
            mass = (np.arange(need) + u) * (total / need) if stratified else u * total
            stratified, u = False, None
            candidates = self.mask.find(mass)
            ok = self._accept(candidates)
            found.append(candidates[ok])
            need -= int(ok.sum())
            self._sync(candidates, only_masked=True)  # items now ahead of E leave the draw
        slots = found[0] if len(found) == 1 else np.concatenate(found)
        return slots, self.trees.weights(slots, self.beta)

    def _unmask(self) -> None:
        if self._fast is not None:
            m = self.mask
            self._lanes.flush()
            self._fast.unmask(m.tree, m.offsets, m.k, m.capacity, self.accumulated)
            return
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

    state_keys = (*Prioritized.state_keys, "count", "base", "anchor", "accumulated", "calls")
    legacy_keys = ("stamp",)  # saves before the exact RR-M kept a per-slot stamp; not needed now

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
