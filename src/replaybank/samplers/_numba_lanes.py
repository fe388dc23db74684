"""RR-M's two pairs of trees in one compiled tree (``replaybank[fast]``): four lanes per node.

``PrioritizedReshuffled`` keeps a sum and a min over the scaled priorities (as ``Prioritized``)
and a second pair, the mask: a sum over the items still eligible for a draw and a min over the
due times of the masked ones. In two trees, a step walked the mask tree, refreshed it, then
refreshed the main tree's ancestors of the same leaves from cold (about twice the misses of a
``Prioritized`` step). Here the four values of a leaf, and of every inner node, sit side by side
(32 bytes; a node of 8 children is four adjacent cache lines, aligned), so the lines a draw's walk
brings in are the ones every later refresh of those leaves reads and writes, and one refresh
recomputes all four lanes.

Lanes: ``ELIGIBLE`` (sum, the draws walk it), ``DUE`` (min), ``MASS`` (sum of the scaled
priorities), ``LOW`` (their min, the weights' normaliser). The walk and the search are those of
``_numba_tree`` (``_walk``, ``_below``) on a stride of 4 instead of 2; ``LaneTree.mask`` and
``LaneTree.trees`` give the two pairs the interface of ``NumbaPairTree``, so the sampler's numpy
steps (its fallback) run on them unchanged.
"""

from __future__ import annotations

import numba
import numpy as np

from ._numba_prefetch import prefetch
from ._numba_tree import _level_offsets, _weights

LANES = 4
ELIGIBLE, DUE, MASS, LOW = 0, 1, 2, 3
_ALIGN = 256  # bytes: a node's 8 children, four lanes each


