"""Slot tables restored from state are checked against what a buffer could have produced."""

import numpy as np
import pytest

from replaybank import ReplayBankError
from replaybank.slots import RingTable, SlotTable


def table():
    t = SlotTable(8)
    slots = np.array([0, 1, 2, 5])
    t.fill(slots, t.make_ids(np.array([0, 1, 2, 4]), slots), 6)
    return t


def test_round_trip():
    t = table()
    u = SlotTable(8)
    u.load_state_dict(t.state_dict())
    assert u.state_dict()["ids"].tolist() == t.ids.tolist() and (u.size, u.high) == (4, 6)
    assert u.slots_of(t.ids[[0, 5]])[1].all()


def edited(**changes):
    state = dict(table().state_dict(), ids=table().ids.copy())
    state.update(changes)
    return state


@pytest.mark.parametrize(
    "state, words",
    [
        (edited(size=3), "table.size = 3, but"),
        (edited(size=9), "table.size"),
        (edited(high=5), "table.high = 5, but slot 5"),
        (edited(high=9), "table.high"),
        (edited(arrivals=4), "table.ids\\[5\\]"),  # slot 5 holds arrival 4
        (edited(arrivals=-1), "table.arrivals"),
        (edited(arrivals=2**62), "table.arrivals"),
        (edited(arrivals="6"), "table.arrivals"),
        (edited(ids=np.zeros(7, np.int64)), "table.ids: shape"),
        (edited(ids=table().ids.astype(np.int32)), "table.ids: dtype"),
        (edited(ids=table().ids.tolist()), "table.ids: expected an array"),
        (edited(extra=1), "table.extra: unknown"),
        ({"ids": table().ids, "size": 4, "high": 6}, "table.arrivals: missing"),
    ],
)
def test_bad_states_are_refused_and_nothing_changes(state, words):
    t = table()
    with pytest.raises(ReplayBankError, match=words):
        t.load_state_dict(state)
    assert t.size == 4 and t.arrivals == 6


def test_ids_must_encode_their_own_slot_and_one_arrival_each():
    ids = table().ids.copy()
    ids[3] = ids[0] | 3  # arrival 0 again, in slot 3
    with pytest.raises(ReplayBankError, match="table.size|same arrival"):
        SlotTable(8).load_state_dict(edited(ids=ids, size=5))
    ids = table().ids.copy()
    ids[1] = ids[2]  # slot 2's id in slot 1
    with pytest.raises(ReplayBankError, match=r"table.ids\[1\]"):
        SlotTable(8).load_state_dict(edited(ids=ids))


def test_ring_table_arrivals_are_checked():
    r = RingTable(8)
    for bad in (-1, 1.0, True, None, 2**61):
        with pytest.raises(ReplayBankError, match="table.arrivals"):
            r.load_state_dict({"arrivals": bad})
    with pytest.raises(ReplayBankError, match="table.size: unknown"):
        r.load_state_dict({"arrivals": 3, "size": 3})
    r.load_state_dict({"arrivals": 11})
    assert (r.size, r.high) == (8, 8)


@pytest.mark.parametrize("capacity", [1, 7, 64])
@pytest.mark.parametrize("arrivals", [0, 5, 64, 200])
def test_ring_table_compiled_maps_match_the_numpy_fallback_exactly(capacity, arrivals, monkeypatch):
    pytest.importorskip("numba")
    fast = RingTable(capacity)
    monkeypatch.setenv("REPLAYBANK_KERNELS", "numpy")
    slow = RingTable(capacity)
    assert fast._kernels is not None and slow._kernels is None
    for t in (fast, slow):
        t.fill(np.zeros(0, np.int64), np.zeros(0, np.int64), arrivals)
    slots = np.arange(-2, capacity + 3, dtype=np.int64)
    np.testing.assert_array_equal(fast.ids_of(slots), slow.ids_of(slots))
    grid = slots.reshape(1, -1).repeat(2, axis=0)  # trajectory slices: 2-D slots keep their shape
    np.testing.assert_array_equal(fast.ids_of(grid), slow.ids_of(grid))
    # every id a ring ever issued (live and overwritten), in random order with repeats
    issued = (np.arange(arrivals, dtype=np.int64) << fast.shift) | (np.arange(arrivals) % capacity)
    ids = np.random.default_rng(0).choice(issued, 50) if arrivals else issued
    for got, want in zip(fast.slots_of(ids), slow.slots_of(ids)):
        np.testing.assert_array_equal(got, want)
    # ids a ring would not issue take the general path in both: it names the ones never issued
    # and reads the others (here arrival 0 in slot 1, which FIFO never does) as not live
    for bad in ([-1], [arrivals << fast.shift]):
        errors = []
        for t in (fast, slow):
            with pytest.raises(ReplayBankError) as err:
                t.slots_of(np.array(bad + ids[:1].tolist(), dtype=np.int64))
            errors.append(str(err.value))
        assert errors[0] == errors[1] and "never issued" in errors[0]
    if capacity > 1 and arrivals:
        odd = np.array([1, *ids[:3]], dtype=np.int64)
        for got, want in zip(fast.slots_of(odd), slow.slots_of(odd)):
            np.testing.assert_array_equal(got, want)
