"""n-step discounted returns that stop at episode ends."""

from __future__ import annotations

from typing import Any

import numpy as np

from .checks import check_int, check_real
from .errors import InvalidArgumentError, InvalidTypeError


def _column(values: Any, name: str, length: int | None) -> np.ndarray:
    """A 1-D array of real numbers (finite for rewards), named in every error."""
    try:
        arr = np.asarray(values)
    except (ValueError, TypeError) as err:
        raise InvalidTypeError(f"nstep_returns({name}=...): not an array of numbers ({err})") from None
    if arr.dtype.kind not in "biuf":
        raise InvalidTypeError(f"nstep_returns({name}=...): expected real numbers, got dtype {arr.dtype}")
    if arr.ndim != 1 or (length is not None and len(arr) != length):
        want = "(T,)" if length is None else f"({length},) like rewards"
        raise InvalidArgumentError(f"nstep_returns({name}=...): shape {arr.shape}, expected {want}")
    if arr.dtype.kind == "f" and not np.isfinite(arr).all():
        raise InvalidArgumentError(f"nstep_returns({name}=...): holds NaN or infinite values")
    return arr.astype(np.float64, copy=False)


def _flags(values: Any, name: str, length: int) -> np.ndarray:
    """Episode-end flags: booleans, or numbers that are exactly 0 or 1 (0.5 is not an end)."""
    arr = _column(values, name, length)
    if ((arr != 0) & (arr != 1)).any():
        raise InvalidArgumentError(f"nstep_returns({name}=...): flags must be True/False or 0/1")
    return arr.astype(bool)


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
    gamma = check_real(gamma, "nstep_returns", "gamma", low=0.0, high=1.0)
    n = check_int(n, "nstep_returns", "n", low=1)
    rewards = _column(rewards, "rewards", None)
    T = len(rewards)
    dones = _flags(dones, "dones", T)
    cut = dones.copy() if truncated is None else dones | _flags(truncated, "truncated", T)
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
