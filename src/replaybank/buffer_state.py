"""A ``ReplayBuffer``'s state format: a snapshot of its parts out, a checked restore in.

The buffer calls both with its lock held and hands over its slot table and generator; neither
function keeps them. ``snapshot`` copies what it returns, so a writer thread that runs the moment
the lock is released cannot change it. ``restore`` checks the whole state (the parts it owns here,
the slot table, the storage, and whatever the sampler and admission check in their own
``load_state_dict``) and returns the new table and generator for the buffer to take; it puts the
sampler and admission back as they were if either refuses, so a refused state leaves the buffer
exactly as it was.

After its ``load_state_dict``, each sampler and admission policy is shown the restored slot table
(``SlotTable`` or ``RingTable``) through ``check_table``, to refuse state that disagrees with it
(e.g. priority mass on empty slots, an arrival counter that differs), by raising
``ReplayBankError``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

import numpy as np

from .admission import Admission, Fifo, Reservoir
from .errors import ReplayBankError
from .samplers.base import Sampler
from .schema import fields, integer, mapping
from .schema import rng as check_rng
from .slots import RingTable, SlotTable
from .spec import ColumnSpec, Spec
from .storage import Storage, check_columns

SCHEMA_VERSION = 2  # 1: fixed columns held every slot, ragged ones were split in two keys
KEYS = ("schema_version", "capacity", "spec", "rng", "table", "sampler", "admission", "columns")


class BufferParts(Protocol):
    """The public parts of a ``ReplayBuffer`` that its state (and ``replaybank.persist``) reads.

    A protocol rather than the class itself, so that neither this module nor ``persist`` imports
    ``buffer.py``, which imports them: the buffer calls into its state, never the other way round.
    """

    sampler: Sampler
    admission: Admission
    storage: Storage

    @property
    def capacity(self) -> int: ...

    @property
    def spec(self) -> Spec | None: ...

    def state_dict(self) -> dict[str, Any]: ...

    def stream_state(
        self, write_columns: Callable[[dict[str, Any], np.ndarray], None]
    ) -> dict[str, Any]: ...


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


def snapshot(
    buffer: BufferParts,
    table: SlotTable | RingTable,
    rng: np.random.Generator,
    *,
    copy_columns: bool = True,
) -> dict[str, Any]:
    """The state of ``buffer`` with slot table ``table`` and generator ``rng``; call with the
    buffer's lock held.

    Everything but the columns is copied. Fixed columns hold rows ``[0, table.high)``: copies with
    the rows of empty slots zeroed, or with ``copy_columns=False`` views of the live arrays, valid
    only while the caller keeps holding the lock (used to stream memory-mapped columns to disk).
    """
    spec = buffer.spec or {}
    return {
        "schema_version": SCHEMA_VERSION,
        "capacity": buffer.capacity,
        "spec": {name: col.to_json() for name, col in spec.items()},
        "rng": copied(rng.bit_generator.state),
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


def _check_counters(admission: Admission, arrivals: int) -> None:
    """Admission counters that must equal the slot table's arrival count."""
    if isinstance(admission, Fifo):
        attr, counted = "count", admission.count
    elif isinstance(admission, Reservoir):
        attr, counted = "seen", admission.seen
    else:
        return
    if counted != arrivals:
        raise ReplayBankError(
            f"admission.{attr} = {counted} but table.arrivals = {arrivals}: the two count the same items"
        )


def restore(
    buffer: BufferParts, current: SlotTable | RingTable, state: Any
) -> tuple[SlotTable | RingTable, np.random.Generator]:
    """Check ``state`` (``snapshot`` output) against ``buffer``, whose slot table is ``current``,
    and load its sampler, admission and storage; returns the restored slot table and generator
    for the buffer to take (see the module doc). Call with the buffer's lock held.

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
    table = type(current)(buffer.capacity)
    table.load_state_dict(state["table"])
    if not spec and table.arrivals:
        raise ReplayBankError(
            f"spec is empty, but table.arrivals = {table.arrivals}: items were stored"
        )
    if spec:
        _call(buffer.sampler.check_spec, spec, "spec")
        ragged = [name for name, col in spec.items() if col.ragged]
        if ragged and not buffer.storage.supports_ragged:
            raise ReplayBankError(
                f"spec: column(s) {ragged} are ragged, but {type(buffer.storage).__name__} holds "
                "fixed-shape columns only"
            )
        full = not buffer.storage.copy_on_restore
        check_columns(buffer.capacity, spec, state["columns"], table.high, full=full)
    elif not isinstance(state["columns"], Mapping) or state["columns"]:
        raise ReplayBankError("columns: expected none (the spec is empty)")
    admission, sampler = buffer.admission, buffer.sampler
    before = {"admission": copied(admission.state_dict()), "sampler": copied(sampler.state_dict())}
    try:
        _component(admission, state["admission"], "admission")
        _check_counters(admission, table.arrivals)
        _component(sampler, state["sampler"], "sampler")
        _call(admission.check_table, table, f"admission ({type(admission).__name__})")
        _call(sampler.check_table, table, f"sampler ({type(sampler).__name__})")
        if spec:
            buffer.storage.restore(buffer.capacity, spec, state["columns"], table.high)
    except BaseException:
        admission.load_state_dict(before["admission"])
        sampler.load_state_dict(before["sampler"])
        raise
    return table, generator

