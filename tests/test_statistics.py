"""Statistical behaviour, tested statistically: fixed seeds, chi-square, stated tolerances."""

import numpy as np
import pytest
from scipy import stats

from replaybank import (
    GroupBalanced,
    Prioritized,
    PrioritizedReshuffled,
    ReplayBuffer,
    Reservoir,
    Reshuffled,
    Uniform,
)

ALPHA_LEVEL = 1e-3  # reject the null (correct distribution) only below this p-value


@pytest.mark.parametrize("kernels", ["numba", "numpy"])
def test_prioritized_frequencies_follow_p_to_the_alpha(kernels, monkeypatch):
    monkeypatch.setenv("REPLAYBANK_KERNELS", kernels)
    n, alpha = 50, 0.6
    priorities = np.linspace(0.1, 5.0, n)
    buf = ReplayBuffer(n, sampler=Prioritized(alpha=alpha, beta=0.4, eps=0.0), seed=123)
    ids = buf.extend({"i": np.arange(n)}, priorities=priorities)
    counts = np.zeros(n)
    for _ in range(400):
        np.add.at(counts, buf.sample(128).data["i"], 1)
    expected = priorities**alpha / (priorities**alpha).sum() * counts.sum()
    p = stats.chisquare(counts, expected).pvalue
    assert p > ALPHA_LEVEL, p
    assert ids.size == n


@pytest.mark.parametrize("kernels", ["numba", "numpy"])
def test_prioritized_weights_are_normalised_importance_weights(kernels, monkeypatch):
    monkeypatch.setenv("REPLAYBANK_KERNELS", kernels)
    n, alpha, beta = 20, 0.7, 0.5
    priorities = np.arange(1, n + 1, dtype=float)
    buf = ReplayBuffer(n, sampler=Prioritized(alpha=alpha, beta=beta, eps=0.0), seed=0)
    buf.extend({"i": np.arange(n)}, priorities=priorities)
    b = buf.sample(1000)
    P = priorities**alpha / (priorities**alpha).sum()
    w = (n * P) ** -beta
    expected = w / w.max()
    np.testing.assert_allclose(b.weights, expected[b.data["i"]], rtol=1e-6)
    assert b.weights.max() <= 1.0


def test_new_items_get_the_running_max_priority():
    buf = ReplayBuffer(10, sampler=Prioritized(alpha=1.0, eps=0.0), seed=0)
    ids = buf.extend({"i": np.arange(3)}, priorities=[1.0, 7.0, 2.0])
    buf.update_priorities(ids[:1], [9.0])
    buf.extend({"i": np.array([3])})
    assert buf.sampler.trees.leaves[3] == 9.0


def test_reservoir_keeps_a_uniform_sample_of_the_stream():
    capacity, stream, trials = 10, 100, 2000
    counts = np.zeros(stream)
    rng = np.random.default_rng(7)
    for _ in range(trials):
        buf = ReplayBuffer(capacity, admission=Reservoir(), seed=int(rng.integers(1 << 31)))
        # mix batch sizes so the vectorised path and the one-by-one path are both exercised
        sizes = [1, 7, 30, 2, 60]
        start = 0
        for s in sizes:
            buf.extend({"i": np.arange(start, start + s)})
            start += s
        stored = buf.state_dict()["columns"]["i"]
        np.add.at(counts, stored, 1)
    expected = np.full(stream, trials * capacity / stream)
    p = stats.chisquare(counts, expected).pvalue
    assert p > ALPHA_LEVEL, p


