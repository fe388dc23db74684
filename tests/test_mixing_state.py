"""A mixer / mix-plan state is checked whole before any of it is restored."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from replaybank.errors import InvalidStateError
from replaybank.hf.plan import MixError, MixPlan
from replaybank.mixing import Mixer


def _mixer() -> Mixer:
    m = Mixer([10, 3], [0.75, 0.25], 4, seed=0)
    it = iter(m)
    next(it)
    return m


@pytest.mark.parametrize(
    ("key", "value", "match"),
    [
        ("epoch", -1, "epoch"),
        ("step", -3, "step"),
        ("taken", -7, "taken"),
        ("taken", 10**9, "taken"),  # silently skipped the rest of the epoch
        ("taken", 1.5, "taken"),
        ("cursor", [1], "cursor"),  # short
        ("cursor", [0, -2], "cursor"),
        ("cursor", [0, 2**60], "cursor"),
        ("credit", [float("nan"), 0.0], "NaN"),
        ("credit", [0.5], "credit"),
        ("credit", [5.0, -5.0], "credit"),
        ("credit", [0.5, 0.1], "altered"),
        ("taken", 4, "altered"),
        ("step", 99, "past the end"),
        ("epoch", True, "epoch"),
        ("sizes", np.array([10, 3]), "sizes"),
    ],
)
def test_a_bad_mixer_position_is_refused_and_nothing_is_restored(key, value, match):
    m = _mixer()
    before = m.state_dict()
    bad = {**copy.deepcopy(before), key: value}
    with pytest.raises(InvalidStateError, match=match):
        m.load_state_dict(bad)
    assert m.state_dict() == before
    assert isinstance(InvalidStateError(""), ValueError)  # the old contract (ValueError) holds


def test_missing_and_unknown_keys_are_refused():
    m = _mixer()
    state = m.state_dict()
    with pytest.raises(InvalidStateError, match="missing key 'cursor'"):
        m.load_state_dict({k: v for k, v in state.items() if k != "cursor"})
    with pytest.raises(InvalidStateError, match="unknown key 'extra'"):
        m.load_state_dict({**state, "extra": 1})
    with pytest.raises(InvalidStateError, match="schema_version"):
        m.load_state_dict([1, 2])  # type: ignore[arg-type]


def test_a_good_state_still_resumes_exactly():
    a = Mixer([10, 3], [0.75, 0.25], 4, seed=0)
    it = iter(a)
    next(it)
    b = Mixer([10, 3], [0.75, 0.25], 4, seed=0)
    b.load_state_dict(a.state_dict())
    assert [x.index.tolist() for x in it] == [x.index.tolist() for x in b]


def _plan() -> MixPlan:
    p = MixPlan(12, 5, 0.25, batch_size=2, seed=0, world_size=2)
    it = iter(p)
    next(it)
    return p


@pytest.mark.parametrize(
    ("change", "match"),
    [
        (lambda s: s["mixer"].update(epoch=-1), "epoch"),
        (lambda s: s["mixer"].update(taken=10**9), "taken"),
        (lambda s: s["mixer"].update(cursor=[0]), "cursor"),
        (lambda s: s.update(rank_credit=[float("nan"), 0.0]), "rank_credit"),
        (lambda s: s.update(rank_credit=[0.0]), "rank_credit"),
        (lambda s: s.pop("rank_credit"), "keys"),
        (lambda s: s.pop("mixer"), "keys"),
    ],
)
def test_a_bad_plan_state_is_refused_before_the_mixer_is_touched(change, match):
    p = _plan()
    before = p.state_dict()
    bad = copy.deepcopy(before)
    bad["mixer"]["epoch"] = 3  # a good change, which must not be applied when the rest is bad
    change(bad)
    with pytest.raises(MixError, match=match):
        p.load_state_dict(bad)
    assert p.state_dict() == before
