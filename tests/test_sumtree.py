import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replaybank.samplers._numba_tree import NumbaPairTree
from replaybank.samplers.sumtree import KaryTree, PairedTrees

TREES = {"numpy": KaryTree}  # the single-reduction tree behind PairedTrees


@st.composite
def tree_updates(draw):
    capacity = draw(st.integers(1, 300))
    branching = draw(st.sampled_from([2, 3, 4, 8, 32]))
    n_updates = draw(st.integers(1, 5))
    updates = []
    for _ in range(n_updates):
        idx = draw(st.lists(st.integers(0, capacity - 1), min_size=1, max_size=40))
        value = st.one_of(st.just(0.0), st.floats(1e-6, 100))  # zeros (empty slots) and priorities
        vals = draw(st.lists(value, min_size=len(idx), max_size=len(idx)))
        updates.append((np.array(idx), np.array(vals)))
    return capacity, branching, updates


def apply(tree, reference, idx, vals):
    tree.update(idx, vals)  # repeated indices included: the last value must win
    for i, v in zip(idx, vals):
        reference[i] = v


@pytest.mark.parametrize("impl", TREES)
@settings(max_examples=150, deadline=None)
@given(case=tree_updates())
def test_sum_and_min_trees_match_a_plain_array(impl, case):
    capacity, branching, updates = case
    s = TREES[impl](capacity, branching=branching, reduce="sum")
    m = TREES[impl](capacity, branching=branching, reduce="min")
    ref_s = np.zeros(capacity)
    ref_m = np.full(capacity, np.inf)
    for idx, vals in updates:
        apply(s, ref_s, idx, vals)
        apply(m, ref_m, idx, vals)
    np.testing.assert_allclose(s.root, ref_s.sum(), rtol=1e-9, atol=1e-9)
    assert m.root == ref_m.min()
    np.testing.assert_array_equal(s.leaves, ref_s)


@pytest.mark.parametrize("impl", TREES)
@settings(max_examples=150, deadline=None)
@given(
    case=tree_updates(),
    fractions=st.lists(st.floats(0, 1, exclude_max=True), min_size=1, max_size=50),
)
def test_find_returns_the_leaf_whose_prefix_interval_holds_the_mass(impl, case, fractions):
    capacity, branching, updates = case
    s = TREES[impl](capacity, branching=branching)
    ref = np.zeros(capacity)
    for idx, vals in updates:
        apply(s, ref, idx, vals)
    if ref.sum() == 0:
        return
    mass = np.array(fractions) * s.root
    found = s.find(mass)
    assert (ref[found] > 0).all(), "a zero-priority leaf must never be found"
    prefix = np.concatenate(([0.0], np.cumsum(ref)))
    tol = 1e-9 * max(1.0, ref.sum())
    for leaf, u in zip(found, mass):
        assert prefix[leaf] - tol <= u <= prefix[leaf + 1] + tol


@pytest.mark.parametrize("impl", TREES)
def test_duplicate_indices_in_one_update_leave_consistent_parents(impl):
    # Regression guard for the classic sum-tree bug: delta updates applied twice for a repeated index.
    t = TREES[impl](16, branching=2)
    t.update(np.arange(16), np.ones(16))
    idx = np.array([3, 3, 3, 7])
    t.update(idx, np.array([9.0, 7.0, 5.0, 2.0]))
    assert t.root == 16 - 2 + 5 + 2
    t.rebuild()
    assert t.root == 21


@pytest.mark.parametrize("impl", TREES)
@pytest.mark.parametrize("capacity", [1, 5, 8, 40, 100, 1000])
def test_rebuild_from_leaves_matches_incremental_updates(impl, capacity):
    rng = np.random.default_rng(capacity)
    values = rng.random(capacity)
    a = TREES[impl](capacity, branching=8)
    a.update(np.arange(capacity), values)
    b = TREES[impl](capacity, branching=8)
    b.leaves[:] = values
    b.rebuild()
    np.testing.assert_allclose(a.root, b.root)
    u = rng.random(50) * a.root
    np.testing.assert_array_equal(a.find(u), b.find(u))


PAIRS = {"numpy": PairedTrees, "numba": NumbaPairTree}


@pytest.mark.parametrize("impl", PAIRS)
@settings(max_examples=100, deadline=None)
@given(
    case=tree_updates(),
    fractions=st.lists(st.floats(0, 1, exclude_max=True), min_size=1, max_size=30),
)
def test_paired_sum_and_min_trees(impl, case, fractions):
    capacity, branching, updates = case
    pair = PAIRS[impl](capacity, branching=max(branching, 2))
    ref = np.zeros(capacity)
    for idx, vals in updates:
        apply(pair, ref, idx, vals)
    np.testing.assert_allclose(pair.total, ref.sum(), rtol=1e-9, atol=1e-9)
    positive = ref[ref > 0]
    assert pair.minimum == (positive.min() if len(positive) else np.inf)
    if ref.sum() > 0:
        found = pair.find(np.array(fractions) * pair.total)
        assert (ref[found] > 0).all()
        expected = (ref[found] / positive.min()) ** -0.5
        np.testing.assert_allclose(pair.weights(found, 0.5), expected, rtol=1e-6, atol=1e-7)
    reloaded = PAIRS[impl](capacity, branching=max(branching, 2))
    reloaded.load(ref.copy())
    np.testing.assert_allclose(reloaded.total, pair.total, rtol=1e-12)
    assert reloaded.minimum == pair.minimum


