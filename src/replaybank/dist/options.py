"""The options of ``ShardedReplayBuffer``: checked, with their defaults filled in, before any actor starts."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from ..buffer_checks import positive_int as _positive_int
from ..errors import ReplayBankError
from ..samplers import Prioritized, Uniform
from ..storage import MemmapStorage
from . import ids as idmod
from . import manifest as manifest_mod

Component = Any  # an instance (copied into every shard) or a callable: shard index -> instance


def check_options(
    num_shards: int, capacity: int, timeout: float, max_restarts: int, sampler: Component,
    storage: Component,
) -> tuple[int, int, Component, Any]:
    """Check the constructor's arguments.

    Returns:
        ``(num_shards, capacity, sampler, probe)``: the sampler defaults to ``Uniform()``;
        ``probe`` is an instance of it (shard 0's when ``sampler`` is a callable).

    Raises:
        ReplayBankError: a count out of range, a sampler with no exact global form (only
            ``Uniform`` and ``Prioritized`` have one), one ``MemmapStorage`` folder for several
            shards, or a ragged storage.
    """
    num_shards = _positive_int(num_shards, "num_shards")
    if num_shards > idmod.MAX_SHARDS:
        raise ReplayBankError(f"num_shards={num_shards} exceeds {idmod.MAX_SHARDS} (ids keep 7 bits for the shard)")
    capacity = _positive_int(capacity, "capacity")
    if capacity < num_shards:
        raise ReplayBankError(f"capacity={capacity} is smaller than num_shards={num_shards}; every shard needs a slot")
    if not (isinstance(timeout, (int, float)) and timeout > 0):
        raise ReplayBankError(f"timeout must be a positive number of seconds, got {timeout!r}")
    if isinstance(max_restarts, bool) or not isinstance(max_restarts, int) or not 0 <= max_restarts < idmod.MAX_GENERATIONS - 1:
        raise ReplayBankError(f"max_restarts must be an integer in [0, {idmod.MAX_GENERATIONS - 2}], got {max_restarts!r}")
    sampler = Uniform() if sampler is None else sampler
    probe = sampler(0) if callable(sampler) and not hasattr(sampler, "sample") else sampler
    if type(probe) not in (Uniform, Prioritized):
        raise ReplayBankError(
            f"sampler={type(probe).__name__}: a sharded buffer samples exactly only with Uniform or "
            "Prioritized (the others have no exact global form over shards)"
        )
    if isinstance(storage, MemmapStorage) and num_shards > 1:
        raise ReplayBankError(
            "storage=MemmapStorage(...) would put every shard in one folder; pass "
            "storage=lambda shard: MemmapStorage(f'dir/shard-{shard}') instead"
        )
    if getattr(storage, "supports_ragged", False):
        raise ReplayBankError("storage: ragged columns are not supported by ShardedReplayBuffer yet")
    return num_shards, capacity, sampler, probe


def prepare_checkpoint_dir(checkpoint_dir: str | None, max_restarts: int) -> str | None:
    """The folder ``checkpoint()`` writes to: a new temporary one when shards may restart and
    none is given; stale restart counters of an earlier buffer there are removed.

    Raises:
        ReplayBankError: the folder already holds a checkpoint (resume it with ``load``).
    """
    if max_restarts and checkpoint_dir is None:
        checkpoint_dir = tempfile.mkdtemp(prefix="replaybank-shards-")
    if checkpoint_dir is not None:
        root = Path(checkpoint_dir)
        if (root / manifest_mod.MANIFEST).exists():
            raise ReplayBankError(
                f"checkpoint_dir={checkpoint_dir!r} already holds a checkpoint; resume it with "
                "ShardedReplayBuffer.load(checkpoint_dir) or choose an empty folder"
            )
        if (root / "generations").is_dir():
            for stale in (root / "generations").glob("shard-*.json"):
                stale.unlink()
    return checkpoint_dir
