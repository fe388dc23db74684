"""``Mixer.set_shares`` changes the quotas between batches, exactly, and resumes exactly."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest

from replaybank.errors import InvalidArgumentError, InvalidStateError
from replaybank.mixing import Mixer

SIZES, BATCH = [40, 7, 5], 8
# shares in effect from the given batch on (a steering schedule)
SCHEDULE = {0: [0.9, 0.1, 0.0], 3: [0.55, 0.3, 0.15], 7: [0.7, 0.05, 0.25], 11: [0.625, 0.25, 0.125]}


def _run(mixer: Mixer, batches: int, start: int = 0) -> list[tuple[list[int], list[int]]]:
    """``batches`` batches from batch number ``start`` on, steering by ``SCHEDULE``; epochs run on."""
    out = []
    it = iter(mixer)
    for b in range(start, start + batches):
        if b in SCHEDULE and b > 0:
            mixer.set_shares(SCHEDULE[b])
        try:
            mb = next(it)
        except StopIteration:
            it = iter(mixer)
            mb = next(it)
        out.append((mb.source.tolist(), mb.index.tolist()))
    return out


def _shares_at(b: int) -> np.ndarray:
    return np.asarray(SCHEDULE[max(k for k in SCHEDULE if k <= b)])


@pytest.mark.parametrize("carry_credit", [False, True])
def test_every_batch_holds_the_quota_of_the_shares_in_effect(carry_credit):
    m = Mixer(SIZES, SCHEDULE[0], BATCH, seed=1, drop_last=True, carry_credit=carry_credit)
    batches = _run(m, 30)
    for b, (source, _) in enumerate(batches):
        count = np.bincount(source, minlength=3)
        exact = BATCH * _shares_at(b)
        # floor or ceil of batch_size * share, for every source, in every batch
        assert np.all(count >= np.floor(exact + 1e-9)) and np.all(count <= np.ceil(exact - 1e-9)), (b, count, exact)
    # each stretch of constant shares inside epoch 0 is within one row of its share per source
    for lo, hi in ((0, 3), (3, 7)):
        rows = np.sum([np.bincount(s, minlength=3) for s, _ in batches[lo:hi]], axis=0)
        assert np.all(np.abs(rows - (hi - lo) * BATCH * _shares_at(lo)) < 1.0), (lo, rows)
    # a source at share 0 never wins a leftover row
    assert all(2 not in s for s, _ in batches[:3])


def test_equal_shares_change_nothing_so_a_fixed_controller_keeps_todays_batches():
    plain = Mixer(SIZES, [0.55, 0.3, 0.15], BATCH, seed=4)
    steered = Mixer(SIZES, [0.55, 0.3, 0.15], BATCH, seed=4)
    a = [(b.source.tolist(), b.index.tolist()) for b in plain.epoch(0)]
    out = []
    it = steered.epoch(0)
    for _ in range(len(a)):
        steered.set_shares([0.55, 0.3, 0.15])
        b = next(it)
        out.append((b.source.tolist(), b.index.tolist()))
    assert out == a and next(it, None) is None  # the epoch ends where it did
    assert "segment" not in steered.state_dict() and steered.state_dict() == plain.state_dict()


@pytest.mark.parametrize("carry_credit", [False, True])
@pytest.mark.parametrize("cut", [1, 3, 5, 8, 12, 17])
def test_resume_from_a_steered_state_equals_an_uninterrupted_run(carry_credit, cut):
    kw = {"seed": 7, "drop_last": True, "carry_credit": carry_credit}
    whole = _run(Mixer(SIZES, SCHEDULE[0], BATCH, **kw), 24)
    first = Mixer(SIZES, SCHEDULE[0], BATCH, **kw)
    head = _run(first, cut)
    state = json.loads(json.dumps(first.state_dict()))
    resumed = Mixer(SIZES, SCHEDULE[0], BATCH, **kw)
    resumed.load_state_dict(state)
    assert head + _run(resumed, 24 - cut, start=cut) == whole


def test_a_state_of_todays_format_still_loads():
    # written by the mixer before set_shares existed (main at 64b6abe), and its next two batches
    old = {"epoch_credit": [0.0, 0.0, 0.0], "schema_version": 1, "seed": 3, "sizes": [10, 3, 5],
           "shares": [0.6, 0.25, 0.15], "batch_size": 4, "epoch": 0, "step": 2, "taken": 5,
           "cursor": [0, 2, 1], "credit": [-0.20000000000000018, 0.0, 0.19999999999999996]}
    m = Mixer([10, 3, 5], [0.6, 0.25, 0.15], 4, seed=3, carry_credit=True)
    m.load_state_dict(old)
    it = iter(m)
    got = [(b.source.tolist(), b.index.tolist()) for b in (next(it), next(it))]
    assert got == [([0, 0, 1, 2], [4, 7, 1, 3]), ([0, 0, 0, 1], [5, 3, 8, 1])]
    with pytest.raises(InvalidStateError, match="shares"):  # unsteered: still the constructor's shares
        Mixer([10, 3, 5], [0.5, 0.25, 0.25], 4, seed=3, carry_credit=True).load_state_dict(old)


def _steered() -> Mixer:
    m = Mixer(SIZES, SCHEDULE[0], BATCH, seed=2)
    _run(m, 9)
    return m


@pytest.mark.parametrize(
    ("path", "value", "match"),
    [
        (("segment", "step"), 99, "step"),  # after the position
        (("segment", "taken"), -1, "taken"),
        (("segment", "credit"), [0.5, 0.0, 0.0], "sums to 0"),
        (("segment", "credit"), [0.0, 0.0], "credit"),
        (("segment", "extra"), 1, "unknown key 'extra'"),
        (("shares",), [0.5, 0.0, 0.5], "altered"),  # other shares than the position was reached with
        (("shares",), [0.0, 0.5, 0.5], "epoch source"),
        (("shares",), [float("nan"), 0.5, 0.5], "NaN"),
    ],
)
def test_an_altered_steered_state_is_refused_whole(path, value, match):
    m = _steered()
    before = m.state_dict()
    bad = copy.deepcopy(before)
    target = bad
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    with pytest.raises(InvalidStateError, match=match):
        m.load_state_dict(bad)
    assert m.state_dict() == before


def test_a_steered_share_for_an_empty_source_is_refused_by_the_state_check_too():
    m = Mixer([40, 7, 0], [0.9, 0.1, 0.0], BATCH, seed=0)
    it = iter(m)
    m.set_shares([0.8, 0.2, 0.0])
    next(it)
    state = m.state_dict()
    state["shares"] = [0.8, 0.1, 0.1]
    with pytest.raises(InvalidStateError, match="source 2 has share 0.1 but no rows"):
        Mixer([40, 7, 0], [0.9, 0.1, 0.0], BATCH, seed=0).load_state_dict(state)


@pytest.mark.parametrize(
    ("shares", "match"),
    [
        ([0.5, 0.5], "2 shares for 3 sources"),
        ([0.0, 1.0, 0.0], "epoch source 0 has share 0"),
        ([0.5, float("nan"), 0.5], "finite"),
        ([0.5, -0.1, 0.6], "finite and >= 0"),
        ([0.8, 0.1, 0.1], "source 2 has share 0.1 but no rows"),
    ],
)
def test_bad_steering_is_refused_and_changes_nothing(shares, match):
    m = Mixer([40, 7, 0], [0.9, 0.1, 0.0], BATCH, seed=0)
    it = iter(m)
    next(it)
    before = m.state_dict()
    with pytest.raises(InvalidArgumentError, match=match):
        m.set_shares(shares)
    assert m.state_dict() == before
    assert next(it).rows_of(1).size in (0, 1)  # still 0.9 / 0.1


def test_a_source_whose_share_fell_to_zero_gets_no_leftover_row():
    # after one batch at 9.5 / 0.5 the carried credit favours source 1; were it kept, source 1
    # would win the next leftover row although its share is now 0
    m = Mixer([40, 7, 5], [0.95, 0.05, 0.0], 10, seed=0)
    it = iter(m)
    assert np.bincount(next(it).source, minlength=3).tolist() == [10, 0, 0]
    m.set_shares([0.95, 0.0, 0.05])
    counts = [np.bincount(next(it).source, minlength=3).tolist() for _ in range(3)]
    assert all(c[1] == 0 for c in counts) and sum(c[2] for c in counts) in (1, 2), counts
