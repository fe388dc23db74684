"""Hypothesis fuzz of the rate limiters' parameters and state.

Random constructor arguments (mostly sensible, often not: NaN, infinities, 1e300, strings, bools),
then a liveness walk and random ``load_state_dict`` calls. Every call either succeeds or raises a
``ReplayBankError`` (``RateLimitTimeout`` for a call that may not pass yet, at ``timeout=0``); a
limiter that was built must never deadlock a lone writer and reader (both blocked with nothing
else to wait for: that call would wait forever), and a refused state changes no count.
``FUZZ_EXAMPLES`` raises the number of examples for a long run (the suite uses 100).
"""

import math
import os

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from replaybank import ReplayBankError
from replaybank.ratelimit import MinSize, RateLimiter, RateLimitTimeout, SampleToInsertRatio

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "100"))
BOUNDED_S = 2.0  # every call below must return within this (timeouts are 0)

weird = st.sampled_from([math.nan, math.inf, -math.inf, 1e300, -1e300, 2**60, -1, 0, True, None, "1"])


def often(good, bad):
    return st.integers(0, 4).flatmap(lambda i: bad if i == 0 else good)


real = often(st.one_of(st.floats(-50, 50), st.integers(-50, 50), st.just(math.inf), st.just(-math.inf)), weird)
positive = often(st.one_of(st.floats(0.01, 20), st.integers(1, 20)), weird)
count = often(st.integers(0, 30), st.sampled_from([-1, 2**60, 1.5, True, None, "3"]))


@st.composite
def limiters(draw):
    kind = draw(st.sampled_from(["raw", "ratio", "min"]))
    timeout = draw(often(st.sampled_from([None, 0, 0.5, math.inf]), st.sampled_from([1e300, -1, math.nan, "1"])))
    if kind == "raw":
        args = (draw(positive), draw(count), draw(real), draw(real))
        return lambda: RateLimiter(*args, timeout=timeout)
    if kind == "ratio":
        args = (draw(positive), draw(count), draw(positive))
        return lambda: SampleToInsertRatio(*args, timeout=timeout)
    size = draw(count)
    return lambda: MinSize(size, timeout=timeout)


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(make=limiters(), states=st.lists(st.dictionaries(
    st.sampled_from(["inserts", "samples", "size", "other"]), count, max_size=4), max_size=3))
def test_limiter_parameters_and_state(make, states, bounded):
    try:
        limiter = bounded(make, BOUNDED_S)
    except ReplayBankError as err:
        event(f"construct: {type(err).__name__}")
        return
    event("construct: accepted")
    # liveness: a lone writer and reader, each call at timeout=0, must keep moving (or be told at
    # once that a call can never fit); both blocked is a deadlock a real caller would wait out forever
    steps = min(limiter.min_size, 200) + 50
    for _ in range(steps):
        outcome = []
        for call in (limiter.sample, limiter.insert):
            try:
                bounded(lambda call=call: call(1, timeout=0), BOUNDED_S)
                outcome.append("ok")
                break
            except RateLimitTimeout:
                outcome.append("blocked")
            except ReplayBankError:
                outcome.append("never")
        if outcome == ["blocked", "blocked"]:
            pytest.fail(f"{limiter!r} deadlocks at inserts={limiter.inserts} samples={limiter.samples}")
        if "ok" not in outcome:
            event("calls: can never fit (raised at once)")
            break
    before = limiter.state_dict()
    for state in states:
        try:
            limiter.load_state_dict(state)
            event("state: accepted")
            before = limiter.state_dict()
        except ReplayBankError as err:
            event(f"state: {type(err).__name__}")
            assert limiter.state_dict() == before, "a refused state changed the counts"
