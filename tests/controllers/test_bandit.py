"""The bandit controller's arithmetic on constructed statistics."""

from __future__ import annotations

import numpy as np
import pytest

from replaybank.controllers import (
    BanditController,
    MixLimits,
    SourceStats,
    bandit_rewards,
    exp3_mixture,
)

LIM = MixLimits(("tools", "agenda"), floor=0.0, max_share=0.9)
BOTH = [True, True]


def stats(tools: float, agenda: float, domain: float = 0.8) -> SourceStats:
    return SourceStats(np.array([domain, tools, agenda]), np.zeros(3))


def test_rewards_are_the_clipped_predicted_rise_and_the_domains_tolerance():
    s = SourceStats(np.array([0.5, 1.1, 0.9, 2.5]), np.array([0.0, 0.1, 0.0, 0.0]))
    np.testing.assert_allclose(bandit_rewards(s, tolerance=0.05, scale=0.5, trend_weight=1.0), [0.1, 0.4, 0.0, 1.0])
    np.testing.assert_allclose(bandit_rewards(s, tolerance=0.05, scale=0.5, trend_weight=0.0), [0.1, 0.2, 0.0, 1.0])


def test_the_prior_and_the_exploration_set_the_start_and_exploration_decays():
    c = BanditController(LIM, np.random.default_rng(0), explore=0.2, start_share=0.1)
    # (1 - 0.2) * [0.9, 0.05, 0.05] + 0.2 / 3
    np.testing.assert_allclose(c.mixture(BOTH), [0.8 * 0.9 + 0.2 / 3, 0.8 * 0.05 + 0.2 / 3, 0.8 * 0.05 + 0.2 / 3])
    np.testing.assert_allclose(exp3_mixture(np.zeros(2), np.array([True, True]), 0.0), [0.5, 0.5])
    quiet = BanditController(LIM, np.random.default_rng(0), explore=0.2, lr=1e-9)
    for _ in range(15):  # rewards change nothing (lr ~ 0): only the exploration term moves, to 0.2 / 4
        mix = quiet.update(stats(1.0, 1.0), BOTH)
    np.testing.assert_allclose(mix[1], (1 - 0.05) * 0.05 + 0.05 / 3, rtol=1e-6)  # t = 15: 0.2 / sqrt(16)


def test_a_forgotten_source_gains_share_and_loses_it_once_it_recovers():
    c = BanditController(LIM, np.random.default_rng(0), explore=0.0)
    start = c.mixture(BOTH)
    for _ in range(5):
        mix = c.update(stats(1.4, 1.0), BOTH)  # tools forgotten by 40%, agenda kept
    assert mix[1] > 0.4 > start[1] and mix[2] < start[2]
    for _ in range(30):
        mix = c.update(stats(1.0, 1.0), BOTH)  # recovered: the domain's tolerance wins again
    assert mix[1] < 0.06 and mix[0] > 0.9 - 1e-9


def test_a_source_that_becomes_available_enters_at_the_prior():
    c = BanditController(LIM, np.random.default_rng(0), explore=0.0, start_share=0.2)
    for _ in range(3):
        c.update(stats(1.0, np.nan), [True, False])
    before = c.mixture([True, False])
    assert before[2] == 0
    mix = c.mixture(BOTH)  # agenda enters with log(0.2 / 2) against the domain's log(0.8)
    assert mix[2] / mix[0] == pytest.approx(0.1 / 0.8 * np.exp(-c.state_dict()["score"][0]))


def test_sampled_feedback_probes_uniformly_with_the_passed_generator_and_reads_only_that_source():
    def probes(seed: int) -> list[int]:
        c = BanditController(LIM, np.random.default_rng(seed), feedback="sampled")
        out = []
        for _ in range(400):
            arm = c.probe(BOTH)
            assert c.probe(BOTH) == arm  # drawn once until the update
            loss = np.array([0.8, np.nan, np.nan])
            loss[arm] = 1.2
            c.update(SourceStats(loss, np.where(np.isnan(loss), np.nan, 0.0)), BOTH)
            out.append(arm)
        return out

    a = probes(3)
    assert a == probes(3) and a != probes(4)
    counts = np.bincount(a, minlength=3)
    assert counts[0] == 0 and abs(counts[1] - 200) < 4 * np.sqrt(100)  # binomial(400, 1/2): 4 sd
    only = BanditController(LIM, np.random.default_rng(0), feedback="sampled")
    assert only.probe([False, False]) == 0  # nothing to measure


def test_sampled_feedback_weights_the_probed_reward_by_the_number_of_available_sources():
    # Exp3's importance weight: the probed source's reward times m (1 / its chance of being probed),
    # so the expected gain equals full feedback's; without it, sampled feedback learns m times slower
    lim = MixLimits(("a", "b", "c"), floor=0.0, max_share=0.9)
    available = [True, True, True]
    full = BanditController(lim, np.random.default_rng(0), lr=0.5, discount=0.9)
    loss, trend = np.array([0.8, 1.3, 1.1, 1.2]), np.zeros(4)
    full.update(SourceStats(loss, trend), available)
    want = 0.5 * bandit_rewards(SourceStats(loss, trend), 0.05, 0.5, 1.0)
    np.testing.assert_allclose(full.state_dict()["score"], want)
    mean = np.zeros(4)
    for seed in range(30):
        c = BanditController(lim, np.random.default_rng(seed), lr=0.5, discount=0.9, feedback="sampled")
        arm = c.probe(available)
        seen = np.full(4, np.nan)
        seen[0], seen[arm] = loss[0], loss[arm]
        c.update(SourceStats(seen, np.where(np.isnan(seen), np.nan, 0.0)), available)
        score = np.array(c.state_dict()["score"])
        assert score[arm] == pytest.approx(3 * want[arm])  # m = 3 sources available
        assert score[0] == pytest.approx(want[0])
        mean += score / 30
    # all three probed over 30 seeds; the average gain is near full feedback's (unbiased)
    assert np.all(np.abs(mean[1:] - want[1:]) < 0.6 * want[1:] + 1e-9)
