"""A ``ReplayBuffer``'s full state: a consistent snapshot out, a checked restore in.

``snapshot`` runs under the buffer's lock and copies what it returns, so a writer thread that runs
the moment the lock is released cannot change it. ``restore`` checks the whole state (the parts it
owns here, the slot table, the storage, and whatever the sampler and admission check in their own
``load_state_dict``) before the buffer is changed, and puts the sampler and admission back as they
were if either refuses, so a refused state leaves the buffer exactly as it was.

A sampler or admission policy may also define ``check_table(table)``: it is called after its
``load_state_dict`` with the restored slot table (``SlotTable`` or ``RingTable``), to refuse state
that disagrees with it (e.g. priority mass on empty slots, an arrival counter that differs), by
raising ``ReplayBankError``.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any, Protocol

import numpy as np

from .admission import Admission, Fifo, Reservoir
from .errors import ReplayBankError
from .samplers.base import Sampler, View
from .schema import fields, integer, mapping
from .schema import rng as check_rng
from .slots import RingTable, SlotTable
from .spec import ColumnSpec, Spec
from .storage import Storage, check_columns

SCHEMA_VERSION = 2  # 1: fixed columns held every slot, ragged ones were split in two keys
KEYS = ("schema_version", "capacity", "spec", "rng", "table", "sampler", "admission", "columns")


class BufferParts(Protocol):
    """The parts of a ``ReplayBuffer`` that its state (and ``replaybank.persist``) reads and sets.

    A protocol rather than the class itself, so that neither this module nor ``persist`` imports
    ``buffer.py``, which imports them: the buffer calls into its state, never the other way round.
    """

    sampler: Sampler
    admission: Admission
    storage: Storage
    _rng: np.random.Generator
    _table: SlotTable | RingTable
    _lock: threading.RLock
    _view: View

    @property
    def capacity(self) -> int: ...

    @property
    def spec(self) -> Spec | None: ...


def copied(tree: Any) -> Any:
    """``tree`` with every numpy array (and container) copied."""
    if isinstance(tree, np.ndarray):
        return tree.copy()
    if isinstance(tree, Mapping):
        return {k: copied(v) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return [copied(v) for v in tree]
    return tree


def holes(table: SlotTable | RingTable) -> np.ndarray:
    """Slots below ``table.high`` that hold no item (their rows are not exported)."""
    if table.dense:
        return np.zeros(0, dtype=np.int64)
    return np.flatnonzero(table.ids_of(np.arange(table.high, dtype=np.int64)) < 0)


def snapshot(buffer: BufferParts, *, copy_columns: bool = True) -> dict[str, Any]:
    """The buffer's state; call with the buffer's lock held, or let this take it.

    Everything but the columns is copied. Fixed columns hold rows ``[0, table.high)``: copies with
    the rows of empty slots zeroed, or with ``copy_columns=False`` views of the live arrays, valid
    only while the caller keeps holding the lock (used to stream memory-mapped columns to disk).
    """
    with buffer._lock:
        table = buffer._table
        spec = buffer.spec or {}
        return {
            "schema_version": SCHEMA_VERSION,
            "capacity": buffer.capacity,
            "spec": {name: col.to_json() for name, col in spec.items()},
            "rng": copied(buffer._rng.bit_generator.state),
            "table": copied(table.state_dict()),
            "sampler": copied(buffer.sampler.state_dict()),
            "admission": copied(buffer.admission.state_dict()),
            "columns": buffer.storage.export(table.high, holes(table), copy=copy_columns)
            if spec
            else {},
        }


def _call(fn: Any, arg: Any, where: str) -> None:
    """``fn(arg)``, with whatever it raises turned into a ReplayBankError that names ``where``
    (a component that does not validate its state yet raises KeyError, TypeError and the like)."""
    try:
        fn(arg)
    except ReplayBankError as err:
        raise ReplayBankError(f"{where}: {err}") from err
    except KeyError as err:
        raise ReplayBankError(f"{where}: missing key {err.args[0]!r}") from err
    except (ValueError, TypeError, IndexError, AttributeError, OverflowError) as err:
        raise ReplayBankError(f"{where}: invalid state ({type(err).__name__}: {err})") from err


def _component(obj: Any, state: Any, where: str) -> None:
    """``obj.load_state_dict(state)``, errors named as ``where (Class)``."""
    _call(obj.load_state_dict, state, f"{where} ({type(obj).__name__})")


def _check_counters(buffer: BufferParts, arrivals: int) -> None:
    """Admission counters that must equal the slot table's arrival count."""
    for cls, attr in ((Fifo, "count"), (Reservoir, "seen")):
        if isinstance(buffer.admission, cls) and getattr(buffer.admission, attr) != arrivals:
            raise ReplayBankError(
                f"admission.{attr} = {getattr(buffer.admission, attr)} but table.arrivals = "
                f"{arrivals}: the two count the same items"
            )


