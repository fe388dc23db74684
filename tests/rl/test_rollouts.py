from __future__ import annotations

import copy
import math

import numpy as np
import pytest

from replaybank.errors import EmptyBufferError, ReplayBankError
from replaybank.rl.rollouts import RolloutBuffer, group_advantages, importance_ratio


def _add(buf: RolloutBuffer, rng: np.random.Generator, version: int, size: int = 4, prompt: int = 0) -> int:
    tokens = [rng.integers(0, 50, size=rng.integers(1, 6)) for _ in range(size)]
    logprobs = [-rng.random(len(t)) for t in tokens]
    return buf.add_group(prompt, tokens, rng.random(size), logprobs, version=version)


def test_staleness_eviction_is_exact() -> None:
    rng = np.random.default_rng(0)
    buf = RolloutBuffer(1000, max_staleness=2, max_reuse=1000, seed=0)
    for v in range(6):
        buf.set_policy_version(v)
        for _ in range(3):
            _add(buf, rng, version=v)
        # right after each advance: exactly the versions v-2..v are live, nothing older
        live = {g.version for g in buf.groups.values()}
        assert live == set(range(max(0, v - 2), v + 1))
    # 3 groups of 4 per version; versions 0,1,2 are now stale at version 5
    assert buf.evicted["stale"] == 3 * 3 * 4
    assert len(buf) == 3 * 3 * 4
    assert buf.buffer.contains(buf.live_ids).all()  # every live rollout is still stored
    # advancing by one evicts exactly version 3 (age 3 > 2) and keeps version 4 (age 2 == bound)
    assert buf.set_policy_version(6) == {"stale": 12}
    assert {g.version for g in buf.groups.values()} == {4, 5}
    for _ in range(50):
        batch = buf.sample(8)
        assert batch.staleness.max() <= 2
        assert (batch.version >= 4).all()


def test_stale_on_arrival_and_future_versions() -> None:
    rng = np.random.default_rng(1)
    buf = RolloutBuffer(100, max_staleness=0, seed=0)
    buf.set_policy_version(3)
    _add(buf, rng, version=2)  # age 1 > 0: never served
    assert len(buf) == 0 and buf.evicted["stale"] == 4
    with pytest.raises(ReplayBankError, match="newer than the current policy version"):
        _add(buf, rng, version=4)
    with pytest.raises(ReplayBankError, match="may not go back"):
        buf.set_policy_version(2)


def test_reuse_limit_per_rollout() -> None:
    rng = np.random.default_rng(2)
    buf = RolloutBuffer(1000, max_staleness=10, max_reuse=3, seed=0)
    for _ in range(10):
        _add(buf, rng, version=0)
    served: dict[int, int] = {}
    for _ in range(10):
        for i in buf.sample(8).ids.tolist():
            served[i] = served.get(i, 0) + 1
    assert max(served.values()) <= 3
    assert len(buf) == 40 - buf.evicted["reuse"]
    with pytest.raises((ReplayBankError, EmptyBufferError)):
        for _ in range(100):
            buf.sample(8)


def test_groups_are_never_split() -> None:
    rng = np.random.default_rng(3)
    # a small capacity makes FIFO overwrite reach live groups: they must go whole
    buf = RolloutBuffer(40, max_staleness=3, max_reuse=2, min_fresh=0.25, seed=0)
    members: dict[int, set[int]] = {}
    for v in range(40):
        buf.set_policy_version(v)
        for _ in range(3):
            gid = _add(buf, rng, version=v, size=4, prompt=v)
            members[gid] = set(buf.groups[gid].ids.tolist())
        if v == 0:
            continue
        batch = buf.sample(16)
        assert len(batch) == 16
        for gid in np.unique(batch.group_id).tolist():
            got = set(batch.ids[batch.group_id == gid].tolist())
            assert got == members[gid], "a group was served in part"
        assert (np.unique(batch.prompt_id, return_counts=True)[1] % 4 == 0).all()
    assert buf.evicted["capacity"] > 0
    assert all(len(g.ids) == 4 for g in buf.groups.values())
    assert buf.buffer.contains(buf.live_ids).all()


