"""The limits, statistics and constraint every controller shares."""

from __future__ import annotations

import numpy as np
import pytest

from replaybank.controllers import ControllerError, MixLimits, SourceStats, constrain, summarize
from replaybank.controllers.base import check_available, check_stats
from replaybank.errors import ReplayBankError

ALL = np.array([True, True, True])


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"sources": ("a", "b"), "floor": 0.3, "max_share": 0.5}, r"floors sum to 0.6, above max_share=0.5"),
        ({"sources": ("a", "b"), "floor": [0.1, 0.5], "max_share": 0.5}, "floors sum to 0.6"),
        ({"sources": ("a", "b"), "floor": [0.1, -0.1]}, "floor of 'b' must lie in"),
        ({"sources": ("a", "b"), "floor": [0.1]}, "one per source"),
        ({"sources": ("a", "b"), "floor": float("nan")}, "finite"),
        ({"sources": ("a",), "max_share": 1.0}, r"max_share=1.0.*\[0, 1\)"),
        ({"sources": ("a",), "max_share": True}, "max_share=True"),
        ({"sources": ("a", "a")}, "names repeat"),
        ({"sources": ()}, "non-empty"),
        ({"sources": "ab"}, "non-empty list of names"),
    ],
)
def test_limits_that_admit_no_mixture_are_refused_naming_the_key(kwargs, match):
    with pytest.raises(ControllerError, match=match) as err:
        MixLimits(**kwargs)
    assert isinstance(err.value, ReplayBankError)


def test_constrain_keeps_a_feasible_mixture_and_repairs_the_rest():
    lim = MixLimits(("a", "b"), floor=0.05, max_share=0.4)
    ok = np.array([0.7, 0.2, 0.1])
    np.testing.assert_allclose(constrain(ok, lim, ALL), ok)
    # too much rehearsal: capped at 0.4 in proportion; below a floor: lifted to it
    np.testing.assert_allclose(constrain(np.array([0.2, 0.4, 0.4]), lim, ALL), [0.6, 0.2, 0.2])
    np.testing.assert_allclose(constrain(np.array([0.2, 0.79, 0.01]), lim, ALL), [0.6, 0.35, 0.05])
    # masked: share 0 and no floor; nothing wanted: the floors
    np.testing.assert_allclose(constrain(np.array([0.5, 0.25, 0.25]), lim, np.array([True, True, False])), [2 / 3, 1 / 3, 0.0])
    np.testing.assert_allclose(constrain(np.array([1.0, 0.0, 0.0]), lim, ALL), [0.9, 0.05, 0.05])


def test_summarize_normalises_by_the_start_and_fits_the_trend_of_the_last_k():
    h = [[2.0, np.nan], [1.8, 1.0], [1.2, 1.1], [1.0, 1.4]]
    s = summarize(h, k=2)
    np.testing.assert_allclose(s.loss, [0.5, 1.4])
    np.testing.assert_allclose(s.trend, [-0.1, 0.3])  # (1.0 - 1.2) / 2 per evaluation; 1.4 - 1.1
    one = summarize([[3.0, np.nan]])
    assert one.loss[0] == 1.0 and one.trend[0] == 0.0 and np.isnan(one.loss[1])


@pytest.mark.parametrize(
    ("history", "k", "match"),
    [
        ([[1.0, -0.5]], 3, r"\[0\]\[1\] = -0.5"),
        ([[1.0, 1.0], [np.inf, 1.0]], 3, r"\[1\]\[0\] = inf"),
        ([[0.0, 1.0]], 3, "source 0 starts at loss 0"),
        ([1.0, 2.0], 3, "evaluations x sources"),
        ([[1.0]], 1, "k=1"),
    ],
)
def test_summarize_refuses_bad_losses_naming_where(history, k, match):
    with pytest.raises(ControllerError, match=match):
        summarize(history, k=k)


def test_statistics_must_be_finite_and_non_negative_where_a_source_is_available():
    lim = MixLimits(("a", "b"))
    mask = np.array([True, True, False])
    check_stats(SourceStats(np.array([0.8, 1.1, np.nan]), np.array([0.0, 0.1, np.nan])), mask, lim)
    with pytest.raises(ControllerError, match=r"SourceStats.loss\[1\] = nan \(a\)"):
        check_stats(SourceStats(np.array([0.8, np.nan, 1.0]), np.zeros(3)), mask, lim)
    with pytest.raises(ControllerError, match=r"SourceStats.trend\[0\] = inf \(current domain\)"):
        check_stats(SourceStats(np.ones(3), np.array([np.inf, 0, 0])), mask, lim)
    with pytest.raises(ControllerError, match=r"SourceStats.loss\[2\] = -1.0 \(b\): a loss is never negative"):
        check_stats(SourceStats(np.array([0.8, 1.0, -1.0]), np.zeros(3)), mask, lim)
    with pytest.raises(ControllerError, match="SourceStats.loss: expected 3 numbers"):
        check_stats(SourceStats(np.ones(2), np.zeros(3)), mask, lim)
    with pytest.raises(ControllerError, match="available=.*expected 2 bools"):
        check_available([True], lim)
    with pytest.raises(ControllerError, match="expected 2 bools"):
        check_available([1, 0], lim)
