"""The bookkeeping of a TD priority update of ``Trajectories`` (``episodes.EpisodeIndex``) as one
compiled pass (numba, ``replaybank[fast]``). As numpy it is ``last_wins`` (a sort with
``return_index``), ``np.add.at`` into the episodes' sums and ``np.unique`` of the episodes
touched, three sorts and their temporaries for a batch of a few hundred steps; here it is one
stable sort and one loop, with the same arithmetic in the same order (the fallback's sums come
out bit for bit, tested). The episodes' weights are then set by ``EpisodeIndex._refresh``, shared
by both paths.
"""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True, nogil=True)
def td_update(
    slots: np.ndarray,
    priorities: np.ndarray,
    episode: np.ndarray,
    n_keys: int,
    step_value: np.ndarray,
    ep_value: np.ndarray,
) -> tuple[np.ndarray, float]:
    """Set ``step_value[slots] = priorities`` (the last value wins for a repeated slot) and move
    each episode's sum ``ep_value`` by the change, slots taken in ascending order (as
    ``np.add.at`` over ``last_wins``' output). Returns the episodes' keys touched (sorted, once
    each) and the largest priority set (``-inf`` for none)."""
    n = len(slots)
    order = np.argsort(slots, kind="mergesort")  # stable: a repeated slot's last value is last
    keys = np.empty(n, dtype=np.int64)
    m = 0
    top = -np.inf
    for j in range(n):
        i = order[j]
        s = slots[i]
        if j + 1 < n and slots[order[j + 1]] == s:
            continue
        p = priorities[i]
        key = episode[s] % n_keys
        ep_value[key] += p - step_value[s]
        step_value[s] = p
        top = max(top, p)
        keys[m] = key
        m += 1
    return np.unique(keys[:m]), top
