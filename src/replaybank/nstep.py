"""n-step discounted returns that stop at episode ends."""

from __future__ import annotations

import numpy as np

from .errors import ReplayBankError


def nstep_returns(
    rewards: np.ndarray,
    dones: np.ndarray,
    gamma: float,
    n: int,
    *,
    truncated: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """n-step returns for every step of a time-ordered stream of transitions.

    For step ``t`` with ``m = min(n, steps to the episode's last stored step)``:
    ``G_t = sum_{k<m} gamma^k r_{t+k}``, the bootstrap discount is ``gamma^m`` (0 if the episode
    terminated within those ``m`` steps) and the bootstrap index is ``t + m - 1`` (whose
    ``next_obs`` is the state to bootstrap from). Steps are cut at ``dones`` (termination, no
    bootstrap) and at ``truncated`` (time-limit end: bootstrap from the last ``next_obs``) and at
    the end of the arrays (treated as truncation).

    Args:
        rewards: float array (T,), in time order.
        dones: bool array (T,), True where the episode terminated after that step.
        gamma: discount in [0, 1].
        n: number of steps, >= 1.
        truncated: optional bool array (T,), True where the episode was cut without terminating.

    Returns:
        ``(returns, discounts, bootstrap_index)``, arrays of shape (T,).

    >>> r = np.array([1.0, 1.0, 1.0, 1.0]); d = np.array([False, True, False, False])
    >>> g, disc, idx = nstep_returns(r, d, gamma=0.5, n=2)
    >>> g, disc, idx
    (array([1.5, 1. , 1.5, 1. ]), array([0.  , 0.  , 0.25, 0.5 ]), array([1, 1, 3, 3]))
    """
    rewards = np.asarray(rewards, dtype=np.float64)
    dones = np.asarray(dones, dtype=bool)
    T = len(rewards)
    if dones.shape != (T,):
        raise ReplayBankError(f"dones has shape {dones.shape}, expected ({T},) like rewards")
    if not 0.0 <= gamma <= 1.0:
        raise ReplayBankError(f"gamma={gamma!r} must lie in [0, 1]")
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ReplayBankError(f"n={n!r} must be a positive integer")
    cut = dones.copy() if truncated is None else dones | np.asarray(truncated, dtype=bool)
    if T:
        cut[-1] = True
    # next cut at or after each t, scanned from the end: a vectorised "index of next True"
    idx = np.where(cut, np.arange(T), T)
    next_cut = np.minimum.accumulate(idx[::-1])[::-1]
    last = np.minimum(np.arange(T) + n - 1, next_cut)  # bootstrap index
    m = last - np.arange(T) + 1
    returns = np.zeros(T)
    discount = np.ones(T)
    for k in range(n):  # n is small; each pass is vectorised over all T steps
        active = k < m
        j = np.minimum(np.arange(T) + k, T - 1)
        returns += np.where(active, discount * rewards[j], 0.0)
        discount = np.where(active, discount * gamma, discount)
    terminated = dones[last]
    return returns, np.where(terminated, 0.0, discount), last
