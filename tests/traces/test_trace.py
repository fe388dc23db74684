"""The trace's rules: every bad input is refused with the field, the request and the step."""

from __future__ import annotations

import doctest
import importlib
from typing import Any

import numpy as np
import pytest

from replaybank.errors import ReplayBankError
from replaybank.traces import Trace, synthetic_trace


def parts(**change: Any) -> dict[str, Any]:
    """Two requests: request 5 prefills 2 tokens then decodes 1; request 9 decodes after a 1-token
    prefill; 2 layers of 4 experts, top-2."""
    base: dict[str, Any] = dict(
        request=[5, 9, 5, 9],
        kind=[0, 0, 1, 1],
        start=[0, 0, 2, 1],
        tokens=[2, 1, 1, 1],
        experts=[[[0, 1], [1, 2], [2, 3], [0, 3], [1, 3]], [[3, 2], [0, 1], [0, 2], [1, 2], [0, 3]]],
        num_experts=[4, 4],
    )
    return {**base, **change}


def test_a_good_trace_has_its_shape_and_canonical_dtypes() -> None:
    t = Trace.build(**parts(), layers=[1, 3], meta={"model": "toy"})
    assert (t.num_steps, t.num_tokens, t.num_layers, t.top_k, t.routing_events) == (4, 5, 2, 2, 10)
    assert t.offsets.tolist() == [0, 2, 3, 4, 5]
    assert t.step_of_token().tolist() == [0, 0, 1, 2, 3]
    assert (t.experts.dtype, t.gates.dtype, t.kind.dtype) == (np.int16, np.float32, np.uint8)
    assert np.allclose(t.gates, 0.5)
    assert t.describe_step(0) == "request 5, step 0: prefill of tokens 0..1"
    assert t.describe_step(3) == "request 9, step 3: decode at position 1"


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(experts=[[[0, 1], [1, 2], [2, 3], [0, 3], [1, 3]], [[3, 2], [0, 1], [0, 4], [1, 2], [0, 3]]]),
         r"experts\[layer 1, token 2, slot 1\] = 4: layer 1 has 4 experts \(ids 0..3\) \(request 9, step 1: prefill at position 0\)"),
        (dict(experts=[[[0, 1], [1, 2], [2, 3], [0, 3], [1, -1]], [[3, 2], [0, 1], [0, 2], [1, 2], [0, 3]]]),
         r"experts\[layer 0, token 4, slot 1\] = -1: .*\(request 9, step 3: decode at position 1\)"),
        (dict(experts=[[[0, 1], [2, 2], [2, 3], [0, 3], [1, 3]], [[3, 2], [0, 1], [0, 2], [1, 2], [0, 3]]]),
         r"experts\[layer 0, token 1\] = \[2, 2\]: a token's top-k experts must be distinct \(request 5, step 0: prefill at position 1\)"),
        (dict(tokens=[2, 1, 1, 2]), r"tokens\[3\] = 2: a decode step has exactly 1 token \(request 9, step 3\)"),
        (dict(start=[0, 0, 3, 1]), r"start\[2\] = 3: expected 2, the next position of request 5 .*\(request 5, step 2\)"),
        (dict(start=[0, 0, 2, 2]), r"start\[3\] = 2: expected 1, the next position of request 9"),
        (dict(kind=[0, 2, 1, 1]), r"kind\[1\] = 2: expected 0 \(prefill\) or 1 \(decode\) \(request 9, step 1\)"),
        (dict(tokens=[2, 0, 1, 1]), r"tokens\[1\] = 0: expected >= 1 \(request 9, step 1\)"),
        (dict(request=[5, 9, 5]), r"kind: 4 rows, but request has 3"),
        (dict(experts=[[[0, 1]] * 4] * 2), r"experts: 4 token rows, but the step table's tokens sum to 5"),
        (dict(num_experts=[4]), r"num_experts = \[4\]: expected 2 integers"),
        (dict(num_experts=[4, 1]), r"num_experts\[1\] = 1: expected an integer in \[top_k=2,"),
        (dict(start=[0.0, 0, 2, 1]), r"start: expected a 1-d array of integers, got 1-d float64"),
        (dict(request=[], kind=[], start=[], tokens=[], experts=np.zeros((2, 0, 2), int)), r"at least one step"),
    ],
)
def test_bad_input_is_named(change: dict[str, Any], message: str) -> None:
    with pytest.raises(ReplayBankError, match=message):
        Trace.build(**parts(**change))


def test_gates_must_be_finite_and_shaped_like_experts() -> None:
    gates = np.full((2, 5, 2), 0.5)
    gates[1, 3, 0] = np.nan
    with pytest.raises(ReplayBankError, match=r"gates\[layer 1, token 3, slot 0\] = nan: .*\(request 5, step 2"):
        Trace.build(**parts(), gates=gates)
    with pytest.raises(ReplayBankError, match=r"gates: float32 \(2, 5, 1\), expected floats shaped like"):
        Trace.build(**parts(), gates=np.ones((2, 5, 1)))


