"""``update_priorities`` of the last weighted batch's ids through the one-pass check and set
(``Prioritized.update_checked``, ``NumbaPairTree.update_checked``, ``_numba_checks.shifted``)
against the general path: the same leaves bit for bit, the same later draws, the same errors, and
nothing changed when it refuses."""

from __future__ import annotations

import numpy as np
import pytest

from replaybank import Prioritized, PrioritizedReshuffled, ReplayBuffer
from replaybank.errors import InvalidArgumentError, InvalidTypeError
from replaybank.samplers._numba_checks import shifted, within


def _pair(seed: int = 0, capacity: int = 500, alpha: float = 0.6) -> list[ReplayBuffer]:
    bufs = []
    for _ in range(2):
        buf = ReplayBuffer(capacity, sampler=Prioritized(alpha=alpha, beta=0.4), seed=seed)
        for i in range(300):  # the per-step path: items wait in the sampler until a read
            buf.add(obs=np.full(3, i, np.float32), reward=float(i))
        bufs.append(buf)
    return bufs


@pytest.mark.parametrize("alpha", [0.6, 0.5, 1.0, 2.0, 0.0])  # 0.5 and 2 are numpy's sqrt / square
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_one_pass_update_sets_the_general_paths_leaves_and_draws(alpha, dtype):
    fast, general = _pair(alpha=alpha)
    rng = np.random.default_rng(1)
    for step in range(40):
        a, b = fast.sample(64), general.sample(64)
        np.testing.assert_array_equal(a.ids, b.ids)
        np.testing.assert_array_equal(a.weights, b.weights)
        p = (rng.random(64) * 10.0 ** rng.integers(-3, 3)).astype(dtype)
        assert fast.update_priorities(a.ids, p) == 64  # the remembered ids: the one-pass path
        assert general.update_priorities(b.ids.copy(), p) == 64  # a copy: ids checked, as before
        np.testing.assert_array_equal(fast.sampler.trees.leaves, general.sampler.trees.leaves)
        assert fast.sampler.max_priority == general.sampler.max_priority
        if step % 7 == 0:
            fast.add(obs=np.zeros(3, np.float32), reward=1.0)
            general.add(obs=np.zeros(3, np.float32), reward=1.0)
    np.testing.assert_array_equal(fast.sampler.trees.tree, general.sampler.trees.tree)


def test_the_one_pass_path_is_taken(monkeypatch):
    buf, _ = _pair()
    batch = buf.sample(8)
    calls = []
    checked = buf.sampler.update_checked
    monkeypatch.setattr(buf, "_update_checked", lambda s, p: calls.append(1) or checked(s, p))
    buf.update_priorities(batch.ids, np.ones(8, np.float32))
    assert calls == [1]
    assert buf.sampler.update_checked(np.arange(3), np.ones(3))  # a direct call works too


@pytest.mark.parametrize(
    "bad, error, message",
    [
        (np.nan, InvalidArgumentError, "finite and >= 0"),
        (-1.0, InvalidArgumentError, "finite and >= 0"),
        (np.inf, InvalidArgumentError, "finite and >= 0"),
        (1e308, InvalidArgumentError, "above"),
    ],
)
def test_a_bad_value_is_named_and_nothing_changes(bad, error, message):
    buf, _ = _pair(alpha=1.0)
    batch = buf.sample(16)
    before, top = buf.sampler.trees.tree.copy(), buf.sampler.max_priority
    p = np.ones(16)
    p[0] = 1e3  # would raise max_priority, if anything were applied
    p[9] = bad
    with pytest.raises(error, match=rf"priorities\[9\].*{message}"):
        buf.update_priorities(batch.ids, p)
    np.testing.assert_array_equal(buf.sampler.trees.tree, before)
    assert buf.sampler.max_priority == top


@pytest.mark.parametrize(
    "priorities, error",
    [
        (np.ones(15), InvalidArgumentError),  # one short
        (np.ones((16, 1)), InvalidArgumentError),  # 2-D: the general path decides, as before
        (np.ones(16, bool), InvalidTypeError),
        (np.ones(16, complex), InvalidTypeError),
        (["a"] * 16, InvalidTypeError),
    ],
)
def test_other_priorities_meet_the_general_checks(priorities, error):
    buf, _ = _pair()
    batch = buf.sample(16)
    before = buf.sampler.trees.tree.copy()
    assert buf.sampler.update_checked(buf._table.recall(batch.ids), priorities) is False
    with pytest.raises(error):
        buf.update_priorities(batch.ids, priorities)
    np.testing.assert_array_equal(buf.sampler.trees.tree, before)


def test_lists_ints_and_float16_still_go_the_general_way():
    fast, general = _pair()
    for p in ([2.0] * 16, np.full(16, 3), np.full(16, 1.5, np.float16)):
        a, b = fast.sample(16), general.sample(16)
        assert fast.update_priorities(a.ids, p) == general.update_priorities(b.ids.copy(), p) == 16
        np.testing.assert_array_equal(fast.sampler.trees.leaves, general.sampler.trees.leaves)


def test_subclasses_and_the_numpy_fallback_take_the_general_path(monkeypatch):
    rrm = ReplayBuffer(100, sampler=PrioritizedReshuffled(), seed=0)
    rrm.extend({"x": np.arange(100)})
    assert rrm.sampler.update_checked(np.arange(3), np.ones(3)) is False
    batch = rrm.sample(8)
    assert rrm.update_priorities(batch.ids, np.ones(8)) == 8
    monkeypatch.setenv("REPLAYBANK_KERNELS", "numpy")
    buf = ReplayBuffer(100, sampler=Prioritized(), seed=0)
    buf.extend({"x": np.arange(100)})
    assert buf.sampler.update_checked(np.arange(3), np.ones(3)) is False
    batch = buf.sample(8)
    assert buf.update_priorities(batch.ids, np.full(8, 2.0)) == 8
    assert buf.sampler.max_priority == 2.0


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_shifted_answers_as_within_and_adds_as_numpy(dtype):
    rng = np.random.default_rng(0)
    for values in (rng.random(50) * 7, np.array([0.0, 5.0]), np.array([np.nan]), np.array([-0.0, -1e-30]),
                   np.array([np.nextafter(5.0, 9.0)]), np.array([1.0, np.inf]), np.zeros(0)):
        v = values.astype(dtype)
        ok, out, top = shifted(v, 5.0, 1e-6)
        assert ok == within(v.astype(np.float64), 5.0)
        if ok and len(v):
            np.testing.assert_array_equal(out, v.astype(np.float64) + 1e-6)
            assert top == float(v.max())
