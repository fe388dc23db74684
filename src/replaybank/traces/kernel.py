"""The cache of one layer, replayed event by event: one loop for every policy.

``replay`` is plain Python that numba compiles when it is installed (``replaybank[fast]``); without
numba (or with ``REPLAYBANK_KERNELS=numpy``) the same function runs interpreted, so both paths
share one definition. ``reference.py`` holds a plain-Python replay, written separately (sets and
an ``OrderedDict``), that the tests and the benchmark compare this against.

Per event: the event's experts are pinned (none of them may be evicted while it runs); each one
not resident is a miss and is loaded (compulsory admission), evicting first when the cache is
full; the victim is the unpinned resident with the lowest score of the policy:

===========  ===============================================================================
policy       victim
===========  ===============================================================================
lru          least recently used (every access gets a fresh stamp, so there are no ties)
lfu          fewest uses since the trace began (in or out of the cache); ties: least recent
lfru         lowest decayed use count: each use adds 1, and counts halve every ``half_life``
             events (LRFU, Lee et al. 2001): between LRU (short) and LFU (long half-lives)
random       uniform among the unpinned residents (the draws are passed in)
opt          the one needed again furthest in the future, or never (Belady's MIN); with
             compulsory admission and atomic events this minimizes misses
===========  ===============================================================================

An eviction is *optimal* when its victim's next use is as far as that of any candidate (what
``opt`` would have evicted from the same cache); ``optimal_victims / evictions`` is the policy's
victim-selection rate.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from typing import Any

import numpy as np

POLICY_CODES = {"lru": 0, "lfu": 1, "lfru": 2, "random": 3, "opt": 4}
#: the order of the counters ``replay`` writes
COUNTERS = ("hits", "misses", "loads", "evictions", "optimal_victims", "stalls")


def replay(
    ptr: np.ndarray,
    ids: np.ndarray,
    next_use: np.ndarray,
    num_experts: int,
    capacity: int,
    policy: int,
    half_life: float,
    uniforms: np.ndarray,
    out: np.ndarray,
) -> None:
    """Replay one layer's events; add the ``COUNTERS`` into ``out`` (int64, 6).

    The caller has checked that no event needs more than ``capacity`` experts and that
    ``uniforms`` has one draw per possible miss (``len(ids)``) for ``random``.
    """
    resident = np.zeros(num_experts, dtype=np.bool_)
    pinned = np.full(num_experts, -1, dtype=np.int64)  # the event that pins it
    stamp = np.zeros(num_experts, dtype=np.int64)  # last access, globally ordered
    uses = np.zeros(num_experts, dtype=np.int64)
    last_event = np.zeros(num_experts, dtype=np.int64)
    crf = np.zeros(num_experts, dtype=np.float64)  # decayed use count at last_event
    key = np.zeros(num_experts, dtype=np.float64)  # log2(decayed count) + last_event / half_life
    nxt = np.zeros(num_experts, dtype=np.int64)  # next event that needs it, after its last access
    size = 0
    clock = 0
    draw = 0
    inv = 1.0 / half_life
    hits = misses = evictions = optimal = stalls = 0
    for i in range(len(ptr) - 1):
        a = ptr[i]
        b = ptr[i + 1]
        for j in range(a, b):
            pinned[ids[j]] = i
        missed = 0
        for j in range(a, b):
            x = ids[j]
            if resident[x]:
                hits += 1
                continue
            missed += 1
            if size == capacity:
                victim = -1
                far = -1
                candidates = 0
                for y in range(num_experts):
                    if resident[y] and pinned[y] != i:
                        candidates += 1
                        if nxt[y] > far:
                            far = nxt[y]
                        if victim < 0:
                            victim = y
                        elif policy == 0:
                            if stamp[y] < stamp[victim]:
                                victim = y
                        elif policy == 1:
                            if uses[y] < uses[victim] or (
                                uses[y] == uses[victim] and stamp[y] < stamp[victim]
                            ):
                                victim = y
                        elif policy == 2:
                            if key[y] < key[victim] or (
                                key[y] == key[victim] and stamp[y] < stamp[victim]
                            ):
                                victim = y
                        elif policy == 4:
                            if nxt[y] > nxt[victim]:
                                victim = y
                if policy == 3:
                    pick = int(uniforms[draw] * candidates)
                    draw += 1
                    for y in range(num_experts):
                        if resident[y] and pinned[y] != i:
                            if pick == 0:
                                victim = y
                                break
                            pick -= 1
                evictions += 1
                if nxt[victim] == far:
                    optimal += 1
                resident[victim] = False
                size -= 1
            resident[x] = True
            size += 1
        for j in range(a, b):
            x = ids[j]
            clock += 1
            stamp[x] = clock
            uses[x] += 1
            crf[x] = 1.0 + crf[x] * 2.0 ** (-(i - last_event[x]) * inv)
            last_event[x] = i
            key[x] = math.log2(crf[x]) + i * inv
            nxt[x] = next_use[j]
        if missed > 0:
            stalls += 1
        misses += missed
    out[0] += hits
    out[1] += misses
    out[2] += misses  # compulsory admission, no prefetch: every miss is one load
    out[3] += evictions
    out[4] += optimal
    out[5] += stalls


def _compiled() -> Callable[..., Any]:
    if os.environ.get("REPLAYBANK_KERNELS", "").lower() == "numpy":
        return replay
    try:
        import numba
    except ImportError:
        return replay
    return numba.njit(cache=True, nogil=True)(replay)  # type: ignore[no-any-return]


def get_kernel() -> Callable[..., Any]:
    """``replay``, compiled when numba is available (compiled once per process)."""
    global _KERNEL
    if _KERNEL is None:
        _KERNEL = _compiled()
    return _KERNEL


_KERNEL: Callable[..., Any] | None = None
