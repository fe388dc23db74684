"""Confidence intervals: hand-worked values, edge cases, and coverage measured by simulation.

Coverage figures measured while writing these tests (fixed seeds; 300 simulated runs each, 500
resamples): two-level bootstrap of a mean score with 5 seeds x 24 items, seed spread 0.05: 0.97;
the same with no seed spread: 0.98; one seed x 40 items: 0.95. It undercovers when few seeds
carry a large seed-to-seed spread (5 seeds, spread 0.15: 0.92; 3 seeds, spread 0.10: 0.88) and at
one seed with a score near 1 (24 items at 0.9: 0.91, the percentile bootstrap of a binomial).
"""

from __future__ import annotations

import numpy as np
import pytest

from replaybank.errors import ReplayBankError
from replaybank.intervals import Interval, bootstrap_ratio, wilson


def test_wilson_hand_worked_values():
    # 8 of 10, z = 1.959964, z^2 = 3.841459: centre (0.8 + z^2/20) / (1 + z^2/10) = 0.99207 / 1.38415
    # = 0.71674; half-width z * sqrt(0.016 + z^2/400) / (1 + z^2/10) = 1.95996 * 0.16001 / 1.38415 = 0.22658
    low, high = wilson(8, 10)
    assert low == pytest.approx(0.71674 - 0.22658, abs=2e-5) and high == pytest.approx(0.71674 + 0.22658, abs=2e-5)
    assert wilson(8, 10) == pytest.approx((0.490162, 0.943318), abs=1e-6)
    # no success: the lower bound is 0 and the upper bound z^2 / (n + z^2)
    z2 = 1.959964**2
    assert wilson(0, 8) == pytest.approx((0.0, z2 / (8 + z2)), abs=1e-6)
    assert wilson(24, 24) == pytest.approx((24 / (24 + z2), 1.0), abs=1e-6)
    # a wider level gives a wider interval around the same centre
    lo90, hi90 = wilson(8, 10, level=0.90)
    assert low < lo90 < hi90 < high


@pytest.mark.parametrize("n,p", [(24, 0.5), (50, 0.3), (40, 0.8), (100, 0.1)])
def test_wilson_covers_at_the_nominal_rate(n, p):
    # 4000 simulated binomials; the coverage's own standard error is 0.0034, the tolerance 0.025
    # (Wilson's coverage oscillates with n and p around the nominal level; Brown, Cai & DasGupta 2001)
    k = np.random.default_rng([n, int(p * 100)]).binomial(n, p, size=4000)
    bounds = np.array([wilson(int(x), n) for x in k])
    coverage = np.mean((bounds[:, 0] <= p) & (p <= bounds[:, 1]))
    assert abs(coverage - 0.95) < 0.025, coverage


def test_wilson_refuses_bad_input():
    for args in [(3, 0), (-1, 5), (6, 5), (float("nan"), 5)]:
        with pytest.raises(ReplayBankError):
            wilson(*args)
    with pytest.raises(ReplayBankError, match="level"):
        wilson(1, 2, level=1.0)


def test_bootstrap_estimate_is_the_mean_over_seeds_of_the_per_seed_ratio():
    # seed 1: arm 3 of 4 over base 4 of 4 = 0.75; seed 2: 2 of 4 over base 2 of 4 on the same items = 1.0
    groups = [([1, 1, 0, 1], [1, 1, 1, 1]), ([1, 1, 0, 0], [1, 1, 0, 0])]
    iv = bootstrap_ratio(groups, resamples=400, seed=1)
    assert iv is not None and iv.mean == pytest.approx(0.875)
    assert iv.low <= iv.mean <= iv.high
    # a seed whose base scores 0 has no ratio: left out, like a family the base model fails
    only = bootstrap_ratio([([1, 1, 0, 1], [1, 1, 1, 1]), ([1, 0], [0, 0])], resamples=400)
    assert only is not None and only.mean == pytest.approx(0.75)
    assert bootstrap_ratio([([1, 0], [0, 0])]) is None
    # nothing varies: the interval is the point
    assert bootstrap_ratio([([1, 1], [1, 1])] * 4, resamples=100) == Interval(1.0, 1.0, 1.0)


def test_bootstrap_is_reproducible_and_its_bounds_barely_move_between_bootstrap_seeds():
    rng = np.random.default_rng(3)
    groups = [((rng.random(24) < p).astype(float), np.ones(24)) for p in (0.8, 0.85, 0.75, 0.9, 0.8)]
    assert bootstrap_ratio(groups, seed=5) == bootstrap_ratio(groups, seed=5)
    lows = [bootstrap_ratio(groups, seed=s).low for s in range(10)]  # type: ignore[union-attr]
    assert 0 < np.std(lows) < 0.01  # 2000 resamples: the bound moves by well under one point


def _coverage(seeds: int, items: int, mu: float, spread: float, trials: int, rng: np.random.Generator) -> float:
    hits = 0
    for t in range(trials):
        ps = np.clip(rng.normal(mu, spread, size=seeds), 0, 1)
        groups = [((rng.random(items) < p).astype(float), np.ones(items)) for p in ps]
        iv = bootstrap_ratio(groups, resamples=500, seed=t)
        assert iv is not None
        hits += iv.low <= mu <= iv.high
    return hits / trials


def test_bootstrap_over_items_covers_at_the_nominal_rate():
    # one seed, 40 items at 0.8: only the item level varies; 300 runs, standard error 0.013
    assert abs(_coverage(1, 40, 0.8, 0.0, 300, np.random.default_rng(11)) - 0.95) < 0.035


def test_bootstrap_over_seeds_and_items_covers_the_true_mean_at_least_nominally():
    # 5 seeds x 24 items, each seed's true score drawn around 0.8 (spread 0.05). Resampling the
    # items inside resampled seeds counts the item noise twice, so the interval is a little wide:
    # coverage between the nominal rate (less 2 standard errors) and 0.995 (not vacuous).
    coverage = _coverage(5, 24, 0.8, 0.05, 300, np.random.default_rng(12))
    assert 0.925 <= coverage <= 0.995, coverage


def test_bootstrap_pairs_base_and_arm_scores_per_item():
    # The arm is right exactly where the base is: retention 1 in every resample (pairing kept);
    # unpaired resampling would spread it around 1.
    base = np.array([1, 0, 1, 1, 0, 1, 0, 1, 1, 1], dtype=float)
    iv = bootstrap_ratio([(base, base), (base[::-1], base[::-1])], resamples=300)
    assert iv == Interval(1.0, 1.0, 1.0)


def test_bootstrap_refuses_bad_input():
    with pytest.raises(ReplayBankError, match="at least one group"):
        bootstrap_ratio([])
    with pytest.raises(ReplayBankError, match="group 1"):
        bootstrap_ratio([([1], [1]), ([1, 0], [1])])
    with pytest.raises(ReplayBankError, match="group 0"):
        bootstrap_ratio([([], [])])
    with pytest.raises(ReplayBankError, match="resamples"):
        bootstrap_ratio([([1], [1])], resamples=10)
    with pytest.raises(ReplayBankError, match="finite"):
        bootstrap_ratio([([np.nan], [1])])


def test_doctests():
    import doctest

    import replaybank.intervals as intervals

    assert doctest.testmod(intervals).failed == 0
