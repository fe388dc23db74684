"""The proxy policy (frozen weights) and its cross-entropy fit."""

from __future__ import annotations

import numpy as np
import pytest

from replaybank.controllers import (
    ControllerError,
    MixLimits,
    ProxyController,
    SourceStats,
    fit_proxy,
    proxy_mixture,
)

LIM = MixLimits(("tools", "agenda"), floor=0.05, max_share=0.6)
ALL = np.array([True, True, True])


def test_the_rehearsal_total_follows_the_sigmoid_between_the_floors_and_the_maximum():
    s = SourceStats(np.array([0.5, 1.0, 1.0]), np.zeros(3))
    low = proxy_mixture(np.array([-60.0, 0, 0, 0, 0, 0, 0]), s, LIM, ALL)
    high = proxy_mixture(np.array([60.0, 0, 0, 0, 0, 0, 0]), s, LIM, ALL)
    mid = proxy_mixture(np.zeros(7), s, LIM, ALL)
    np.testing.assert_allclose(low, [0.9, 0.05, 0.05], atol=1e-12)
    np.testing.assert_allclose(high, [0.4, 0.3, 0.3], atol=1e-12)
    np.testing.assert_allclose(mid[1:].sum(), 0.1 + 0.5 * 0.5)


def test_the_split_favours_the_source_whose_loss_rises_when_its_weight_says_so():
    s = SourceStats(np.array([0.5, 1.4, 1.0]), np.zeros(3))
    w = np.array([0.0, 0, 0, 0, 0, 3.0, 0])
    mix = proxy_mixture(w, s, LIM, ALL)
    assert mix[1] > mix[2] >= 0.05
    np.testing.assert_allclose(mix[1] / mix[2], np.exp(3.0 * 0.4), rtol=1e-9)
    np.testing.assert_allclose(proxy_mixture(-w, s, LIM, ALL)[1:].sum(), mix[1:].sum())  # only the split moved


def test_the_controller_keeps_only_the_last_statistics():
    c = ProxyController(LIM, [0.0, 5.0, 0, 0, 0, 2.0, 0])
    start = c.mixture([True, True])
    mix = c.update(SourceStats(np.array([0.5, 1.3, 1.1]), np.array([-0.1, 0.1, 0.0])), [True, True])
    np.testing.assert_allclose(c.mixture([True, True]), mix)
    assert mix[1:].sum() > start[1:].sum()


def test_fit_proxy_finds_a_known_optimum_and_is_reproducible_by_seed():
    target = np.array([0.5, -1.0, 2.0, 0.0, 1.0, 3.0, -2.0])

    def score(w: np.ndarray) -> float:
        return -float(((w - target) ** 2).sum())

    fit = fit_proxy(score, np.random.default_rng(0), rounds=15, population=12, elite=3)
    assert fit.score > -0.5 and len(fit.history) == 15
    assert np.abs(fit.weights - target).max() < 0.6
    again = fit_proxy(score, np.random.default_rng(0), rounds=15, population=12, elite=3)
    np.testing.assert_array_equal(again.weights, fit.weights)
    assert fit.score == max(fit.history) and fit.history[-1] > fit.history[0]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"rounds": 0}, "rounds=0"), ({"elite": 13}, "elite=13"), ({"population": 1}, "population=1"), ({"init_std": -1.0}, "init_std")],
)
def test_fit_proxy_refuses_bad_counts(kwargs, match):
    with pytest.raises(ControllerError, match=match):
        fit_proxy(lambda w: 0.0, np.random.default_rng(0), **kwargs)


def test_fit_proxy_refuses_a_score_that_is_not_a_finite_number():
    with pytest.raises(ControllerError, match="score returned nan"):
        fit_proxy(lambda w: float("nan"), np.random.default_rng(0), rounds=1)
