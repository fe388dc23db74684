import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from replaybank.samplers.sumtree import KaryTree


@st.composite
def tree_updates(draw):
    capacity = draw(st.integers(1, 300))
    branching = draw(st.sampled_from([2, 3, 4, 32]))
    n_updates = draw(st.integers(1, 5))
    updates = []
    for _ in range(n_updates):
        idx = draw(st.lists(st.integers(0, capacity - 1), min_size=1, max_size=40))
        vals = draw(st.lists(st.floats(0, 100), min_size=len(idx), max_size=len(idx)))
        updates.append((np.array(idx), np.array(vals)))
    return capacity, branching, updates


def apply(tree, reference, idx, vals):
    # duplicate indices: the buffer passes unique ones, keeping the last value per index
    last = len(idx) - 1 - np.unique(idx[::-1], return_index=True)[1]
    tree.update(idx[last], vals[last])
    for i, v in zip(idx, vals):
        reference[i] = v


@settings(max_examples=150, deadline=None)
@given(tree_updates())
def test_sum_and_min_trees_match_a_plain_array(case):
    capacity, branching, updates = case
    s = KaryTree(capacity, branching=branching, reduce="sum")
    m = KaryTree(capacity, branching=branching, reduce="min")
    ref_s = np.zeros(capacity)
    ref_m = np.full(capacity, np.inf)
    for idx, vals in updates:
        apply(s, ref_s, idx, vals)
        apply(m, ref_m, idx, vals)
    np.testing.assert_allclose(s.root, ref_s.sum(), rtol=1e-9, atol=1e-9)
    assert m.root == ref_m.min()
    np.testing.assert_array_equal(s.leaves, ref_s)


@settings(max_examples=150, deadline=None)
@given(tree_updates(), st.lists(st.floats(0, 1, exclude_max=True), min_size=1, max_size=50))
def test_find_returns_the_leaf_whose_prefix_interval_holds_the_mass(case, fractions):
    capacity, branching, updates = case
    s = KaryTree(capacity, branching=branching)
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


def test_duplicate_indices_in_one_update_leave_consistent_parents():
    # Regression guard for the classic sum-tree bug: delta updates applied twice for a repeated index.
    t = KaryTree(16, branching=2)
    t.update(np.arange(16), np.ones(16))
    idx = np.array([3, 3, 3, 7])
    t.update(idx, np.array([5.0, 5.0, 5.0, 2.0]))
    assert t.root == 16 - 2 + 5 + 2
    t.rebuild()
    assert t.root == 21
