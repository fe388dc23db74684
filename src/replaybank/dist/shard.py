"""One shard: a core ``ReplayBuffer`` inside a Ray actor, speaking in global ids.

The class is plain Python (``ray.remote`` wraps it in ``sharded.py``), so it needs no Ray to import.
Each method answers with the shard's *stats* where the driver needs them for global sampling:
``(size, mass, min_mass)``, where ``mass`` is the total sampling mass (the number of items for
uniform sampling, ``sum_i (p_i + eps)^alpha`` for prioritized) and ``min_mass`` the smallest
per-item mass (``min_i (p_i + eps)^alpha``; 1 for uniform).

On start the shard takes the next generation (kept in ``checkpoint_dir/generations/``) and restores
its last checkpoint if there is one, else the save it was loaded from, else starts empty.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np

from ..buffer import ReplayBuffer
from ..errors import ReplayBankError
from ..samplers import Prioritized
from . import ids as idmod
from . import manifest as manifest_mod

Stats = tuple[int, float, float]


def _bump_generation(checkpoint_dir: Path, index: int, first: int) -> int:
    """``first`` on the shard's first start, one more than last time on every restart."""
    folder = checkpoint_dir / "generations"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{manifest_mod.shard_dir_name(index)}.json"
    generation = first
    if path.exists():
        generation = int(json.loads(path.read_text())["generation"]) + 1
    if generation >= idmod.MAX_GENERATIONS:
        raise ReplayBankError(
            f"shard {index} has restarted {generation} times; ids have room for "
            f"{idmod.MAX_GENERATIONS} generations (see replaybank.dist.ids)"
        )
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"generation": generation}))
    os.replace(tmp, path)
    return generation


def _checkpoint_of(checkpoint_dir: Path, index: int) -> str | None:
    if not (checkpoint_dir / manifest_mod.MANIFEST).exists():
        return None
    shards = manifest_mod.read(checkpoint_dir)["shards"]
    return str(shards[index]["path"]) if index < len(shards) else None


class Shard:
    """A core buffer plus the shard's index and generation."""

    def __init__(
        self,
        index: int,
        capacity: int,
        components: dict[str, Any],
        seed: int,
        checkpoint_dir: str | None = None,
        restore_from: str | None = None,
        generation: int = 0,
    ) -> None:
        self.index = index
        self.generation = generation
        source = restore_from
        if checkpoint_dir is not None:
            root = Path(checkpoint_dir)
            self.generation = _bump_generation(root, index, generation)
            source = _checkpoint_of(root, index) or restore_from
        self.restored_from = source
        if source is not None:
            self.buffer = ReplayBuffer.load(source)
            if self.buffer.capacity != capacity:
                raise ReplayBankError(
                    f"{source}: shard {index} has capacity {self.buffer.capacity}, expected {capacity}"
                )
        else:
            self.buffer = ReplayBuffer(capacity, seed=seed, **components)
        sampler = self.buffer.sampler
        self.prioritized: Prioritized | None = sampler if isinstance(sampler, Prioritized) else None

    # -- introspection ------------------------------------------------------------------------
    def stats(self) -> Stats:
        size = len(self.buffer)
        if size == 0:
            return 0, 0.0, math.inf
        if self.prioritized is not None:
            return size, self.prioritized.mass(), self.prioritized.min_mass()
        return size, float(size), 1.0

    def info(self) -> dict[str, Any]:
        spec = self.buffer.spec
        return {
            "index": self.index,
            "generation": self.generation,
            "pid": os.getpid(),
            "size": len(self.buffer),
            "spec": None if spec is None else {k: v.to_json() for k, v in spec.items()},
            "restored_from": self.restored_from,
        }

    def ping(self, delay: float = 0.0) -> int:
        """The actor's process id, after ``delay`` seconds (health checks, tests)."""
        if delay > 0:
            import time

            time.sleep(delay)
        return os.getpid()

    # -- writing ------------------------------------------------------------------------------
    def extend(
        self, columns: dict[str, Any], priorities: Any = None, groups: Any = None
    ) -> np.ndarray:
        local = self.buffer.extend(columns, priorities=priorities, groups=groups)
        return idmod.encode(self.index, self.generation, local)

    def update_priorities(self, ids: np.ndarray, priorities: np.ndarray) -> int:
        """Apply to the ids of this generation; older ones belong to items issued before a
        restart and are skipped, like overwritten items."""
        current = idmod.generation_of(ids) == self.generation
        if not current.any():
            return 0
        return self.buffer.update_priorities(idmod.local_of(ids[current]), priorities[current])

    # -- reading ------------------------------------------------------------------------------
    def sample(
        self, batch_size: int, beta: float | None
    ) -> tuple[dict[str, Any], np.ndarray, np.ndarray | None, Stats]:
        if beta is not None and self.prioritized is not None:
            self.prioritized.beta = beta
        batch = self.buffer.sample(batch_size)
        ids = idmod.encode(self.index, self.generation, np.asarray(batch.ids))
        return batch.data, ids, batch.weights, self.stats()

    def get(self, ids: np.ndarray) -> dict[str, Any]:
        if (idmod.generation_of(ids) != self.generation).any():
            raise ReplayBankError(
                f"ids {ids[:5].tolist()} were issued by shard {self.index} before it restarted; "
                "items not in its last checkpoint are gone"
            )
        return self.buffer.get(idmod.local_of(ids))

    # -- state --------------------------------------------------------------------------------
    def save(self, path: str) -> dict[str, Any]:
        self.buffer.save(path)
        digest = manifest_mod.sha256_file(Path(path) / "manifest.json")
        return {"manifest_sha256": digest, "generation": self.generation, "capacity": self.buffer.capacity}
