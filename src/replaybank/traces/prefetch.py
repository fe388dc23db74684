"""Which experts to prefetch for the next layer: a causal cross-layer predictor.

While layer ``l`` serves event ``i`` (a step, or a token under per-token replay), the experts it
routed to are known; layer ``l + 1`` has not run yet. The predictor counts, over the events
already served, how often expert ``b`` of layer ``l + 1`` ran in the same event as expert ``a`` of
layer ``l`` (``together[a, b]``), and prefetches for event ``i`` of layer ``l + 1`` the ``count``
experts with the highest ``sum over a in event i of layer l of together[a, b]`` (only those seen
at least once with them; ties: lower id). Only then does it learn event ``i``. Layer 0 has no layer
before it and is never prefetched for.

>>> import numpy as np
>>> from replaybank.traces import Trace, layer_events
>>> t = Trace.build(request=[0, 0, 0], kind=[0, 1, 1], start=[0, 1, 2], tokens=[1, 1, 1],
...                 experts=[[[0], [1], [0]], [[2], [3], [2]]], num_experts=[2, 4])
>>> ptr, ids, nxt = predict_prefetch(layer_events(t, 0, "step"), layer_events(t, 1, "step"), 1)
>>> ptr.tolist(), ids.tolist(), nxt.tolist()
([0, 0, 0, 1], [2], [2])
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..errors import ReplayBankError
from .events import Events
from .kernel import compile_kernel


def predict(
    src_ptr: np.ndarray,
    src_ids: np.ndarray,
    dst_ptr: np.ndarray,
    dst_ids: np.ndarray,
    src_experts: int,
    dst_experts: int,
    count: int,
    out_ptr: np.ndarray,
    out_ids: np.ndarray,
) -> int:
    """Fill ``out_ptr`` (n + 1) and ``out_ids`` (room for n * count); return how many ids."""
    together = np.zeros((src_experts, dst_experts), dtype=np.int64)
    score = np.zeros(dst_experts, dtype=np.int64)
    taken = np.zeros(dst_experts, dtype=np.bool_)
    used = 0
    for i in range(len(src_ptr) - 1):
        score[:] = 0
        for j in range(src_ptr[i], src_ptr[i + 1]):
            for y in range(dst_experts):
                score[y] += together[src_ids[j], y]
        taken[:] = False
        for _ in range(count):
            best = -1
            for y in range(dst_experts):
                if not taken[y] and score[y] > 0 and (best < 0 or score[y] > score[best]):
                    best = y
            if best < 0:
                break
            taken[best] = True
        for y in range(dst_experts):  # in ascending id order
            if taken[y]:
                out_ids[used] = y
                used += 1
        out_ptr[i + 1] = used
        for j in range(src_ptr[i], src_ptr[i + 1]):
            for k in range(dst_ptr[i], dst_ptr[i + 1]):
                together[src_ids[j], dst_ids[k]] += 1
    return used


def first_use(events: Events, event: np.ndarray, expert: np.ndarray) -> np.ndarray:
    """For each ``(event[q], expert[q])``, the first event at or after ``event[q]`` that needs
    ``expert[q]`` (``events.count`` if none)."""
    n = events.count
    of = np.repeat(np.arange(n, dtype=np.int64), events.sizes())
    keys = np.sort(events.ids.astype(np.int64) * (n + 1) + of)
    q = expert.astype(np.int64) * (n + 1) + event
    pos = np.searchsorted(keys, q)
    found = keys[np.minimum(pos, len(keys) - 1)]
    ok = (pos < len(keys)) & (found // (n + 1) == expert)
    return np.where(ok, found % (n + 1), n)


def predict_prefetch(src: Events, dst: Events, count: int) -> tuple[np.ndarray, ...]:
    """``(ptr, ids, next)`` of what to prefetch before each event of layer ``dst`` from layer
    ``src``'s events (see the module doc); ``next`` is each id's first use at or after its event.

    Raises:
        ReplayBankError: ``count < 1``, or the layers' events do not line up.
    """
    if isinstance(count, bool) or not isinstance(count, (int, np.integer)) or count < 1:
        raise ReplayBankError(f"prefetch = {count!r}: expected an integer >= 1 (experts per event)")
    if src.count != dst.count or not np.array_equal(src.step, dst.step):
        raise ReplayBankError("prefetch: the two layers' events do not line up (same steps needed)")
    n = src.count
    ptr = np.zeros(n + 1, dtype=np.int64)
    ids = np.zeros(n * count, dtype=np.int64)
    used = _kernel()(
        src.ptr, src.ids, dst.ptr, dst.ids, src.num_experts, dst.num_experts, count, ptr, ids
    )
    ids = ids[:used]
    event = np.repeat(np.arange(n, dtype=np.int64), np.diff(ptr))
    return ptr, ids, first_use(dst, event, ids)


def _kernel() -> Callable[..., Any]:
    global _KERNEL
    if _KERNEL is None:
        _KERNEL = compile_kernel(predict)
    return _KERNEL


_KERNEL: Callable[..., Any] | None = None
