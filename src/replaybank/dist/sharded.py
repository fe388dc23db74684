"""``ShardedReplayBuffer``: one buffer API over ``num_shards`` Ray actors, with exact global sampling.

Writes go to one shard per call (round robin, or the shard the caller names). Sampling is global
and exact: every shard contributes in proportion to its sampling mass, and importance weights are
renormalised by the global minimum; the derivation is in :mod:`replaybank.dist.sampling`. Options
are checked in :mod:`replaybank.dist.options`, Ray calls waited on in :mod:`replaybank.dist.remote`.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..buffer import Batch
from ..buffer_checks import positive_int as _positive_int
from ..errors import ReplayBankError
from ..ratelimit import RateLimiter
from ..samplers import Prioritized
from ..spec import ColumnSpec, Spec, check_batch, infer_spec
from . import ids as idmod
from . import remote
from .limiter import LimiterActor
from .options import Component, check_options, prepare_checkpoint_dir
from .sampling import assemble, shard_probabilities
from .shard import Shard, Stats


class PendingBatch:
    """A sample in flight (``sample_async``): ``refs`` are the shards' Ray object refs; ``result()``
    waits for them and assembles the ``Batch`` (the weights need every shard's minimum)."""

    def __init__(self, owner: ShardedReplayBuffer, refs: list[Any], shards: list[int], stats: list[Stats]) -> None:
        self.owner, self.refs, self.shards, self.stats = owner, refs, shards, stats

    def result(self) -> Batch:
        parts = self.owner.get(self.refs, self.shards)
        return assemble(parts, self.shards, self.stats, self.owner.prioritized, self.owner.beta)


class ShardedReplayBuffer:
    """A replay buffer split over ``num_shards`` Ray actors, each holding a core ``ReplayBuffer``.

    Args:
        num_shards: number of shard actors (1..128).
        capacity: total capacity, split as evenly as possible over the shards.
        sampler: ``Uniform()`` (default) or ``Prioritized(...)``; the global distribution is exact
            (see :mod:`replaybank.dist.sampling`). Other samplers have no exact global form and are refused.
        admission, storage: as for ``ReplayBuffer``; an instance is copied into every shard, a
            callable ``f(shard_index)`` builds one per shard (needed for ``MemmapStorage`` folders).
        seed: seeds the driver's shard choice and every shard's generator.
        rate_limiter: optional ``MinSize`` / ``SampleToInsertRatio`` applied to every ``extend``,
            ``add`` and ``sample`` of this buffer and of its copies (in other processes).
        timeout: seconds any call waits for a shard before ``ShardTimeoutError``.
        max_restarts: how often Ray restarts a dead shard (from its last ``checkpoint()``).
        checkpoint_dir: where ``checkpoint()`` writes (a new temporary folder when
            ``max_restarts > 0`` and none is given; shared storage on a multi-node cluster).
        actor_options: extra ``ray.remote`` options for the shard actors (default ``num_cpus=0``).

    Copies of this object (e.g. handed to Ray actors) talk to the same shards and limiter.
    """

    def __init__(
        self,
        num_shards: int,
        capacity: int,
        *,
        sampler: Component = None,
        admission: Component = None,
        storage: Component = None,
        seed: int | None = None,
        rate_limiter: RateLimiter | None = None,
        timeout: float = 60.0,
        max_restarts: int = 0,
        checkpoint_dir: str | None = None,
        actor_options: Mapping[str, Any] | None = None,
        _restore: dict[str, Any] | None = None,
    ) -> None:
        num_shards, capacity, sampler, probe = check_options(
            num_shards, capacity, timeout, max_restarts, sampler, storage
        )
        ray = remote.ray_module()
        self.num_shards = num_shards
        self.capacity = capacity
        self.prioritized = isinstance(probe, Prioritized)
        self.beta: float | None = probe.beta if self.prioritized else None
        self.timeout = float(timeout)
        self.capacities = [capacity // num_shards + (i < capacity % num_shards) for i in range(num_shards)]
        seeds = np.random.SeedSequence(seed).spawn(num_shards + 1)
        self._rng = np.random.default_rng(seeds[-1])
        self._next = 0
        self._spec: Spec | None = None
        self._lock = threading.Lock()
        self.checkpoint_dir = checkpoint_dir = prepare_checkpoint_dir(checkpoint_dir, max_restarts)
        options = {"num_cpus": 0, **(actor_options or {})}
        options.update(max_restarts=max_restarts, max_task_retries=0)
        actor = ray.remote(Shard).options(**options)
        restore = _restore or {}
        self.shards = []
        for i in range(num_shards):
            components = {
                name: (value(i) if callable(value) and not hasattr(value, "bind") else value)
                for name, value in (("sampler", sampler), ("admission", admission), ("storage", storage))
                if value is not None
            }
            self.shards.append(
                actor.remote(
                    i,
                    self.capacities[i],
                    components,
                    int(seeds[i].generate_state(1)[0]),
                    checkpoint_dir,
                    restore.get("paths", [None] * num_shards)[i],
                    restore.get("generations", [0] * num_shards)[i],
                )
            )
        self.limiter = None
        if rate_limiter is not None:
            self.limiter = ray.remote(LimiterActor).options(num_cpus=0, max_concurrency=1000).remote(rate_limiter)
        self.limiter_timeout = None if rate_limiter is None else rate_limiter.timeout

    # -- plumbing -----------------------------------------------------------------------------
    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        del state["_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def get(self, refs: Any, shards: Sequence[int] | None = None, *, timeout: float | None = None) -> Any:
        """``ray.get`` with this buffer's timeout and clear errors: ``ShardFailedError`` when a
        shard died, ``ShardTimeoutError`` when it did not answer, the original error for bad input."""
        wait = self.timeout if timeout is None else timeout
        return remote.get(refs, shards, wait=wait, timeout=self.timeout)

    def _acquire(self, what: str, n: int, timeout: Any) -> None:
        if self.limiter is None:
            return
        wait = self.limiter_timeout if timeout is None else timeout
        ref = self.limiter.acquire.remote(what, n, wait)
        self.get(ref, timeout=self.timeout + (wait if wait is not None else 1e9))

    def _refund(self, what: str, n: int) -> None:
        if self.limiter is not None:
            self.limiter.refund.remote(what, n)

    def _pick_shard(self, shard: int | None) -> int:
        if shard is None:
            with self._lock:
                shard, self._next = self._next, (self._next + 1) % self.num_shards
            return shard
        if isinstance(shard, bool) or not isinstance(shard, (int, np.integer)) or not 0 <= shard < self.num_shards:
            raise ReplayBankError(f"shard={shard!r}: expected an integer in [0, {self.num_shards})")
        return int(shard)

    # -- writing ------------------------------------------------------------------------------
    def _rows(self, columns: Mapping[str, Any]) -> tuple[int, dict[str, Any]]:
        spec = self._spec if self._spec is not None else infer_spec(columns, ragged=False)
        n, rows = check_batch(spec, columns)  # the same check as the core: same errors, no round trip
        if self._spec is None:
            self._spec = spec
        return n, rows

    def extend_async(
        self, columns: Mapping[str, Any], *, priorities: Any = None, groups: Any = None,
        shard: int | None = None, timeout: float | None = None,
    ) -> Any:
        """``extend`` without waiting: returns the Ray object ref of the ids (``get`` it)."""
        n, rows = self._rows(columns)
        self._acquire("insert", n, timeout)
        target = self._pick_shard(shard)
        return self.shards[target].extend.remote(rows, priorities, groups)

    def extend(
        self, columns: Mapping[str, Any], *, priorities: Any = None, groups: Any = None,
        shard: int | None = None, timeout: float | None = None,
    ) -> np.ndarray:
        """Add a batch of items to one shard (round robin unless ``shard`` is given); returns
        their global int64 ids. ``timeout`` bounds the wait for the rate limiter."""
        n, rows = self._rows(columns)
        self._acquire("insert", n, timeout)
        target = self._pick_shard(shard)
        try:
            return self.get(self.shards[target].extend.remote(rows, priorities, groups), [target])
        except BaseException:
            self._refund("insert", n)
            raise

    def add(self, *, shard: int | None = None, timeout: float | None = None, **item: Any) -> int:
        """Add one item (keyword columns); returns its global id."""
        batch = {k: np.asarray(v)[None] for k, v in item.items()}
        return int(self.extend(batch, shard=shard, timeout=timeout)[0])

    def add_async(self, *, shard: int | None = None, timeout: float | None = None, **item: Any) -> Any:
        return self.extend_async({k: np.asarray(v)[None] for k, v in item.items()}, shard=shard, timeout=timeout)

    def update_priorities_async(self, ids: Any, priorities: Any) -> list[Any]:
        """Route each id to its shard (from the id's high bits); returns one ref per shard touched,
        each resolving to how many ids that shard applied."""
        return self._route_priorities(ids, priorities)[0]

    def _route_priorities(self, ids: Any, priorities: Any) -> tuple[list[Any], list[int]]:
        from ..samplers.priorities import check_priorities

        ids = idmod.as_ids(ids)
        p = check_priorities(priorities, ids.size)
        if not self.prioritized:
            raise ReplayBankError("update_priorities: this buffer samples uniformly; use sampler=Prioritized(...)")
        owner = idmod.shard_of(ids)
        if ids.size and (ids.min() < 0 or owner.max() >= self.num_shards):
            bad = ids[(ids < 0) | (owner >= self.num_shards)]
            raise ReplayBankError(
                f"ids {bad[:5].tolist()} were never issued by this buffer: their shard bits name "
                f"shard(s) {sorted(set((bad >> idmod.SHARD_SHIFT).tolist()))[:5]} of {self.num_shards}"
            )
        refs, shards = [], []
        for s in np.unique(owner):
            mine = owner == s
            refs.append(self.shards[s].update_priorities.remote(ids[mine], p[mine]))
            shards.append(int(s))
        return refs, shards

    def update_priorities(self, ids: Any, priorities: Any) -> int:
        """Set new priorities; returns how many ids were applied (ids of overwritten items, or
        issued by a shard before it restarted, are skipped)."""
        refs, shards = self._route_priorities(ids, priorities)
        return int(sum(self.get(refs, shards)))

    # -- reading ------------------------------------------------------------------------------
    def stats(self) -> list[Stats]:
        """Per shard ``(size, mass, min_mass)`` (one parallel round trip)."""
        return self.get([s.stats.remote() for s in self.shards], list(range(self.num_shards)))

    def __len__(self) -> int:
        return int(sum(size for size, _, _ in self.stats()))

    def sample_async(self, batch_size: int, *, timeout: float | None = None) -> PendingBatch:
        """Choose the per-shard counts now (one round trip) and start the shards' sampling;
        ``.result()`` on the returned object assembles the batch."""
        batch_size = _positive_int(batch_size, "batch_size")
        self._acquire("sample", batch_size, timeout)
        try:
            stats = self.stats()
            probabilities = shard_probabilities(stats)
            with self._lock:
                counts = self._rng.multinomial(batch_size, probabilities)
            chosen = [int(s) for s in np.flatnonzero(counts)]
            refs = [self.shards[s].sample.remote(int(counts[s]), self.beta) for s in chosen]
        except BaseException:
            self._refund("sample", batch_size)
            raise
        return PendingBatch(self, refs, chosen, stats)

    def sample(self, batch_size: int, *, timeout: float | None = None) -> Batch:
        """Draw a batch over all shards (the distribution is in :mod:`replaybank.dist.sampling`)."""
        return self.sample_async(batch_size, timeout=timeout).result()

    def get_items(self, ids: Any) -> dict[str, np.ndarray]:
        """The stored rows of ``ids``, in order."""
        ids = idmod.as_ids(ids)
        owner = idmod.shard_of(ids)
        order, parts = [], []
        for s in np.unique(owner):
            where = np.flatnonzero(owner == s)
            order.append(where)
            parts.append(self.get(self.shards[s].get.remote(ids[where]), [int(s)]))
        back = np.argsort(np.concatenate(order), kind="stable")
        return {name: np.concatenate([p[name] for p in parts])[back] for name in parts[0]}

    # -- health, state ------------------------------------------------------------------------
    def info(self) -> list[dict[str, Any]]:
        """Per shard: index, generation, process id, size, spec and where it was restored from."""
        return self.get([s.info.remote() for s in self.shards], list(range(self.num_shards)))

    def driver_state(self) -> dict[str, Any]:
        """The driver's own part of a save (JSON-ready): generator, next shard, beta, spec."""
        with self._lock:
            return {
                "rng": self._rng.bit_generator.state,
                "next_shard": self._next,
                "beta": self.beta,
                "spec": None if self._spec is None else {k: v.to_json() for k, v in self._spec.items()},
            }

    def load_driver_state(self, driver: dict[str, Any]) -> None:
        """Set what ``driver_state`` returned; raises KeyError, TypeError or ValueError on a bad one."""
        with self._lock:
            self._rng.bit_generator.state = driver["rng"]
            self._next = int(driver["next_shard"]) % self.num_shards
            self.beta = None if driver.get("beta") is None else float(driver["beta"])
            spec = driver.get("spec")
            self._spec = None if spec is None else {k: ColumnSpec.from_json(v) for k, v in spec.items()}

    def save(self, path: str | Any) -> None:
        """Write every shard (a core save each) and a checksummed global manifest, atomically."""
        from . import state

        state.save(self, Path(path))

    def checkpoint(self) -> None:
        """Save to ``checkpoint_dir``: what a shard restarted by Ray restores."""
        if self.checkpoint_dir is None:
            raise ReplayBankError("checkpoint(): this buffer has no checkpoint_dir (pass checkpoint_dir= or max_restarts=)")
        self.save(self.checkpoint_dir)

    @classmethod
    def load(cls, path: str | Any, **kwargs: Any) -> ShardedReplayBuffer:
        """Restore a ``save``: same shards, ids, priorities, generators and rate-limiter counts,
        so the next batches are those the saved buffer would have drawn. ``kwargs`` as for the
        constructor (``timeout``, ``max_restarts``, ``checkpoint_dir``, ``actor_options``)."""
        from . import state

        return state.load(cls, Path(path), kwargs)

    def close(self) -> None:
        """Kill the shard and limiter actors (waiting rate-limited calls get ``RateLimiterClosed``)."""
        ray = remote.ray_module()
        if self.limiter is not None:
            self.get(self.limiter.close.remote())
            ray.kill(self.limiter)
        for shard in self.shards:
            ray.kill(shard, no_restart=True)

    def __repr__(self) -> str:
        kind = "Prioritized" if self.prioritized else "Uniform"
        return f"ShardedReplayBuffer(num_shards={self.num_shards}, capacity={self.capacity}, sampler={kind})"
