"""The causal next-use predictor (``pred``): it decides from the trace's past only, equals the
plain-Python replay, and is bounded by the optimum."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from replaybank.traces import Trace, compare, synthetic_trace
from replaybank.traces.simulate import evictions


def decode_trace(experts: np.ndarray, num_experts: int) -> Trace:
    """One request: a 1-token prefill, then one decode step per remaining token row."""
    n = experts.shape[1]
    return Trace.build(
        request=[0] * n,
        kind=[0] + [1] * (n - 1),
        start=list(range(n)),
        tokens=[1] * n,
        experts=experts,
        num_experts=[num_experts] * experts.shape[0],
    )


def routed(seed: int, tokens: int, layers: int = 2, experts: int = 12) -> np.ndarray:
    t = synthetic_trace(
        requests=1,
        prompt_tokens=1,
        decode_tokens=tokens - 1,
        layers=layers,
        experts=experts,
        top_k=2,
        zipf=1.0,
        stickiness=0.4,
        seed=seed,
    )
    return t.experts.astype(np.int64)


def prefix_decisions(log: list[np.ndarray], events: int, experts: int) -> list[list[int]]:
    return [v[v // experts < events].tolist() for v in log]


@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    other=st.integers(0, 2**16),
    cut=st.integers(5, 60),
    prefetch=st.sampled_from([0, 2]),
    semantics=st.sampled_from(["step", "token"]),
)
def test_decisions_on_a_prefix_do_not_depend_on_what_follows(
    seed: int, other: int, cut: int, prefetch: int, semantics: str
) -> None:
    # the same first `cut` steps, then two unrelated continuations
    head = routed(seed, 80)
    a = decode_trace(head, 12)
    b = decode_trace(np.concatenate([head[:, :cut], routed(other + 1, 80)[:, cut:]], axis=1), 12)
    logs = [evictions(t, "pred", 5, semantics=semantics, prefetch=prefetch) for t in (a, b)]
    # every step is one token, so its event index is its step index under both semantics
    assert prefix_decisions(logs[0], cut, 12) == prefix_decisions(logs[1], cut, 12)
    assert sum(len(v) for v in logs[0]) > 0


def test_the_leakage_check_would_catch_a_policy_that_reads_the_future() -> None:
    # opt reads next uses: the same prefix with different futures gets different decisions
    head = routed(3, 80)
    differ = 0
    for other in range(10):
        b = np.concatenate([head[:, :30], routed(100 + other, 80)[:, 30:]], axis=1)
        logs = [evictions(decode_trace(x, 12), "opt", 5) for x in (head, b)]
        differ += prefix_decisions(logs[0], 30, 12) != prefix_decisions(logs[1], 30, 12)
        # and pred does not, on the same pairs
        logs = [evictions(decode_trace(x, 12), "pred", 5) for x in (head, b)]
        assert prefix_decisions(logs[0], 30, 12) == prefix_decisions(logs[1], 30, 12)
    assert differ >= 5


def test_pred_learns_a_deterministic_cycle() -> None:
    # experts cycle 0 -> 1 -> 2 -> 3 -> 0 with an interloper after each 3: once learned, pred keeps
    # what comes next, while LRU evicts exactly it (the cycle is one longer than the cache)
    cycle = [0, 1, 2, 3, 0, 1, 2, 3, 4] * 30
    t = decode_trace(np.array(cycle).reshape(1, -1, 1), 6)
    res = compare(t, 4, ("lru", "pred", "opt"))
    lru, pred, opt = (res.results[p].total.misses for p in ("lru", "pred", "opt"))
    assert opt <= pred < lru
    assert res.gap_recovered("pred") > 0.5
