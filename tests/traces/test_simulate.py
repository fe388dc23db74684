"""The simulator: exact counts by hand, the kernel against the plain-Python replay, and the oracle
against every policy and against a brute-force optimum."""

from __future__ import annotations

import math
from itertools import combinations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from replaybank.errors import ReplayBankError
from replaybank.traces import (
    POLICIES,
    Trace,
    capacity_for_ratio,
    compare,
    layer_events,
    simulate,
    synthetic_trace,
)
from replaybank.traces.kernel import COUNTERS, POLICY_CODES, get_kernel, replay
from replaybank.traces.prefetch import predict_prefetch
from replaybank.traces.reference import lru_from_trace, replay_events


def hand_trace() -> Trace:
    """One layer of 4 experts, top-2: a 3-token prefill needing {0, 1, 2}, then decodes
    {2, 3}, {0, 1}, {0, 2}."""
    return Trace.build(request=[0, 0, 0, 0], kind=[0, 1, 1, 1], start=[0, 3, 4, 5], tokens=[3, 1, 1, 1],
                       experts=[[[0, 1], [1, 2], [0, 2], [2, 3], [0, 1], [0, 2]]], num_experts=[4])


def test_exact_counts_lru_and_opt_per_step() -> None:
    lru = simulate(hand_trace(), "lru", 3, expert_bytes=1000).total
    # prefill: 3 misses; {2,3}: evict 0; {0,1}: evict 2; {0,2}: evict 3
    assert (lru.events, lru.needs, lru.hits, lru.misses, lru.loads, lru.evictions, lru.stalls) == (4, 9, 3, 6, 6, 3, 4)
    assert lru.bytes_moved == 6000 and lru.miss_rate == pytest.approx(6 / 9)
    opt = simulate(hand_trace(), "opt", 3).total
    # {2,3}: evict 0 (0 and 1 both needed next); {0,1}: evict 3 (never needed again); {0,2}: hits
    assert (opt.hits, opt.misses, opt.evictions, opt.optimal_victims, opt.stalls) == (4, 5, 2, 2, 3)
    # LRU's victims: 0 (tied with 1 for farthest: optimal), 2 (needed next step: not), 3 (never again: optimal)
    assert (lru.optimal_victims, lru.victim_rate) == (2, pytest.approx(2 / 3))


def test_exact_counts_lru_per_token() -> None:
    t = simulate(hand_trace(), "lru", 3, semantics="token").total
    # tokens [0,1] [1,2] [0,2] [2,3] [0,1] [0,2]: misses 0,1 | 2 | - | 3 (evict 1) | 1 (evict 2) | 2 (evict 3)
    assert (t.events, t.needs, t.hits, t.misses, t.evictions, t.stalls) == (6, 12, 6, 6, 3, 5)


def test_per_step_and_per_token_semantics_differ() -> None:
    # a prefill whose 4 tokens all route to expert 0: one need and one miss as a step, but four
    # needs and three "hits" when replayed token by token (reuse within a step is not a cache hit)
    t = Trace.build(request=[0, 0], kind=[0, 1], start=[0, 4], tokens=[4, 1], experts=[[[0], [0], [0], [0], [1]]],
                    num_experts=[3])
    step = simulate(t, "lru", 2).total
    token = simulate(t, "lru", 2, semantics="token").total
    assert (step.needs, step.hits, step.misses, step.miss_rate) == (2, 0, 2, 1.0)
    assert (token.needs, token.hits, token.misses, token.miss_rate) == (5, 3, 2, 0.4)
    # a prefill whose union (3) exceeds the capacity (2): per-token replay silently splits it and
    # reloads expert 0 inside the step; per-step replay reports it
    wide = Trace.build(request=[0], kind=[0], start=[0], tokens=[4], experts=[[[0], [1], [2], [0]]], num_experts=[3])
    assert simulate(wide, "lru", 2, semantics="token").total.misses == 4
    with pytest.raises(ReplayBankError, match=r"capacity 2 of layer 0 .* smaller than a step union: request 0, "
                       r"step 0: prefill of tokens 0..3 needs 3 experts at once"):
        simulate(wide, "lru", 2)


