"""``state_dict`` is a snapshot; ``load_state_dict`` checks everything and is all-or-nothing."""

import numpy as np
import pytest

from replaybank import (
    Fifo,
    PrioritizedReshuffled,
    RaggedStorage,
    ReplayBankError,
    ReplayBuffer,
    Reservoir,
    Reshuffled,
)


def filled(sampler=None, admission=None, n=30, seed=0):
    buf = ReplayBuffer(20, sampler=sampler or Reshuffled(), admission=admission or Fifo(), seed=seed)
    buf.extend({"x": np.arange(n, dtype=np.float64), "y": np.arange(n) % 3})
    return buf


def test_state_dict_is_a_copy():
    buf = filled(PrioritizedReshuffled(), Reservoir())
    buf.sample(4)
    state = buf.state_dict()
    x = state["columns"]["x"].copy()
    table = state["table"]["ids"].copy()
    count = state["sampler"]["count"].copy()
    buf.extend({"x": np.full(10, -1.0), "y": np.zeros(10, int)})
    buf.sample(4)
    assert np.array_equal(state["columns"]["x"], x) and np.array_equal(state["table"]["ids"], table)
    assert np.array_equal(state["sampler"]["count"], count)


def test_round_trip_in_memory_is_exact():
    a = filled(PrioritizedReshuffled(), Reservoir())
    a.sample(3)
    b = filled(PrioritizedReshuffled(), Reservoir(), n=3, seed=9)
    b.load_state_dict(a.state_dict())
    for _ in range(5):
        ba, bb = a.sample(6), b.sample(6)
        assert np.array_equal(ba.ids, bb.ids) and np.array_equal(ba.data["x"], bb.data["x"])


def test_ragged_state_round_trips():
    a = ReplayBuffer(6, storage=RaggedStorage(), seed=0)
    a.extend({"t": [np.arange(k % 3 + 1) for k in range(9)]})
    b = ReplayBuffer(6, storage=RaggedStorage(), seed=1)
    b.load_state_dict(a.state_dict())
    assert [r.tolist() for r in a.sample(5)["t"]] == [r.tolist() for r in b.sample(5)["t"]]


@pytest.mark.parametrize(
    "change, words",
    [
        (lambda s: s.pop("rng"), "state.rng: missing"),
        (lambda s: s.__setitem__("extra", 1), "state.extra: unknown"),
        (lambda s: s.__setitem__("capacity", 21), "capacity = 21"),
        (lambda s: s.__setitem__("schema_version", 1), "schema_version"),
        (lambda s: s["rng"].__setitem__("bit_generator", "Evil"), "rng.bit_generator"),
        (lambda s: s["table"].__setitem__("arrivals", 31), "admission.count = 40 but table.arrivals = 31"),
        (lambda s: s["admission"].__setitem__("count", 29), "admission.count = 29"),
        (lambda s: s["admission"].pop("count"), "admission.*count"),
        (lambda s: s["sampler"].pop("order"), "sampler.*order"),
        (lambda s: s.__setitem__("sampler", None), "sampler"),
        (lambda s: s["columns"].pop("y"), "columns.y: missing"),
        (lambda s: s["spec"]["x"].__setitem__("dtype", "|O"), "spec\\['x'\\].dtype"),
        (lambda s: s.__setitem__("spec", {}), "spec is empty, but table.arrivals = 40"),
    ],
)
def test_a_refused_state_leaves_the_buffer_unchanged(change, words):
    buf = filled()
    buf.sample(7)
    twin = filled()
    twin.sample(7)
    state = filled(n=40, seed=3).state_dict()
    change(state)
    with pytest.raises(ReplayBankError, match=words):
        buf.load_state_dict(state)
    for _ in range(4):
        assert np.array_equal(buf.sample(5).data["x"], twin.sample(5).data["x"])


def test_other_numpy_bit_generators_are_restored():
    buf = ReplayBuffer(8, seed=np.random.Generator(np.random.Philox(3)))
    buf.extend({"x": np.arange(8)})
    other = ReplayBuffer(8, seed=0)
    other.load_state_dict(buf.state_dict())
    assert isinstance(other._rng.bit_generator, np.random.Philox)
    assert np.array_equal(buf.sample(5).data["x"], other.sample(5).data["x"])


def test_check_table_hook_can_refuse_and_everything_is_rolled_back():
    class Picky(Reshuffled):
        def check_table(self, table):
            if table.arrivals > 35:
                raise ReplayBankError(f"order ahead of the table ({table.arrivals})")

    buf = ReplayBuffer(20, sampler=Picky(), seed=0)
    buf.extend({"x": np.arange(30, dtype=np.float64), "y": np.arange(30) % 3})
    buf.sample(7)
    order = buf.sampler.order.copy()
    with pytest.raises(ReplayBankError, match=r"sampler \(Picky\): order ahead of the table \(40\)"):
        buf.load_state_dict(filled(n=40, seed=3).state_dict())
    assert np.array_equal(buf.sampler.order, order) and buf.sampler.position == 7
    assert len(buf) == 20 and buf._table.arrivals == 30