def test_reshuffled_serves_each_item_exactly_once_per_epoch():
    n, batch = 97, 10
    buf = ReplayBuffer(128, sampler=Reshuffled(), seed=3)
    buf.extend({"i": np.arange(n)})
    drawn = np.concatenate([buf.sample(batch).data["i"] for _ in range(n * 5 // batch + 1)])[
        : n * 5
    ]
    epochs = drawn.reshape(5, n)
    for e in epochs:
        assert sorted(e.tolist()) == list(range(n))
    assert not all((epochs[0] == e).all() for e in epochs[1:]), "a new permutation every epoch"


def test_reshuffled_overwrite_mid_epoch_serves_the_new_item():
    buf = ReplayBuffer(10, sampler=Reshuffled(), seed=0)
    buf.extend({"i": np.arange(10)})
    first = buf.sample(4).data["i"].tolist()
    buf.extend({"i": np.array([100, 101])})  # FIFO: overwrites items 0 and 1
    rest = buf.sample(6).data["i"].tolist()
    assert len(set(first + rest)) == 10
    for old, new in ((0, 100), (1, 101)):
        assert old not in rest, "an overwritten item is never served after it is gone"
        if old not in first:
            assert new in rest, "its slot serves the new item when the slot's turn comes"


def test_reshuffled_count_variance_is_lower_than_uniform():
    n, batch, calls = 200, 20, 100
    counts = {}
    for name, sampler in (("uniform", Uniform()), ("rr", Reshuffled())):
        buf = ReplayBuffer(n, sampler=sampler, seed=1)
        buf.extend({"i": np.arange(n)})
        c = np.zeros(n)
        for _ in range(calls):
            np.add.at(c, buf.sample(batch).data["i"], 1)
        counts[name] = c
    assert counts["rr"].var() == 0.0  # 10 full epochs
    assert counts["uniform"].var() > 5.0


@pytest.mark.parametrize("kernels", ["numba", "numpy"])
def test_prioritized_reshuffled_keeps_frequencies_and_cuts_count_variance(kernels, monkeypatch):
    monkeypatch.setenv("REPLAYBANK_KERNELS", kernels)
    n, batch, calls = 100, 10, 3000
    priorities = np.linspace(0.5, 3.0, n)
    results = {}
    for name, sampler in (
        ("per", Prioritized(alpha=1.0, eps=0.0)),
        ("rrm", PrioritizedReshuffled(alpha=1.0, eps=0.0)),
    ):
        buf = ReplayBuffer(n, sampler=sampler, seed=5)
        buf.extend({"i": np.arange(n)}, priorities=priorities)
        c = np.zeros(n)
        for _ in range(calls):
            np.add.at(c, buf.sample(batch).data["i"], 1)
        results[name] = c
    expected = priorities / priorities.sum() * batch * calls
    # frequencies stay proportional to priority (within 5% per item on average)
    rel = np.abs(results["rrm"] - expected) / expected
    assert rel.mean() < 0.05, rel.mean()
    # and deviations from the expected counts are much smaller than with replacement
    dev_per = np.abs(results["per"] - expected).mean()
    dev_rrm = np.abs(results["rrm"] - expected).mean()
    assert dev_rrm < 0.5 * dev_per, (dev_rrm, dev_per)


def test_group_balanced_gives_equal_shares_and_uniform_within_groups():
    capacity = 60
    buf = ReplayBuffer(capacity, admission=GroupBalanced(), seed=11)
    # an imbalanced stream: group 0 has 10x the items of groups 1 and 2
    rng = np.random.default_rng(0)
    groups = np.concatenate([np.zeros(2000), np.ones(200), np.full(200, 2)]).astype(np.int64)
    order = rng.permutation(len(groups))
    values = np.arange(len(groups))[order]
    buf.extend({"i": values, "g": groups[order]}, groups=groups[order])
    counts = buf.admission.group_counts()
    assert counts == {0: 20, 1: 20, 2: 20}
    stored = buf.state_dict()["columns"]
    assert np.bincount(stored["g"], minlength=3).tolist() == [20, 20, 20]

    # uniform within groups: over 200 buffer seeds on this same stream, an item's chance to be
    # kept must not depend on where it arrived in its group's stream (group 0 keeps 20 of its
    # 2000 items: arrival ranks in 20 bins of 100, 200 expected hits each; groups 1 and 2 keep 20
    # of 200: 10 bins of 20, 400 expected hits each); chi-square against equal bins
    g = groups[order]
    rank = np.empty(len(g), dtype=np.int64)  # arrival rank of each stream position in its group
    for k in range(3):
        rank[g == k] = np.arange((g == k).sum())
    bin_width = {0: 100, 1: 20, 2: 20}
    hits = {k: np.zeros(len(g[g == k]) // w) for k, w in bin_width.items()}
    for trial in range(200):
        buf = ReplayBuffer(capacity, admission=GroupBalanced(), seed=100 + trial)
        buf.extend({"pos": np.arange(len(g))}, groups=g)
        pos = buf.state_dict()["columns"]["pos"]
        for k, w in bin_width.items():
            np.add.at(hits[k], rank[pos[g[pos] == k]] // w, 1)
    for k, h in hits.items():
        assert h.sum() == 200 * 20
        p = stats.chisquare(h).pvalue
        assert p > ALPHA_LEVEL, (k, p, h.tolist())


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_group_balanced_reservoir_inside_a_group_is_uniform(seed):
    # one group, many items: membership probability must not depend on arrival position
    hits = np.zeros(50)
    for t in range(400):
        buf = ReplayBuffer(5, admission=GroupBalanced(), seed=seed * 1000 + t)
        buf.extend({"i": np.arange(50)}, groups=np.zeros(50, dtype=np.int64))
        np.add.at(hits, buf.state_dict()["columns"]["i"], 1)
    p = stats.chisquare(hits, np.full(50, hits.sum() / 50)).pvalue
    assert p > ALPHA_LEVEL, p
