import numpy as np
import pytest
from scipy import stats

from replaybank import ReplayBankError, ReplayBuffer, Trajectories


def episodes(lengths, start=0):
    done = np.concatenate([np.eye(1, n, n - 1, dtype=bool)[0] for n in lengths])
    t = np.arange(start, start + len(done))
    return {"t": t, "done": done, "reward": np.ones(len(done), np.float32)}


def test_slices_are_uniform_over_valid_starts_and_never_cross_episodes():
    lengths = [3, 10, 1, 6, 8]
    buf = ReplayBuffer(100, sampler=Trajectories(4), seed=0)
    buf.extend(episodes(lengths))
    # valid starts: positions p with p + 4 <= episode length
    valid = []
    s = 0
    for n in lengths:
        valid += list(range(s, s + n - 3))
        s += n
    counts = dict.fromkeys(valid, 0)
    for _ in range(300):
        b = buf.sample(32)
        for row in b.data["t"]:
            assert row[0] in counts
            assert (np.diff(row) == 1).all()
            counts[row[0]] += 1
    p = stats.chisquare(list(counts.values())).pvalue
    assert p > 1e-3, p


def test_reverse_runs_backwards_in_time():
    buf = ReplayBuffer(50, sampler=Trajectories(5, reverse=True), seed=1)
    buf.extend(episodes([20]))
    b = buf.sample(8)
    assert (np.diff(b.data["t"], axis=1) == -1).all()


