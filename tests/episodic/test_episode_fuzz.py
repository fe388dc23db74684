"""Hypothesis fuzz of the episodic store's records.

Episodes with random fields (mostly valid, often not: NaN, bools, strings for numbers, lone
surrogates, huge integers, numpy scalars) go through ``add``: each is either recorded, and then
reads back equal and passes ``verify()``, or refused with a ``ReplayBankError`` leaving the store as
it was. Random JSON (and non-JSON) then replaces a stored body: reading it gives the episode or a
``CorruptStoreError`` naming its id, and ``verify()`` reports it whenever a read fails. Any other
exception, or a call past its bound, fails the test. ``FUZZ_EXAMPLES`` raises the example count
(the suite uses 80 per test).
"""

from __future__ import annotations

import json
import math
import os
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from replaybank.episodic import CorruptStoreError, Episode, EpisodeStore, Step, Task, Verdict
from replaybank.errors import ReplayBankError

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "80"))
BOUNDED_S = 5.0
SETTINGS = settings(max_examples=EXAMPLES, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

junk = st.sampled_from([math.nan, math.inf, -1, -(2**70), 2**64, 1.5, True, None, "x", "\ud800", (), {}, b"1",
                        np.int64(3), np.float32(0.5), np.bool_(True)])


def often(good):
    return st.integers(0, 29).flatmap(lambda i: junk if i == 0 else good)


text = often(st.text(max_size=8))
small = often(st.integers(0, 20))


@st.composite
def episodes(draw):
    task = Task(draw(text), draw(text), draw(text), draw(small), draw(often(st.tuples(st.text(max_size=4)))))
    steps = draw(often(st.lists(st.builds(Step, text, text, often(st.none() | st.text(max_size=4))),
                                min_size=1, max_size=3).map(tuple)))
    verdict = Verdict(draw(often(st.booleans())), draw(often(st.floats(0, 1))),
                      draw(often(st.dictionaries(st.text(max_size=3), st.floats(0, 1), max_size=2))), draw(text))
    context = draw(often(st.lists(st.dictionaries(st.sampled_from(["role", "content"]), st.text(max_size=4)),
                                  max_size=2).map(tuple)))
    return Episode(task, steps, verdict, generation=draw(small), adapter=draw(text),
                   seed=draw(often(st.none() | st.integers(-(2**63), 2**63 - 1))), context=context,
                   replayed=draw(often(st.lists(st.integers(0, 100), max_size=3).map(tuple))),
                   source=draw(often(st.sampled_from(["agent", "demo"]))),
                   started_at=draw(often(st.floats(0, 2e9))), finished_at=draw(often(st.floats(0, 2e9))))


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    with EpisodeStore(tmp_path_factory.mktemp("fuzz") / "ep.db") as s:
        yield s


@SETTINGS
@given(ep=episodes())
def test_add_records_or_refuses_and_reads_back(store, ep, bounded):
    before = (len(store), store.attempt_count())
    try:
        eid = bounded(lambda: store.add(ep), BOUNDED_S)
    except ReplayBankError as err:
        event(f"add: {type(err).__name__}")
        assert (len(store), store.attempt_count()) == before, "a refused episode changed the store"
        return
    event("add: recorded")
    got = bounded(lambda: store.get(eid), BOUNDED_S).episode
    assert got.fingerprint == ep.fingerprint
    assert got == Episode.from_dict(got.to_dict())
    bounded(store.verify, BOUNDED_S)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=6),
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=6), kids, max_size=3),
    max_leaves=12,
)


@st.composite
def bodies(draw):
    good = Episode(Task("t", "x"), (Step("x", "4"),), Verdict(True, 1.0)).to_dict()
    kind = draw(st.sampled_from(["value", "field", "raw", "deep"]))
    if kind == "value":
        return json.dumps(draw(json_values))
    if kind == "field":  # one field of a good body replaced (maybe a nested one)
        part = draw(st.sampled_from(["task", "verdict", "top", "step"]))
        target = {"task": good["task"], "verdict": good["verdict"], "top": good, "step": good["steps"][0]}[part]
        key = draw(st.sampled_from(sorted(target)))
        if draw(st.booleans()):
            del target[key]
        else:
            target[key] = draw(json_values)
        return json.dumps(good)
    if kind == "deep":
        n = draw(st.integers(1, 300_000))
        return "[" * n + "]" * n
    return draw(st.text(max_size=20) | st.sampled_from(["1e999", "NaN", "-Infinity", '{"task": 1e999}']))


@SETTINGS
@given(body=bodies())
def test_a_tampered_body_reads_back_or_is_a_corrupt_store_error(store, body, bounded):
    eid = store.add(Episode(Task("victim", "x"), (Step("x", str(time.monotonic_ns())),), Verdict(True, 1.0)))
    store._conn.execute("UPDATE episodes SET body = ? WHERE id = ?", (body, eid))
    try:
        bounded(lambda: store.get(eid), BOUNDED_S)
        event("read: accepted")
        read_failed = False
    except CorruptStoreError as err:
        assert f"episode {eid}" in str(err)
        event("read: CorruptStoreError")
        read_failed = True
    try:
        bounded(store.verify, BOUNDED_S)
        assert not read_failed, "verify() passed a body that get() refused"
        event("verify: passed")
    except CorruptStoreError as err:
        event("verify: CorruptStoreError")
        assert f"episode {eid}" in str(err)
    store._conn.execute("DELETE FROM episodes WHERE id = ?", (eid,))
