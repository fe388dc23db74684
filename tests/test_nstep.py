import numpy as np
import pytest

from replaybank import ReplayBankError, nstep_returns


def naive(rewards, dones, gamma, n):
    T = len(rewards)
    G, D, L = np.zeros(T), np.zeros(T), np.zeros(T, dtype=int)
    for t in range(T):
        g, disc, j = 0.0, 1.0, t
        for k in range(n):
            j = t + k
            g += disc * rewards[j]
            disc *= gamma
            if dones[j] or j == T - 1:
                break
        G[t], L[t] = g, j
        D[t] = 0.0 if dones[j] else disc
    return G, D, L


@pytest.mark.parametrize("n", [1, 2, 3, 5])
def test_matches_a_plain_loop(n):
    rng = np.random.default_rng(n)
    rewards = rng.normal(size=200)
    dones = rng.random(200) < 0.1
    for got, want in zip(nstep_returns(rewards, dones, 0.9, n), naive(rewards, dones, 0.9, n)):
        np.testing.assert_allclose(got, want)


def test_truncation_bootstraps_but_termination_does_not():
    r = np.ones(4)
    g, disc, idx = nstep_returns(
        r,
        np.array([False, False, False, False]),
        0.5,
        3,
        truncated=np.array([False, True, False, False]),
    )
    assert (
        g.tolist() == [1.5, 1.0, 1.5, 1.0]
        and disc.tolist() == [0.25, 0.5, 0.25, 0.5]
        and idx.tolist() == [1, 1, 3, 3]
    )


def test_bad_arguments():
    with pytest.raises(ReplayBankError, match="gamma"):
        nstep_returns(np.ones(3), np.zeros(3, bool), 1.5, 2)
    with pytest.raises(ReplayBankError, match="n=0"):
        nstep_returns(np.ones(3), np.zeros(3, bool), 0.9, 0)
    with pytest.raises(ReplayBankError, match="dones"):
        nstep_returns(np.ones(3), np.zeros(2, bool), 0.9, 2)