@pytest.mark.parametrize("impl", PAIRS)
@pytest.mark.parametrize("capacity", [1, 5, 8, 40, 100, 1000])
def test_paired_load_matches_incremental_updates(impl, capacity):
    rng = np.random.default_rng(capacity)
    values = np.where(rng.random(capacity) < 0.1, 0.0, rng.random(capacity))
    a, b = PAIRS[impl](capacity, branching=8), PAIRS[impl](capacity, branching=8)
    a.update(np.arange(capacity), values)
    b.load(values)
    np.testing.assert_allclose(a.total, b.total)
    assert a.minimum == b.minimum
    if values.sum() > 0:
        u = rng.random(50) * a.total
        np.testing.assert_array_equal(a.find(u), b.find(u))


@pytest.mark.parametrize("impl", PAIRS)
def test_duplicate_indices_in_one_pair_update_last_wins(impl):
    t = PAIRS[impl](16, branching=2)
    t.update(np.arange(16), np.ones(16))
    t.update(np.array([3, 3, 3, 7]), np.array([9.0, 7.0, 5.0, 0.0]))
    assert t.total == 16 - 2 + 5 and t.minimum == 1.0


@pytest.mark.parametrize("kernels", ["numba", "numpy"])
@pytest.mark.parametrize("branching", [2, 8, 32])
def test_update_pair_and_below_match_brute_force(kernels, branching, monkeypatch):
    # RR-M's mask tree: sums of eligible items to draw from, mins of masked items' due times
    monkeypatch.setenv("REPLAYBANK_KERNELS", kernels)
    from replaybank.samplers.sumtree import make_pair

    rng = np.random.default_rng(branching)
    capacity = 1000
    tree = make_pair(capacity, branching=branching)
    sums, mins = np.zeros(capacity), np.zeros(capacity)
    for _ in range(20):
        index = rng.integers(0, capacity, 64)
        s = np.where(rng.random(64) < 0.5, rng.random(64), 0.0)
        m = np.where(s == 0, rng.random(64) * 100, 0.0)
        tree.update_pair(index, s, m)
        last = len(index) - 1 - np.unique(index[::-1], return_index=True)[1]
        sums[index[last]], mins[index[last]] = s[last], m[last]
        np.testing.assert_allclose(tree.total, sums.sum())
        positive = mins[mins > 0]
        assert tree.minimum == (positive.min() if len(positive) else np.inf)
        for limit in (0.0, 5.0, 50.0, 1e9):
            expected = np.flatnonzero((mins > 0) & (mins <= limit))
            assert sorted(tree.below(limit).tolist()) == expected.tolist()
        draws = tree.find(rng.random(200) * tree.total)
        assert (sums[draws] > 0).all()


def _dyadic_pair(impl, capacity, branching, rng):
    # multiples of 1/64 below 16: every sum of them is exact in float64, so the compiled kernels
    # and the numpy fallback must agree bit for bit whatever order they add in
    tree = PAIRS[impl](capacity, branching=branching)
    values = np.where(rng.random(capacity) < 0.2, 0.0, rng.integers(1, 1024, capacity) / 64)
    tree.update(np.arange(capacity), values)
    return tree


@pytest.mark.parametrize("branching", [2, 8])
@pytest.mark.parametrize("capacity", [1, 7, 100, 5000])
def test_fused_stratified_and_update_powered_match_the_numpy_fallback_exactly(capacity, branching):
    # the one-call fast paths (walk + weights; update with (p + eps) ** alpha and the max) against
    # PairedTrees doing the same steps as separate numpy calls, on the same leaves
    trees = {impl: _dyadic_pair(impl, capacity, branching, np.random.default_rng(capacity)) for impl in PAIRS}
    if trees["numpy"].total == 0:
        trees = {impl: PAIRS[impl](capacity, branching=branching) for impl in PAIRS}
        for t in trees.values():
            t.update(np.arange(capacity), np.ones(capacity))
    rng = np.random.default_rng(1)
    for _ in range(5):
        u = rng.random(64)
        got = {impl: t.stratified(u, 1.0) for impl, t in trees.items()}
        np.testing.assert_array_equal(got["numba"][0], got["numpy"][0])
        np.testing.assert_array_equal(got["numba"][1], got["numpy"][1])
        assert got["numba"][1].dtype == got["numpy"][1].dtype == np.float32
        index = rng.integers(0, capacity, 64)  # repeats included: the last value wins
        p = rng.integers(0, 1024, 64) / 64
        tops = {impl: t.update_powered(index, p, 0.0, 1.0) for impl, t in trees.items()}
        assert tops["numba"] == tops["numpy"] == p.max()
        np.testing.assert_array_equal(trees["numba"].leaves, trees["numpy"].leaves)
        assert trees["numba"].total == trees["numpy"].total
        assert trees["numba"].minimum == trees["numpy"].minimum
    # general exponents: the same draws, weights and leaves up to the last bits of pow
    u = rng.random(64)
    p = rng.random(capacity) * 3
    for t in trees.values():
        t.update_powered(np.arange(capacity), p, 1e-6, 0.6)
    np.testing.assert_allclose(trees["numba"].leaves, trees["numpy"].leaves, rtol=1e-15)
    (s1, w1), (s2, w2) = (t.stratified(u, 0.4) for t in trees.values())
    np.testing.assert_array_equal(s1, s2)
    np.testing.assert_allclose(w1, w2, rtol=1e-6)


@pytest.mark.parametrize("impl", PAIRS)
def test_update_powered_with_no_items_changes_nothing(impl):
    t = PAIRS[impl](10, branching=4)
    t.update(np.arange(10), np.arange(10.0))
    assert t.update_powered(np.zeros(0, np.int64), np.zeros(0), 1e-6, 0.6) == -np.inf
    assert t.total == 45.0 and t.minimum == 1.0
