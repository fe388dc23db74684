"""The input checks ``ReplayBuffer`` runs before it changes anything: batch sizes, priorities,
groups, rows the sampler refuses, the id space, and the memory a capacity or a batch would need.

Each raises a ``ReplayBankError`` subclass naming the argument; none changes the buffer.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .admission import Admission
from .errors import InsufficientMemoryError, InvalidArgumentError, InvalidTypeError, ReplayBankError
from .ragged import Ragged
from .samplers.base import Sampler
from .samplers.priorities import check_priorities
from .slots import RingTable, SlotTable
from .spec import Cast, Spec, cast_to
from .storage import available_memory


def positive_int(value: Any, name: str) -> int:
    """``value`` as an ``int`` > 0 (bools refused).

    >>> positive_int(0, "batch_size")
    Traceback (most recent call last):
    ...
    replaybank.errors.InvalidArgumentError: batch_size must be a positive integer, got 0
    """
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise InvalidTypeError(f"{name} must be a positive integer, got {value!r}")
    if value <= 0:
        raise InvalidArgumentError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


MAX_CAPACITY = 1 << 40  # ids are (arrival << bits(capacity)) | slot in 63 bits


def capacity(value: Any) -> int:
    """``ReplayBuffer(capacity)``: a positive int no larger than an item id can address."""
    out = positive_int(value, "capacity")
    if out > MAX_CAPACITY:
        raise InvalidArgumentError(
            f"capacity={out:,} is above {MAX_CAPACITY:,} (2**40), the most slots an item id can address"
        )
    return out


def cast(value: Any) -> Cast:
    """``ReplayBuffer(cast)``: ``"checked"`` or ``"unsafe"``."""
    if not (isinstance(value, str) and value in ("checked", "unsafe")):
        raise InvalidArgumentError(f"ReplayBuffer(cast={value!r}): expected 'checked' or 'unsafe'")
    return "checked" if value == "checked" else "unsafe"


def time_order(sampler: Sampler, admission: Admission) -> None:
    """A sampler that reads items in arrival order needs an admission that keeps it."""
    if sampler.needs_time_order and not admission.keeps_time_order:
        raise ReplayBankError(
            f"{type(sampler).__name__} needs items in arrival order; use admission=Fifo() "
            f"(got {type(admission).__name__})"
        )


def bookkeeping_memory(capacity: int, sampler: Sampler, admission: Admission) -> None:
    """The slot table, sampler and admission keep a few numbers per slot; check they fit
    before allocating them (the columns themselves are checked by the storage)."""
    per_slot = (
        (0 if admission.keeps_time_order else 8)  # ids table; a FIFO ring needs none
        + sampler.bytes_per_slot
        + admission.bytes_per_slot
    )
    need = capacity * per_slot
    have = available_memory()
    if have is not None and need > have:
        raise InsufficientMemoryError(
            f"capacity {capacity:,} needs {need:,} bytes of bookkeeping ({per_slot} per slot for "
            f"ids, {type(sampler).__name__} and {type(admission).__name__}) before any data, but only "
            f"{have:,} bytes are available; lower the capacity (MemmapStorage keeps only the columns on disk)"
        )


def priorities(sampler: Sampler, values: Any, n: int) -> np.ndarray | None:
    """``values`` as ``n`` float64 priorities the sampler can take, or None if none were given."""
    if values is None:
        return None
    if not sampler.uses_priorities:
        raise ReplayBankError(
            f"priorities were given but {type(sampler).__name__} sampling ignores them; "
            "use a Prioritized sampler or drop priorities="
        )
    return check_priorities(values, n, limit=sampler.priority_limit)


def updates(sampler: Sampler, ids: Any, values: Any) -> tuple[np.ndarray, np.ndarray]:
    """``update_priorities``' arguments: integer ids (a ``Ragged``'s values for episodes) and
    as many valid float64 priorities."""
    try:
        ids = np.asarray(ids.values if isinstance(ids, Ragged) else ids)
    except (ValueError, TypeError) as err:
        raise InvalidTypeError(f"update_priorities: ids must be integers ({err})") from None
    if ids.dtype.kind not in "iu":
        raise InvalidTypeError(f"update_priorities: ids must be integers, got dtype {ids.dtype}")
    return ids, priorities_of(sampler, values, ids.size)


def priorities_of(sampler: Sampler, values: Any, n: int) -> np.ndarray:
    """``update_priorities``' priorities: ``n`` valid float64 values within the sampler's limit."""
    return check_priorities(values, n, limit=sampler.priority_limit)


def id_space(table: SlotTable | RingTable, capacity: int, n: int) -> None:
    """Ids hold the arrival number above the slot bits; refuse the write that would overflow."""
    limit = 1 << (63 - table.shift)
    if table.arrivals + n >= limit:
        raise InvalidArgumentError(
            f"this buffer has issued {table.arrivals:,} ids and can issue {limit:,} with capacity "
            f"{capacity:,}; save what you need into a new buffer"
        )


def rows(sampler: Sampler, values: dict[str, Any]) -> None:
    """Let the sampler refuse row values before anything is stored (e.g. ``done=0.5``)."""
    if values:
        sampler.check_rows(values)


def groups(admission: Admission, values: Any, n: int) -> np.ndarray | None:
    """``values`` as ``n`` int64 group ids, required exactly when the admission uses groups."""
    requires = admission.requires_groups
    if values is None:
        if requires:
            raise ReplayBankError(
                f"{type(admission).__name__} admission needs groups=: one integer group id per item"
            )
        return None
    if not requires:
        raise ReplayBankError(
            f"groups were given but {type(admission).__name__} admission ignores them; "
            "use GroupBalanced or Window, or drop groups="
        )
    try:
        g = np.asarray(values)
    except (ValueError, TypeError) as err:
        raise InvalidTypeError(f"groups: expected {n} integers (one per item) ({err})") from None
    if g.ndim == 0:
        g = np.full(n, g)
    if g.shape != (n,) or g.dtype.kind not in "iu":
        raise InvalidArgumentError(
            f"groups: expected {n} integers (one per item), got shape {g.shape} dtype {g.dtype}"
        )
    return cast_to(g, np.dtype(np.int64), "groups")


def row_nbytes(spec: Spec | None, sampler: Sampler) -> int:
    """Bytes one sampled row takes (data, id, weight); trajectory slices count their steps."""
    steps = sampler.length or 1
    return (sum(c.item_nbytes for c in (spec or {}).values()) + 8) * steps + 12


def batch_memory(batch_size: int, row: int) -> None:
    """Refuse a batch of ``row``-byte rows that would not fit in memory, before numpy tries."""
    need = batch_size * row
    if need < 1 << 28:  # reading /proc/meminfo costs more than a small batch: skip it
        return
    have = available_memory()
    if have is not None and need > have:
        raise InsufficientMemoryError(
            f"batch_size={batch_size:,} would need {need:,} bytes ({row:,} per row) but only {have:,} "
            "bytes are available; lower batch_size"
        )
