"""RolloutBuffer refuses non-finite rewards, float or negative ids, and bad state whole."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from replaybank.errors import InvalidStateError, ReplayBankError
from replaybank.rl.rollouts import RolloutBuffer

TOKENS = [np.array([1, 2]), np.array([3])]
LOGPROBS = [np.array([-0.1, -0.2]), np.array([-0.5])]


def _buf() -> RolloutBuffer:
    buf = RolloutBuffer(64, max_staleness=2, max_reuse=2, seed=0)
    buf.add_group(7, TOKENS, [1.0, 0.0], LOGPROBS, version=0)
    buf.add_group(8, TOKENS, [0.0, 1.0], LOGPROBS, version=0)
    return buf


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"rewards": [float("nan"), 0.0]}, "rewards holds nan"),
        ({"rewards": [float("inf"), 0.0]}, "rewards holds inf"),
        ({"rewards": [1e300, 0.0]}, "finite \\(float32\\)"),
        ({"tokens": [np.array([0.7, 2.9]), np.array([3])]}, "float token ids are refused"),
        ({"tokens": [[0.7, 2.9], [3]]}, "float token ids are refused"),
        ({"tokens": [np.array([-1, 2]), np.array([3])]}, "tokens of rollout 0 holds values outside"),
        ({"version": -1}, "version"),
        ({"version": float("nan")}, "version"),
        ({"version": 1.0}, "version"),
        ({"prompt_id": 2**70}, "prompt_id"),
        ({"prompt_id": -3}, "prompt_id"),
        ({"advantages": [float("nan"), 0.0]}, "advantages"),
        ({"logprobs": [np.array([-0.1, float("nan")]), np.array([-0.5])]}, "log-probs of rollout 0"),
        ({"tokens": 5}, "tokens must be a sequence"),
        ({"logprobs": [np.array([-0.1, 0.5]), np.array([-0.5])]},
         r"log-probs of rollout 0 holds 0.5 at token 1: a log-probability is <= 0 \(up to 1e-06 of float error\)"),
        ({"logprobs": [np.array([-0.1, -0.2]), np.array([2e-6])]}, "log-probs of rollout 1 holds"),
    ],
)
def test_add_group_refuses_bad_values_and_stores_nothing(kw, match):
    buf = _buf()
    before = (len(buf), buf.next_group, len(buf.buffer))
    args = {"prompt_id": 9, "tokens": TOKENS, "rewards": [1.0, 0.0], "logprobs": LOGPROBS, "version": 0, **kw}
    with pytest.raises(ReplayBankError, match=match):
        buf.add_group(**args)
    assert (len(buf), buf.next_group, len(buf.buffer)) == before


def test_log_probs_at_zero_or_within_float_error_above_it_are_taken():
    buf = _buf()
    before = len(buf)
    buf.add_group(9, TOKENS, [1.0, 0.0], [np.array([0.0, 1e-7], np.float32), np.array([-0.0])], version=0)
    assert len(buf) == before + 2


@pytest.mark.parametrize("version", [1.7, True, -1, "2", float("nan"), 2**70])
def test_set_policy_version_refuses_non_integers(version):
    buf = _buf()
    with pytest.raises(ReplayBankError, match="version"):
        buf.set_policy_version(version)
    assert buf.policy_version == 0


def _tampered(change):
    buf = _buf()
    state = copy.deepcopy(buf.state_dict())
    change(state)
    return buf, state


@pytest.mark.parametrize(
    ("change", "match"),
    [
        (lambda s: s["groups"]["0"].update(uses=-100), "uses"),  # was served 50+ times at max_reuse=2
        (lambda s: s["groups"]["0"].update(uses=2), "uses"),
        (lambda s: s["groups"]["0"].update(version=float("nan")), "version"),
        (lambda s: s["groups"]["0"].update(version=5), "version"),
        (lambda s: s.update(policy_version=float("nan")), "policy_version"),
        (lambda s: s.update(policy_version=9), "stale"),
        (lambda s: s.pop("evicted"), "missing key 'evicted'"),
        (lambda s: s["evicted"].pop("stale"), "missing key 'stale'"),
        (lambda s: s["evicted"].update(stale=-1), "stale"),
        (lambda s: s.update(next_group=1), "never issued"),
        (lambda s: s["groups"].update({"x": s["groups"]["0"]}), "group id"),
        (lambda s: s["groups"]["1"].update(ids=s["groups"]["0"]["ids"]), "in no other group"),
        (lambda s: s["groups"]["0"].update(ids=np.array([0, 99])), "not all stored"),
        (lambda s: s["groups"]["0"].update(ids=np.array([0.0, 1.0])), "integers"),
        (lambda s: s["groups"]["0"].update(ids=s["groups"]["1"]["ids"]) or s["groups"].pop("1"), "another group"),
        (lambda s: s.update(rng={"bit_generator": "MT19937"}), "rng"),
        (lambda s: s["buffer"].update(next_id=-5), "buffer"),
        (lambda s: s.update(extra=1), "unknown key 'extra'"),
        (lambda s: s["buffer"]["columns"]["prompt_id"].fill(2**62 + 1), "stored prompt_id is outside"),
        (lambda s: s["buffer"]["columns"]["reward"].fill(np.nan), "stored reward is NaN"),
        (lambda s: s["buffer"]["columns"]["logprobs"].values.fill(0.5), "stored log-prob is 0.5, above 0"),
        (lambda s: s["buffer"]["columns"]["tokens"].values.fill(-4), "stored tokens is outside"),
        (lambda s: s["buffer"]["columns"]["version"].fill(-5), "another group or version"),
    ],
)
def test_a_bad_state_is_refused_before_anything_is_restored(change, match):
    buf, bad = _tampered(change)
    target = RolloutBuffer(64, max_staleness=2, max_reuse=2, seed=1)
    target.add_group(3, TOKENS, [1.0, 0.0], LOGPROBS, version=0)
    before, stored = copy.deepcopy(target.state_dict()), len(target.buffer)
    with pytest.raises(InvalidStateError, match=match):
        target.load_state_dict(bad)
    after = target.state_dict()
    assert after["rng"] == before["rng"] and after["evicted"] == before["evicted"]
    assert after["next_group"] == before["next_group"] and list(after["groups"]) == list(before["groups"])
    assert len(target.buffer) == stored and target.policy_version == before["policy_version"]
    target.sample(2)  # still serves its own group


def test_a_good_state_still_loads():
    buf = _buf()
    other = RolloutBuffer(64, max_staleness=2, max_reuse=2, seed=5)
    other.load_state_dict(copy.deepcopy(buf.state_dict()))
    assert other.sample(4).ids.tolist() == buf.sample(4).ids.tolist()
