"""Plain-Python replays, written apart from ``kernel.py`` to check it and to time it against.

``lru_from_trace`` does everything in Python from the trace's token rows (build each step's union
with a ``set``, keep the cache in an ``OrderedDict``): the benchmark's reference. ``replay_events``
replays the deterministic policies from lists of per-event expert sets, scoring candidates in the
most direct way; the tests require the kernel's counts to equal its counts exactly.

>>> replay_events([[0, 1], [2], [0], [1, 2]], capacity=2, policy="lru")
{'hits': 1, 'misses': 5, 'evictions': 3, 'optimal_victims': 2, 'stalls': 4}
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Sequence

from ..errors import ReplayBankError
from .trace import Trace


def lru_from_trace(trace: Trace, capacity: int, semantics: str = "step") -> list[tuple[int, int]]:
    """``(hits, misses)`` per traced layer under LRU; steps' unions in ``"step"`` semantics,
    tokens one by one in ``"token"`` semantics. Ties within an event are broken as the kernel
    breaks them: the event's experts are touched in ascending id order."""
    rows = trace.experts.tolist()
    offsets = trace.offsets.tolist()
    out = []
    for layer in range(trace.num_layers):
        cache: OrderedDict[int, None] = OrderedDict()
        hits = misses = 0
        tokens = rows[layer]
        if semantics == "step":
            groups = [
                sorted({e for row in tokens[offsets[s] : offsets[s + 1]] for e in row})
                for s in range(trace.num_steps)
            ]
        else:
            groups = [sorted(row) for row in tokens]
        for need in groups:
            pinned = set(need)
            for e in need:
                if e in cache:
                    hits += 1
                    continue
                misses += 1
                if len(cache) == capacity:
                    victim = next(v for v in cache if v not in pinned)
                    del cache[victim]
                cache[e] = None
            for e in need:
                cache.move_to_end(e)
        out.append((hits, misses))
    return out


def replay_events(
    events: Sequence[Sequence[int]], capacity: int, policy: str, half_life: float = 32.0
) -> dict[str, int]:
    """Counts of one cache replaying ``events`` (each the experts one event needs) under ``lru``,
    ``lfu``, ``lfru``, ``pred`` or ``opt``, with the kernel's tie-breaks (see ``kernel.py``)."""
    needs = [sorted(set(e)) for e in events]
    cache: set[int] = set()
    stamp: dict[int, int] = {}
    uses: dict[int, int] = {}
    score: dict[int, float] = {}  # lfru: decayed count, as of event `now`
    last: dict[int, int] = {}
    follows: dict[tuple[int, int], int] = {}  # pred: (a in event t - 1, b in event t) -> count
    followed: dict[int, int] = {}
    counts = dict.fromkeys(("hits", "misses", "evictions", "optimal_victims", "stalls"), 0)
    clock = 0

    def next_use(x: int, now: int) -> int:
        return next((j for j in range(now + 1, len(needs)) if x in needs[j]), len(needs))

    for now, need in enumerate(needs):
        missed = False
        for x in need:
            if x in cache:
                counts["hits"] += 1
                continue
            counts["misses"] += 1
            missed = True
            if len(cache) == capacity:
                candidates = [y for y in cache if y not in need]
                # a resident's next use after `now` counted from its last access
                far = {y: next_use(y, now) for y in candidates}
                if policy == "lru":
                    victim = min(candidates, key=lambda y: stamp[y])
                elif policy == "lfu":
                    victim = min(candidates, key=lambda y: (uses[y], stamp[y]))
                elif policy == "lfru":
                    decayed = {
                        y: score[y] * 2.0 ** (-(now - last[y]) / half_life) for y in candidates
                    }
                    victim = min(candidates, key=lambda y: (math.log2(decayed[y]), stamp[y]))
                elif policy == "pred":
                    # P(y needed next | this event's experts), smoothed toward y's share
                    total = sum(followed.get(a, 0) for a in need) + 1
                    chance = {
                        y: (
                            sum(follows.get((a, y), 0) for a in need)
                            + (uses.get(y, 0) + 1) / (now + 2)
                        )
                        / total
                        for y in candidates
                    }
                    victim = min(candidates, key=lambda y: (chance[y], stamp[y]))
                elif policy == "opt":
                    victim = min(candidates, key=lambda y: (-far[y], y))
                else:
                    raise ReplayBankError(
                        f"policy = {policy!r}: expected lru, lfu, lfru, pred or opt"
                    )
                counts["evictions"] += 1
                counts["optimal_victims"] += far[victim] == max(far.values())
                cache.remove(victim)
            cache.add(x)
        for x in need:
            clock += 1
            stamp[x] = clock
            uses[x] = uses.get(x, 0) + 1
            prev = score.get(x, 0.0) * 2.0 ** (-(now - last.get(x, now)) / half_life)
            score[x], last[x] = 1.0 + prev, now
        counts["stalls"] += missed
        if now > 0:
            for a in needs[now - 1]:
                followed[a] = followed.get(a, 0) + 1
                for b in need:
                    follows[(a, b)] = follows.get((a, b), 0) + 1
    return counts