@numba.njit(cache=True, nogil=True)
def top_sum(tree: np.ndarray, top: int, lane: int) -> float:
    total = 0.0
    for j in range(top, len(tree) // 4):
        total += tree[4 * j + lane]
    return total


@numba.njit(cache=True, nogil=True)
def top_min(tree: np.ndarray, top: int, lane: int) -> float:
    low = np.inf
    for j in range(top, len(tree) // 4):
        low = min(low, tree[4 * j + lane])
    return low


@numba.njit(cache=True, nogil=True)
def walk(tree: np.ndarray, offsets: np.ndarray, k: int, mass: np.ndarray, lane: int) -> np.ndarray:
    """``_numba_tree._walk`` over the sums of ``lane``: the same branch-free scan and the same
    arithmetic; the prefetch of the chosen child's node takes all four lanes' lines (a refresh of
    the leaf reads them next)."""
    n = len(mass)
    node = np.zeros(n, dtype=np.int64)
    m = mass.copy()
    for level in range(len(offsets) - 2, -1, -1):
        here = offsets[level]
        down = offsets[level - 1] if level > 0 else 0
        for i in range(n):
            first = 4 * (here + node[i] * k) + lane
            mi = m[i]
            run = 0.0
            below = 0.0
            before_last = 0.0
            count = 0
            last = -1
            for j in range(k):
                v = tree[first + 4 * j]
                positive = v > 0.0
                last = j if positive else last
                before_last = run if positive else before_last
                run += v
                inside = run <= mi
                count += inside
                below = run if inside else below
            if count > last:
                count = max(last, 0)
                below = before_last
            m[i] = mi - below
            child = node[i] * k + count
            node[i] = child
            if level > 0:
                for line in range(4 * (down + child * k), 4 * (down + child * k + k), 8):
                    prefetch(tree, line)
    return node


@numba.njit(cache=True, nogil=True)
def _node(tree: np.ndarray, first: int, k: int, parent: int) -> None:
    """Write the four lanes of ``parent`` from its ``k`` children starting at ``first``."""
    eligible = 0.0
    due = np.inf
    mass = 0.0
    low = np.inf
    for j in range(first, first + k):
        eligible += tree[4 * j]
        v = tree[4 * j + 1]
        if v < due:
            due = v
        mass += tree[4 * j + 2]
        v = tree[4 * j + 3]
        if v < low:
            low = v
    tree[4 * parent] = eligible
    tree[4 * parent + 1] = due
    tree[4 * parent + 2] = mass
    tree[4 * parent + 3] = low


@numba.njit(cache=True, nogil=True)
def rebuild_from(tree: np.ndarray, offsets: np.ndarray, k: int, start: int) -> None:
    for level in range(start, len(offsets) - 1):
        below, here = offsets[level - 1], offsets[level]
        for parent in range((here - below) // k):
            _node(tree, below + parent * k, k, here + parent)


@numba.njit(cache=True, nogil=True)
def refresh(tree: np.ndarray, offsets: np.ndarray, k: int, index: np.ndarray) -> None:
    """``_numba_tree._refresh`` for four lanes: every ancestor of ``index``, all lanes at once."""
    node = index.copy()
    for level in range(1, len(offsets) - 1):
        below, here = offsets[level - 1], offsets[level]
        parents = (here - below) // k
        if parents <= len(node):
            rebuild_from(tree, offsets, k, level)
            return
        for i in range(len(node)):
            parent = node[i] // k
            node[i] = parent
            _node(tree, below + parent * k, k, here + parent)


@numba.njit(cache=True, nogil=True)
def set_pair(
    tree: np.ndarray, offsets: np.ndarray, k: int, lane: int, index: np.ndarray, sums: np.ndarray, mins: np.ndarray
) -> None:
    """Set the sum lane ``lane`` and the min lane after it (a zero min is +inf: not in it)."""
    for i in range(len(index)):
        tree[4 * index[i] + lane] = sums[i]
        tree[4 * index[i] + lane + 1] = mins[i] if mins[i] > 0.0 else np.inf
    refresh(tree, offsets, k, index)


@numba.njit(cache=True, nogil=True)
def set_powered(
    tree: np.ndarray, offsets: np.ndarray, k: int, index: np.ndarray, values: np.ndarray, priorities: np.ndarray
) -> float:
    """``_numba_tree._update_powered`` on the ``MASS``/``LOW`` lanes: returns the largest priority."""
    top = -np.inf
    for i in range(len(index)):
        top = max(top, priorities[i])
        v = values[i]
        tree[4 * index[i] + 2] = v
        tree[4 * index[i] + 3] = v if v > 0.0 else np.inf
    refresh(tree, offsets, k, index)
    return top


@numba.njit(cache=True, nogil=True)
def ratios(tree: np.ndarray, slots: np.ndarray, low: float) -> np.ndarray:
    out = np.empty(len(slots))
    for i in range(len(slots)):
        out[i] = tree[4 * slots[i] + 2] / low
    return out


@numba.njit(cache=True, nogil=True)
def below(tree: np.ndarray, offsets: np.ndarray, k: int, capacity: int, limit: float) -> np.ndarray:
    """``_numba_tree._below`` on the ``DUE`` lane: leaves whose due time is <= ``limit``."""
    top = len(offsets) - 2
    frontier = np.zeros(1, dtype=np.int64)
    for level in range(top, -1, -1):
        nxt = np.empty(len(frontier) * k, dtype=np.int64)
        n = 0
        for i in range(len(frontier)):
            first = frontier[i] * k
            for j in range(first, first + k):
                if tree[4 * (offsets[level] + j) + 1] <= limit:
                    nxt[n] = j
                    n += 1
        frontier = nxt[:n]
    return frontier[frontier < capacity]


def _index(index: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(index, dtype=np.int64)


def _values(values: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(values, dtype=np.float64)


class LanePair:
    """One (sum, min) pair of a ``LaneTree``'s lanes, with ``NumbaPairTree``'s interface."""

    def __init__(self, owner: LaneTree, lane: int) -> None:
        self.owner, self.lane = owner, lane
        self.tree, self.offsets, self.k, self.capacity = owner.tree, owner.offsets, owner.k, owner.capacity
        self._top = int(owner.offsets[-2])

    @property
    def total(self) -> float:
        return float(top_sum(self.tree, self._top, self.lane))

    @property
    def minimum(self) -> float:
        return float(top_min(self.tree, self._top, self.lane + 1))

    @property
    def leaves(self) -> np.ndarray:
        """The sum lane's leaves (a strided view: read-only use)."""
        return self.tree[self.lane : 4 * self.capacity : 4]

    def update(self, index: np.ndarray, values: np.ndarray) -> None:
        values = _values(values)
        self.update_pair(index, values, values)

    def update_pair(self, index: np.ndarray, sums: np.ndarray, mins: np.ndarray) -> None:
        set_pair(self.tree, self.offsets, self.k, self.lane, _index(index), _values(sums), _values(mins))

    def update_powered(
        self, index: np.ndarray, priorities: np.ndarray, eps: float, alpha: float, *, cold: bool = False
    ) -> float:
        """As ``NumbaPairTree.update_powered`` (the ``MASS`` pair only); ``cold`` is not needed:
        the walk that drew these leaves brought every lane's lines in."""
        p = _values(priorities)
        return float(set_powered(self.tree, self.offsets, self.k, _index(index), (p + eps) ** alpha, p))

    def load(self, values: np.ndarray) -> None:
        """Set this pair's leaves and rebuild every node (all lanes)."""
        self.tree[self.lane : 4 * self.capacity : 4] = values
        self.tree[self.lane + 1 : 4 * self.capacity : 4] = np.where(values > 0, values, np.inf)
        rebuild_from(self.tree, self.offsets, self.k, 1)

    def find(self, mass: np.ndarray) -> np.ndarray:
        return walk(self.tree, self.offsets, self.k, _values(mass), self.lane)  # type: ignore[no-any-return]

    def weights(self, slots: np.ndarray, beta: float) -> np.ndarray:
        return _weights(ratios(self.tree, _index(slots), self.minimum), float(beta))

    def stratified(self, u: np.ndarray, beta: float) -> tuple[np.ndarray, np.ndarray]:
        n = len(u)
        slots = self.find((np.arange(n) + u) * (self.total / n))
        return slots, self.weights(slots, beta)

    def below(self, limit: float) -> np.ndarray:
        """Leaves whose ``DUE`` value is <= ``limit`` (the mask pair's search)."""
        return below(self.tree, self.offsets, self.k, self.capacity, float(limit))  # type: ignore[no-any-return]


class LaneTree:
    """RR-M's trees over ``capacity`` leaves in one array: ``trees`` (the scaled priorities' sum
    and min) and ``mask`` (the eligible items' sum, the masked items' due times), four lanes per
    node, ``branching`` children per node, levels bottom-up as in ``NumbaPairTree``."""

    def __init__(self, capacity: int, *, branching: int = 8) -> None:
        self.capacity = int(capacity)
        self.k = int(branching)
        self.offsets = _level_offsets(self.capacity, self.k)
        n = LANES * int(self.offsets[-1])
        raw = np.zeros(n + _ALIGN // 8)
        start = (-raw.ctypes.data % _ALIGN) // 8
        self.tree = raw[start : start + n]
        self.tree[DUE::4] = np.inf
        self.tree[LOW::4] = np.inf
        self.mask = LanePair(self, ELIGIBLE)
        self.trees = LanePair(self, MASS)
