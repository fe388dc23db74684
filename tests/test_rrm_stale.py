"""RR-M's deferred mask refresh (``LaneTree.stale``): a draw leaves the ancestors of the items it
masked stale for the priority update to refresh. Steps that skip the update, update other ids,
write between the two calls, or read the trees in between must still draw what the numpy steps
draw, and leave the same tree once flushed."""

import numpy as np
import pytest

from replaybank import PrioritizedReshuffled, ReplayBuffer

pytest.importorskip("numba")


def pair(capacity, seed):
    bufs = []
    for compiled in (True, False):
        sampler = PrioritizedReshuffled(alpha=0.7, beta=0.5, eps=0.0)
        buf = ReplayBuffer(capacity, sampler=sampler, seed=seed)
        if not compiled:
            sampler._fast = None
        bufs.append(buf)
    assert bufs[0].sampler._fast is not None and bufs[1].sampler._fast is None
    return bufs


@pytest.mark.parametrize("capacity", [300, 5000])
def test_stale_mask_paths_draw_as_the_numpy_steps(capacity):
    bufs = pair(capacity, seed=7)
    rng = np.random.default_rng(3)
    for buf in bufs:
        priorities = np.random.default_rng(1).lognormal(0, 2, capacity)
        buf.extend({"i": np.arange(capacity)}, priorities=priorities)
    stale_seen = 0
    for step in range(150):
        # 0: update the drawn ids, 1: none, 2: other ids, 3: a write first, 4: a read first
        kind = step % 5
        prios = rng.lognormal(0.0, 2.0, 64)
        prios[rng.random(64) < 0.1] = 0.0
        write = rng.lognormal(0.0, 1.0, 10)
        got = []
        for buf in bufs:
            s = buf.sampler
            b = buf.sample(64)
            if s._fast is not None:
                stale_seen += len(s._lanes.stale)
            if kind == 3:
                buf.extend({"i": np.arange(10) + 10_000 + step}, priorities=write)
            if kind == 4:
                got.append((s.mask.total, s.mask.minimum, s.mass(), s.min_mass()))
            if kind == 0:
                buf.update_priorities(b.ids, prios)
            elif kind == 2:
                stored = buf.contains(b.ids)
                buf.update_priorities(b.ids[stored][::-1][:20], prios[:20][: stored.sum()])
            got.append(b)
        if kind == 4:
            assert got[0] == got[2]
            got = [got[1], got[3]]
        np.testing.assert_array_equal(got[0].ids, got[1].ids)
        np.testing.assert_array_equal(got[0].weights, got[1].weights)
    assert stale_seen > 0  # the deferred path was taken
    fast, slow = (buf.sampler for buf in bufs)
    fast._lanes.flush()
    for name in ("count", "base", "anchor"):
        np.testing.assert_array_equal(getattr(fast, name), getattr(slow, name))
    np.testing.assert_array_equal(fast.mask.tree, slow.mask.tree)
    assert fast.accumulated == slow.accumulated


def test_union_of_refreshed_slots():
    from replaybank.samplers._numba_lanes import union

    a, b = np.array([1, 4, 9], dtype=np.int64), np.array([0, 4, 12], dtype=np.int64)
    np.testing.assert_array_equal(union(a, b), [0, 1, 4, 9, 12])
    np.testing.assert_array_equal(union(a[::-1].copy(), b), [0, 1, 4, 9, 12])
    np.testing.assert_array_equal(union(a, b[:0]), a)