def restore(buffer: BufferParts, state: Any) -> None:
    """Check ``state`` (``snapshot`` output) against the buffer and load it; see the module doc.

    Raises:
        ReplayBankError: a missing or unknown key, a value of the wrong type or range, or parts
            that disagree (columns vs spec and capacity, table vs admission); the message starts
            with the key. The buffer is unchanged when it raises.
    """
    fields(state, "state", KEYS)
    if state["schema_version"] != SCHEMA_VERSION:
        raise ReplayBankError(
            f"schema_version = {state['schema_version']!r} is not supported (expected {SCHEMA_VERSION})"
        )
    if integer(state["capacity"], "capacity", 1) != buffer.capacity:
        raise ReplayBankError(
            f"capacity = {state['capacity']}, but this buffer has capacity {buffer.capacity}"
        )
    spec = {
        name: ColumnSpec.from_json(col, f"spec[{name!r}]")
        for name, col in mapping(state["spec"], "spec").items()
    }
    generator = check_rng(state["rng"], "rng")
    table = type(buffer._table)(buffer.capacity)
    table.load_state_dict(state["table"])
    if not spec and table.arrivals:
        raise ReplayBankError(
            f"spec is empty, but table.arrivals = {table.arrivals}: items were stored"
        )
    if spec:
        _call(buffer.sampler.check_spec, spec, "spec")
        ragged = [name for name, col in spec.items() if col.ragged]
        if ragged and not getattr(buffer.storage, "supports_ragged", False):
            raise ReplayBankError(
                f"spec: column(s) {ragged} are ragged, but {type(buffer.storage).__name__} holds "
                "fixed-shape columns only"
            )
        full = not getattr(buffer.storage, "copy_on_restore", True)
        check_columns(buffer.capacity, spec, state["columns"], table.high, full=full)
    elif not isinstance(state["columns"], Mapping) or state["columns"]:
        raise ReplayBankError("columns: expected none (the spec is empty)")
    with buffer._lock:
        before = {
            "admission": copied(buffer.admission.state_dict()),
            "sampler": copied(buffer.sampler.state_dict()),
        }
        try:
            _component(buffer.admission, state["admission"], "admission")
            _check_counters(buffer, table.arrivals)
            _component(buffer.sampler, state["sampler"], "sampler")
            for part in ("admission", "sampler"):  # optional: checks against the restored table
                component = getattr(buffer, part)
                check = getattr(component, "check_table", None)
                if check is not None:
                    _call(check, table, f"{part} ({type(component).__name__})")
            if spec:
                buffer.storage.restore(buffer.capacity, spec, state["columns"], table.high)
        except BaseException:
            buffer.admission.load_state_dict(before["admission"])
            buffer.sampler.load_state_dict(before["sampler"])
            raise
        buffer._table = table
        buffer._view.table = table
        buffer._rng = generator


def clear(buffer: BufferParts) -> None:
    """Empty ``buffer`` (``ReplayBuffer.clear``): the FIFO ring restarts at slot 0 with its next
    arrival rounded up to a multiple of the capacity, so ids keep growing and none is reused; the
    sampler starts over through its ``on_clear``. Checked before anything changes.

    Raises:
        ReplayBankError: admission other than ``Fifo`` (its placement depends on everything it
            has seen), a sampler that tracks episodes across arrivals (``Trajectories``) or has
            no ``on_clear``, or an id space too full to round up.
    """
    with buffer._lock:
        table, admission, sampler = buffer._table, buffer.admission, buffer.sampler
        who = type(sampler).__name__
        if not isinstance(admission, Fifo) or not isinstance(table, RingTable):
            raise ReplayBankError(
                f"clear() needs Fifo admission (got {type(admission).__name__}, whose placement "
                "depends on every item it has seen); build a new buffer instead"
            )
        if getattr(sampler, "needs_time_order", False) or not hasattr(sampler, "on_clear"):
            raise ReplayBankError(
                f"clear() cannot restart {who} sampling (it has no on_clear, or tracks episodes "
                "across arrivals); build a new buffer instead"
            )
        base = -(-table.arrivals // buffer.capacity) * buffer.capacity
        if base >= 1 << (63 - table.shift):
            raise ReplayBankError(
                f"clear(): this buffer has issued {table.arrivals:,} ids; no room is left to restart "
                "the ring without reusing one; build a new buffer"
            )
        admission.count = base
        table.restart(base)
        sampler.on_clear()  # type: ignore[attr-defined]
