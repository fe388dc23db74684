"""Exact global sampling over shards: how many items each shard gives, and their weights.

* the driver asks every shard for its stats ``(size, mass, min_mass)`` (one round trip, in
  parallel), draws how many items each shard contributes from a multinomial over the shards'
  masses (:func:`shard_probabilities`), and asks each shard for that many (a second round trip);
* with ``Uniform`` the mass of a shard is its size, so every stored item has probability ``1/N``;
  with ``Prioritized`` it is ``sum (p_i + eps)^alpha``, so item ``i`` of shard ``s`` has
  probability ``mass_s / M * (p_i + eps)^alpha / mass_s = (p_i + eps)^alpha / M``, exactly the
  single-buffer ``P(i)`` over all items;
* importance weights are ``(N P(i))^-beta / max_k (N P(k))^-beta = ((p_i + eps)^alpha / m)^-beta``
  with the global ``m = min_k (p_k + eps)^alpha`` (the global ``N`` cancels); a shard normalises by
  its own minimum ``m_s``, so the driver multiplies by ``(m_s / m)^-beta`` (:func:`assemble`).

The two round trips see the same state unless another process writes in between; batches are
returned shard by shard (not interleaved).

Example (two shards of 2 and 6 items under ``Uniform``: a quarter of the draws go to shard 0):
    >>> shard_probabilities([(2, 2.0, 1.0), (6, 6.0, 1.0)]).tolist()
    [0.25, 0.75]
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..buffer import Batch
from ..errors import EmptyBufferError, ReplayBankError
from ..ragged import Ragged
from .shard import Stats


def shard_probabilities(stats: Sequence[Stats]) -> np.ndarray:
    """Each shard's share of a batch: its mass over the total.

    Raises:
        EmptyBufferError: every shard is empty.
        ReplayBankError: every stored priority is zero (with ``eps=0``).
    """
    mass = np.array([m for _, m, _ in stats])
    if sum(size for size, _, _ in stats) == 0:
        raise EmptyBufferError("cannot sample from an empty sharded buffer; extend() it first")
    if mass.sum() <= 0:
        raise ReplayBankError("all stored priorities are zero (with eps=0); nothing can be sampled")
    return mass / mass.sum()


def assemble(
    parts: Sequence[Any], shards: Sequence[int], stats: Sequence[Stats], prioritized: bool,
    beta: float | None,
) -> Batch:
    """One ``Batch`` from the shards' answers, in shard order.

    Args:
        parts: per sampled shard, its answer ``(data, ids, weights, stats)``.
        shards: the index of each sampled shard.
        stats: every shard's stats from the first round trip; a sampled shard's minimum is
            replaced by the one it sampled with.
        prioritized: whether the shards sample by priority (then the batch has weights).
        beta: the importance-weight exponent (``None`` counts as 0).
    """
    mins = [mn for _, _, mn in stats]
    for s, part in zip(shards, parts):
        mins[s] = part[3][2]  # the minimum when the shard sampled
    global_min = min(mins)
    data: dict[str, np.ndarray | Ragged] = {
        name: np.concatenate([p[0][name] for p in parts]) for name in parts[0][0]
    }
    ids = np.concatenate([p[1] for p in parts])
    weights = None
    if prioritized:
        beta = float(beta or 0.0)
        weights = np.concatenate([
            p[2] * np.float32((mins[s] / global_min) ** -beta if math.isfinite(global_min) else 1.0)
            for s, p in zip(shards, parts)
        ]).astype(np.float32)
    return Batch(data, ids, weights)
