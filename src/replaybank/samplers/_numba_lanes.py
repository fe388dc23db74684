"""RR-M's two pairs of trees in one compiled tree (``replaybank[fast]``): four lanes per node.

``PrioritizedReshuffled`` keeps a sum and a min over the scaled priorities (as ``Prioritized``)
and a second pair, the mask: a sum over the items still eligible for a draw and a min over the
due times of the masked ones. As two trees, a step walked the mask tree and refreshed it, then
refreshed the main tree's ancestors of the same leaves from cold, and unmasked due items with a
second search and refresh. Here both pairs share one node numbering: lanes ``ELIGIBLE`` (sum, the
draws walk it), ``DUE`` (min), ``MASS`` (sum of the scaled priorities) and ``LOW`` (their min,
the weights' normaliser), each lane a row of one (4, nodes) array, so:

* a walk (or the due-time search) reads one cache line per node of its own lane (8 children),
  and prefetches the node's line in every lane as it goes down: the refreshes of the drawn leaves
  that follow (mask, then priorities) find every lane cached;
* a priority update is one refresh of all four lanes; a change of the mask refreshes its two.

Tried first: the four values of a child interleaved (32 bytes, a node four adjacent lines),
where a walk waits on four lines per level instead of one (replaced together with other changes,
so its own share was not measured). The walk and the
search are ``_numba_tree``'s (``_walk``, ``_below``) on lanes; ``LaneTree.mask`` and
``LaneTree.trees`` give the two pairs ``NumbaPairTree``'s interface, so the sampler's numpy steps
(its fallback) run on them unchanged, and the tests compare the two draw for draw.
"""

from __future__ import annotations

import numba
import numpy as np

from ._numba_prefetch import prefetch
from ._numba_tree import _index, _level_offsets, _values, _weights

LANES = 4
ELIGIBLE, DUE, MASS, LOW = 0, 1, 2, 3
_ALIGN = 64  # bytes: a cache line; a node's 8 children in one lane are one line
_NONE = np.zeros(0, dtype=np.int64)


@numba.njit(cache=True, nogil=True)
def top_sum(tree: np.ndarray, top: int, lane: int) -> float:
    total = 0.0
    for j in range(top, tree.shape[1]):
        total += tree[lane, j]
    return total


@numba.njit(cache=True, nogil=True)
def top_min(tree: np.ndarray, top: int, lane: int) -> float:
    low = np.inf
    for j in range(top, tree.shape[1]):
        low = min(low, tree[lane, j])
    return low


@numba.njit(cache=True, nogil=True)
def _prefetch_node(tree: np.ndarray, first: int, k: int) -> None:
    """Start loading the ``k`` children at ``first`` in every lane (one line per lane at k = 8)."""
    for lane in range(LANES):
        for j in range(first, first + k, 8):
            prefetch(tree[lane], j)  # type: ignore[call-arg]  # numba intrinsic


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
            first = here + node[i] * k
            mi = m[i]
            run = 0.0
            below = 0.0
            before_last = 0.0
            count = 0
            last = -1
            for j in range(k):
                v = tree[lane, first + j]
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
                _prefetch_node(tree, down + child * k, k)
    return node


@numba.njit(cache=True, nogil=True)
def _node(tree: np.ndarray, first: int, k: int, parent: int, lanes: int) -> None:
    """Write the first ``lanes`` lanes of ``parent`` (2: the mask's, 4: all) from its ``k``
    children starting at ``first``; the mins by selects, not branches."""
    for lane in range(0, lanes, 2):  # a (sum, min) pair: the mask's (eligible, due), then (mass, low)
        total = 0.0
        low = np.inf
        for j in range(first, first + k):
            total += tree[lane, j]
            v = tree[lane + 1, j]
            low = v if v < low else low
        tree[lane, parent] = total
        tree[lane + 1, parent] = low


