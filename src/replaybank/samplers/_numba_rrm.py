"""Compiled steps of RR-M (``rrm.PrioritizedReshuffled``) over a ``NumbaPairTree`` mask tree.

Each function does in one pass what ``PrioritizedReshuffled`` does as a chain of numpy calls
(kept there as the fallback), with the same arithmetic in the same order, so both give the same
draws for the same random numbers (tested). The per-item arrays are the sampler's ``count``,
``base`` and ``anchor``; ``leaves`` are the scaled priorities of its main tree.
"""

from __future__ import annotations

import numba
import numpy as np

from ._numba_prefetch import prefetch
from ._numba_tree import _below, _refresh, _walk


@numba.njit(cache=True, nogil=True)
def _expected(s: int, leaves: np.ndarray, base: np.ndarray, anchor: np.ndarray, acc: float) -> float:
    return base[s] + leaves[s] * (acc - anchor[s])


@numba.njit(cache=True, nogil=True)
def sync(
    tree: np.ndarray,
    offsets: np.ndarray,
    k: int,
    slots: np.ndarray,
    only_masked: bool,
    leaves: np.ndarray,
    count: np.ndarray,
    base: np.ndarray,
    anchor: np.ndarray,
    acc: float,
    tol: float,
) -> None:
    """Put ``slots`` in the mask tree's sums (eligible) or, ahead of their expected count, in its
    mins (due times); ``only_masked`` leaves the eligible ones as they are."""
    touched = np.empty(len(slots), dtype=np.int64)
    n = 0
    for i in range(len(slots)):
        s = slots[i]
        masked = count[s] > _expected(s, leaves, base, anchor, acc) + tol
        if not masked and only_masked:
            continue
        if masked:
            tree[2 * s] = 0.0
            if leaves[s] == 0.0:  # a masked item with priority 0 is due never
                due = np.inf
            else:
                due = anchor[s] + (count[s] - tol / 2 - base[s]) / leaves[s]
            tree[2 * s + 1] = due if due > 0.0 else np.inf
        else:
            tree[2 * s] = leaves[s]
            tree[2 * s + 1] = np.inf
        touched[n] = s
        n += 1
    if n:
        _refresh(tree, offsets, k, touched[:n])


@numba.njit(cache=True, nogil=True)
def unmask(tree: np.ndarray, offsets: np.ndarray, k: int, capacity: int, leaves: np.ndarray, acc: float) -> None:
    """Masked items whose due time has come (min <= ``acc``) go back into the draw."""
    back = _below(tree, offsets, k, capacity, acc)
    if len(back):
        for s in back:
            tree[2 * s] = leaves[s]
            tree[2 * s + 1] = np.inf
        _refresh(tree, offsets, k, back)


@numba.njit(cache=True, nogil=True)
def draw(
    tree: np.ndarray,
    offsets: np.ndarray,
    k: int,
    mass: np.ndarray,
    leaves: np.ndarray,
    count: np.ndarray,
    base: np.ndarray,
    anchor: np.ndarray,
    acc: float,
    tol: float,
) -> np.ndarray:
    """One round of masked draws: walk the mask tree for each ``mass``, accept the candidates in
    order (the r-th of an item passes iff ``C + r <= E``), count the accepted ones, and mask the
    items now ahead of their expected count. Returns the accepted slots in draw order."""
    candidates = _walk(tree, offsets, k, mass)
    for s in candidates:  # start every candidate's misses at once; the checks below read them
        prefetch(count, s)  # type: ignore[call-arg]  # numba intrinsic; count, base and anchor share a line
        prefetch(leaves, s)
    ascending = True
    for i in range(1, len(candidates)):
        if candidates[i] < candidates[i - 1]:
            ascending = False
            break
    # stable, as the numpy path; a stratified round walks increasing masses, so its candidates
    # come out in slot order already and need no sort
    order = np.arange(len(candidates)) if ascending else np.argsort(candidates, kind="mergesort")
    ok = np.empty(len(candidates), dtype=np.bool_)
    rank = 0
    for j in range(len(order)):
        s = candidates[order[j]]
        rank = rank + 1 if j > 0 and s == candidates[order[j - 1]] else 0
        ok[order[j]] = count[s] + rank <= _expected(s, leaves, base, anchor, acc) + tol
    n = 0
    accepted = np.empty(len(candidates), dtype=np.int64)
    for i in range(len(candidates)):
        if ok[i]:
            count[candidates[i]] += 1.0
            accepted[n] = candidates[i]
            n += 1
    sync(tree, offsets, k, candidates, True, leaves, count, base, anchor, acc, tol)
    return accepted[:n]


@numba.njit(cache=True, nogil=True)
def reanchor(slots: np.ndarray, leaves: np.ndarray, base: np.ndarray, anchor: np.ndarray, acc: float) -> None:
    """Fold the expected count accrued so far into ``base`` before a slot's priority changes."""
    for s in slots:
        base[s] = _expected(s, leaves, base, anchor, acc)
        anchor[s] = acc
