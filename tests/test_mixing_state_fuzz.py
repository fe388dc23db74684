"""Hypothesis fuzz of the mixer and mix-plan state.

A valid state of a ``Mixer`` (or a ``MixPlan``, which wraps one) has random entries replaced with
random values (negative, huge, fractional, NaN, wrong lengths, strings, missing keys, extra keys).
``load_state_dict`` either refuses it with a ``ReplayBankError`` (``InvalidStateError`` /
``MixError``, both ``ValueError``) leaving the state exactly as it was, or accepts it, and then the
next batches are well-formed (every index inside its source, full batches) and come within a
bound. Any other exception fails the test. ``FUZZ_EXAMPLES`` raises the count (suite: 100).
"""

from __future__ import annotations

import copy
import math
import os

import numpy as np
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from replaybank.errors import ReplayBankError
from replaybank.hf.plan import MixPlan
from replaybank.mixing import Mixer

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "100"))
BOUNDED_S = 2.0
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])

scalar = st.one_of(
    st.integers(-3, 12), st.integers(-(2**70), 2**70), st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([True, None, "1"]), st.builds(list), st.builds(dict),
)
value = st.one_of(scalar, st.lists(scalar, max_size=4))
SIZES, SHARES, BATCH = [10, 3, 5], [0.6, 0.25, 0.15], 4


def _perturb(draw, state: dict) -> dict:
    state = copy.deepcopy(state)
    for _ in range(draw(st.integers(1, 3))):
        key = draw(st.sampled_from(sorted(state) + ["extra"]))
        action = draw(st.sampled_from(["set", "del", "item", "plausible"]))
        if action == "del" and key in state:
            del state[key]
        elif action == "item" and isinstance(state.get(key), list) and state[key]:
            state[key][draw(st.integers(0, len(state[key]) - 1))] = draw(scalar)
        elif action == "plausible":  # a value a real run could hold, often enough to be accepted
            state[key] = draw(st.integers(0, 12)) if not isinstance(state.get(key), list) else [
                draw(st.integers(0, 12)) for _ in state[key]]
        else:
            state[key] = draw(value)
    return state


@st.composite
def mixer_states(draw):
    m = Mixer(SIZES, SHARES, BATCH, seed=0)
    it = iter(m)
    for _ in range(draw(st.integers(0, 6))):
        if next(it, None) is None:
            it = iter(m)
    return m, _perturb(draw, m.state_dict())


@SETTINGS
@given(case=mixer_states())
def test_mixer_state_is_refused_whole_or_resumes_well_formed(case, bounded):
    m, state = case
    before = m.state_dict()
    try:
        bounded(lambda: m.load_state_dict(state), BOUNDED_S)
    except ReplayBankError as err:
        event(f"mixer: {type(err).__name__}")
        assert m.state_dict() == before, "a refused state changed the mixer"
        return
    event("mixer: accepted")

    def next_batches():
        it = iter(m)
        for _ in range(4):
            b = next(it, None)
            if b is None:
                it = iter(m)
                continue
            assert 1 <= len(b.source) <= BATCH  # an epoch's last batch may be partial
            for s, n in enumerate(SIZES):
                rows = b.rows_of(s)
                assert ((rows >= 0) & (rows < n)).all()

    bounded(next_batches, BOUNDED_S)


@st.composite
def plan_states(draw):
    p = MixPlan(12, 5, 0.25, batch_size=2, seed=0, world_size=2, epochs=draw(st.sampled_from([None, 3])))
    it = iter(p)
    for _ in range(draw(st.integers(0, 4))):
        next(it, None)
    state = p.state_dict()
    if draw(st.booleans()):
        state["mixer"] = _perturb(draw, state["mixer"])
    else:
        state = _perturb(draw, state)
    return p, state


@SETTINGS
@given(case=plan_states())
def test_plan_state_is_refused_whole_or_resumes_well_formed(case, bounded):
    p, state = case
    before = p.state_dict()
    try:
        bounded(lambda: p.load_state_dict(state), BOUNDED_S)
    except ReplayBankError as err:
        event(f"plan: {type(err).__name__}")
        assert p.state_dict() == before, "a refused state changed the plan"
        return
    event("plan: accepted")

    def next_batches():
        for k, b in enumerate(p):
            assert b.source.size == 4 and np.isin(b.source, [0, 1]).all()
            assert (b.index >= 0).all() and (b.index[b.source == 0] < 12).all() and (b.index[b.source == 1] < 5).all()
            if k == 3:
                break

    bounded(next_batches, BOUNDED_S)
    assert math.isfinite(float(np.sum(p.state_dict()["rank_credit"])))
