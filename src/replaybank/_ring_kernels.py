"""Compiled id <-> slot maps of ``slots.RingTable`` (numba, ``replaybank[fast]``).

Both run once per ``sample`` / ``update_priorities``. As numpy they are chains of six to nine
small array operations (~7 and ~15 us for 256 ids at a microsecond or so each); compiled, one
pass. ``slots.RingTable`` keeps the numpy versions as the fallback and for the error messages.
"""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True, nogil=True)
def ring_ids(slots: np.ndarray, shift: int, capacity: int, arrivals: int, size: int) -> np.ndarray:
    """The id each slot holds (-1 for empty slots): the latest arrival that went to it."""
    out = np.empty(len(slots), dtype=np.int64)
    last = arrivals - 1
    for i in range(len(slots)):
        s = slots[i]
        if s < size:
            out[i] = ((last - (last - s) % capacity) << shift) | s
        else:
            out[i] = -1
    return out


@numba.njit(cache=True, nogil=True)
def ring_slots(
    ids: np.ndarray, shift: int, mask: int, capacity: int, arrivals: int, size: int
) -> tuple[np.ndarray, np.ndarray, bool]:
    """``(slots, live, ok)``: ``ok`` is False when some id was never issued by a ring (then the
    caller takes the general path, which names them)."""
    slots = np.empty(len(ids), dtype=np.int64)
    live = np.empty(len(ids), dtype=np.bool_)
    oldest = arrivals - size
    for i in range(len(ids)):
        x = ids[i]
        s = x & mask
        a = x >> shift
        if x < 0 or a >= arrivals or a % capacity != s:
            return slots, live, False
        slots[i] = s
        live[i] = a >= oldest
    return slots, live, True
