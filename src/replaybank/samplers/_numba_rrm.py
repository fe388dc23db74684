"""Compiled steps of RR-M (``rrm.PrioritizedReshuffled``) over its ``LaneTree``.

Each function does in one pass what ``PrioritizedReshuffled`` does as a chain of numpy calls
(kept there as the fallback), with the same arithmetic in the same order, so both give the same
draws for the same random numbers (tested). The per-item arrays are the sampler's ``count``,
``base`` and ``anchor``; an item's scaled priority is its leaf's ``MASS`` lane, ``tree[2, s]``
(``_numba_lanes``), and the mask is its ``ELIGIBLE`` and ``DUE`` lanes.

A draw masks the items it took without refreshing their ancestors: it hands them back as the
tree's ``stale`` leaves, and the priority update that follows refreshes them together with its
own (the same leaves, in a step), all four lanes in one pass; a kernel that walks or searches
the mask is given ``stale`` and refreshes it first (``LaneTree``).
"""

from __future__ import annotations

import numba
import numpy as np

from ._numba_lanes import below, ratios, refresh, top_min, top_sum, union, walk
from ._numba_prefetch import prefetch
from ._numba_tree import _weights as weights  # noqa: F401  (the sampler's: ratios -> weights)


@numba.njit(cache=True, nogil=True)
def _expected(s: int, tree: np.ndarray, base: np.ndarray, anchor: np.ndarray, acc: float) -> float:
    return base[s] + tree[2, s] * (acc - anchor[s])


@numba.njit(cache=True, nogil=True)
def _mask_leaves(
    tree: np.ndarray,
    slots: np.ndarray,
    only_masked: bool,
    count: np.ndarray,
    base: np.ndarray,
    anchor: np.ndarray,
    acc: float,
    tol: float,
) -> np.ndarray:
    """Write the mask lanes of ``slots``: the scaled priority (eligible) or, ahead of the expected
    count, the due time; ``only_masked`` leaves the eligible ones as they are. Returns the slots
    written (their ancestors are to be refreshed)."""
    touched = np.empty(len(slots), dtype=np.int64)
    n = 0
    for i in range(len(slots)):
        s = slots[i]
        leaf = tree[2, s]
        masked = count[s] > _expected(s, tree, base, anchor, acc) + tol
        if not masked and only_masked:
            continue
        if masked:
            tree[0, s] = 0.0
            if leaf == 0.0:  # a masked item with priority 0 is due never
                due = np.inf
            else:
                due = anchor[s] + (count[s] - tol / 2 - base[s]) / leaf
            tree[1, s] = due if due > 0.0 else np.inf
        else:
            tree[0, s] = leaf
            tree[1, s] = np.inf
        touched[n] = s
        n += 1
    return touched[:n]


@numba.njit(cache=True, nogil=True)
def sync(
    tree: np.ndarray,
    offsets: np.ndarray,
    k: int,
    slots: np.ndarray,
    only_masked: bool,
    count: np.ndarray,
    base: np.ndarray,
    anchor: np.ndarray,
    acc: float,
    tol: float,
) -> None:
    """Put ``slots`` in the mask's sums (eligible) or, ahead of their expected count, in its mins
    (due times); ``only_masked`` leaves the eligible ones as they are."""
    touched = _mask_leaves(tree, slots, only_masked, count, base, anchor, acc, tol)
    if len(touched):
        refresh(tree, offsets, k, touched, 2)


@numba.njit(cache=True, nogil=True)
def unmask(tree: np.ndarray, offsets: np.ndarray, k: int, capacity: int, acc: float) -> None:
    """Masked items whose due time has come (due <= ``acc``) go back into the draw."""
    back = below(tree, offsets, k, capacity, acc)
    if len(back):
        for s in back:
            tree[0, s] = tree[2, s]
            tree[1, s] = np.inf
        refresh(tree, offsets, k, back, 2)


@numba.njit(cache=True, nogil=True)
def flush(tree: np.ndarray, offsets: np.ndarray, k: int, stale: np.ndarray) -> None:
    """Refresh the mask lanes of the ancestors of the ``stale`` leaves."""
    if len(stale):
        refresh(tree, offsets, k, stale, 2)


