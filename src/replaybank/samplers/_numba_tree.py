"""Sum and min trees over the same leaves, compiled with numba (``replaybank[fast]``).

Why numba: a prioritized step is 256 root-to-leaf walks plus 256 leaf-to-root updates. Compiled,
that is a few microseconds of arithmetic; as numpy calls it is dozens of calls at about a
microsecond each (``sumtree.PairedTrees`` is that pure-numpy fallback). Over a million leaves the
cost is cache misses, so the layout is chosen for them:

* 8 children per node (8 measured fastest among 2..64): a walk is 7 steps, each a scan of
  adjacent values, instead of 20 dependent steps in a binary tree;
* sum and min interleaved node by node, a node's 8 pairs on one 128-byte-aligned pair of cache
  lines: ``update_priorities`` follows ``sample`` on the same slots, and the walk that sampling
  did has already brought the min values into cache (measured in place, in the benchmark's step
  with the row gather between: the update costs about half of what it does with the sums and
  the mins in two arrays, while the walk costs about the same);
* walks and updates go level by level across the batch, so the misses of different leaves
  overlap; each is one compiled call per batch with its loops written inline.

Parents are recomputed from all their children, so repeated indices are harmless (the last value
wins) and rounding never accumulates.
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np

from ._numba_checks import shifted as _shifted
from ._numba_prefetch import prefetch
from .priorities import importance_weights

_ALIGN = 128  # bytes: the 8 (sum, min) pairs of one node, two adjacent cache lines


def _aligned(n: int) -> np.ndarray:
    """``n`` float64 zeros starting on an ``_ALIGN``-byte boundary."""
    pad = _ALIGN // 8
    raw = np.zeros(n + pad)
    start = (-raw.ctypes.data % _ALIGN) // 8
    return raw[start : start + n]


@numba.njit(cache=True, nogil=True)
def _top_total(tree: np.ndarray, top: int) -> float:
    total = 0.0
    for j in range(top, len(tree) // 2):
        total += tree[2 * j]
    return total


@numba.njit(cache=True, nogil=True)
def _top_min(tree: np.ndarray, top: int) -> float:
    low = np.inf
    for j in range(top, len(tree) // 2):
        low = min(low, tree[2 * j + 1])
    return low


@numba.njit(cache=True, nogil=True)
def _walk(tree: np.ndarray, offsets: np.ndarray, k: int, mass: np.ndarray) -> np.ndarray:
    """The leaf holding each ``mass``: the child where the running sum first exceeds what is left
    of it, never a zero-mass child (rounding overflow lands on the last positive one).

    Branch-free per node: every child is added to a running sum and counted while the sum stays
    <= the mass, so the scan has no data-dependent exit to mispredict (that cost ~15 ns a level).
    The mass left is the mass minus the running sum before the chosen child, as in the numpy
    fallback (``KaryTree.find``). As soon as a walk has chosen its child, the child's node one
    level down is prefetched; the batch goes level by level, so it arrives before it is read.
    """
    n = len(mass)
    node = np.zeros(n, dtype=np.int64)
    m = mass.copy()
    for level in range(len(offsets) - 2, -1, -1):
        here = offsets[level]
        down = offsets[level - 1] if level > 0 else 0
        for i in range(n):
            first = 2 * (here + node[i] * k)
            mi = m[i]
            run = 0.0  # running sum of the children so far
            below = 0.0  # the running sum before the chosen child
            before_last = 0.0  # the running sum before the last positive child
            count = 0
            last = -1
            for j in range(k):
                v = tree[first + 2 * j]
                positive = v > 0.0  # selects below, not branches
                last = j if positive else last
                before_last = run if positive else before_last
                run += v
                inside = run <= mi
                count += inside
                below = run if inside else below
            if count > last:  # rounding left mass past the last positive child: take it
                count = max(last, 0)
                below = before_last
            m[i] = mi - below
            child = node[i] * k + count
            node[i] = child
            if level > 0:
                for line in range(2 * (down + child * k), 2 * (down + child * k + k), 8):
                    prefetch(tree, line)  # type: ignore[call-arg]  # numba intrinsic (typingctx is bound); the child's k (sum, min) pairs, 64 bytes a line
    return node


@numba.njit(cache=True, nogil=True)
def _ratios(tree: np.ndarray, slots: np.ndarray, low: float) -> np.ndarray:
    """``leaf / min`` of each slot: the importance weight is its ``-beta`` power (``_weights``)."""
    out = np.empty(len(slots))
    for i in range(len(slots)):
        out[i] = tree[2 * slots[i]] / low
    return out


@numba.njit(cache=True, nogil=True)
def _stratified(tree: np.ndarray, offsets: np.ndarray, k: int, u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The walk of a stratified batch in one call: draw ``i`` takes mass ``(i + u[i]) * total / n``;
    returns the slots and their ``leaf / min`` ratios (read while the leaves are in cache)."""
    top = offsets[len(offsets) - 2]
    n = len(u)
    step = _top_total(tree, top) / n
    mass = np.empty(n)
    for i in range(n):
        mass[i] = (i + u[i]) * step
    slots = _walk(tree, offsets, k, mass)
    return slots, _ratios(tree, slots, _top_min(tree, top))


