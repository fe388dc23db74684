"""``Trajectories(priority="td")``: the compiled TD update (``samplers/_numba_episodes.py``)
against the numpy steps it replaces, draw for draw and bit for bit on the episodes' sums."""

import numpy as np
import pytest

from replaybank import ReplayBuffer, Trajectories

pytest.importorskip("numba")


def test_compiled_td_update_matches_the_numpy_steps_exactly():
    bufs = []
    for compiled in (True, False):
        sampler = Trajectories(4, priority="td", alpha=0.7, beta=0.5, eps=1e-3)
        bufs.append(ReplayBuffer(500, sampler=sampler, seed=3))
        if not compiled:
            sampler._td_fast = None
    assert bufs[0].sampler._td_fast is not None
    rng = np.random.default_rng(4)
    for step in range(80):
        n = 37  # not a multiple of the capacity: the ring wraps mid-episode
        done = rng.random(n) < 0.15
        prios = rng.lognormal(0.0, 2.0, n)
        new = rng.lognormal(0.0, 2.0, 12 * 4)
        new[rng.random(len(new)) < 0.1] = 0.0
        got = []
        for buf in bufs:
            buf.extend({"done": done, "x": np.arange(n) + 100 * step}, priorities=prios)
            b = buf.sample(12)
            ids = b.ids.reshape(-1)
            ids = np.concatenate([ids, ids[:5]])  # repeated ids: the last value given wins
            buf.update_priorities(ids, np.concatenate([new, new[:5][::-1] * 3]))
            got.append(b)
        np.testing.assert_array_equal(got[0].ids, got[1].ids)
        np.testing.assert_array_equal(got[0].weights, got[1].weights)
    fast, slow = (buf.sampler for buf in bufs)
    for name in ("step_value", "ep_value", "ep_stored"):
        np.testing.assert_array_equal(getattr(fast, name), getattr(slow, name))
    np.testing.assert_array_equal(fast.tree.leaves, slow.tree.leaves)
    assert fast.max_priority == slow.max_priority


def test_compiled_td_update_of_nothing_and_of_evicted_ids():
    sampler = Trajectories(2, priority="td", alpha=1.0, eps=0.0)
    buf = ReplayBuffer(10, sampler=sampler, seed=0)
    ids = buf.extend({"done": np.arange(12) % 3 == 2}, priorities=np.ones(12))  # 2 evicted
    before = sampler.ep_value.copy()
    buf.update_priorities(ids[:0], np.zeros(0))
    np.testing.assert_array_equal(sampler.ep_value, before)
    buf.update_priorities(ids, np.full(12, 2.0))  # evicted ids are ignored, as before
    assert sampler.max_priority == 2.0
    np.testing.assert_allclose(sampler.ep_value.sum(), 2.0 * 10)


def test_the_sampled_2d_ids_take_one_priority_per_step_and_a_row_count_is_refused():
    """The batch's own (read-only, remembered) ids are (trajectories, length): the update takes one
    priority per step (flat, in the ids' order), as for any other ids; one per trajectory is an error
    that names the count, and nothing changes (a fuzz case once sent 2-D slots to the compiled pass)."""
    from replaybank.errors import ReplayBankError

    bufs = []
    for compiled in (True, False):
        buf = ReplayBuffer(64, sampler=Trajectories(2, priority="td", alpha=0.6), seed=1)
        if not compiled:
            buf.sampler._td_fast = None
        buf.extend({"done": np.array([0, 1, 0, 1, 0, 1], bool), "x": np.arange(6)})
        bufs.append(buf)
    for buf in bufs:
        b = buf.sample(3)
        assert b.ids.shape == (3, 2)
        before = buf.sampler.step_value.copy()
        with pytest.raises(ReplayBankError, match="6"):
            buf.update_priorities(b.ids, np.ones(3))
        np.testing.assert_array_equal(buf.sampler.step_value, before)
        assert buf.update_priorities(b.ids, np.arange(1.0, 7.0)) == 6
    fast, slow = (buf.sampler for buf in bufs)
    np.testing.assert_array_equal(fast.step_value, slow.step_value)
    np.testing.assert_array_equal(fast.tree.leaves, slow.tree.leaves)
