"""Hypothesis fuzz of RolloutBuffer's inputs and state.

Random ``add_group`` / ``set_policy_version`` / ``sample`` calls with values that are mostly
valid and often not (NaN, inf, float tokens, negative ids, huge ints, bools, strings), then a
saved state with random entries replaced, deleted or added, loaded into a fresh buffer. Each call
either succeeds, with every served batch finite and within ``max_reuse``, or raises a
``ReplayBankError`` and changes nothing; a refused state restores nothing. Any other exception,
or a call past its bound, fails the test. ``FUZZ_EXAMPLES`` raises the count (suite: 60 each).
"""

from __future__ import annotations

import copy
import math
import os

import numpy as np
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from replaybank.errors import ReplayBankError
from replaybank.rl.rollouts import RolloutBuffer

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "60"))
BOUNDED_S = 2.0
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
MAX_REUSE = 2

junk = st.sampled_from([math.nan, math.inf, -1, -(2**70), 2**70, 1.5, True, None, "3", [], 1e300])


def often(good):
    return st.integers(0, 7).flatmap(lambda i: junk if i == 0 else good)


token_row = often(st.integers(0, 7).flatmap(lambda i: (
    st.lists(st.floats(0, 50), min_size=1, max_size=4)  # float tokens: refused, never truncated
    if i == 0 else st.lists(st.integers(0, 50), min_size=1, max_size=4))))


@st.composite
def calls(draw):
    kind = draw(st.sampled_from(["add", "add", "version", "sample"]))
    if kind == "add":
        g = draw(st.integers(1, 3))
        tokens = [draw(token_row) for _ in range(g)]
        lens = [len(t) if isinstance(t, list) else 1 for t in tokens]
        logprobs = [draw(often(st.just([-0.5] * n))) for n in lens]
        return ("add", draw(often(st.integers(0, 9))), tokens, draw(often(st.lists(st.floats(-1, 1), min_size=g, max_size=g))),
                logprobs, draw(often(st.integers(0, 3))))
    if kind == "version":
        return ("version", draw(often(st.integers(0, 4))))
    return ("sample", draw(often(st.integers(1, 6))))


def _summary(buf: RolloutBuffer):
    return (buf.policy_version, buf.next_group, dict(buf.evicted), len(buf.buffer),
            {k: (g.ids.tolist(), g.version, g.uses) for k, g in buf.groups.items()})


@SETTINGS
@given(ops=st.lists(calls(), min_size=1, max_size=12))
def test_calls_succeed_well_formed_or_refuse_changing_nothing(ops, bounded):
    buf = RolloutBuffer(32, max_staleness=1, max_reuse=MAX_REUSE, seed=0)
    served: dict[int, int] = {}
    for op in ops:
        before = _summary(buf)
        try:
            if op[0] == "add":
                bounded(lambda op=op: buf.add_group(op[1], op[2], op[3], op[4], version=op[5]), BOUNDED_S)
            elif op[0] == "version":
                bounded(lambda op=op: buf.set_policy_version(op[1]), BOUNDED_S)
            else:
                batch = bounded(lambda op=op: buf.sample(op[1]), BOUNDED_S)
                assert np.isfinite(batch.advantage).all() and np.isfinite(batch.reward).all()
                assert batch.tokens.values.dtype.kind in "iu" and (batch.tokens.values >= 0).all()
                for i in batch.ids.tolist():
                    served[i] = served.get(i, 0) + 1
                    assert served[i] <= MAX_REUSE
            event(f"{op[0]}: ok")
        except ReplayBankError as err:
            event(f"{op[0]}: {type(err).__name__}")
            assert _summary(buf) == before, f"a refused {op[0]} changed the buffer"


scalar = st.one_of(st.integers(-3, 6), st.integers(-(2**70), 2**70), st.floats(allow_nan=True, allow_infinity=True),
                   st.sampled_from([True, None, "1"]), st.builds(list), st.builds(dict))


@st.composite
def states(draw):
    src = RolloutBuffer(32, max_staleness=1, max_reuse=MAX_REUSE, seed=0)
    for v in range(draw(st.integers(0, 2))):
        src.set_policy_version(v)
        for p in range(draw(st.integers(1, 3))):
            src.add_group(p, [np.array([1, 2]), np.array([3])], [1.0, 0.0], [np.array([-0.1, -0.2]), np.array([-0.5])], v)
    if src.groups and draw(st.booleans()):
        src.sample(2)
    state = copy.deepcopy(src.state_dict())
    for _ in range(draw(st.integers(1, 3))):
        where = draw(st.sampled_from(["top", "group", "evicted"]))
        target = state
        groups, evicted = state.get("groups"), state.get("evicted")
        if where == "group" and isinstance(groups, dict) and groups:
            picked = groups[draw(st.sampled_from(sorted(groups)))]
            target = picked if isinstance(picked, dict) else state
        elif where == "evicted" and isinstance(evicted, dict):
            target = evicted
        key = draw(st.sampled_from(sorted(target) + ["extra"]))
        if key == "schema_version" and draw(st.booleans()):
            continue
        if draw(st.integers(0, 3)) == 0 and key in target:
            del target[key]
        else:
            target[key] = draw(scalar)
    return state


@SETTINGS
@given(state=states())
def test_a_state_is_refused_whole_or_loads_and_serves(state, bounded):
    buf = RolloutBuffer(32, max_staleness=1, max_reuse=MAX_REUSE, seed=1)
    buf.add_group(5, [np.array([4])], [1.0], [np.array([-0.3])], 0)
    before = _summary(buf)
    try:
        bounded(lambda: buf.load_state_dict(state), BOUNDED_S)
    except ReplayBankError as err:
        event(f"load: {type(err).__name__}")
        assert _summary(buf) == before, "a refused state was half restored"
        buf.sample(1)
        return
    event("load: accepted")
    for g in buf.groups.values():
        assert 0 <= g.uses < MAX_REUSE and 0 <= buf.policy_version - g.version <= 1
    if buf.groups:
        size = len(next(iter(buf.groups.values())).ids)
        try:
            batch = bounded(lambda: buf.sample(size), BOUNDED_S)
            assert np.isfinite(batch.advantage).all()
        except ReplayBankError as err:  # e.g. groups of different sizes
            event(f"sample after load: {type(err).__name__}")
