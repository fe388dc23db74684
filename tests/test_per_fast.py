"""The prioritized fast paths against the numpy fallback and against the distribution.

The compiled walk (branch-free child scan, prefetch of the next level), the compiled value check
of priorities, numpy's pow in the compiled tree, the cold-update prefetch and the default
branching. Equivalence is exact: both paths add a node's children in order and take the same
numpy powers, so on the same tree they give the same leaves, slots and weights bit for bit.
Statistical checks use fixed seeds and reject only below ``ALPHA_LEVEL``.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from replaybank import Prioritized, PrioritizedReshuffled, ReplayBuffer
from replaybank.errors import InvalidArgumentError
from replaybank.samplers import priorities as prio_mod
from replaybank.samplers._numba_checks import within
from replaybank.samplers._numba_tree import NumbaPairTree
from replaybank.samplers.sumtree import PairedTrees, default_branching

ALPHA_LEVEL = 1e-3


def _pair(capacity: int, branching: int, values: np.ndarray) -> dict[str, object]:
    trees = {"numba": NumbaPairTree(capacity, branching=branching), "numpy": PairedTrees(capacity, branching=branching)}
    for t in trees.values():
        t.update(np.arange(capacity), values)  # type: ignore[attr-defined]
    return trees


@pytest.mark.parametrize("branching", [2, 3, 8, 32])
@pytest.mark.parametrize("capacity", [1, 9, 1000, 40_000])
def test_branch_free_walk_matches_the_fallback_on_every_boundary(capacity, branching):
    # multiples of 1/64 (some zero): every running sum is exact, so each mass that lands exactly
    # on a boundary between two leaves must go to the same leaf on both paths, and masses at or
    # past the total (rounding overflow) to the last positive leaf, never an empty one
    rng = np.random.default_rng(capacity + branching)
    values = np.where(rng.random(capacity) < 0.3, 0.0, rng.integers(1, 1024, capacity) / 64)
    values[rng.integers(0, capacity)] = 1.0  # at least one positive leaf
    trees = _pair(capacity, branching, values)
    edges = np.cumsum(values)
    total = trees["numba"].total  # type: ignore[attr-defined]
    masses = np.concatenate([
        edges[values > 0][:2000],  # exactly on a boundary
        np.nextafter(edges[values > 0][:2000], -np.inf),  # just before one
        rng.random(2000) * total,
        [0.0, total, np.nextafter(total, np.inf), total * 2],  # overflow lands on the last positive
    ])
    got = {impl: t.find(masses) for impl, t in trees.items()}  # type: ignore[attr-defined]
    np.testing.assert_array_equal(got["numba"], got["numpy"])
    assert (values[got["numba"]] > 0).all()
    assert got["numba"][-1] == np.flatnonzero(values > 0)[-1]


@pytest.mark.parametrize("branching", [2, 8, 32])
def test_compiled_tree_powers_and_weights_are_the_fallbacks_bit_for_bit(branching):
    # general exponents: both paths evaluate (p + eps) ** alpha and (leaf / min) ** -beta with
    # numpy, so leaves, draws and float32 weights are identical, not just close
    capacity = 5000
    rng = np.random.default_rng(branching)
    trees = _pair(capacity, branching, np.zeros(capacity))
    p = rng.random(capacity) * 3
    p[:50] = 0.0  # eps carries them
    for t in trees.values():
        assert t.update_powered(np.arange(capacity), p, 1e-6, 0.6) == p.max()  # type: ignore[attr-defined]
    np.testing.assert_array_equal(trees["numba"].leaves, trees["numpy"].leaves)  # type: ignore[attr-defined]
    for _ in range(5):
        u = rng.random(256)
        (s1, w1), (s2, w2) = (t.stratified(u, 0.4) for t in trees.values())  # type: ignore[attr-defined]
        np.testing.assert_array_equal(s1, s2)
        np.testing.assert_array_equal(w1, w2)
        assert w1.dtype == np.float32 and (w1 > 0).all() and w1.max() <= 1.0
        np.testing.assert_array_equal(*(t.weights(s1, 1.3) for t in trees.values()))  # type: ignore[attr-defined]
        index = rng.integers(0, capacity, 256)  # repeats: the last value wins on both
        q = rng.random(256) * 5
        tops = {impl: t.update_powered(index, q, 1e-6, 0.6) for impl, t in trees.items()}  # type: ignore[attr-defined]
        assert tops["numba"] == tops["numpy"] == q.max()
        np.testing.assert_array_equal(trees["numba"].leaves, trees["numpy"].leaves)  # type: ignore[attr-defined]
        assert trees["numba"].minimum == trees["numpy"].minimum  # type: ignore[attr-defined]


def test_cold_update_prefetch_changes_no_value():
    capacity = 200_000
    rng = np.random.default_rng(0)
    base = rng.random(capacity) + 0.1
    warm, cold = NumbaPairTree(capacity), NumbaPairTree(capacity)
    for t in (warm, cold):
        t.update(np.arange(capacity), base)
    for _ in range(10):
        index, p = rng.integers(0, capacity, 256), rng.random(256) * 4
        assert warm.update_powered(index, p, 1e-6, 0.6) == cold.update_powered(index, p, 1e-6, 0.6, cold=True)
    np.testing.assert_array_equal(warm.tree, cold.tree)


VALUES = [
    [],
    [0.0, 1.0, 2.0],
    [-0.0],
    [np.nan],
    [1.0, np.nan],
    [np.inf],
    [-np.inf, 1.0],
    [-1e-300],
    [5.0],  # exactly the limit
    [np.nextafter(5.0, np.inf)],
]


@pytest.mark.parametrize("values", VALUES)
def test_compiled_priority_check_answers_as_the_numpy_one(values):
    p = np.array(values, dtype=np.float64)
    assert within(p, 5.0) == (len(p) == 0 or prio_mod._numpy_within(p, 5.0))


@pytest.mark.parametrize("kernels", ["numba", "numpy"])
@pytest.mark.parametrize("bad, message", [(np.nan, "finite and >= 0"), (-1.0, "finite and >= 0"), (1e308, "above")])
def test_update_priorities_still_names_the_bad_value(kernels, bad, message, monkeypatch):
    monkeypatch.setenv("REPLAYBANK_KERNELS", kernels)
    monkeypatch.setattr(prio_mod, "_WITHIN", [])  # choose the check again under this setting
    buf = ReplayBuffer(100, sampler=Prioritized(alpha=1.0), seed=0)  # its limit is ~9e305
    ids = buf.extend({"x": np.arange(100)}, priorities=np.ones(100))
    before = buf.sampler.trees.leaves.copy()
    p = np.ones(10)
    p[7] = bad
    with pytest.raises(InvalidArgumentError, match=rf"priorities\[7\].*{message}"):
        buf.update_priorities(ids[:10], p)
    np.testing.assert_array_equal(buf.sampler.trees.leaves, before)  # nothing changed


def test_default_branching_follows_the_kernels(monkeypatch):
    assert Prioritized().branching == default_branching() == 8
    assert Prioritized(branching=32).branching == 32
    monkeypatch.setenv("REPLAYBANK_KERNELS", "numpy")
    assert Prioritized().branching == default_branching() == 32
    assert PrioritizedReshuffled().branching == 32


def test_a_save_keeps_its_branching(tmp_path):
    buf = ReplayBuffer(50, sampler=Prioritized(), seed=0)
    buf.extend({"x": np.arange(50)}, priorities=np.arange(50.0))
    buf.save(tmp_path / "b")
    back = ReplayBuffer.load(tmp_path / "b")
    assert back.sampler.branching == buf.sampler.branching == 8
    np.testing.assert_array_equal(back.sample(64).ids, buf.sample(64).ids)


@pytest.mark.parametrize("kernels", ["numba", "numpy"])
@pytest.mark.parametrize("sampler", [Prioritized, PrioritizedReshuffled])
def test_skewed_priorities_are_drawn_in_proportion(kernels, sampler, monkeypatch):
    # heavy-tailed priorities over 5 orders of magnitude on 3,000 items (three tree levels at
    # branching 8 and 32), updated between calls as in training: the long-run frequency of each
    # priority class must match its share of the mass (chi-square, fixed seed)
    monkeypatch.setenv("REPLAYBANK_KERNELS", kernels)
    n, alpha = 3000, 0.6
    rng = np.random.default_rng(7)
    priorities = rng.pareto(1.2, n) * 10.0 ** rng.integers(-2, 3, n) + 1e-3
    buf = ReplayBuffer(n, sampler=sampler(alpha=alpha, beta=0.4, eps=0.0), seed=11)
    ids = buf.extend({"i": np.arange(n)}, priorities=priorities)
    classes = np.minimum(np.searchsorted(np.quantile(priorities, [0.5, 0.8, 0.95, 0.99]), priorities), 4)
    counts = np.zeros(5)
    for _ in range(300):
        b = buf.sample(256)
        np.add.at(counts, classes[b.data["i"]], 1)
        buf.update_priorities(b.ids, priorities[b.data["i"]])  # the same values: P stays fixed
    mass = priorities**alpha
    expected = np.bincount(classes, weights=mass, minlength=5) / mass.sum() * counts.sum()
    assert stats.chisquare(counts, expected).pvalue > ALPHA_LEVEL
    assert ids.size == n
