"""Every controller keeps the same contract.

Hypothesis draws limits (1-4 sources, floors, a maximum share), a controller of each kind, and a
run of updates with random statistics and availability masks; every mixture returned must be a
distribution over the available sources within the limits. A saved state (JSON round trip) taken
mid-run continues exactly as the uninterrupted controller; states of another configuration and
altered states are refused whole.
"""

from __future__ import annotations

import copy
import json
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from replaybank.controllers import (
    CONTROLLERS,
    ControllerError,
    MixLimits,
    SourceStats,
    constrain,
    make_controller,
)
from replaybank.errors import InvalidStateError

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "100"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
KINDS = ["fixed", "bandit", "bandit-sampled", "proxy"]


def build(kind: str, limits: MixLimits, seed: int = 0, params: dict | None = None):
    """A controller of ``kind`` over ``limits`` with parameters that fit them."""
    rng = np.random.default_rng(seed)
    if kind == "fixed":
        spare = limits.max_share - limits.floors.sum()
        return make_controller("fixed", limits, shares=(limits.floors + spare / (2 * limits.n)).tolist())
    if kind.startswith("bandit"):
        extra = {"feedback": "sampled"} if kind.endswith("sampled") else {}
        return make_controller("bandit", limits, rng=rng, **extra, **(params or {}))
    w = params["weights"] if params else [0.5, 3.0, 1.0, -1.0, 2.0, 4.0, 1.0]
    return make_controller("proxy", limits, weights=w)


def check_distribution(mix: np.ndarray, limits: MixLimits, available: np.ndarray) -> None:
    mask = np.concatenate([[True], available])
    assert mix.shape == (limits.n + 1,)
    assert np.all(np.isfinite(mix)) and np.all(mix >= 0)
    assert abs(mix.sum() - 1.0) < 1e-9
    assert np.all(mix[~mask] == 0)
    assert np.all(mix[1:][available] >= limits.floors[available] - 1e-12)
    assert mix[1:].sum() <= limits.max_share + 1e-9
    np.testing.assert_allclose(constrain(mix, limits, mask), mix, atol=1e-9)  # already inside


@st.composite
def limits_st(draw) -> MixLimits:
    n = draw(st.integers(1, 4))
    max_share = draw(st.floats(0.0, 0.95))
    total = draw(st.floats(0.0, 1.0)) * max_share
    parts = np.array(draw(st.lists(st.floats(0.0, 1.0), min_size=n, max_size=n))) + 1e-9
    return MixLimits(tuple(f"s{i}" for i in range(n)), floor=(total * parts / parts.sum() * (1 - 1e-9)).tolist(), max_share=max_share)


stat = st.one_of(st.floats(0.0, 5.0), st.sampled_from([0.0, 1.0, 1e-9, 50.0]))
trend = st.one_of(st.floats(-3.0, 3.0), st.just(0.0))


@st.composite
def run_st(draw, n: int, steps: int):
    out = []
    for _ in range(steps):
        mask = np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)))
        loss = np.array(draw(st.lists(stat, min_size=n + 1, max_size=n + 1)))
        tr = np.array(draw(st.lists(trend, min_size=n + 1, max_size=n + 1)))
        loss[1:][~mask] = np.nan  # not measured where not available
        tr[1:][~mask] = np.nan
        out.append((SourceStats(loss, tr), mask))
    return out


@pytest.mark.parametrize("kind", KINDS)
@SETTINGS
@given(data=st.data())
def test_every_mixture_is_a_distribution_over_the_available_sources_within_the_limits(kind, data):
    limits = data.draw(limits_st())
    params = None
    if kind.startswith("bandit"):
        params = {"lr": data.draw(st.floats(0.01, 50.0)), "discount": data.draw(st.floats(0.0, 1.0)),
                  "explore": data.draw(st.floats(0.0, 1.0)), "start_share": data.draw(st.floats(0.001, 0.999))}
    elif kind == "proxy":
        params = {"weights": data.draw(st.lists(st.floats(-100, 100), min_size=7, max_size=7))}
    ctl = build(kind, limits, seed=data.draw(st.integers(0, 2**32 - 1)), params=params)
    for stats, mask in data.draw(run_st(limits.n, data.draw(st.integers(1, 12)))):
        check_distribution(ctl.mixture(mask), limits, mask)
        check_distribution(ctl.update(stats, mask), limits, mask)


def _stats_run(n: int, steps: int, seed: int):
    rng = np.random.default_rng(seed)
    out = []
    for t in range(steps):
        mask = np.arange(n) < 1 + t // 3  # sources become available one by one
        loss = np.concatenate([[max(0.2, 1 - 0.1 * t)], 1 + rng.uniform(0, 0.6, n)])
        out.append((SourceStats(loss, rng.normal(0, 0.1, n + 1)), mask))
    return out


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("cut", [0, 1, 4, 7])
def test_resume_from_a_saved_state_equals_the_uninterrupted_controller(kind, cut):
    limits = MixLimits(("tools", "agenda", "dates"), floor=0.02, max_share=0.5)
    run = _stats_run(3, 10, seed=5)
    whole = build(kind, limits, seed=11)
    expected = [whole.update(s, m).tolist() for s, m in run]
    first = build(kind, limits, seed=11)
    got = [first.update(s, m).tolist() for s, m in run[:cut]]
    state = json.loads(json.dumps(first.state_dict()))
    resumed = build(kind, limits, seed=99)  # another seed: the saved RNG state must win
    resumed.load_state_dict(state)
    # before any update the loaded controller is the saved one: its state and the mixture it gives
    # (a policy that reads only the latest statistics still serves the saved ones until the next)
    twin = build(kind, limits, seed=7)
    twin.load_state_dict(state)
    assert json.loads(json.dumps(twin.state_dict())) == state
    mask = run[min(cut, len(run) - 1)][1]
    assert twin.mixture(mask).tolist() == first.mixture(mask).tolist()
    got += [resumed.update(s, m).tolist() for s, m in run[cut:]]
    assert got == expected
    assert resumed.state_dict() == whole.state_dict()


