"""Save and load of a ``ShardedReplayBuffer`` (layout and trust rules in ``manifest.py``).

The buffer (and, for ``load``, its class) is passed in and typed ``Any`` here: ``sharded.py``
imports this module, so this one does not import it back.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from ..errors import CorruptSaveError
from ..ratelimit import RateLimiter
from . import manifest as manifest_mod

B = TypeVar("B")


def save(buffer: Any, root: Path) -> None:
    version, staging = manifest_mod.prepare(root)
    names = [manifest_mod.shard_dir_name(i) for i in range(buffer.num_shards)]
    refs = [s.save.remote(str(staging / name)) for s, name in zip(buffer.shards, names)]
    shards = buffer.get(refs, list(range(buffer.num_shards)))
    limiter = None
    if buffer.limiter is not None:
        limiter = buffer.get(buffer.limiter.state.remote())
    driver = buffer.driver_state()
    manifest = {
        "format": manifest_mod.FORMAT,
        "schema_version": manifest_mod.SCHEMA_VERSION,
        "version": version,
        "num_shards": buffer.num_shards,
        "capacity": buffer.capacity,
        "prioritized": buffer.prioritized,
        "shards": [{"dir": name, **meta} for name, meta in zip(names, shards)],
        "driver": driver,
        "rate_limiter": limiter,
    }
    manifest_mod.commit(root, manifest)


def _shard_spec(path: str) -> tuple[Any, Any]:
    core = manifest_mod.read_core(Path(path))
    return core.get("state", {}).get("spec"), core.get("sampler")


def load(cls: Callable[..., B], root: Path, kwargs: dict[str, Any]) -> B:
    manifest = manifest_mod.read(root)
    shards = manifest["shards"]
    specs = [_shard_spec(s["path"]) for s in shards]
    first_spec, first_sampler = specs[0]
    for i, (spec, sampler) in enumerate(specs[1:], start=1):
        if spec and first_spec and spec != first_spec:
            raise CorruptSaveError(f"{root}: shard {i} has columns {spec}, shard 0 has {first_spec} (mismatched specs)")
        if sampler != first_sampler:
            raise CorruptSaveError(f"{root}: shard {i} samples with {sampler}, shard 0 with {first_sampler}")
    capacity = sum(s["capacity"] for s in shards)
    if capacity != manifest.get("capacity"):
        raise CorruptSaveError(f"{root}: shard capacities add up to {capacity}, manifest says {manifest.get('capacity')}")
    from ..samplers import Prioritized, Uniform

    params = first_sampler.get("params", {}) if isinstance(first_sampler, dict) else {}
    sampler = Prioritized(**params) if manifest.get("prioritized") else Uniform()
    driver = manifest.get("driver") or {}
    limiter_state = manifest.get("rate_limiter")
    rate_limiter = kwargs.pop("rate_limiter", None)
    if limiter_state is not None and not isinstance(rate_limiter, RateLimiter):
        raise CorruptSaveError(
            f"{root}: the buffer was saved with a rate limiter; pass the same one as rate_limiter="
        )
    if rate_limiter is not None and limiter_state is not None:
        rate_limiter.load_state_dict(limiter_state)
    buffer: Any = cls(
        len(shards),
        capacity,
        sampler=sampler,
        rate_limiter=rate_limiter,
        _restore={"paths": [s["path"] for s in shards], "generations": [s["generation"] for s in shards]},
        **kwargs,
    )
    if buffer.capacities != [s["capacity"] for s in shards]:
        raise CorruptSaveError(f"{root}: shard capacities {[s['capacity'] for s in shards]} are not an even split")
    try:
        buffer.load_driver_state(driver)
    except (KeyError, TypeError, ValueError) as err:
        raise CorruptSaveError(f"{root / manifest_mod.MANIFEST}: bad 'driver' section ({err})") from err
    buffer.info()  # every shard has loaded (a bad shard save raises here, not at the first call)
    return buffer