def test_layers_must_be_distinct_and_meta_strings() -> None:
    with pytest.raises(ReplayBankError, match=r"layers = \[3, 3\]: expected distinct"):
        Trace.build(**parts(), layers=[3, 3])
    with pytest.raises(ReplayBankError, match="meta: expected a mapping of strings"):
        Trace.build(**parts(), meta={"n": 3})  # type: ignore[dict-item]


def test_synthetic_trace_follows_its_parameters() -> None:
    t = synthetic_trace(requests=40, prompt_tokens=8, decode_tokens=24, layers=2, experts=16, top_k=2,
                        zipf=1.2, stickiness=0.0, concurrent=4, seed=3)
    assert t.num_tokens == 40 * 32 and t.num_steps == 40 * 25
    # Zipf: the most used expert of a layer takes far more than a uniform share (1/16 of picks)
    share = np.bincount(t.experts[0].ravel(), minlength=16).max() / t.experts[0].size
    assert share > 0.12
    sticky = synthetic_trace(requests=40, prompt_tokens=8, decode_tokens=24, layers=2, experts=16,
                             top_k=2, zipf=0.0, stickiness=0.8, seed=3)
    same = (sticky.experts[0, 1:] == sticky.experts[0, :-1]).all(axis=1).mean()
    assert 0.7 < same < 0.85  # ~0.8 of tokens repeat the previous one (first tokens never do)
    again = synthetic_trace(requests=40, prompt_tokens=8, decode_tokens=24, layers=2, experts=16,
                            top_k=2, zipf=0.0, stickiness=0.8, seed=3)
    assert np.array_equal(sticky.experts, again.experts)
    with pytest.raises(ReplayBankError, match="top_k = 5: more than experts = 4"):
        synthetic_trace(requests=1, prompt_tokens=1, decode_tokens=0, layers=1, experts=4, top_k=5)


@pytest.mark.parametrize(
    "module",
    ["trace", "events", "simulate", "store", "synthetic", "reference", "prefetch", "schedule", "interventions", "workloads"],
)
def test_docstring_examples_hold(module: str) -> None:
    result = doctest.testmod(importlib.import_module(f"replaybank.traces.{module}"))
    assert result.attempted >= 1 and result.failed == 0


def test_token_counts_that_would_overflow_int64_are_refused() -> None:
    # two steps of 2**63 - 1 tokens and one of 3 wrap around int64 to a sum of 1 token row, which
    # numpy later indexes far outside the arrays (a segfault in inspect and simulate)
    big = 2**63 - 1
    with pytest.raises(ReplayBankError, match=r"tokens\[0\] = 9223372036854775807: more than the 1 token rows"):
        Trace.build(request=[0, 1, 2], kind=[0, 0, 0], start=[0, 0, 0], tokens=[big, big, 3],
                    experts=[[[0, 1]]], num_experts=[4])  # fmt: skip
    # each count fits in the token rows, but 17 x 2**60 wraps around int64 to exactly 2**60
    n = 2**60
    with pytest.raises(ReplayBankError, match="tokens sum to more than int64 can count"):
        Trace(request=np.arange(17, dtype=np.int64), kind=np.zeros(17, np.uint8), start=np.zeros(17, np.int64),
              tokens=np.full(17, n, np.int64), experts=np.broadcast_to(np.zeros((1, 1, 1), np.int16), (1, n, 1)),
              gates=np.broadcast_to(np.ones((1, 1, 1), np.float32), (1, n, 1)), num_experts=(4,), layers=(0,))  # fmt: skip


@pytest.mark.parametrize("seed", [-1, 1.5, True, "0"])
def test_seeds_are_integers_at_least_zero(seed: Any) -> None:
    from replaybank.traces import simulate

    with pytest.raises(ReplayBankError, match=r"seed = .*: expected an integer >= 0 or a numpy.random.Generator"):
        synthetic_trace(requests=2, prompt_tokens=2, decode_tokens=1, layers=1, experts=4, top_k=2, seed=seed)
    t = synthetic_trace(requests=2, prompt_tokens=2, decode_tokens=1, layers=1, experts=4, top_k=2)
    with pytest.raises(ReplayBankError, match=r"seed = .*: expected an integer >= 0"):
        simulate(t, "random", 4, seed=seed)


@pytest.mark.parametrize("zipf", [float("inf"), float("nan"), -1.0])
def test_zipf_must_be_finite(zipf: float) -> None:
    with pytest.raises(ReplayBankError, match="zipf = .*finite, >= 0"):
        synthetic_trace(requests=2, prompt_tokens=2, decode_tokens=1, layers=1, experts=4, top_k=2, zipf=zipf)