@pytest.mark.parametrize("kind", KINDS)
def test_a_state_of_another_configuration_or_sequence_is_refused_naming_the_key(kind):
    limits = MixLimits(("tools", "agenda"), floor=0.02, max_share=0.5)
    saved = build(kind, limits).state_dict()
    other_sequence = build(kind, MixLimits(("tools", "dates"), floor=0.02, max_share=0.5))
    with pytest.raises(InvalidStateError, match=r"config\['sources'\]=\['tools', 'agenda'\].*\['tools', 'dates'\].*another configuration or sequence"):
        other_sequence.load_state_dict(saved)
    with pytest.raises(InvalidStateError, match=r"config\['max_share'\]"):
        build(kind, MixLimits(("tools", "agenda"), floor=0.02, max_share=0.4)).load_state_dict(saved)
    other_kind = "proxy" if kind != "proxy" else "fixed"
    with pytest.raises(InvalidStateError, match=f"controller state is of '{saved['name']}', this controller is '{other_kind}'"):
        build(other_kind, limits).load_state_dict(saved)


BAD = {"schema_version": 2, "score": [1.0, float("nan"), 0.0], "prior": [0.0, 0.5, 0.0],
       "seen": [False, True, True], "probe": 3, "rng": {"state": 1},
       "t": -1, "loss": [1.0, -1.0, 1.0], "trend": [0.0, 0.0]}
ALTERED = [(k, key) for k in ("bandit", "bandit-sampled") for key in ("schema_version", "score", "prior", "seen", "probe", "rng", "t", "extra", "missing")]
ALTERED += [("proxy", key) for key in ("schema_version", "loss", "trend", "extra", "missing")]


@pytest.mark.parametrize(("kind", "key"), ALTERED)
def test_an_altered_state_is_refused_and_nothing_is_restored(kind, key):
    limits = MixLimits(("tools", "agenda"), floor=0.02, max_share=0.5)
    ctl = build(kind, limits, seed=3)
    for s, m in _stats_run(2, 4, seed=1):
        ctl.update(s, m)
    ctl.probe([True, True]) if kind == "bandit-sampled" else None
    before = ctl.state_dict()
    bad = copy.deepcopy(before)
    if key == "extra":
        bad["extra"] = 1
    elif key == "missing":
        bad.pop("config")
    else:
        assert key in bad
        bad[key] = BAD[key]
    with pytest.raises(InvalidStateError, match=key if key not in ("extra", "missing") else "key"):
        ctl.load_state_dict(bad)
    assert json.dumps(ctl.state_dict()) == json.dumps(before)


def test_unknown_names_and_parameters_are_refused_with_a_suggestion():
    limits = MixLimits(("a",))
    assert sorted(CONTROLLERS) == ["bandit", "fixed", "proxy"]
    with pytest.raises(ControllerError, match="unknown controller 'fixd'.*did you mean 'fixed'"):
        make_controller("fixd", limits)
    with pytest.raises(ControllerError, match="controller 'bandit' has no parameter 'discont'.*did you mean 'discount'"):
        make_controller("bandit", limits, rng=np.random.default_rng(0), discont=0.5)
    with pytest.raises(ControllerError, match="controller 'fixed' has no parameter 'lr'"):
        make_controller("fixed", limits, lr=0.5)
    with pytest.raises(ControllerError, match="needs rng="):
        make_controller("bandit", limits)
    with pytest.raises(ControllerError, match="rng=42"):
        make_controller("bandit", limits, rng=42)  # type: ignore[arg-type]
    with pytest.raises(ControllerError, match=r"bandit\(discount=1.5\)"):
        make_controller("bandit", limits, rng=np.random.default_rng(0), discount=1.5)
    with pytest.raises(ControllerError, match="feedback='some'"):
        make_controller("bandit", limits, rng=np.random.default_rng(0), feedback="some")
    with pytest.raises(ControllerError, match="7 finite numbers"):
        make_controller("proxy", limits, weights=[1.0, 2.0])
    with pytest.raises(ControllerError, match="above max_share"):
        make_controller("fixed", MixLimits(("a", "b"), max_share=0.3), shares=0.2)
    with pytest.raises(ControllerError, match="below its floor"):
        make_controller("fixed", MixLimits(("a", "b"), floor=0.1), shares=[0.2, 0.05])


@pytest.mark.parametrize("kind", KINDS)
def test_negative_or_nan_statistics_are_refused_and_change_nothing(kind):
    limits = MixLimits(("tools", "agenda"), floor=0.02, max_share=0.5)
    ctl = build(kind, limits, seed=2)
    if kind == "bandit-sampled":  # a seed whose probe is a source (the domain arm reads nothing)
        ctl = next(c for c in (build(kind, limits, seed=s) for s in range(50)) if c.probe([True, True]) > 0)
    before = json.dumps(ctl.state_dict())
    if kind == "bandit-sampled":
        arm = ctl.probe([True, True])
        bad = np.ones(3)
        bad[arm] = np.nan
    else:
        bad = np.array([1.0, np.nan, 1.0])
    with pytest.raises(ControllerError, match=r"SourceStats.loss\[\d\] = nan"):
        ctl.update(SourceStats(bad, np.zeros(3)), [True, True])
    with pytest.raises(ControllerError, match="never negative"):
        ctl.update(SourceStats(np.array([1.0, 1.0, -0.1]), np.zeros(3)), [True, True])
    assert json.dumps(ctl.state_dict()) == before
