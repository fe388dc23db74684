"""Vectorised k-ary sum and min trees over per-slot priorities.

``PairedTrees`` (a sum and a min ``KaryTree`` over the same leaves) is the pure-numpy fallback
used when numba is not installed; ``_numba_tree.NumbaPairTree`` is the fast path. Why k-ary: a batch of 256 lookups in a binary tree over a million leaves is 20 levels of
small numpy calls, and numpy's per-call overhead dominates; with 32 children per node the same
tree is 4 levels deep, each level one gather of a (batch, 32) block plus a cumulative sum.

Updates recompute each touched parent from all its children instead of adding deltas, so repeated
indices in one update are harmless and rounding error never accumulates.
"""

from __future__ import annotations

import os
from typing import Any, Literal

import numpy as np

from .priorities import importance_weights, powered

Reduce = Literal["sum", "min"]


class KaryTree:
    """A reduction tree (``sum`` or ``min``) over ``capacity`` leaves, ``branching`` children per node.

    >>> t = KaryTree(5, branching=2)
    >>> t.update(np.array([0, 3]), np.array([1.0, 3.0]))
    >>> t.root, t.find(np.array([0.5, 1.5, 3.9]))
    (4.0, array([0, 3, 3]))
    """

    def __init__(self, capacity: int, *, branching: int = 32, reduce: Reduce = "sum") -> None:
        self.k = branching
        self.reduce = reduce
        self.fill = 0.0 if reduce == "sum" else np.inf
        self._op = np.add if reduce == "sum" else np.minimum
        # levels[0] are the leaves; every level is padded to a multiple of k so it reshapes to
        # (parents, k); the last level has a single node, the root.
        self.levels: list[np.ndarray] = []
        size = max(int(capacity), 1)
        while True:
            padded = -(-size // self.k) * self.k
            self.levels.append(np.full(padded, self.fill))
            if size == 1:
                break
            size = padded // self.k
        self.capacity = int(capacity)

    @property
    def leaves(self) -> np.ndarray:
        return self.levels[0][: self.capacity]

    @property
    def root(self) -> float:
        return float(self.levels[-1][0])

    def update(self, index: np.ndarray, values: np.ndarray) -> None:
        """Set ``leaves[index] = values`` (for a repeated index the last value wins) and refresh
        the ancestors."""
        if len(index) > 1:
            last = len(index) - 1 - np.unique(index[::-1], return_index=True)[1]
            index, values = index[last], values[last]
        self.levels[0][index] = values
        node = index
        for child, parent in zip(self.levels, self.levels[1:]):
            node = node // self.k
            parent[node] = self._op.reduce(child.reshape(-1, self.k)[node], axis=1)

    def rebuild(self) -> None:
        for child, parent in zip(self.levels, self.levels[1:]):
            parent[: len(child) // self.k] = self._op.reduce(child.reshape(-1, self.k), axis=1)

    def find(self, mass: np.ndarray) -> np.ndarray:
        """For a sum tree: the leaf where the running sum first exceeds each ``mass`` value.

        ``mass`` must lie in ``[0, root)``. Leaves with zero value are never returned.
        """
        node = np.zeros(len(mass), dtype=np.int64)
        mass = np.array(mass, dtype=np.float64)
        for level in reversed(self.levels[:-1]):
            children = level.reshape(-1, self.k)[node]  # (batch, k)
            running = np.cumsum(children, axis=1)
            pick = np.count_nonzero(running <= mass[:, None], axis=1)
            # Rounding can leave mass at or above the last running sum: fall back to the last
            # child with positive value so an empty slot is never chosen.
            last = self.k - 1 - np.argmax(children[:, ::-1] > 0, axis=1)
            pick = np.minimum(pick, last)
            rows = np.arange(len(node))
            mass -= np.where(pick > 0, running[rows, np.maximum(pick - 1, 0)], 0.0)
            node = node * self.k + pick
        return node


class PairedTrees:
    """A sum tree and a min tree over the same leaves (numpy fallback of ``NumbaPairTree``)."""

    def __init__(self, capacity: int, *, branching: int = 32) -> None:
        self.sum = KaryTree(capacity, branching=branching, reduce="sum")
        self.min = KaryTree(capacity, branching=branching, reduce="min")

    @property
    def total(self) -> float:
        return self.sum.root

    @property
    def minimum(self) -> float:
        return self.min.root

    @property
    def leaves(self) -> np.ndarray:
        return self.sum.leaves

    def update(self, index: np.ndarray, values: np.ndarray) -> None:
        # zero mass is +inf for the min, so empty slots never set the weight normaliser
        self.sum.update(index, values)
        self.min.update(index, np.where(values > 0, values, np.inf))

    def update_powered(
        self, index: np.ndarray, priorities: np.ndarray, eps: float, alpha: float, *, cold: bool = False
    ) -> float:
        """Set ``leaves[index] = (priorities + eps) ** alpha`` (the last value wins for a repeated
        index); returns ``max(priorities)``, ``-inf`` when there are none. ``cold`` is the
        compiled tree's prefetch hint; numpy has none."""
        values, top = powered(priorities, eps, alpha)
        self.update(index, values)
        return top

    def update_pair(self, index: np.ndarray, sums: np.ndarray, mins: np.ndarray) -> None:
        """Set the sum-tree and min-tree leaves to different values (zero min = not in it)."""
        self.sum.update(index, sums)
        self.min.update(index, np.where(mins > 0, mins, np.inf))

    def load(self, values: np.ndarray) -> None:
        self.sum.leaves[:] = values
        self.min.leaves[:] = np.where(values > 0, values, np.inf)
        self.sum.rebuild()
        self.min.rebuild()

    def find(self, mass: np.ndarray) -> np.ndarray:
        return self.sum.find(mass)

    def below(self, limit: float) -> np.ndarray:
        """Leaves holding a positive value <= ``limit``, found level by level through the min tree."""
        levels, k = self.min.levels, self.min.k
        node = np.zeros(1, dtype=np.int64)
        if not levels[-1][0] <= limit:
            return node[:0]
        for level in reversed(levels[:-1]):
            children = (node[:, None] * k + np.arange(k)).ravel()
            node = children[level[children] <= limit]
        return node[node < self.min.capacity]

    def weights(self, slots: np.ndarray, beta: float) -> np.ndarray:
        """``(P(i) / min_k P(k)) ** -beta``: importance weights scaled so the largest possible is 1."""
        return importance_weights(self.sum.leaves[slots] / self.min.root, beta)

    def stratified(self, u: np.ndarray, beta: float) -> tuple[np.ndarray, np.ndarray]:
        n = len(u)
        slots = self.find((np.arange(n) + u) * (self.total / n))
        return slots, self.weights(slots, beta)


def _compiled_tree() -> Any:
    """``NumbaPairTree``, or None without numba or when ``REPLAYBANK_KERNELS=numpy`` asks for the
    numpy fallback."""
    if os.environ.get("REPLAYBANK_KERNELS", "").lower() == "numpy":
        return None
    try:
        from ._numba_tree import NumbaPairTree
    except ImportError:
        return None
    return NumbaPairTree


def default_branching() -> int:
    """Children per node of the trees ``make_pair`` builds when not told: 8 for the compiled tree
    (its walk reads every child of a node, and 8 (sum, min) pairs are two cache lines), 32 for
    the numpy fallback (fewer levels, so fewer numpy calls per walk)."""
    return 8 if _compiled_tree() is not None else 32


def make_pair(capacity: int, *, branching: int | None = None) -> Any:
    """Sum and min trees over the same leaves: compiled and interleaved when numba is installed."""
    compiled = _compiled_tree()
    k = branching or default_branching()
    return compiled(capacity, branching=k) if compiled is not None else PairedTrees(capacity, branching=k)