# float32 ``ratios ** -beta``, never 0: the numpy expression every tree evaluates, so the compiled and
# numpy paths give the same bits (``priorities.importance_weights``)
_weights = importance_weights


@numba.njit(cache=True, nogil=True)
def _prefetch_up(tree: np.ndarray, offsets: np.ndarray, k: int, index: np.ndarray) -> None:
    """Start loading, all at once, the nodes a refresh of ``index`` reads on the two levels above
    the leaves, where a batch's ancestors are scattered over megabytes (at 10^6 items an update of
    256 uncached leaves took 28-32 us without, 17-18 us with). After a walk to the same leaves
    they are cached already and the 1,024 prefetches only cost time, so it is asked for."""
    for level in range(1, min(3, len(offsets) - 1)):
        below = offsets[level - 1]
        span = k ** level
        for i in range(len(index)):
            first = below + (index[i] // span) * k
            for line in range(2 * first, 2 * (first + k), 8):
                prefetch(tree, line)  # type: ignore[call-arg]  # numba intrinsic


@numba.njit(cache=True, nogil=True)
def _refresh(tree: np.ndarray, offsets: np.ndarray, k: int, index: np.ndarray) -> None:
    """Recompute every ancestor of ``index`` from all its children, level by level. Near the top,
    where a level has fewer nodes than there are leaves to refresh, the whole level is recomputed
    instead (the ancestors of a batch share those few nodes, so that is less work)."""
    node = index.copy()
    for level in range(1, len(offsets) - 1):
        below, here = offsets[level - 1], offsets[level]
        parents = (here - below) // k
        whole = parents <= len(node)
        for i in range(parents if whole else len(node)):
            if whole:
                parent = i
            else:
                parent = node[i] // k
                node[i] = parent
            first = below + parent * k
            total = 0.0
            low = np.inf
            for j in range(first, first + k):
                total += tree[2 * j]
                v = tree[2 * j + 1]
                if v < low:
                    low = v
            tree[2 * (here + parent)] = total
            tree[2 * (here + parent) + 1] = low
        if whole:  # every level above is smaller still
            _rebuild_from(tree, offsets, k, level + 1)
            return


@numba.njit(cache=True, nogil=True)
def _update(tree: np.ndarray, offsets: np.ndarray, k: int, index: np.ndarray, values: np.ndarray) -> None:
    """Set leaves (zero mass is +inf for the min, so empty slots never set the weight normaliser)."""
    for i in range(len(index)):
        tree[2 * index[i]] = values[i]
        tree[2 * index[i] + 1] = values[i] if values[i] > 0.0 else np.inf
    _refresh(tree, offsets, k, index)


@numba.njit(cache=True, nogil=True)
def _update_powered(
    tree: np.ndarray,
    offsets: np.ndarray,
    k: int,
    index: np.ndarray,
    values: np.ndarray,
    priorities: np.ndarray,
    cold: bool,
) -> float:
    """Set leaves to ``values`` (the powered ``priorities``); returns the largest priority (-inf if
    none). ``cold``: the leaves were not just walked to, prefetch their ancestors first."""
    if cold:
        _prefetch_up(tree, offsets, k, index)
    top = -np.inf
    for i in range(len(index)):
        top = max(top, priorities[i])
        v = values[i]
        tree[2 * index[i]] = v
        tree[2 * index[i] + 1] = v if v > 0.0 else np.inf
    _refresh(tree, offsets, k, index)
    return top


@numba.njit(cache=True, nogil=True)
def _update_pair(
    tree: np.ndarray, offsets: np.ndarray, k: int, index: np.ndarray, sums: np.ndarray, mins: np.ndarray
) -> None:
    """Set the sum and the min of leaves separately (a zero min is +inf: not in the min tree)."""
    for i in range(len(index)):
        tree[2 * index[i]] = sums[i]
        tree[2 * index[i] + 1] = mins[i] if mins[i] > 0.0 else np.inf
    _refresh(tree, offsets, k, index)


@numba.njit(cache=True, nogil=True)
def _rebuild_from(tree: np.ndarray, offsets: np.ndarray, k: int, start: int) -> None:
    """Recompute every node of levels ``start`` and above from their children."""
    for level in range(start, len(offsets) - 1):
        below, here = offsets[level - 1], offsets[level]
        for parent in range((here - below) // k):
            total = 0.0
            low = np.inf
            for j in range(below + parent * k, below + parent * k + k):
                total += tree[2 * j]
                v = tree[2 * j + 1]
                if v < low:
                    low = v
            tree[2 * (here + parent)] = total
            tree[2 * (here + parent) + 1] = low


@numba.njit(cache=True, nogil=True)
def _rebuild(tree: np.ndarray, offsets: np.ndarray, k: int) -> None:
    _rebuild_from(tree, offsets, k, 1)


@numba.njit(cache=True, nogil=True)
def _below(tree: np.ndarray, offsets: np.ndarray, k: int, capacity: int, limit: float) -> np.ndarray:
    """Leaves whose min value is <= ``limit`` (zero leaves count as +inf, so never). Descends
    level by level, only into subtrees whose min is <= limit, keeping the whole frontier of a level
    together so that its cache misses overlap (as ``_walk`` does)."""
    top = len(offsets) - 2
    frontier = np.zeros(1, dtype=np.int64)  # the root; its children are the top level
    for level in range(top, -1, -1):
        nxt = np.empty(len(frontier) * k, dtype=np.int64)
        n = 0
        for i in range(len(frontier)):
            first = frontier[i] * k
            for j in range(first, first + k):
                if tree[2 * (offsets[level] + j) + 1] <= limit:
                    nxt[n] = j
                    n += 1
        frontier = nxt[:n]
    return frontier[frontier < capacity]


def _index(index: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(index, dtype=np.int64)


def _values(values: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(values, dtype=np.float64)


class NumbaPairTree:
    """Sum and min trees over ``capacity`` leaves, interleaved, with ``branching`` children per node.

    Levels are stored bottom-up in one flat array of (sum, min) pairs, each level padded to a
    multiple of ``branching``; the top level holds the root's children.
    """

    def __init__(self, capacity: int, *, branching: int = 8) -> None:
        self.capacity = int(capacity)
        self.k = int(branching)
        self.offsets = _level_offsets(self.capacity, self.k)
        self.tree = _aligned(2 * int(self.offsets[-1]))
        self.tree[1::2] = np.inf
        self._top = int(self.offsets[-2])

    @property
    def total(self) -> float:
        return float(_top_total(self.tree, self._top))

    @property
    def minimum(self) -> float:
        return float(_top_min(self.tree, self._top))

    @property
    def leaves(self) -> np.ndarray:
        """The sum-tree leaves (a strided view: read-only use)."""
        return self.tree[: 2 * self.capacity : 2]

    def update(self, index: np.ndarray, values: np.ndarray) -> None:
        _update(self.tree, self.offsets, self.k, _index(index), _values(values))

    def update_powered(
        self, index: np.ndarray, priorities: np.ndarray, eps: float, alpha: float, *, cold: bool = False
    ) -> float:
        """Set ``leaves[index] = (priorities + eps) ** alpha`` (the last value wins for a repeated
        index); returns ``max(priorities)``, ``-inf`` when there are none. The power is numpy's,
        as in the fallback (``priorities.powered``); leaves, ancestors and the maximum are one call.
        ``cold``: the caller did not just walk to these leaves (``_prefetch_up``)."""
        p = _values(priorities)
        return float(
            _update_powered(self.tree, self.offsets, self.k, _index(index), (p + eps) ** alpha, p, cold)
        )

    def update_checked(
        self, index: np.ndarray, priorities: Any, eps: float, alpha: float, limit: float
    ) -> float | None:
        """``update_powered`` of a 1-D float32 / float64 array of ``len(index)`` priorities, each
        checked to lie in ``[0, limit]`` in the same compiled pass that adds ``eps``: the largest
        priority, or None (nothing changed) when ``priorities`` is anything else or holds a value
        out of range (the caller's checked path then decides, and names the value). The leaves get
        the same bits: the power is numpy's ``** alpha`` of the same sums."""
        if (
            type(priorities) is not np.ndarray
            or priorities.dtype.char not in "fd"
            or priorities.shape != index.shape
            or index.ndim != 1
        ):
            return None
        ok, shifted, top = _shifted(priorities, limit, eps)
        if not ok:
            return None
        _update(self.tree, self.offsets, self.k, _index(index), shifted ** alpha)
        return float(top)

    def update_pair(self, index: np.ndarray, sums: np.ndarray, mins: np.ndarray) -> None:
        """Set the sum-tree and min-tree leaves to different values (zero min = not in it)."""
        _update_pair(self.tree, self.offsets, self.k, _index(index), _values(sums), _values(mins))

    def load(self, values: np.ndarray) -> None:
        self.tree[: 2 * self.capacity : 2] = values
        self.tree[1 : 2 * self.capacity : 2] = np.where(values > 0, values, np.inf)
        _rebuild(self.tree, self.offsets, self.k)

    def find(self, mass: np.ndarray) -> np.ndarray:
        return _walk(self.tree, self.offsets, self.k, _values(mass))  # type: ignore[no-any-return]

    def weights(self, slots: np.ndarray, beta: float) -> np.ndarray:
        return _weights(_ratios(self.tree, _index(slots), self.minimum), float(beta))

    def stratified(self, u: np.ndarray, beta: float) -> tuple[np.ndarray, np.ndarray]:
        """One draw per equal slice of the mass (one compiled call), and normalised importance
        weights."""
        slots, ratios = _stratified(self.tree, self.offsets, self.k, _values(u))
        return slots, _weights(ratios, float(beta))

    def below(self, limit: float) -> np.ndarray:
        """Leaves holding a positive value <= ``limit``, in no particular order."""
        return _below(self.tree, self.offsets, self.k, self.capacity, float(limit))  # type: ignore[no-any-return]


def _level_offsets(capacity: int, k: int) -> np.ndarray:
    """Start of each level in the flat array (bottom-up, each padded to a multiple of k)."""
    sizes = []
    size = max(capacity, 1)
    while True:
        padded = -(-size // k) * k
        sizes.append(padded)
        if padded == k:
            break
        size = padded // k
    return np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
