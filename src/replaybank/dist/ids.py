"""Global item ids of a sharded buffer: the shard and its generation live in the high bits.

An id is a non-negative int64 laid out as::

    bit 63      0 (ids are never negative)
    bits 56-62  shard index          (7 bits: up to 128 shards)
    bits 51-55  shard generation     (5 bits: the shard's start count, 0..31)
    bits 0-50   the core buffer's id (51 bits: ``arrival << shift | slot``, see ``replaybank.slots``)

so ``update_priorities`` routes an id with a shift and a mask, no lookup. Within a shard ids grow
strictly with arrival and are never reused: a restarted shard (restored from its last checkpoint)
has the next generation, so ids it issued before the restart that were lost with it can never be
confused with new ones. The core id leaves ``51 - bit_length(capacity)`` bits of arrivals per
shard and generation: 2**31 (2.1 billion) items per shard for a shard capacity of a million.

>>> ids = encode(3, 1, np.array([5, 6]))
>>> ids.tolist(), shard_of(ids).tolist(), generation_of(ids).tolist(), local_of(ids).tolist()
([218424581927469061, 218424581927469062], [3, 3], [1, 1], [5, 6])
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import ReplayBankError

SHARD_BITS = 7
GENERATION_BITS = 5
LOCAL_BITS = 51
SHARD_SHIFT = LOCAL_BITS + GENERATION_BITS  # 56
GENERATION_SHIFT = LOCAL_BITS  # 51
MAX_SHARDS = 1 << SHARD_BITS
MAX_GENERATIONS = 1 << GENERATION_BITS
LOCAL_MASK = (1 << LOCAL_BITS) - 1
GENERATION_MASK = (1 << GENERATION_BITS) - 1


def encode(shard: int, generation: int, local: np.ndarray) -> np.ndarray:
    """Global ids of the core ids ``local`` issued by ``shard`` in ``generation``."""
    local = np.asarray(local, dtype=np.int64)
    if local.size and int(local.max()) > LOCAL_MASK:
        raise ReplayBankError(
            f"shard {shard} has issued more ids than fit in {LOCAL_BITS} bits (see "
            "replaybank.dist.ids); use more shards or a smaller capacity per shard"
        )
    return local | np.int64((shard << SHARD_SHIFT) | (generation << GENERATION_SHIFT))


def as_ids(ids: Any, where: str = "ids") -> np.ndarray:
    """Validate ``ids`` as a flat int64 array (integers only)."""
    values = getattr(ids, "values", ids)  # Ragged ids
    arr = np.asarray(values)
    if arr.dtype.kind not in "iu":
        raise ReplayBankError(f"{where} must be integers (ids from extend/add/sample), got dtype {arr.dtype}")
    return arr.astype(np.int64, copy=False).ravel()


def shard_of(ids: np.ndarray) -> np.ndarray:
    return ids >> SHARD_SHIFT


def generation_of(ids: np.ndarray) -> np.ndarray:
    return (ids >> GENERATION_SHIFT) & GENERATION_MASK


def local_of(ids: np.ndarray) -> np.ndarray:
    return ids & LOCAL_MASK
