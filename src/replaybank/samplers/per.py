"""Proportional prioritized replay (Schaul et al. 2016): the ``Prioritized`` sampler.

Its random-reshuffling variant, ``PrioritizedReshuffled`` (RR-M), subclasses it in :mod:`.rrm`;
the priority checks both use are in :mod:`.priorities`. Both samplers are public as
``replaybank.Prioritized`` and ``replaybank.PrioritizedReshuffled`` (also ``replaybank.samplers``).
"""

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
from ..errors import InvalidArgumentError, ReplayBankError
from .base import SamplerBase, View, check_can_sample
from .priorities import leaf_limit
from .sumtree import default_branching, make_pair
from .torch_tree import TORCH_BRANCHING, TorchPairTree, torch_device


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
        branching: children per sum-tree node, an integer in [2, 1024]; by default 8 with the
            compiled kernels (numba), 32 with the numpy fallback (``sumtree.default_branching``)
            and with a torch tree (``torch_tree.TORCH_BRANCHING``).
        device: None (default): the trees are numpy arrays (numba-compiled when installed).
            ``"cuda"``, ``"cuda:N"`` or ``"cpu"`` (or a ``torch.device``): they are torch tensors
            there (``torch_tree.TorchPairTree``), the same draws, leaves and weights. Batches
            are unchanged: ids and weights come back as numpy, since the rows and ids they index
            are on the host (ask ``sample(as_tensors="torch", device=...)`` for tensors). Where
            the tree runs is not saved: a save loads onto the numpy/numba tree; to resume on a
            device, ``load_state_dict`` the loaded buffer's ``state_dict()`` into a buffer built
            with this ``device``.

    Raises:
        InvalidTypeError, InvalidArgumentError: a parameter of the wrong type or out of range;
            a ``device`` that is not ``cpu`` or ``cuda``, or CUDA that is not available here.
        ImportError: a ``device`` without torch installed.
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
        self,
        alpha: float = 0.6,
        beta: float = 0.4,
        eps: float = 1e-6,
        *,
        branching: int | None = None,
        device: Any = None,
    ) -> None:
        who = type(self).__name__
        self.alpha = check_real(alpha, who, "alpha", low=0.0)
        self.beta = beta
        self.eps = check_real(eps, who, "eps", low=0.0)
        self.device = None if device is None else self._torch_device(device)
        if branching is None:
            branching = default_branching() if device is None else TORCH_BRANCHING
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
        self._trees = self._make_trees(capacity)  # sum and min over p^alpha
        own = type(self).update_priorities is Prioritized.update_priorities and not self._cold_updates
        self._checked = getattr(self._trees, "update_checked", None) if own else None
        self._pending: list[int] = []  # slots written one by one, not yet in the trees

    @property
    def trees(self) -> Any:
        """The sum and min trees over ``(p + eps) ** alpha``, with every item written so far in them.

        Items written one at a time (``on_write_one``, a per-step loop's ``add``) are put in the
        trees here, all at once in one compiled update, the first time anything reads or changes
        the trees after them. They all weigh ``max_priority`` and nothing changes
        ``max_priority`` without reading the trees first, so they get the weight they would have
        got at once."""
        if self._pending:
            self._flush()
        return self._trees

    def _flush(self) -> None:
        pending = self._pending
        n = len(pending)
        slots = np.array(pending[:n], dtype=np.int64)
        del pending[:n]  # one step under the GIL: a slot appended meanwhile stays pending
        self._trees.update_powered(slots, np.full(n, self.max_priority), self.eps, self.alpha)

    def _make_trees(self, capacity: int) -> Any:
        if self.device is not None:
            return TorchPairTree(capacity, branching=self.branching, device=self.device)
        return make_pair(capacity, branching=self.branching)

    # whether this class's trees may be torch tensors (RR-M's mask tree is numpy/numba only)
    _torch_trees = True

    def _torch_device(self, device: Any) -> Any:
        who = type(self).__name__
        if not self._torch_trees:
            raise InvalidArgumentError(
                f"{who}(device={device!r}): only Prioritized keeps its trees on a torch device; "
                f"leave device=None for {who}"
            )
        return torch_device(device, who)

    def _limit(self, capacity: int) -> float:
        """The largest priority whose ``(p + eps) ** alpha`` fits a leaf (``leaf_limit``)."""
        if self.alpha == 0:
            return float(np.finfo(np.float64).max)
        with np.errstate(over="ignore"):
            top = np.float64(leaf_limit(capacity)) ** (1.0 / self.alpha) * (1 - 1e-12)
        return float(min(top, np.finfo(np.float64).max)) - self.eps

    # Whether the tree nodes of updated priorities are usually cold: Prioritized's updates follow
    # a walk of this tree to the same leaves; PrioritizedReshuffled walks its mask tree instead.
    _cold_updates = False

    def _set(self, slots: np.ndarray, priorities: np.ndarray) -> None:
        # one pass: the leaves get (p + eps) ** alpha, and the largest p comes back
        top = self.trees.update_powered(slots, priorities, self.eps, self.alpha, cold=self._cold_updates)
        if top > self.max_priority:
            self.max_priority = top

    def on_write(
        self, slots: np.ndarray, rows: dict[str, Any], priorities: np.ndarray | None, view: View
    ) -> None:
        if priorities is None:
            priorities = np.full(len(slots), self.max_priority)
        self._set(slots, priorities)

    def on_write_one(self, slot: int, view: View) -> None:
        """One item written by the per-step path, at the largest priority seen (``trees``)."""
        self._pending.append(slot)

    def on_evict(self, slots: np.ndarray) -> None:
        self.trees.update(slots, np.zeros(len(slots)))

    def on_clear(self) -> None:
        self.max_priority = 1.0  # as new: fresh trees, and new items weigh 1 again
        self.bind(self.capacity)

    def update_priorities(self, slots: np.ndarray, priorities: np.ndarray) -> None:
        self._set(slots, priorities)

    def update_checked(self, slots: np.ndarray, priorities: Any) -> bool:
        """``update_priorities`` of priorities not checked yet, when the compiled tree can check
        them in the pass that sets them (a 1-D float array, one value per slot, every value in
        ``[0, priority_limit]``, which is what ``check_priorities`` accepts of such an array);
        False, with nothing changed, otherwise: the caller then checks them the general way
        (which names a bad value) and calls ``update_priorities``. Only for this class's own
        ``update_priorities`` (a subclass that overrides it always gets False)."""
        quick = self._checked
        if quick is None:
            return False
        if self._pending:
            self._flush()
        top = quick(slots, priorities, self.eps, self.alpha, self.priority_limit)
        if top is None:
            return False
        if top > self.max_priority:
            self.max_priority = top
        return True

    def sample(
        self, batch_size: int, view: View, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        check_can_sample(batch_size, view, True, "Prioritized")
        self._check_mass()
        return self.trees.stratified(rng.random(batch_size), self.beta)  # type: ignore[no-any-return]

    def _check_mass(self) -> float:
        """The total mass; raises when there is none to draw from."""
        total: float = self.trees.total
        if total <= 0:
            raise ReplayBankError(
                "all stored priorities are zero (with eps=0); nothing can be sampled"
            )
        return total

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

    #: the keys state_dict() writes; legacy_keys: keys of older saves that load ignores
    state_keys: tuple[str, ...] = ("priorities", "max_priority", "beta")

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore ``state_dict()``; every entry is checked before anything changes.

        Raises:
            InvalidStateError: a missing or unknown key, or a value of the wrong type, shape or
                range (scaled priorities must be finite, >= 0 and fit the tree).
        """
        who = type(self).__name__
        check_state_keys(state, who, self.state_keys, self.legacy_keys)
        scaled = state_array(
            state, "priorities", who, shape=(self.capacity,), low=0.0, high=leaf_limit(self.capacity)
        )
        max_priority = state_number(state, "max_priority", who, low=0.0, high=self.priority_limit)
        beta = state_number(state, "beta", who, low=0.0)
        self._load_extra(state, scaled)
        self.trees.load(scaled)
        self.max_priority = max_priority
        self.beta = beta

    legacy_keys: tuple[str, ...] = ()

    def check_table(self, table: Any) -> None:
        """Slots that hold no item must have no priority mass (else ``sample`` draws them)."""
        check_zero_on_empty(self.trees.leaves, table, type(self).__name__, "priorities")

    def _load_extra(self, state: dict[str, Any], scaled: np.ndarray) -> None:
        """Subclasses check and apply their own entries here (before the trees are loaded)."""
        return None