def test_open_episode_and_wraparound():
    buf = ReplayBuffer(16, sampler=Trajectories(4), seed=2)
    for k in range(5):  # 5 episodes of 7 steps through a ring of 16: oldest ones get overwritten
        buf.extend(episodes([7], start=7 * k))
    buf.extend(
        {"t": np.arange(35, 38), "done": np.zeros(3, bool), "reward": np.ones(3, np.float32)}
    )
    for _ in range(50):
        t = buf.sample(16).data["t"]
        assert (np.diff(t, axis=1) == 1).all()
        assert (t[:, 0] // 7 == t[:, -1] // 7).all(), "same episode"
        assert t.min() >= 38 - 16, "only stored steps"


def test_extend_larger_than_capacity_starts_a_fresh_episode():
    buf = ReplayBuffer(10, sampler=Trajectories(3), seed=0)
    buf.extend(episodes([4, 30]))
    t = buf.sample(20).data["t"]
    assert t.min() >= 24 and (np.diff(t, axis=1) == 1).all()


def test_return_priority_prefers_high_return_episodes():
    buf = ReplayBuffer(100, sampler=Trajectories(2, priority="return", alpha=1.0, eps=0.0), seed=0)
    data = episodes([5, 5])
    data["reward"] = np.array([1, 1, 1, 1, 1, 3, 3, 3, 3, 3], np.float32)  # returns 5 and 15
    buf.extend(data)
    first = buf.sample(4000).data["t"][:, 0]
    share = (first >= 5).mean()
    assert abs(share - 0.75) < 0.03, share


def test_td_priority_follows_update_priorities():
    buf = ReplayBuffer(100, sampler=Trajectories(2, priority="td", alpha=1.0, eps=0.0), seed=0)
    ids = buf.extend(episodes([4, 4]), priorities=np.ones(8))
    buf.update_priorities(ids[4:], np.full(4, 9.0))
    first = buf.sample(4000).data["t"][:, 0]
    assert abs((first >= 4).mean() - 0.9) < 0.03


def test_errors():
    with pytest.raises(ReplayBankError, match="length"):
        Trajectories(0)
    buf = ReplayBuffer(10, sampler=Trajectories(3), seed=0)
    with pytest.raises(ReplayBankError, match="'done' column"):
        buf.extend({"t": np.arange(4)})
    assert len(buf) == 0
    buf.extend(episodes([2, 2]))
    with pytest.raises(ReplayBankError, match="no stored episode has 3"):
        buf.sample(2)


@pytest.mark.parametrize("reverse", [False, True])
def test_whole_episodes_are_uniform_over_episodes(reverse):
    lengths = [3, 10, 1, 6]
    buf = ReplayBuffer(100, sampler=Trajectories(None, reverse=reverse), seed=0)
    buf.extend(episodes(lengths))
    starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
    counts = np.zeros(len(lengths))
    for _ in range(200):
        b = buf.sample(8)
        t = b.data["t"]
        assert len(t) == 8 and len(b.ids) == 8
        for row in t:
            row = row[::-1] if reverse else row
            k = int(np.searchsorted(starts, row[0]))
            assert row.tolist() == list(range(starts[k], starts[k] + lengths[k]))
            counts[k] += 1
    p = stats.chisquare(counts).pvalue
    assert p > 1e-3, p


def test_whole_episodes_after_partial_overwrite_return_the_stored_tail():
    buf = ReplayBuffer(12, sampler=Trajectories(None), seed=0)
    buf.extend(episodes([8, 8]))  # the first 4 steps of episode 0 are gone
    rows = {tuple(r.tolist()) for r in buf.sample(50).data["t"]}
    assert rows == {(4, 5, 6, 7), tuple(range(8, 16))}


@pytest.mark.parametrize("kernels", ["numba", "numpy"])
def test_priority_weights_are_normalised_like_prioritized(kernels, monkeypatch):
    # Weights are (N_e * P(e))^-beta over the largest weight ANY episode could get, as Prioritized
    # does, not over the batch maximum: a batch without the rarest episode has weights below 1.
    monkeypatch.setenv("REPLAYBANK_KERNELS", kernels)
    alpha, beta = 1.0, 0.5
    sampler = Trajectories(2, priority="td", alpha=alpha, beta=beta, eps=0.0)
    buf = ReplayBuffer(100, sampler=sampler, seed=0)
    ids = buf.extend(episodes([4, 4, 4]), priorities=np.ones(12))
    buf.update_priorities(ids[:4], np.full(4, 0.01))  # episode 0 is rarely drawn
    buf.update_priorities(ids[8:], np.full(4, 9.0))
    P = np.array([0.01, 1.0, 9.0]) ** alpha
    P /= P.sum()
    w = (3 * P) ** -beta
    expected = w / w.max()
    saw_batch_without_rarest = False
    for _ in range(50):
        b = buf.sample(4)
        episode = b.data["t"][:, 0] // 4
        np.testing.assert_allclose(b.weights, expected[episode], rtol=1e-5)
        if not (episode == 0).any():
            saw_batch_without_rarest = True
            assert b.weights.max() < 0.2  # the batch maximum is not rescaled to 1
    assert saw_batch_without_rarest


def test_one_step_episodes_filling_the_buffer_are_all_kept():
    # With capacity keys for episodes, capacity stored one-step episodes lost the oldest as soon
    # as the next episode opened: whole-episode samples came back empty (found by the fuzz test).
    for capacity in (1, 2, 5):
        buf = ReplayBuffer(capacity, sampler=Trajectories(None), seed=0)
        buf.extend({"t": np.arange(capacity), "done": np.ones(capacity, bool)})
        rows = buf.sample(20 * capacity).data["t"].to_list()
        assert all(len(r) == 1 for r in rows)
        assert sorted({int(r[0]) for r in rows}) == list(range(capacity))
        assert (buf.sample(3).data["t"].values >= 0).all()
        one = ReplayBuffer(capacity, sampler=Trajectories(1), seed=0)
        one.extend({"t": np.arange(capacity), "done": np.ones(capacity, bool)})
        assert sorted(set(one.sample(20 * capacity).data["t"][:, 0].tolist())) == list(range(capacity))


@pytest.mark.parametrize("big", [False, True])
def test_td_episode_sums_match_the_stored_steps(big):
    # The write path once took the slots it was filling for slots being overwritten (the table
    # already held the new ids), so while the buffer filled up episode 0's sums went negative.
    rng = np.random.default_rng(0)
    for capacity in (1, 3, 7, 40):
        buf = ReplayBuffer(capacity, sampler=Trajectories(None, priority="td"), seed=0)
        s, t = buf.sampler, 0
        for _ in range(100):
            n = int(rng.integers(1, 2 * capacity + 2 if big else capacity + 1))
            done = rng.random(n) < 0.3
            buf.extend({"t": np.arange(t, t + n), "done": done}, priorities=rng.random(n))
            t += n
            live = np.arange(min(t, capacity))
            episodes, counts = np.unique(s.episode[live], return_counts=True)
            keys = episodes % len(s.ep_stored)
            assert (s.ep_stored[keys] == counts).all()
            sums = [s.step_value[live][s.episode[live] == e].sum() for e in episodes]
            np.testing.assert_allclose(s.ep_value[keys], sums, atol=1e-9)


def test_td_sums_rounding_below_zero_weigh_zero_not_nan():
    # ep_value is kept by adding and subtracting priorities; it can round to -1e-17 (found by
    # the fuzz test as a NaN warning). (-1e-17) ** alpha is NaN; the weight must be 0.
    buf = ReplayBuffer(8, sampler=Trajectories(1, priority="td", alpha=0.5, eps=0.0), seed=0)
    buf.extend(episodes([3, 2]), priorities=[0.1, 0.2, 0.3, 1.0, 1.0])
    s = buf.sampler
    s.ep_value[0] = -1e-17
    with np.errstate(invalid="raise"):
        s._refresh(np.array([0]))
    assert s.tree.leaves[0] == 0.0 and np.isfinite(s.tree.total)
    assert (buf.sample(16).data["t"][:, 0] >= 3).all()