@numba.njit(cache=True, nogil=True)
def rebuild_from(tree: np.ndarray, offsets: np.ndarray, k: int, start: int, lanes: int) -> None:
    for level in range(start, len(offsets) - 1):
        below, here = offsets[level - 1], offsets[level]
        for parent in range((here - below) // k):
            _node(tree, below + parent * k, k, here + parent, lanes)


@numba.njit(cache=True, nogil=True)
def refresh(tree: np.ndarray, offsets: np.ndarray, k: int, index: np.ndarray, lanes: int) -> None:
    """``_numba_tree._refresh`` over lanes: every ancestor of ``index``, its first ``lanes``
    lanes (2 after a change of the mask only, 4 after a change of priorities). A parent equal to
    the one before it is written once (sorted ``index``: each ancestor once per level)."""
    node = index.copy()
    n = len(node)
    for level in range(1, len(offsets) - 1):
        below, here = offsets[level - 1], offsets[level]
        parents = (here - below) // k
        if parents <= n:
            rebuild_from(tree, offsets, k, level, lanes)
            return
        m = 0
        for i in range(n):
            parent = node[i] // k
            if m and node[m - 1] == parent:
                continue
            node[m] = parent
            m += 1
            _node(tree, below + parent * k, k, here + parent, lanes)
        n = m


@numba.njit(cache=True, nogil=True)
def union(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The slots of ``a`` and ``b`` for one ``refresh``: ``a`` itself when ``b`` is empty, else
    their sorted union (a merge when both are ascending, as a stratified draw's are)."""
    if len(b) == 0:
        return a
    for x in (a, b):
        for i in range(1, len(x)):
            if x[i] < x[i - 1]:
                return np.unique(np.concatenate((a, b)))
    out = np.empty(len(a) + len(b), dtype=np.int64)
    i = j = n = 0
    while i < len(a) or j < len(b):
        if j == len(b) or (i < len(a) and a[i] <= b[j]):
            v = a[i]
            i += 1
        else:
            v = b[j]
            j += 1
        if n == 0 or out[n - 1] != v:
            out[n] = v
            n += 1
    return out[:n]


@numba.njit(cache=True, nogil=True)
def set_pair(
    tree: np.ndarray, offsets: np.ndarray, k: int, lane: int, index: np.ndarray, sums: np.ndarray, mins: np.ndarray
) -> None:
    """Set the sum lane ``lane`` and the min lane after it (a zero min is +inf: not in it)."""
    for i in range(len(index)):
        tree[lane, index[i]] = sums[i]
        tree[lane + 1, index[i]] = mins[i] if mins[i] > 0.0 else np.inf
    refresh(tree, offsets, k, index, 2 if lane == 0 else 4)


@numba.njit(cache=True, nogil=True)
def set_powered(
    tree: np.ndarray, offsets: np.ndarray, k: int, index: np.ndarray, values: np.ndarray, priorities: np.ndarray
) -> float:
    """``_numba_tree._update_powered`` on the ``MASS``/``LOW`` lanes: returns the largest priority."""
    top = -np.inf
    for i in range(len(index)):
        top = max(top, priorities[i])
        v = values[i]
        tree[2, index[i]] = v
        tree[3, index[i]] = v if v > 0.0 else np.inf
    refresh(tree, offsets, k, index, 4)
    return top


@numba.njit(cache=True, nogil=True)
def ratios(tree: np.ndarray, slots: np.ndarray, low: float) -> np.ndarray:
    out = np.empty(len(slots))
    for i in range(len(slots)):
        out[i] = tree[2, slots[i]] / low
    return out


@numba.njit(cache=True, nogil=True)
def below(tree: np.ndarray, offsets: np.ndarray, k: int, capacity: int, limit: float) -> np.ndarray:
    """``_numba_tree._below`` on the ``DUE`` lane: leaves whose due time is <= ``limit``. The same
    level-by-level frontier, without a data-dependent branch per child (each child is written and
    the count advanced by the comparison), and each node kept for the next level has its children
    prefetched at once (every lane), so the frontier's misses overlap as a walk's do."""
    top = len(offsets) - 2
    frontier = np.zeros(1, dtype=np.int64)
    for level in range(top, -1, -1):
        here = offsets[level]
        down = offsets[level - 1] if level > 0 else 0
        nxt = np.empty(len(frontier) * k, dtype=np.int64)
        n = 0
        for i in range(len(frontier)):
            first = frontier[i] * k
            for j in range(first, first + k):
                nxt[n] = j
                n += tree[1, here + j] <= limit
        frontier = nxt[:n]
        if level > 0:
            for i in range(n):
                _prefetch_node(tree, down + frontier[i] * k, k)
    return frontier[frontier < capacity]


class LanePair:
    """One (sum, min) pair of a ``LaneTree``'s lanes, with ``NumbaPairTree``'s interface."""

    def __init__(self, owner: LaneTree, lane: int) -> None:
        self.owner, self.lane = owner, lane
        self.tree, self.offsets, self.k, self.capacity = owner.tree, owner.offsets, owner.k, owner.capacity
        self._top = int(owner.offsets[-2])

    @property
    def total(self) -> float:
        self.owner.flush()
        return float(top_sum(self.tree, self._top, self.lane))

    @property
    def minimum(self) -> float:
        self.owner.flush()
        return float(top_min(self.tree, self._top, self.lane + 1))

    @property
    def leaves(self) -> np.ndarray:
        """The sum lane's leaves (a view: read-only use)."""
        return self.tree[self.lane, : self.capacity]

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
        self.tree[self.lane, : self.capacity] = values
        self.tree[self.lane + 1, : self.capacity] = np.where(values > 0, values, np.inf)
        rebuild_from(self.tree, self.offsets, self.k, 1, 4)

    def find(self, mass: np.ndarray) -> np.ndarray:
        self.owner.flush()
        return walk(self.tree, self.offsets, self.k, _values(mass), self.lane)  # type: ignore[no-any-return]

    def weights(self, slots: np.ndarray, beta: float) -> np.ndarray:
        return _weights(ratios(self.tree, _index(slots), self.minimum), float(beta))

    def stratified(self, u: np.ndarray, beta: float) -> tuple[np.ndarray, np.ndarray]:
        n = len(u)
        slots = self.find((np.arange(n) + u) * (self.total / n))
        return slots, self.weights(slots, beta)

    def below(self, limit: float) -> np.ndarray:
        """Leaves whose ``DUE`` value is <= ``limit`` (the mask pair's search)."""
        self.owner.flush()
        return below(self.tree, self.offsets, self.k, self.capacity, float(limit))  # type: ignore[no-any-return]


class LaneTree:
    """RR-M's trees over ``capacity`` leaves in one array: ``trees`` (the scaled priorities' sum
    and min) and ``mask`` (the eligible items' sum, the masked items' due times), four lanes per
    node, ``branching`` children per node, levels bottom-up as in ``NumbaPairTree``.

    ``stale``: leaves whose mask lanes changed while their ancestors' were left as they were (a
    draw masks the items it took, and the priority update that usually follows refreshes the
    same ancestors in all four lanes: ``_numba_rrm.update`` does both in one refresh). Every
    reader of the inner nodes (``total``, ``minimum``, ``find``, ``below``, RR-M's kernels)
    calls ``flush`` first. Writers need not: a node is a function of its children alone, so
    the flush recomputes each stale ancestor, bottom-up, from children that are final by then.
    """

    def __init__(self, capacity: int, *, branching: int = 8) -> None:
        self.capacity = int(capacity)
        self.k = int(branching)
        self.offsets = _level_offsets(self.capacity, self.k)
        n = -(-int(self.offsets[-1]) // 8) * 8  # each lane a whole number of cache lines
        raw = np.zeros(LANES * n + _ALIGN // 8)
        start = (-raw.ctypes.data % _ALIGN) // 8
        self.tree = raw[start : start + LANES * n].reshape(LANES, n)
        self.tree[DUE] = np.inf
        self.tree[LOW] = np.inf
        self.stale = _NONE
        self.mask = LanePair(self, ELIGIBLE)
        self.trees = LanePair(self, MASS)

    def flush(self) -> None:
        """Refresh the mask lanes of the ``stale`` leaves' ancestors."""
        if len(self.stale):
            refresh(self.tree, self.offsets, self.k, self.stale, 2)
            self.stale = _NONE
