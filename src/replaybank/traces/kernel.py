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
pred         the causal next-use predictor: the largest predicted next-use distance 1 / P,
             P = the chance it is needed by the next event, from a Markov chain over experts
             learned online from the events already replayed (see below); ties: least recent
===========  ===============================================================================

``pred`` learns, after each event ``t``, ``transitions[a, b] += 1`` for every ``a`` of event
``t - 1`` and ``b`` of event ``t``, and ``followed[a] += 1``. Evicting during event ``i``, it scores
``P(y) = (sum_a transitions[a, y] + (uses[y] + 1) / (i + 2)) / (sum_a followed[a] + 1)`` over the
``a`` of event ``i`` (the latest event whose experts are known; ``i - 1`` while prefetching for
``i``): the empirical chance that ``y`` follows them, smoothed toward ``y``'s share of past events.
Nothing of event ``i + 1`` or later is read (``next_use`` only feeds the victim-rate count).

With prefetch, before event ``i`` the predicted experts are loaded if absent (evicting by the
policy; none of the event's own experts is pinned yet, as its router has not run): a
``prefetch_load`` each, ``useful`` when event ``i`` then needs it. ``loads = misses +
prefetch_loads``; ``stalls`` count events with a demand miss.

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

POLICY_CODES = {"lru": 0, "lfu": 1, "lfru": 2, "random": 3, "opt": 4, "pred": 5}
#: the order of the counters ``replay`` writes
COUNTERS = (
    "hits", "misses", "loads", "evictions", "optimal_victims", "stalls",
    "prefetch_loads", "useful_prefetches",
)  # fmt: skip
NO_PREFETCH = np.zeros(0, dtype=np.int64)


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
    pf_ptr: np.ndarray = NO_PREFETCH,
    pf_ids: np.ndarray = NO_PREFETCH,
    pf_next: np.ndarray = NO_PREFETCH,
    victims: np.ndarray = NO_PREFETCH,
) -> None:
    """Replay one layer's events; add the ``COUNTERS`` into ``out`` (int64, 8).

    Before event ``i``, the experts ``pf_ids[pf_ptr[i]:pf_ptr[i+1]]`` are prefetched (loaded if
    absent, evicting by the policy; ``pf_next`` is each one's first use at or after ``i``);
    ``pf_ptr`` empty means no prefetch. A non-empty ``victims`` (one slot per possible eviction)
    receives ``event * num_experts + victim`` of each eviction, in order.

    The caller has checked that no event needs more than ``capacity`` experts, that no event
    prefetches more than ``capacity``, and that ``uniforms`` has one draw per possible eviction
    for ``random``.
    """
    resident = np.zeros(num_experts, dtype=np.bool_)
    pinned = np.full(num_experts, -1, dtype=np.int64)  # the event that pins it (prefetch: -2 - i)
    fetched = np.full(num_experts, -1, dtype=np.int64)  # the event it was last prefetched for
    stamp = np.zeros(num_experts, dtype=np.int64)  # last access, globally ordered
    uses = np.zeros(num_experts, dtype=np.int64)
    last_event = np.zeros(num_experts, dtype=np.int64)
    crf = np.zeros(num_experts, dtype=np.float64)  # decayed use count at last_event
    key = np.zeros(num_experts, dtype=np.float64)  # log2(decayed count) + last_event / half_life
    nxt = np.zeros(num_experts, dtype=np.int64)  # next event that needs it, after its last access
    # pred: transitions[a, b] = events t with a in event t-1 and b in event t (t before now)
    learn = policy == 5
    transitions = np.zeros((num_experts if learn else 0, num_experts), dtype=np.float64)
    followed = np.zeros(num_experts, dtype=np.float64)  # events t-1 holding a that had a successor
    chance = np.zeros(
        num_experts, dtype=np.float64
    )  # pred: P(needed by the next event), at `scored`
    scored = -1
    size = 0
    clock = 0
    draw = 0
    inv = 1.0 / half_life
    hits = misses = evictions = optimal = stalls = fetches = useful = 0
    prefetching = len(pf_ptr) > 0
    logging = len(victims) > 0
    for i in range(len(ptr) - 1):
        a = ptr[i]
        b = ptr[i + 1]
        # phase 0 prefetches (its experts pinned as -2 - i while it runs), phase 1 serves the event
        # (pinned as i; what was prefetched is evictable again)
        for phase in range(2):
            if phase == 0:
                if not prefetching:
                    continue
                lo, hi, pin = pf_ptr[i], pf_ptr[i + 1], -2 - i
            else:
                lo, hi, pin = a, b, i
            missed = 0
            for j in range(lo, hi):
                pinned[pf_ids[j] if phase == 0 else ids[j]] = pin
            for j in range(lo, hi):
                x = pf_ids[j] if phase == 0 else ids[j]
                if resident[x]:
                    if phase == 1:
                        hits += 1
                        if fetched[x] == i:
                            useful += 1
                    continue
                missed += 1
                if size == capacity:
                    if policy == 5 and scored != 2 * i + phase:
                        # P(y needed next | the latest known event: i serving, i - 1 prefetching):
                        # Markov over experts, smoothed toward y's share of past events
                        scored = 2 * i + phase
                        total = 1.0
                        for y in range(num_experts):
                            chance[y] = (uses[y] + 1.0) / (i + 2.0)
                        lo_k, hi_k = (a, b) if phase == 1 else (ptr[max(i - 1, 0)], a)
                        for k in range(lo_k, hi_k):
                            total += followed[ids[k]]
                            for y in range(num_experts):
                                chance[y] += transitions[ids[k], y]
                        for y in range(num_experts):
                            chance[y] /= total
                    victim = -1
                    far = -1
                    candidates = 0
                    for y in range(num_experts):
                        if resident[y] and pinned[y] != i and pinned[y] != pin:
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
                            elif policy == 5:
                                # largest predicted next-use distance 1 / P: smallest P
                                if chance[y] < chance[victim] or (
                                    chance[y] == chance[victim] and stamp[y] < stamp[victim]
                                ):
                                    victim = y
                    if policy == 3:
                        pick = int(uniforms[draw] * candidates)
                        draw += 1
                        for y in range(num_experts):
                            if resident[y] and pinned[y] != i and pinned[y] != pin:
                                if pick == 0:
                                    victim = y
                                    break
                                pick -= 1
                    if logging:
                        victims[evictions] = i * num_experts + victim
                    evictions += 1
                    if nxt[victim] == far:
                        optimal += 1
                    resident[victim] = False
                    size -= 1
                resident[x] = True
                size += 1
                if phase == 0:  # recent (LRU does not drop it first), but not a use
                    fetched[x] = i
                    clock += 1
                    stamp[x] = clock
                    nxt[x] = pf_next[j]
            if phase == 0:
                fetches += missed
            else:
                if missed > 0:
                    stalls += 1
                misses += missed
        for j in range(a, b):
            x = ids[j]
            clock += 1
            stamp[x] = clock
            uses[x] += 1
            crf[x] = 1.0 + crf[x] * 2.0 ** (-(i - last_event[x]) * inv)
            last_event[x] = i
            key[x] = math.log2(crf[x]) + i * inv
            nxt[x] = next_use[j]
        if learn and i > 0:
            for j in range(ptr[i - 1], a):
                followed[ids[j]] += 1.0
                for k in range(a, b):
                    transitions[ids[j], ids[k]] += 1.0
    out[0] += hits
    out[1] += misses
    out[2] += misses + fetches  # compulsory admission: every miss is one load, plus prefetches
    out[3] += evictions
    out[4] += optimal
    out[5] += stalls
    out[6] += fetches
    out[7] += useful


def compile_kernel(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` compiled by numba when it is installed (and ``REPLAYBANK_KERNELS`` is not
    ``numpy``), else ``fn`` itself: one definition for both paths."""
    if os.environ.get("REPLAYBANK_KERNELS", "").lower() == "numpy":
        return fn
    try:
        import numba
    except ImportError:
        return fn
    return numba.njit(cache=True, nogil=True)(fn)  # type: ignore[no-any-return]


def get_kernel() -> Callable[..., Any]:
    """``replay``, compiled when numba is available (compiled once per process)."""
    global _KERNEL
    if _KERNEL is None:
        _KERNEL = compile_kernel(replay)
    return _KERNEL


_KERNEL: Callable[..., Any] | None = None