@numba.njit(cache=True, nogil=True)
def draw(
    tree: np.ndarray,
    offsets: np.ndarray,
    k: int,
    stale: np.ndarray,
    u: np.ndarray,
    stratified: bool,
    count: np.ndarray,
    base: np.ndarray,
    anchor: np.ndarray,
    acc: float,
    tol: float,
) -> tuple[np.ndarray, np.ndarray]:
    """One round of masked draws (after a ``flush`` of ``stale``): a mass per ``u`` (stratified: ``(i + u_i) * total / n``, else
    ``u_i * total``, the total of the eligible sums), a walk for each, the candidates accepted in
    order (the r-th of an item passes iff ``C + r <= E``), the accepted ones counted, and the
    items now ahead of their expected count masked. Returns the accepted slots in draw order and
    the leaves masked, whose ancestors are left stale."""
    flush(tree, offsets, k, stale)
    n = len(u)
    total = top_sum(tree, offsets[len(offsets) - 2], 0)
    mass = np.empty(n)
    step = total / n
    for i in range(n):
        mass[i] = (i + u[i]) * step if stratified else u[i] * total
    candidates = walk(tree, offsets, k, mass, 0)
    for s in candidates:  # start every candidate's misses at once; the checks below read them
        prefetch(count, s)  # type: ignore[call-arg]  # numba intrinsic; count, base and anchor share a line
    ascending = True
    for i in range(1, n):
        if candidates[i] < candidates[i - 1]:
            ascending = False
            break
    # stable, as the numpy path; a stratified round walks increasing masses, so its candidates
    # come out in slot order already and need no sort
    order = np.arange(n) if ascending else np.argsort(candidates, kind="mergesort")
    ok = np.empty(n, dtype=np.bool_)
    rank = 0
    for j in range(n):
        s = candidates[order[j]]
        rank = rank + 1 if j > 0 and s == candidates[order[j - 1]] else 0
        ok[order[j]] = count[s] + rank <= _expected(s, tree, base, anchor, acc) + tol
    m = 0
    accepted = np.empty(n, dtype=np.int64)
    for i in range(n):
        if ok[i]:
            count[candidates[i]] += 1.0
            accepted[m] = candidates[i]
            m += 1
    return accepted[:m], _mask_leaves(tree, candidates, True, count, base, anchor, acc, tol)


@numba.njit(cache=True, nogil=True)
def first_round(
    tree: np.ndarray,
    offsets: np.ndarray,
    k: int,
    capacity: int,
    stale: np.ndarray,
    u: np.ndarray,
    count: np.ndarray,
    base: np.ndarray,
    anchor: np.ndarray,
    acc: float,
    tol: float,
) -> tuple[bool, np.ndarray, np.ndarray, np.ndarray]:
    """A sample call's start in one call: ``flush`` of ``stale``, ``unmask``, then, if anything
    is eligible, a stratified ``draw`` with ``u``. Returns whether it drew, the accepted slots,
    their ``leaf / min`` ratios (the weights' base, as ``_numba_lanes.ratios``) and the leaves
    now stale."""
    flush(tree, offsets, k, stale)
    unmask(tree, offsets, k, capacity, acc)
    top = offsets[len(offsets) - 2]
    none = np.empty(0, dtype=np.int64)
    if not top_sum(tree, top, 0) > 0.0:
        return False, none, np.empty(0), none
    accepted, masked = draw(tree, offsets, k, none, u, True, count, base, anchor, acc, tol)
    return True, accepted, ratios(tree, accepted, top_min(tree, top, 3)), masked


@numba.njit(cache=True, nogil=True)
def update(
    tree: np.ndarray,
    offsets: np.ndarray,
    k: int,
    stale: np.ndarray,
    slots: np.ndarray,
    values: np.ndarray,
    priorities: np.ndarray,
    count: np.ndarray,
    base: np.ndarray,
    anchor: np.ndarray,
    acc: float,
    tol: float,
) -> float:
    """A priority update in one pass: fold each slot's expected count so far into ``base``, set
    its scaled priority to ``values`` (the last value wins for a repeated slot), re-sync its mask
    lanes, and refresh the ancestors once for all four lanes, those of the ``stale`` leaves with
    them (usually the same ones). Returns the largest priority."""
    top = -np.inf
    for i in range(len(slots)):
        s = slots[i]
        base[s] = _expected(s, tree, base, anchor, acc)
        anchor[s] = acc
        top = max(top, priorities[i])
        v = values[i]
        tree[2, s] = v
        tree[3, s] = v if v > 0.0 else np.inf
    _mask_leaves(tree, slots, False, count, base, anchor, acc, tol)
    refresh(tree, offsets, k, union(slots, stale), 4)
    return top


@numba.njit(cache=True, nogil=True)
def reanchor(slots: np.ndarray, tree: np.ndarray, base: np.ndarray, anchor: np.ndarray, acc: float) -> None:
    """Fold the expected count accrued so far into ``base`` before a slot's priority changes."""
    for s in slots:
        base[s] = _expected(s, tree, base, anchor, acc)
        anchor[s] = acc
