"""Prefetch of the next layer's predicted experts: the predictor's plan and the counts, by hand."""

from __future__ import annotations

import numpy as np
import pytest

from replaybank.errors import ReplayBankError
from replaybank.traces import Trace, compare, layer_events, simulate
from replaybank.traces.prefetch import first_use, predict_prefetch


def two_layers() -> Trace:
    """7 decode-like steps of one token, top-1. Layer 1's expert follows layer 0's (0 -> 2, 1 -> 3)
    for six steps, then breaks the pattern twice: step 5 (0 -> 3) and step 6 (0 -> 1)."""
    l0 = [0, 1, 0, 1, 0, 0, 0]
    l1 = [2, 3, 2, 3, 2, 3, 1]
    experts = np.array([l0, l1]).reshape(2, 7, 1)
    return Trace.build(
        request=[0] * 7,
        kind=[0] + [1] * 6,
        start=list(range(7)),
        tokens=[1] * 7,
        experts=experts,
        num_experts=[4, 4],
    )


def test_the_plan_is_learned_from_earlier_steps_only() -> None:
    t = two_layers()
    ptr, ids, nxt = predict_prefetch(layer_events(t, 0, "step"), layer_events(t, 1, "step"), 1)
    # steps 0 and 1 have nothing learned for their layer-0 expert; then 0 -> 2 and 1 -> 3; at step 6
    # expert 0 was seen with 2 three times and with 3 once: still 2
    assert ptr.tolist() == [0, 0, 0, 1, 2, 3, 4, 5]
    assert ids.tolist() == [2, 3, 2, 2, 2]
    assert nxt.tolist() == [2, 3, 4, 7, 7]  # the first use at or after the step (7 = never)


def test_exact_counts_with_and_without_prefetch() -> None:
    t = two_layers()
    on = simulate(t, "lru", 1, prefetch=1, expert_bytes=10)
    l0, l1 = on.layers
    # layer 0 is never prefetched for: 0 1 0 1 0 0 0 with one slot: 5 misses, 2 hits
    assert (l0.misses, l0.hits, l0.prefetch_loads, l0.loads, l0.evictions, l0.stalls) == (
        5,
        2,
        0,
        5,
        4,
        5,
    )
    # layer 1: miss 2, miss 3; steps 2-4 prefetch the right expert (a load, an eviction, then a hit);
    # step 5 prefetches 2, already resident, then misses 3; step 6 prefetches 2 (a load evicting 3)
    # and misses 1, evicting the useless 2
    assert (l1.misses, l1.hits, l1.prefetch_loads, l1.useful_prefetches) == (4, 3, 4, 3)
    assert (l1.loads, l1.evictions, l1.stalls, l1.bytes_moved) == (8, 7, 4, 80)
    assert on.total.bytes_moved == 130 and l1.prefetch_accuracy == pytest.approx(0.75)
    off = simulate(t, "lru", 1, expert_bytes=10).layers[1]
    assert (off.misses, off.hits, off.prefetch_loads, off.loads, off.evictions, off.stalls) == (
        7,
        0,
        0,
        7,
        6,
        7,
    )


def test_prefetch_keeps_the_optimum_a_bound_and_counts_consistent() -> None:
    from replaybank.traces import synthetic_trace

    t = synthetic_trace(
        requests=6,
        prompt_tokens=3,
        decode_tokens=40,
        layers=3,
        experts=12,
        top_k=2,
        stickiness=0.5,
        concurrent=2,
        seed=4,
    )
    res = compare(t, 8, prefetch=3)
    for r in res.results.values():
        c = r.total
        assert c.loads == c.misses + c.prefetch_loads and c.useful_prefetches <= c.prefetch_loads
        assert c.hits + c.misses == c.needs and r.layers[0].prefetch_loads == 0
    # the plan is the same whatever the policy: opt's evictions differ, the prefetch requests do not
    assert res.results["opt"].total.misses <= min(r.total.misses for r in res.results.values())


def test_first_use_at_or_after() -> None:
    t = two_layers()
    ev = layer_events(t, 1, "step")
    got = first_use(ev, np.array([0, 0, 3, 6, 6]), np.array([2, 3, 3, 1, 0]))
    assert got.tolist() == [0, 1, 3, 6, 7]


def test_bad_prefetch_counts_are_refused() -> None:
    t = two_layers()
    with pytest.raises(ReplayBankError, match=r"prefetch = 2: expected an integer in \[0, 1\]"):
        simulate(t, "lru", 1, prefetch=2)
    with pytest.raises(ReplayBankError, match="prefetch = -1"):
        simulate(t, "lru", 2, prefetch=-1)