def test_capacity_is_checked_per_layer() -> None:
    t = synthetic_trace(requests=2, prompt_tokens=1, decode_tokens=3, layers=2, experts=8, top_k=2, seed=0)
    for bad in (0, 9, [4], [4, 9], 2.0, True):
        with pytest.raises(ReplayBankError, match="capacity"):
            simulate(t, "lru", bad)  # type: ignore[arg-type]
    with pytest.raises(ReplayBankError, match=r"capacity = 9 for layer 1 \(model layer 1\): expected an integer in \[1, 8\]"):
        simulate(t, "lru", [4, 9])
    assert capacity_for_ratio(t, 0.25) == (2, 2)
    with pytest.raises(ReplayBankError, match="policy = 'fifo'"):
        simulate(t, "fifo", 4)  # type: ignore[arg-type]


def test_random_is_seeded() -> None:
    t = synthetic_trace(requests=4, prompt_tokens=2, decode_tokens=30, layers=2, experts=16, top_k=2, seed=1)
    a, b = simulate(t, "random", 6, seed=7), simulate(t, "random", 6, seed=7)
    assert a.layers == b.layers
    assert simulate(t, "random", 6, seed=8).layers != a.layers
    assert a.total.victim_rate < 1.0


@pytest.mark.parametrize("semantics", ["step", "token"])
def test_kernel_equals_the_plain_python_replays(semantics: str) -> None:
    t = synthetic_trace(requests=6, prompt_tokens=6, decode_tokens=40, layers=3, experts=12, top_k=2, zipf=0.8,
                        stickiness=0.3, concurrent=3, seed=4)
    res = compare(t, 8, ("lru", "lfu", "lfru", "pred", "opt"), semantics=semantics)  # type: ignore[arg-type]
    assert [(c.hits, c.misses) for c in res.results["lru"].layers] == lru_from_trace(t, 8, semantics)
    for layer in range(t.num_layers):
        ev = layer_events(t, layer, semantics)  # type: ignore[arg-type]
        lists = [ev.ids[ev.ptr[i]: ev.ptr[i + 1]].tolist() for i in range(ev.count)]
        for policy in ("lru", "lfu", "lfru", "pred", "opt"):
            want = replay_events(lists, 8, policy)
            c = res.results[policy].layers[layer]
            assert {k: getattr(c, k) for k in want} == want, (policy, layer)


@pytest.mark.parametrize("prefetch", [0, 2])
def test_interpreted_kernel_equals_compiled(prefetch: int) -> None:
    t = synthetic_trace(requests=3, prompt_tokens=5, decode_tokens=30, layers=2, experts=10, top_k=2, seed=5)
    src, ev = layer_events(t, 0, "step"), layer_events(t, 1, "step")
    plan = predict_prefetch(src, ev, prefetch) if prefetch else (np.zeros(0, dtype=np.int64),) * 3
    draws = np.random.default_rng(0).random(len(ev.ids) + len(plan[1]))
    for policy, code in POLICY_CODES.items():
        outs = []
        for fn in (replay, get_kernel()):
            out = np.zeros(len(COUNTERS), dtype=np.int64)
            victims = np.full(len(draws), -1, dtype=np.int64)
            fn(ev.ptr, ev.ids, ev.next_use, 10, 6, code, 32.0, draws, out, *plan, victims)
            outs.append(out.tolist() + victims.tolist())
        assert outs[0] == outs[1], policy