def test_min_fresh_share() -> None:
    rng = np.random.default_rng(4)
    buf = RolloutBuffer(10_000, max_staleness=5, max_reuse=100, min_fresh=0.5, seed=0)
    for v in range(8):
        buf.set_policy_version(v)
        for _ in range(4):
            _add(buf, rng, version=v)
        if v >= 2:
            for _ in range(5):
                batch = buf.sample(6 * 4)  # 6 groups: at least 3 from version v
                assert (batch.version == v).sum() >= math.ceil(0.5 * 6) * 4
                assert batch.fresh_share >= 0.5
    with pytest.raises(ReplayBankError, match="min_fresh"):
        buf.sample(10 * 4)  # 5 fresh groups needed, 4 stored


def test_bad_inputs_name_the_problem() -> None:
    with pytest.raises(ReplayBankError, match="max_staleness"):
        RolloutBuffer(10, max_staleness=-1)
    with pytest.raises(ReplayBankError, match="max_reuse"):
        RolloutBuffer(10, max_staleness=0, max_reuse=0)
    with pytest.raises(ReplayBankError, match="min_fresh"):
        RolloutBuffer(10, max_staleness=0, min_fresh=1.5)
    buf = RolloutBuffer(100, max_staleness=1, seed=0)
    with pytest.raises(EmptyBufferError):
        buf.sample(4)
    _add(buf, np.random.default_rng(5), version=0, size=8)
    with pytest.raises(ReplayBankError, match="more than batch_size=4"):
        buf.sample(4)
    with pytest.raises(ReplayBankError, match="log-probs"):
        buf.add_group(0, [np.array([1, 2])], [1.0], [np.array([-0.1])], version=0)


def test_importance_ratio_and_advantages() -> None:
    cur, beh = np.log([0.5, 0.1]), np.log([0.25, 0.4])
    np.testing.assert_allclose(importance_ratio(cur, beh), [2.0, 0.25])
    np.testing.assert_allclose(importance_ratio(cur, beh, clip=1.5), [1.5, 0.25])
    torch = pytest.importorskip("torch")
    t = torch.tensor(cur, requires_grad=True)
    r = importance_ratio(t, beh)
    r.sum().backward()
    np.testing.assert_allclose(t.grad.numpy(), [2.0, 0.25])  # d exp(x - c) / dx = ratio
    adv = group_advantages([1.0, 1.0, 0.0, 0.0])
    np.testing.assert_allclose(adv, [1, 1, -1, -1], atol=1e-5)
    assert (group_advantages([0.5, 0.5]) == 0).all()


def _same_batch(x, y) -> None:
    for name in ("ids", "prompt_id", "group_id", "reward", "advantage", "version", "staleness", "uses"):
        np.testing.assert_array_equal(getattr(x, name), getattr(y, name), err_msg=name)
    for name in ("tokens", "logprobs"):
        np.testing.assert_array_equal(getattr(x, name).values, getattr(y, name).values, err_msg=name)
        np.testing.assert_array_equal(getattr(x, name).lengths, getattr(y, name).lengths, err_msg=name)
    assert x.fresh_share == y.fresh_share


def test_state_dict_resumes_exactly() -> None:
    """A buffer loaded from a state dict behaves like the original from then on: the same batches
    (groups, use counts, staleness), the same evictions by staleness, reuse and capacity, the same
    new group ids, over several versions of further use, not just the next batch."""
    rng = np.random.default_rng(6)
    a = RolloutBuffer(32, max_staleness=2, max_reuse=3, min_fresh=0.25, seed=7)
    for v in range(4):
        a.set_policy_version(v)
        for _ in range(3):
            _add(a, rng, version=v)
        a.sample(8)
    assert any(g.uses > 0 for g in a.groups.values())  # the state carries use counts to restore
    b = RolloutBuffer(32, max_staleness=2, max_reuse=3, min_fresh=0.25, seed=99)
    b.load_state_dict(copy.deepcopy(a.state_dict()))  # as if saved: nothing shared with a
    assert len(b) == len(a) and b.live_ids.tolist() == a.live_ids.tolist()
    rng_a, rng_b = np.random.default_rng(8), np.random.default_rng(8)
    for v in range(4, 9):
        for _ in range(3):
            _same_batch(a.sample(8), b.sample(8))
        assert a.set_policy_version(v) == b.set_policy_version(v)
        for _ in range(3):  # capacity 32 = 8 groups: FIFO overwrite evicts whole groups too
            assert _add(a, rng_a, version=v) == _add(b, rng_b, version=v)
        assert a.evicted == b.evicted and a.live_ids.tolist() == b.live_ids.tolist()
    assert a.evicted["stale"] > 0 and a.evicted["reuse"] > 0 and a.evicted["capacity"] > 0
    assert a.state_dict()["rng"] == b.state_dict()["rng"]
