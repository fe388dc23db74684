"""RR-M's one compiled tree of four lanes (``samplers/_numba_lanes.py``) against two
``NumbaPairTree``s, the layout it replaced: every operation the sampler uses gives the same bits."""

import numpy as np
import pytest

pytest.importorskip("numba")

from replaybank.samplers._numba_lanes import LaneTree  # noqa: E402
from replaybank.samplers._numba_tree import NumbaPairTree  # noqa: E402


@pytest.mark.parametrize("capacity,branching", [(1, 8), (7, 2), (300, 3), (5000, 8), (4097, 16)])
def test_lanes_match_two_pair_trees(capacity, branching):
    rng = np.random.default_rng(capacity)
    lanes = LaneTree(capacity, branching=branching)
    main, mask = NumbaPairTree(capacity, branching=branching), NumbaPairTree(capacity, branching=branching)
    pairs = ((lanes.trees, main), (lanes.mask, mask))
    values = rng.lognormal(0.0, 3.0, capacity) * (rng.random(capacity) < 0.9)
    lanes.trees.load(values)
    main.load(values)
    for _ in range(40):
        index = rng.integers(0, capacity, rng.integers(1, 64))  # repeats included
        p = rng.lognormal(0.0, 2.0, len(index)) * (rng.random(len(index)) < 0.8)
        assert lanes.trees.update_powered(index, p, 1e-6, 0.6) == main.update_powered(index, p, 1e-6, 0.6)
        sums = np.where(rng.random(len(index)) < 0.5, p, 0.0)
        dues = np.where(sums == 0, rng.random(len(index)) * 10, 0.0)
        lanes.mask.update_pair(index, sums, dues)
        mask.update_pair(index, sums, dues)
        gone = rng.integers(0, capacity, 3)
        lanes.trees.update(gone, np.zeros(3))
        main.update(gone, np.zeros(3))
        for mine, theirs in pairs:
            assert mine.total == theirs.total and mine.minimum == theirs.minimum
            np.testing.assert_array_equal(mine.leaves, theirs.leaves)
            if theirs.total > 0:
                mass = np.sort(rng.random(50)) * theirs.total
                np.testing.assert_array_equal(mine.find(mass), theirs.find(mass))
        limit = float(rng.random() * 10)
        np.testing.assert_array_equal(np.sort(lanes.mask.below(limit)), np.sort(mask.below(limit)))
        if main.total > 0:
            slots = main.find(np.sort(rng.random(20)) * main.total)
            np.testing.assert_array_equal(lanes.trees.weights(slots, 0.4), main.weights(slots, 0.4))
            u = rng.random(16)
            for got, want in zip(lanes.trees.stratified(u, 0.7), main.stratified(u, 0.7)):
                np.testing.assert_array_equal(got, want)