def brute_force_misses(events: list[list[int]], capacity: int) -> int:
    """The fewest misses over every demand-paging schedule: after each event the cache may hold any
    set of at most ``capacity`` experts that contains the event's experts and nothing loaded
    without being needed (dynamic programming over cache contents)."""
    best: dict[frozenset[int], int] = {frozenset(): 0}
    for need in map(frozenset, events):
        nxt: dict[frozenset[int], int] = {}
        for cache, cost in best.items():
            pool = sorted(cache - need)
            room = capacity - len(need)
            for n in range(min(room, len(pool)) + 1):
                for keep in combinations(pool, n):
                    state = need | frozenset(keep)
                    c = cost + len(need - cache)
                    if c < nxt.get(state, math.inf):
                        nxt[state] = c
        best = nxt
    return min(best.values())


small_traces = st.builds(
    dict,
    requests=st.integers(1, 3),
    prompt_tokens=st.integers(1, 3),
    decode_tokens=st.integers(0, 6),
    experts=st.integers(2, 6),
    zipf=st.sampled_from([0.0, 1.0, 2.0]),
    stickiness=st.sampled_from([0.0, 0.5]),
    concurrent=st.integers(1, 3),
    seed=st.integers(0, 2**16),
)


def _trace(p: dict, top_k: int) -> Trace:
    return synthetic_trace(layers=1, top_k=min(top_k, p["experts"]), **p)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(p=small_traces, top_k=st.integers(1, 2), spare=st.integers(0, 3), semantics=st.sampled_from(["step", "token"]))
def test_optimal_equals_brute_force_and_bounds_every_policy(p: dict, top_k: int, spare: int, semantics: str) -> None:
    t = _trace(p, top_k)
    ev = layer_events(t, 0, semantics)  # type: ignore[arg-type]
    capacity = min(int(ev.sizes().max()) + spare, p["experts"])
    res = compare(t, capacity, POLICIES, semantics=semantics, seed=p["seed"])  # type: ignore[arg-type]
    opt = res.results["opt"].total
    lists = [ev.ids[ev.ptr[i]: ev.ptr[i + 1]].tolist() for i in range(ev.count)]
    assert opt.misses == brute_force_misses(lists, capacity)
    assert opt.evictions == opt.optimal_victims
    for policy, r in res.results.items():
        assert r.total.misses >= opt.misses, policy
        assert r.total.hits + r.total.misses == r.total.needs


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**16), ratio=st.sampled_from([0.5, 0.75]), semantics=st.sampled_from(["step", "token"]))
def test_optimal_bounds_every_policy_on_larger_traces(seed: int, ratio: float, semantics: str) -> None:
    t = synthetic_trace(requests=8, prompt_tokens=2, decode_tokens=40, layers=2, experts=16, top_k=2,
                        zipf=1.0, stickiness=0.3, concurrent=4, seed=seed)
    res = compare(t, capacity_for_ratio(t, ratio), semantics=semantics, seed=seed)  # type: ignore[arg-type]
    for layer in range(2):
        opt = res.results["opt"].layers[layer].misses
        assert all(r.layers[layer].misses >= opt for r in res.results.values())
    gap = res.gap_recovered("lru")
    assert gap is None or gap == 0.0
    assert res.gap_recovered("opt") in (None, 1.0)


def test_decode_only_replay_drops_the_prefill_steps() -> None:
    t = synthetic_trace(requests=5, prompt_tokens=12, decode_tokens=10, layers=1, experts=8, top_k=2, seed=2)
    ev = layer_events(t, 0, "step", steps="decode")
    assert ev.count == 50 and (t.kind[ev.step] == 1).all()
    assert ev.ids.tolist() == np.sort(t.experts[0][t.kind[t.step_of_token()] == 1], axis=1).ravel().tolist()
    step, token = (simulate(t, "lru", 2, semantics=s, steps="decode") for s in ("step", "token"))  # type: ignore[arg-type]
    assert step.layers == token.layers and step.steps == "decode"
    with pytest.raises(ReplayBankError, match="smaller than a step union"):
        simulate(t, "lru", 2)
    with pytest.raises(ReplayBankError, match="steps = 'some'"):
        simulate(t, "lru", 2, steps="some")  # type: ignore[arg-type]
