"""Controllers refuse what is not a number (a string, a bool, None, a ragged list), a saved RNG
state out of numpy's range, and parameters that collide with what make_controller passes itself:
each a ControllerError or InvalidStateError naming the argument, never a TypeError or a numpy
cast."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from replaybank.controllers import (
    BanditController,
    ControllerError,
    FixedController,
    MixLimits,
    ProxyController,
    SourceStats,
    check_params,
    make_controller,
    summarize,
)
from replaybank.errors import InvalidStateError

LIM = MixLimits(("a", "b"), max_share=0.5)


@pytest.mark.parametrize(
    "build, message",
    [
        (lambda: MixLimits(("a",), floor="0.1"), r"MixLimits\(floor\) = '0.1': expected numbers, got a string"),
        (lambda: MixLimits(("a", "b"), floor=[0.1, True]), r"MixLimits\(floor\) = .*got a bool True"),
        (lambda: FixedController(LIM, shares="0.1"), r"fixed\(shares\) = '0.1': expected numbers, got a string"),
        (lambda: FixedController(LIM, shares=["0.1", "0.1"]), r"fixed\(shares\) = .*got a string '0.1'"),
        (lambda: FixedController(LIM, shares=True), r"fixed\(shares\) = True: expected numbers, got bools"),
        (lambda: FixedController(LIM, shares=[0.1, None]), r"fixed\(shares\) = .*got None"),
        (lambda: ProxyController(LIM, weights=["1"] * 7), r"proxy\(weights\) = .*got a string '1'"),
        (lambda: ProxyController(LIM, weights=[0, 0, 0, 0, 0, 0, True]), r"proxy\(weights\) = .*got a bool True"),
        (lambda: ProxyController(LIM, weights="1234567"), r"proxy\(weights\) = '1234567': expected numbers, got a string"),
    ],
)
def test_shares_floors_and_weights_must_be_numbers(build: Any, message: str) -> None:
    with pytest.raises(ControllerError, match=message):
        build()


@pytest.mark.parametrize(
    "loss, message",
    [
        (["1", "1", "1"], r"SourceStats.loss = .*got a string '1'"),
        (np.array(["1", "1", "1"]), r"SourceStats.loss = .*got strings"),
        ([1.0, [1.0, 2.0], 1.0], r"SourceStats.loss = .*regular \(not ragged\) shape"),
        ([1.0, True, 1.0], r"SourceStats.loss = .*got a bool True"),
    ],
)
def test_statistics_must_be_numbers(loss: Any, message: str) -> None:
    for c in (BanditController(LIM, np.random.default_rng(0)), FixedController(LIM, 0.1),
              ProxyController(LIM, [0] * 7)):  # fmt: skip
        with pytest.raises(ControllerError, match=message):
            c.update(SourceStats(loss, np.zeros(3)), [True, True])


@pytest.mark.parametrize(
    "history, message",
    [
        ([[1.0, 2.0], [1.0]], r"summarize\(history\) = .*regular \(not ragged\) shape"),
        ([["1", "2"], ["1", "2"]], r"summarize\(history\) = .*got a string '1'"),
        ([[True, 1.0], [1.0, 1.0]], r"summarize\(history\) = .*got a bool True"),
        ([[1.0, None], [1.0, 1.0]], r"summarize\(history\) = .*got None"),
    ],
)
def test_summarize_refuses_ragged_or_non_numeric_history(history: Any, message: str) -> None:
    with pytest.raises(ControllerError, match=message):
        summarize(history)


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(state={"state": 2**300, "inc": 1}), r"state\['rng'\].state.state = \d+: expected an integer in"),
        (dict(state={"state": -1, "inc": 1}), r"state\['rng'\].state.state = -1: expected an integer in"),
        (dict(state={"state": 1.5, "inc": 1}), r"state\['rng'\].state.state = 1.5: expected an integer in"),
        (dict(has_uint32=2**100), r"state\['rng'\].has_uint32 = \d+: expected an integer in \[0, 1\]"),
        (dict(uinteger=2**100), r"state\['rng'\]: numpy refuses this PCG64 state"),
        (dict(bit_generator="MT19937"), r"state\['rng'\]: not a PCG64 state \(bit_generator 'MT19937'\)"),
    ],
)
def test_a_huge_or_malformed_rng_state_is_refused(change: dict[str, Any], message: str) -> None:
    c = BanditController(LIM, np.random.default_rng(0), feedback="sampled")
    state = c.state_dict()
    before = c.rng.bit_generator.state
    state["rng"] = {**state["rng"], **change}
    with pytest.raises(InvalidStateError, match=message):
        c.load_state_dict(state)
    assert c.rng.bit_generator.state == before  # nothing set
    c.load_state_dict(c.state_dict())  # a good state still loads


@pytest.mark.parametrize("key", ["rng", "limits"])
def test_params_that_collide_with_rng_or_limits_are_named(key: str) -> None:
    with pytest.raises(ControllerError, match=rf"controller 'bandit': parameter '{key}' is set by replaybank"):
        check_params("bandit", {key: 1})
    if key == "limits":
        with pytest.raises(ControllerError, match="parameter 'limits' is set by replaybank"):
            make_controller("bandit", LIM, rng=np.random.default_rng(0), **{key: 1})
