"""Serving orders of recorded requests: pick requests, join workloads, interleave their steps.

A recorded request's routing does not depend on what else the server runs (each step is a
forward pass of that request alone), so its steps can be replayed in another order: that is how
one recording gives several workloads (seeded subsets), a mixed stream of two workloads, or a
stream with more requests in flight.

* ``select(trace, requests)``: the steps of those requests, in the trace's order.
* ``concat(traces)``: one trace holding all of them (request ids renumbered so they stay apart;
  ``meta["workload"]`` of each is kept per request in ``meta["workloads"]``).
* ``interleave(trace, concurrent, seed)``: ``concurrent`` requests in flight, in a seeded order;
  each round runs the next step of every request in flight, and a finished request's place is
  taken by the next one (continuous batching, one step per request per round).

>>> from replaybank.traces import synthetic_trace
>>> t = synthetic_trace(requests=3, prompt_tokens=2, decode_tokens=2, layers=1, experts=4, top_k=1)
>>> s = interleave(t, concurrent=2, seed=None)
>>> s.request.tolist(), s.kind.tolist()
([0, 1, 0, 1, 0, 1, 2, 2, 2], [0, 0, 1, 1, 1, 1, 0, 1, 1])
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..errors import ReplayBankError
from .trace import Trace


def _take(trace: Trace, steps: np.ndarray, **meta: str) -> Trace:
    """The trace of ``steps`` (step indices, in the new order)."""
    rows = np.concatenate(
        [np.arange(trace.offsets[s], trace.offsets[s + 1]) for s in steps.tolist()]
    )
    return Trace.build(
        request=trace.request[steps],
        kind=trace.kind[steps],
        start=trace.start[steps],
        tokens=trace.tokens[steps],
        experts=trace.experts[:, rows],
        gates=trace.gates[:, rows],
        num_experts=trace.num_experts,
        layers=trace.layers,
        meta={**trace.meta, **meta},
    )


def requests_of(trace: Trace) -> list[int]:
    """Request ids in order of first appearance."""
    _, first = np.unique(trace.request, return_index=True)
    return trace.request[np.sort(first)].tolist()


def select(trace: Trace, requests: Sequence[int]) -> Trace:
    """The steps of ``requests`` only, in the trace's order.

    Raises:
        ReplayBankError: a request id the trace does not hold.
    """
    wanted = np.asarray(list(requests), dtype=np.int64)
    missing = sorted(set(wanted.tolist()) - set(trace.request.tolist()))
    if missing or len(wanted) == 0:
        raise ReplayBankError(f"select: requests {missing or 'none'} are not in the trace")
    return _take(trace, np.flatnonzero(np.isin(trace.request, wanted)))


def concat(traces: Sequence[Trace]) -> Trace:
    """All steps of ``traces``, one after another, request ids renumbered ``0..`` in order of
    first appearance so requests of different traces never share an id.

    Raises:
        ReplayBankError: no traces, or traces of different layers, expert counts or top-k.
    """
    if not traces:
        raise ReplayBankError("concat: no traces")
    first = traces[0]
    for i, t in enumerate(traces[1:], 1):
        if (t.layers, t.num_experts, t.top_k) != (first.layers, first.num_experts, first.top_k):
            raise ReplayBankError(
                f"concat: trace {i} has layers {t.layers}, experts {t.num_experts}, top-{t.top_k}; "
                f"trace 0 has {first.layers}, {first.num_experts}, top-{first.top_k}"
            )
    request, base, names = [], 0, []
    for t in traces:
        ids = requests_of(t)
        lookup = {r: base + i for i, r in enumerate(ids)}
        request.append(np.array([lookup[r] for r in t.request.tolist()], dtype=np.int64))
        names += [t.meta.get("workload", "?")] * len(ids)
        base += len(ids)
    return Trace.build(
        request=np.concatenate(request),
        kind=np.concatenate([t.kind for t in traces]),
        start=np.concatenate([t.start for t in traces]),
        tokens=np.concatenate([t.tokens for t in traces]),
        experts=np.concatenate([t.experts for t in traces], axis=1),
        gates=np.concatenate([t.gates for t in traces], axis=1),
        num_experts=first.num_experts,
        layers=first.layers,
        meta={
            **first.meta,
            "workload": "+".join(dict.fromkeys(t.meta.get("workload", "?") for t in traces)),
            "workloads": ",".join(names),
        },
    )


def interleave(trace: Trace, concurrent: int, seed: int | None) -> Trace:
    """The same requests served ``concurrent`` at a time (see the module doc), in an order
    shuffled by ``seed`` (``None``: order of first appearance).

    Raises:
        ReplayBankError: ``concurrent < 1``.
    """
    if isinstance(concurrent, bool) or not isinstance(concurrent, int) or concurrent < 1:
        raise ReplayBankError(f"concurrent = {concurrent!r}: expected an integer >= 1")
    ids = requests_of(trace)
    if seed is not None:
        ids = [ids[i] for i in np.random.default_rng(seed).permutation(len(ids))]
    queues = {r: np.flatnonzero(trace.request == r).tolist() for r in ids}
    waiting = list(reversed(ids))
    flight: list[int] = []
    order: list[int] = []
    while waiting or flight:
        while waiting and len(flight) < concurrent:
            flight.append(waiting.pop())
        for r in list(flight):
            order.append(queues[r].pop(0))
            if not queues[r]:
                flight.remove(r)
    return _take(trace, np.asarray(order, dtype=np.int64), concurrent=str(concurrent))
