"""Quota rounding and the quota mixer (pure numpy)."""

from __future__ import annotations

import numpy as np
import pytest

from replaybank.mixing import Mixer, batch_quotas, largest_remainder, next_quota


def test_exact_quota_every_batch():
    q = batch_quotas(10, [0.9, 0.1], num_batches=50)
    assert (q == [9, 1]).all()


def test_single_batch_largest_remainder():
    assert batch_quotas(10, [0.85, 0.15]).tolist() == [9, 1]
    assert batch_quotas(7, [1, 1, 1]).tolist() == [3, 2, 2]
    assert largest_remainder(7, [0.5, 0.5]).tolist() == [4, 3]


@pytest.mark.parametrize("batch_size,shares", [(10, [0.85, 0.15]), (8, [0.1, 0.2, 0.7]), (3, [1 / 3] * 3), (16, [0.93, 0.07]), (5, [0.05, 0.95])])
def test_leftovers_rotate_and_converge(batch_size, shares):
    n = 400
    q = batch_quotas(batch_size, shares, num_batches=n)
    assert (q.sum(axis=1) == batch_size).all()
    exact = np.asarray(shares) / np.sum(shares) * batch_size
    # Every batch is floor or ceil of the exact quota ...
    assert (q >= np.floor(exact + 1e-9)).all() and (q <= np.ceil(exact - 1e-9)).all()
    # ... and the running totals never drift by a full row from the exact share.
    drift = np.abs(np.cumsum(q, axis=0) - np.outer(np.arange(1, n + 1), exact))
    assert drift.max() < 1.0 + 1e-9


def test_leftover_not_always_first_source():
    q = batch_quotas(10, [0.85, 0.15], num_batches=4)
    assert q[:, 1].tolist() == [1, 2, 1, 2]


def test_quota_validation():
    with pytest.raises(ValueError, match="shares"):
        batch_quotas(10, [0.5, -0.1])
    with pytest.raises(ValueError, match="all be zero"):
        batch_quotas(10, [0, 0])
    with pytest.raises(ValueError, match="batch_size"):
        batch_quotas(0, [1.0])
    with pytest.raises(ValueError, match="credit"):
        next_quota(4, [0.5, 0.5], np.zeros(3))


def _epoch_rows(m: Mixer, epoch: int) -> list:
    return [(b.source.copy(), b.index.copy()) for b in m.epoch(epoch)]


def test_mixer_epoch_covers_primary_once_and_cycles_small_source():
    m = Mixer([95, 3], [0.9, 0.1], batch_size=10, seed=1)
    batches = list(m.epoch(0))
    primary = np.concatenate([b.rows_of(0) for b in batches])
    assert sorted(primary.tolist()) == list(range(95))  # every domain row exactly once
    small = np.concatenate([b.rows_of(1) for b in batches])
    assert small.size >= 10  # not starved: present in every full batch
    counts = np.bincount(small, minlength=3)
    assert counts.max() - counts.min() <= 1  # cycled pass by pass, not sampled at random
    assert all(b.rows_of(1).size == 1 for b in batches[:-1])
    assert len(batches) == m.batches_per_epoch() == 11


def test_mixer_last_batch_keeps_ratio_and_never_ends_early():
    m = Mixer([25, 1000], [0.8, 0.2], batch_size=10, seed=0)
    batches = list(m.epoch(0))
    assert sum(b.rows_of(0).size for b in batches) == 25
    last = batches[-1]
    assert (last.rows_of(0).size, last.rows_of(1).size) == (1, 0)  # 1 row / 0.8 share rounds to 1
    assert [b.rows_of(1).size for b in batches[:-1]] == [2, 2, 2]


def test_mixer_drop_last():
    m = Mixer([25], [1.0], batch_size=10, seed=0, drop_last=True)
    assert [b.index.size for b in m.epoch(0)] == [10, 10]


def test_mixer_seeded_and_epochs_differ():
    a = _epoch_rows(Mixer([40, 7], [0.75, 0.25], 8, seed=3), 0)
    b = _epoch_rows(Mixer([40, 7], [0.75, 0.25], 8, seed=3), 0)
    c = _epoch_rows(Mixer([40, 7], [0.75, 0.25], 8, seed=4), 0)
    assert all((x[1] == y[1]).all() for x, y in zip(a, b, strict=True))
    assert any((x[1] != y[1]).any() for x, y in zip(a, c, strict=True))
    m = Mixer([40, 7], [0.75, 0.25], 8, seed=3)
    e0 = np.concatenate([b.rows_of(0) for b in m.epoch(0)])
    e1 = np.concatenate([b.rows_of(0) for b in m.epoch(1)])
    assert sorted(e0) == sorted(e1) and (e0 != e1).any()


def test_mixer_resume_mid_epoch_gives_same_order():
    full = Mixer([50, 6], [0.8, 0.2], batch_size=5, seed=7)
    ref = [(b.source.tolist(), b.index.tolist()) for e in range(2) for b in full.epoch(e)]
    m = Mixer([50, 6], [0.8, 0.2], batch_size=5, seed=7)
    seen = []
    for b in m.epoch(0):
        seen.append((b.source.tolist(), b.index.tolist()))
        if len(seen) == 4:
            break
    state = m.state_dict()
    fresh = Mixer([50, 6], [0.8, 0.2], batch_size=5, seed=7)
    fresh.load_state_dict(state)
    seen += [(b.source.tolist(), b.index.tolist()) for b in fresh]
    seen += [(b.source.tolist(), b.index.tolist()) for b in fresh.epoch(1)]
    assert seen == ref


def test_mixer_state_mismatch_rejected():
    state = Mixer([10, 2], [0.5, 0.5], 4, seed=0).state_dict()
    with pytest.raises(ValueError, match="seed"):
        Mixer([10, 2], [0.5, 0.5], 4, seed=1).load_state_dict(state)
    with pytest.raises(ValueError, match="schema_version"):
        Mixer([10, 2], [0.5, 0.5], 4, seed=0).load_state_dict({**state, "schema_version": 99})


def test_mixer_validation():
    with pytest.raises(ValueError, match="no rows"):
        Mixer([10, 0], [0.9, 0.1], 10)
    with pytest.raises(ValueError, match="differ in length"):
        Mixer([10], [0.9, 0.1], 10)
    with pytest.raises(ValueError, match="share 0"):
        Mixer([10, 5], [0.0, 1.0], 10)


def test_mixer_long_run_share_is_exact():
    m = Mixer([1000, 13], [0.93, 0.07], batch_size=16, seed=0, drop_last=True)
    batches = list(m.epoch(0))
    got = sum(b.rows_of(1).size for b in batches) / sum(b.index.size for b in batches)
    assert abs(got - 0.07) < 1 / (16 * len(batches)) + 1e-9


def test_doctests():
    import doctest

    import replaybank.mixing
    import replaybank.quotas

    for module in (replaybank.mixing, replaybank.quotas):
        assert doctest.testmod(module).failed == 0, module.__name__
