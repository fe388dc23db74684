"""``ReplayBuffer``: the one class users hold. It owns ids, locking and the order of calls.

Every write goes: validate -> admission.place -> storage.write -> slot table -> sampler.on_write.
Every read goes: sampler.sample -> storage.read. Nothing is mutated until the whole batch has been
validated, so a bad ``extend`` leaves the buffer exactly as it was.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from . import batch as output
from . import buffer_checks, buffer_state, single
from .admission import Admission, AdmissionBase, Fifo
from .batch import AsTensors, Batch
from .buffer_state import SCHEMA_VERSION
from .checks import check_int
from .errors import ReplayBankError
from .ragged import Ragged
from .samplers.base import Sampler, SamplerBase, View
from .samplers.uniform import Uniform
from .slots import RingTable, SlotTable, kept
from .spec import Cast, Spec, as_spec, check_batch, infer_spec
from .storage import ColumnarStorage, Storage

__all__ = ["Batch", "ReplayBuffer", "SCHEMA_VERSION"]


class ReplayBuffer:
    """A replay buffer of named columns with pluggable admission, sampling and storage.

    Args:
        capacity: the most items stored at once.
        sampler: how batches are drawn (default ``Uniform()``); see ``replaybank.samplers``.
        admission: which slot a new item takes (default ``Fifo()``); see ``replaybank.admission``.
        storage: where items live (default ``ColumnarStorage()``, in memory); ``MemmapStorage``
            for on-disk buffers, ``RaggedStorage`` for variable-length rows.
        seed: a non-negative int seeding the buffer's generator, or a ``numpy.random.Generator``
            to use as it is (all randomness comes from it).
        spec: optional ``{name: (shape, dtype)}``; otherwise inferred from the first ``extend``.
        cast: how values of another dtype than their column's are stored. ``"checked"``
            (default): converted within their kind only if every value survives (300 into int8,
            1e40 into float32 or 2**64-1 into int64 are refused, naming the column);
            ``"unsafe"``: numpy's ``astype``, values may wrap or overflow.
        sample_dtypes: optional ``{column: dtype}`` that sampled batches come back as (e.g.
            ``{"reward": "float32", "done": "float32"}`` for a TD target), whatever is stored;
            numpy's ``astype`` on the sampled copy. Also settable later as ``buf.sample_dtypes``.

    Sampler, admission and storage instances belong to one buffer. ``extend``, ``add``,
    ``sample`` and ``update_priorities`` may be called from several threads.

    >>> buf = ReplayBuffer(1000, seed=0)
    >>> ids = buf.extend({"obs": np.zeros((3, 4), np.float32), "action": np.array([0, 1, 1])})
    >>> len(buf), buf.sample(2).data["obs"].shape
    (3, (2, 4))
    """

    def __init__(
        self,
        capacity: int,
        *,
        sampler: Sampler | None = None,
        admission: Admission | None = None,
        storage: Storage | None = None,
        seed: int | np.random.Generator | None = None,
        spec: Mapping[str, Any] | None = None,
        cast: Cast = "checked",
        sample_dtypes: Mapping[str, Any] | None = None,
    ) -> None:
        self._capacity = buffer_checks.capacity(capacity)
        self._cast: Cast = buffer_checks.cast(cast)
        self._row_spec: Spec | None = None  # the spec _row_nbytes was computed for
        self._row_nbytes = 0
        self.sampler: Sampler = sampler if sampler is not None else Uniform()
        self.admission: Admission = admission if admission is not None else Fifo()
        self.storage: Storage = storage if storage is not None else ColumnarStorage()
        buffer_checks.time_order(self.sampler, self.admission)
        buffer_checks.bookkeeping_memory(self._capacity, self.sampler, self.admission)
        if seed is not None and not isinstance(seed, np.random.Generator):
            check_int(seed, "ReplayBuffer", "seed", low=0)
        self._rng = np.random.default_rng(seed)
        ring = self.admission.keeps_time_order
        self._table: SlotTable | RingTable = (
            RingTable(self._capacity) if ring else SlotTable(self._capacity)
        )
        self._lock = threading.RLock()
        self.admission.bind(self._capacity)
        self.sampler.bind(self._capacity)
        self._view = View(self._table, self.storage)
        self._castable: dict[tuple[str, np.dtype[Any]], bool] = {}
        # single items skip batch arrays with an admission that places them one at a time
        self._one_by_one = type(self.admission).place_one is not AdmissionBase.place_one
        self._plan_spec: Spec | None = None
        self._one_plan: single.Plan | None = None
        self._last_arrival = 1 << (63 - self._table.shift)  # ids run out here (id_space)
        # the per-step path builds index arrays only for a slot table or a sampler that reads them
        self._notify_one = not isinstance(self._table, RingTable) or (
            type(self.sampler).on_write is not SamplerBase.on_write
        )
        # ... and into a ring, a sampler that reads no rows is told the slot alone
        hook = self._notify_one and ring and not self.sampler.needs_rows
        self._write_hook = self.sampler.on_write_one if hook else None
        # update_priorities of the last weighted batch's ids: the sampler's one-pass check and set,
        # where it has one (the default always declines)
        one_pass = type(self.sampler).update_checked is not SamplerBase.update_checked
        self._update_checked = self.sampler.update_checked if one_pass else None
        self.sample_dtypes = sample_dtypes  # type: ignore[assignment]
        if spec is not None:
            checked = as_spec(spec)
            output.check_names(self._sample_dtypes, checked)
            self.storage.allocate(self._capacity, checked)

    # -- properties -----------------------------------------------------------------------------
    @property
    def capacity(self) -> int:
        return self._capacity

    @property
    def spec(self) -> Spec | None:
        return self.storage.spec

    @property
    def sample_dtypes(self) -> dict[str, np.dtype[Any]]:
        """``{column: dtype}`` applied to every sampled batch (see the constructor)."""
        return dict(self._sample_dtypes)

    @sample_dtypes.setter
    def sample_dtypes(self, value: Mapping[str, Any] | None) -> None:
        dtypes = output.check_sample_dtypes(value)
        output.check_names(dtypes, self.spec)
        self._sample_dtypes = dtypes

    def __len__(self) -> int:
        return self._table.size

    def __repr__(self) -> str:
        cols = ", ".join(self.spec or {})
        return (
            f"ReplayBuffer({len(self)}/{self._capacity}, columns=[{cols}], sampler={type(self.sampler).__name__}, "
            f"admission={type(self.admission).__name__}, storage={type(self.storage).__name__})"
        )

    # -- writing --------------------------------------------------------------------------------
    def extend(
        self, columns: Mapping[str, Any], *, priorities: Any = None, groups: Any = None
    ) -> np.ndarray:
        """Add a batch of items, one row per item in every column.

        Args:
            columns: column name -> array-like with a leading item axis (for ragged columns in a
                ``RaggedStorage``: a list of arrays).
            priorities: optional per-item priorities for prioritized samplers (finite, >= 0).
            groups: per-item integer group ids, required by ``GroupBalanced`` and ``Window``.

        Returns:
            int64 ids, one per input row, strictly increasing and never reused. Rows the admission
            policy did not keep still get an id; ``contains(ids)`` says which are stored.

        Raises:
            ReplayBankError: unknown, missing or mis-shaped columns, bad dtypes, bad priorities or
                groups. Nothing is stored when it raises.
        """
        plan = self._plan()
        if plan is not None and priorities is None and groups is None:
            one = single.coerce(plan, columns, self._castable, self._cast, batched=True)
            if one is not None:  # one row: the per-step path
                return np.array([self._write_one(one)], dtype=np.int64)
        with self._lock:
            spec = self.spec
            if spec is None:
                spec = infer_spec(columns, ragged=self.storage.supports_ragged)
                output.check_names(self._sample_dtypes, spec)
            n, rows = check_batch(spec, columns, self._cast)
            self.sampler.check_spec(spec)
            buffer_checks.rows(self.sampler, rows)
            prio = buffer_checks.priorities(self.sampler, priorities, n)
            grp = buffer_checks.groups(self.admission, groups, n)
            buffer_checks.id_space(self._table, self._capacity, n)
            if n == 0:
                return np.zeros(0, dtype=np.int64)
            if self.spec is None:
                self.storage.allocate(self._capacity, spec)
            return self._write(n, rows, prio, grp)

    def add(self, **item: Any) -> int:
        """Add one item given as keyword arguments (``buf.add(obs=o, action=a, reward=r)``).

        The per-step path of RL loops: with FIFO admission and fixed columns it builds no batch
        arrays. For priorities or groups use ``extend`` with a batch of one. Returns the item's id.

        Raises:
            InvalidArgumentError: besides ``extend``'s errors, when every value carries a leading
                env axis (a vector env's step: ``obs`` of shape ``(n_envs, *obs_shape)``); store
                those with ``extend`` (see ``single.refuse_env_axis``).
        """
        plan = self._one_plan if self.storage.spec is self._plan_spec else self._plan()
        if plan is not None:
            values = single.coerce(plan, item, self._castable, self._cast, batched=False)
            if values is not None:
                return self._write_one(values)
        single.refuse_env_axis(self.spec, item)
        batch = {
            k: [v] if isinstance(v, (list, Ragged)) else np.asarray(v)[None]
            for k, v in item.items()
        }
        return int(self.extend(batch)[0])

    def _plan(self) -> single.Plan | None:
        """The single-item path's column plan (None: no spec yet, ragged columns, or an
        admission without ``place_one``), rebuilt only when the spec object changes."""
        spec = self.spec
        if spec is not self._plan_spec:
            ok = spec is not None and self._one_by_one
            self._one_plan, self._plan_spec = (single.plan(spec) if ok else None), spec  # type: ignore[arg-type]
        return self._one_plan

    def _write_one(self, values: dict[str, Any]) -> int:
        """Store one checked item (``single.coerce``) in the ring of an admission that places
        items one at a time; returns its id. Samplers that read no rows are told the slot alone
        (``on_write_one``); index arrays are built only for a slot table or a sampler that reads
        the rows."""
        sampler = self.sampler
        written: dict[str, np.ndarray] = {}
        if sampler.needs_rows:
            written = single.rows(self._one_plan, values)  # type: ignore[arg-type]
            buffer_checks.rows(sampler, written)
        with self._lock:
            table = self._table
            arrival = table.arrivals
            if arrival + 1 >= self._last_arrival:
                buffer_checks.id_space(table, self._capacity, 1)
            slot = self.admission.place_one()
            self.storage.write_one(slot, values)
            item_id = (arrival << table.shift) | slot
            # a write hook, or no notice at all, is only ever set up for a ring (see __init__)
            if self._write_hook is not None:
                table.advance(arrival + 1)  # type: ignore[union-attr]
                self._write_hook(slot, self._view)
            elif self._notify_one:
                index = np.array([slot], dtype=np.int64)
                table.fill(index, np.array([item_id]), arrival + 1)
                sampler.on_write(index, written, None, self._view)
            else:  # a ring with a sampler that keeps no per-item state: nothing to index
                table.advance(arrival + 1)  # type: ignore[union-attr]
            return item_id

    def _write(
        self, n: int, rows: dict[str, Any], prio: np.ndarray | None, groups: np.ndarray | None
    ) -> np.ndarray:
        first = self._table.arrivals
        placement = self.admission.place(n, groups, self._rng)
        slots = placement.slots
        ids = self._table.make_ids(first + np.arange(n, dtype=np.int64), slots)
        keep = None if placement.run is not None else kept(slots)
        if keep is not None:
            rows = {
                k: [v[i] for i in keep] if isinstance(v, list) else v[keep] for k, v in rows.items()
            }
            slots = slots[keep]
            prio = None if prio is None else prio[keep]
        if len(placement.evict):
            self._table.evict(placement.evict)
            self.sampler.on_evict(placement.evict)
        self.storage.write(placement.run if placement.run is not None else slots, rows)
        self._table.fill(slots, ids if keep is None else ids[keep], first + n)
        self.sampler.on_write(slots, rows, prio, self._view)
        return ids

    # -- reading --------------------------------------------------------------------------------
    def sample(
        self, batch_size: int, *, as_tensors: AsTensors | None = None, device: Any = None
    ) -> Batch:
        """Draw a batch; see the sampler for the distribution.

        Args:
            batch_size: items in the batch.
            as_tensors: ``"torch"``: columns and weights come back as torch tensors (ids stay
                numpy, for ``update_priorities``), after ``sample_dtypes`` is applied.
            device: where the tensors go (``"cuda"``, a ``torch.device``); CPU when omitted.

        A weighted batch's ids (prioritized samplers, FIFO admission) come back read-only:
        ``update_priorities`` given that array before the next write skips the id checks.

        Raises:
            EmptyBufferError: nothing is stored yet.
            ReplayBankError: ``batch_size`` is not positive, or exceeds the stored items for a
                sampler that never repeats an item within a batch; ``device`` without
                ``as_tensors``; a ragged column with ``as_tensors``.
            ImportError: ``as_tensors="torch"`` without torch installed (the ``torch`` extra).
        """
        batch_size = buffer_checks.positive_int(batch_size, "batch_size")
        torch, device = output.check_output(as_tensors, device)
        batch = self._sample(batch_size)
        if self._sample_dtypes or torch is not None:
            return output.finish(batch, self._sample_dtypes, torch, device)
        return batch

    def _sample(self, batch_size: int) -> Batch:
        if self.spec is not self._row_spec:  # per-row bytes, computed once per spec
            self._row_nbytes, self._row_spec = buffer_checks.row_nbytes(self.spec, self.sampler), self.spec
        buffer_checks.batch_memory(batch_size, self._row_nbytes)
        with self._lock:
            slots, weights = self.sampler.sample(batch_size, self._view, self._rng)
            batch = output.read(self.storage, self._table, slots, weights)
            if weights is not None:  # their priorities come back: the ring remembers the slots
                self._table.remember(batch.ids, slots)
            return batch

    def clear(self) -> None:
        """Remove every stored item. Ids keep growing (an id issued before is never reused, and
        ``update_priorities`` skips it); the spec, the components' parameters, the RNG stream and
        the allocated memory stay; the sampler starts over (priorities, epoch order).

        The FIFO ring restarts at slot 0 with its next arrival rounded up to a multiple of the
        capacity, so ids keep growing and none is reused; the sampler starts over through its
        ``on_clear``. Checked before anything changes.

        Raises:
            ReplayBankError: admission other than ``Fifo`` (its placement depends on everything
                it has seen), a sampler that tracks episodes across arrivals (``Trajectories``),
                or an id space too full to round up; the buffer is unchanged.
        """
        with self._lock:
            table, admission, sampler = self._table, self.admission, self.sampler
            if not isinstance(admission, Fifo) or not isinstance(table, RingTable):
                raise ReplayBankError(
                    f"clear() needs Fifo admission (got {type(admission).__name__}, whose placement "
                    "depends on every item it has seen); build a new buffer instead"
                )
            if sampler.needs_time_order:
                raise ReplayBankError(
                    f"clear() cannot restart {type(sampler).__name__} sampling (it tracks episodes "
                    "across arrivals); build a new buffer instead"
                )
            base = -(-table.arrivals // self._capacity) * self._capacity
            if base >= 1 << (63 - table.shift):
                raise ReplayBankError(
                    f"clear(): this buffer has issued {table.arrivals:,} ids; no room is left to "
                    "restart the ring without reusing one; build a new buffer"
                )
            admission.count = base
            table.restart(base)
            sampler.on_clear()

    def update_priorities(self, ids: Any, priorities: Any) -> int:
        """Set new priorities for sampled items (e.g. |TD error|).

        Ids whose item has since been overwritten or evicted are skipped. Returns how many ids
        were applied. Raises ``ReplayBankError`` for ids this buffer never issued, for priorities
        that are NaN, infinite or negative, or when the sampler has no priorities.
        """
        if ids is self._table.remembered:  # the last weighted batch's ids (read-only)
            if self._update_checked is not None:  # priorities checked in the pass that sets them
                with self._lock:
                    slots = self._table.recall(ids)
                    if slots is not None and self._update_checked(slots, priorities):
                        return int(slots.size)
            p = buffer_checks.priorities_of(self.sampler, priorities, ids.size)  # one per id: a trajectory batch is 2-D
            with self._lock:
                slots = self._table.recall(ids)  # None if anything was written since
                if slots is not None:
                    self.sampler.update_priorities(slots, p)
                    return len(p)
        ids, p = buffer_checks.updates(self.sampler, ids, priorities)
        with self._lock:
            slots, live = self._table.slots_of(ids)
            applied = int(np.count_nonzero(live))
            if applied < len(live):  # the common case, every id still stored, needs no masking
                slots, p = slots[live], p[live]
            # repeated ids are passed on in order: samplers apply them so the last one wins
            self.sampler.update_priorities(slots, p)
            return applied

    def contains(self, ids: Any) -> np.ndarray:
        """Boolean per id: is that item still stored?"""
        with self._lock:
            return self._table.slots_of(ids)[1]

    def get(self, ids: Any) -> dict[str, np.ndarray | Ragged]:
        """The stored rows of ``ids`` (all must still be stored)."""
        with self._lock:
            slots, live = self._table.slots_of(ids)
            if not live.all():
                raise ReplayBankError(
                    f"ids {np.asarray(ids).ravel()[~live][:5].tolist()} are no longer stored"
                )
            return self.storage.read(slots)

    # -- state ----------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue exactly: data, slot table, sampler, admission, RNG.

        A consistent snapshot taken under the lock: every array is a copy, so later writes do
        not change it. Fixed columns hold the rows of slots ``[0, table.high)``, zeros for empty
        slots; ragged columns are ``Ragged`` rows of the same slots.
        """
        with self._lock:
            return buffer_state.snapshot(self, self._table, self._rng)

    def stream_state(self, write_columns: Callable[[dict[str, Any], np.ndarray], None]) -> dict[str, Any]:
        """``state_dict()`` without its ``"columns"``, which are handed to
        ``write_columns(columns, holes)`` as views of the live arrays while the lock is held
        (``holes``: slots below ``table.high`` holding no item, whose rows are stale). How
        ``save`` writes memory-mapped columns too big to copy."""
        with self._lock:
            state = buffer_state.snapshot(self, self._table, self._rng, copy_columns=False)
            write_columns(state.pop("columns"), buffer_state.holes(self._table))
            return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore a ``state_dict`` into a buffer built with the same capacity and components.

        Every part is checked before anything changes (see ``replaybank.buffer_state``).

        Raises:
            ReplayBankError: a missing, unknown or invalid key, named in the message; the buffer
                is unchanged.
        """
        with self._lock:
            self._table, self._rng = buffer_state.restore(self, self._table, state)
            self._view.table = self._table

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the buffer to directory ``path`` atomically (see ``replaybank.persist``)."""
        from .persist import save

        save(self, path)

    @classmethod
    def load(
        cls,
        path: str | os.PathLike[str],
        *,
        mmap: bool | None = None,
        directory: str | os.PathLike[str] | None = None,
    ) -> ReplayBuffer:
        """Load a buffer written by ``save``, after checking every checksum and every field.

        Args:
            path: the directory ``save`` wrote.
            mmap: map fixed columns copy-on-write from the saved files instead of reading them
                into RAM (the save is never modified; pages written later become private
                memory). ``None`` (default): map when the buffer was saved from a
                ``MemmapStorage``, read otherwise.
            directory: come back as ``MemmapStorage(directory)``: the columns are copied into
                ``directory`` and mapped read-write there, like the buffer that was saved.

        Raises:
            CorruptSaveError: the save is incomplete, altered, or not a save this replaybank
                wrote; the message names the file and key. See ``replaybank.persist``.
        """
        from .persist import load

        return load(path, cls, mmap=mmap, directory=directory)
