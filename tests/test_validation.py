"""Bad inputs are refused with a named error before anything changes."""

import subprocess
import sys

import numpy as np
import pytest

from replaybank import (
    GroupBalanced,
    Prioritized,
    PrioritizedReshuffled,
    ReplayBankError,
    ReplayBuffer,
    Reservoir,
    Reshuffled,
    Trajectories,
    Uniform,
    Window,
    nstep_returns,
)
from replaybank.errors import (
    InsufficientMemoryError,
    InvalidArgumentError,
    InvalidStateError,
    InvalidTypeError,
)


# -- memory safety and hangs: every numeric parameter is checked at construction -----------------
def test_bad_branching_no_longer_crashes_the_process():
    code = (
        "import numpy as np\n"
        "from replaybank import ReplayBuffer, Prioritized\n"
        "try:\n"
        "    ReplayBuffer(100, sampler=Prioritized(branching=-2)).extend({'x': np.arange(100)})\n"
        "except ValueError as e:\n"
        "    print('refused:', e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "refused: Prioritized(branching=-2)" in out.stdout


@pytest.mark.parametrize(
    ("make", "error", "words"),
    [
        (lambda: Prioritized(branching=-2), InvalidArgumentError, "branching=-2"),
        (lambda: Prioritized(branching=1), InvalidArgumentError, "branching=1"),  # used to hang
        (lambda: Prioritized(branching=0), InvalidArgumentError, "branching=0"),  # used to be 8
        (lambda: Prioritized(branching=2.5), InvalidTypeError, "branching=2.5"),  # used to be 2
        (lambda: Prioritized(branching=True), InvalidTypeError, "branching=True"),
        (lambda: Prioritized(branching=10**6), InvalidArgumentError, "branching"),
        (lambda: Prioritized(alpha=float("nan")), InvalidArgumentError, "alpha=nan"),
        (lambda: Prioritized(alpha=-1), InvalidArgumentError, "alpha=-1"),
        (lambda: Prioritized(beta=float("inf")), InvalidArgumentError, "beta=inf"),
        (lambda: Prioritized(eps=-1e-3), InvalidArgumentError, "eps"),
        (lambda: Prioritized(alpha="0.6"), InvalidTypeError, "alpha='0.6'"),
        (lambda: Prioritized(alpha=True), InvalidTypeError, "alpha=True"),
        (lambda: PrioritizedReshuffled(beta=-0.1), InvalidArgumentError, "beta"),
        (lambda: PrioritizedReshuffled(branching=1), InvalidArgumentError, "branching"),
        (lambda: Trajectories(0), InvalidArgumentError, "length=0"),
        (lambda: Trajectories(True), InvalidTypeError, "length=True"),
        (lambda: Trajectories(2.0), InvalidTypeError, "length=2.0"),
        (lambda: Trajectories(2, reverse="yes"), InvalidTypeError, "reverse"),
        (
            lambda: Trajectories(2, priority="td", alpha=float("nan")),
            InvalidArgumentError,
            "alpha=nan",
        ),
        (lambda: Trajectories(2, priority="td", eps=-1), InvalidArgumentError, "eps=-1"),
        (
            lambda: Trajectories(2, priority="td", beta=float("nan")),
            InvalidArgumentError,
            "beta=nan",
        ),
        (lambda: Trajectories(2, priority="return", alpha=-1), InvalidArgumentError, "alpha=-1"),
        (lambda: Trajectories(2, priority="max"), InvalidArgumentError, "priority='max'"),
        (lambda: Trajectories(2, done_key=3), InvalidTypeError, "done_key"),
        (lambda: Window(True), InvalidTypeError, "k=True"),  # used to be k=1
        (lambda: Window(0), InvalidArgumentError, "k=0"),
        (lambda: Window(1.5), InvalidTypeError, "k=1.5"),
    ],
)
def test_constructor_parameters_are_checked(make, error, words):
    with pytest.raises(error, match=words.replace("(", r"\(").replace(".", r"\.")) as info:
        make()
    assert isinstance(info.value, ReplayBankError) and isinstance(info.value, ValueError)


def test_beta_is_checked_when_annealed():
    s = Prioritized()
    s.beta = 0.9
    with pytest.raises(InvalidArgumentError, match="beta=nan"):
        s.beta = float("nan")
    assert s.beta == 0.9


@pytest.mark.parametrize("branching", [2, 3, 7, 64, 1024])
@pytest.mark.parametrize("kernels", ["numba", "numpy"])
def test_every_accepted_branching_samples_inside_the_buffer(branching, kernels, monkeypatch):
    monkeypatch.setenv("REPLAYBANK_KERNELS", kernels)
    for capacity in (1, 2, 5, 100):
        buf = ReplayBuffer(capacity, sampler=PrioritizedReshuffled(branching=branching), seed=0)
        buf.extend({"x": np.arange(capacity)}, priorities=np.linspace(0, 3, capacity))
        for _ in range(5):
            b = buf.sample(7)
            assert buf.contains(b.ids).all()
            assert np.isfinite(b.weights).all() and (b.weights > 0).all() and (b.weights <= 1).all()


# -- values must not change silently ---------------------------------------------------------------
@pytest.mark.parametrize(
    ("dtype", "value", "words"),
    [
        (np.int64, np.array([2**64 - 1], dtype=np.uint64), "does not fit int64"),
        (np.int8, np.array([300]), "does not fit int8"),
        (np.float32, np.array([1e40]), "overflows float32"),
        (np.float16, np.array([1e6]), "overflows float16"),
        (np.uint8, np.array([-1]), "does not fit uint8"),
    ],
)
def test_lossy_casts_are_refused_naming_the_column(dtype, value, words):
    buf = ReplayBuffer(8, spec={"v": ((), dtype)})
    with pytest.raises(InvalidArgumentError, match=f"column 'v'.*{words}"):
        buf.extend({"v": value})
    with pytest.raises(InvalidArgumentError, match=f"column 'v'.*{words}"):
        buf.add(v=value[0])
    assert len(buf) == 0
    unsafe = ReplayBuffer(8, spec={"v": ((), dtype)}, cast="unsafe")
    unsafe.extend({"v": value})  # the explicit opt-in stores numpy's conversion
    assert len(unsafe) == 1


def test_value_preserving_casts_still_work():
    buf = ReplayBuffer(8, spec={"a": ((), np.int8), "f": ((2,), np.float32), "u": ((), np.uint8)})
    ids = buf.extend(
        {"a": np.array([-128, 127]), "f": np.array([[0.1, np.inf], [1e30, -2.0]]), "u": [0, 255]}
    ).tolist()
    ids.append(buf.add(a=5, f=[1.0, 2.0], u=7))
    got = buf.get(ids)
    assert got["a"].tolist() == [-128, 127, 5] and got["u"].tolist() == [0, 255, 7]
    assert got["f"][0, 1] == np.inf and got["f"].dtype == np.float32


def test_float_into_int_is_still_a_type_error():
    buf = ReplayBuffer(8, spec={"a": ((), np.int64)})
    with pytest.raises(InvalidTypeError, match="column 'a'"):
        buf.extend({"a": np.array([1.5])})


def test_complex_priorities_are_refused():
    buf = ReplayBuffer(8, sampler=Prioritized())
    with pytest.raises(InvalidTypeError, match="priorities.*complex"):
        buf.extend({"x": np.arange(2)}, priorities=np.array([1 + 2j, 1.0]))
    ids = buf.extend({"x": np.arange(2)})
    with pytest.raises(InvalidTypeError, match="priorities"):
        buf.update_priorities(ids, np.array([1 + 2j, 1.0]))


@pytest.mark.parametrize("done", [0.5, 2.0, -1])
def test_done_must_be_a_flag(done):
    buf = ReplayBuffer(8, sampler=Trajectories(2), seed=0)
    with pytest.raises(InvalidArgumentError, match="column 'done'"):
        buf.extend({"t": np.arange(3), "done": np.array([0.0, done, 1.0])})
    buf.extend({"t": np.arange(3), "done": np.array([0.0, 0.0, 1.0])})  # 0/1 numbers are fine
    with pytest.raises(InvalidArgumentError, match="column 'done'"):
        buf.add(t=3, done=done)
    assert len(buf) == 3


def test_nstep_checks_its_arguments():
    r = np.ones(3)
    with pytest.raises(InvalidArgumentError, match="dones"):
        nstep_returns(r, np.array([0, 0.5, 1]), gamma=0.9, n=2)
    with pytest.raises(InvalidTypeError, match="n=True"):
        nstep_returns(r, np.zeros(3, bool), gamma=0.9, n=True)
    with pytest.raises(InvalidArgumentError, match="gamma=nan"):
        nstep_returns(r, np.zeros(3, bool), gamma=float("nan"), n=2)
    with pytest.raises(InvalidArgumentError, match="rewards"):
        nstep_returns(np.array([1.0, np.nan, 1.0]), np.zeros(3, bool), gamma=0.9, n=2)


# -- degenerate numbers ----------------------------------------------------------------------------
def test_priorities_that_would_overflow_the_tree_are_refused():
    buf = ReplayBuffer(100, sampler=Prioritized(alpha=1.0), seed=0)
    with pytest.raises(InvalidArgumentError, match=r"priorities\[3\].*largest priority"):
        buf.extend({"x": np.arange(4)}, priorities=[1, 1, 1, 1e308])
    limit = buf.sampler.priority_limit
    ids = buf.extend({"x": np.arange(8)}, priorities=np.full(8, limit))
    b = buf.sample(8)
    assert np.isfinite(buf.sampler.trees.total)
    assert len(np.unique(b.ids)) > 1 and (b.weights > 0).all()
    with pytest.raises(InvalidArgumentError, match="largest priority"):
        buf.update_priorities(ids[:1], [1e308])


def test_alpha_and_eps_that_make_the_default_priority_infinite_are_refused():
    with pytest.raises(InvalidArgumentError, match="alpha"):
        ReplayBuffer(10, sampler=Prioritized(alpha=1e6, eps=1.0))


@pytest.mark.parametrize(
    "sampler",
    [
        lambda: Trajectories(2, priority="td", alpha=0.6),
        lambda: Trajectories(2, priority="return", alpha=1.0),
    ],
)
def test_trajectory_priorities_stay_finite(sampler):
    buf = ReplayBuffer(16, sampler=sampler(), seed=0)
    data = {"t": np.arange(6), "done": np.array([0, 0, 1, 0, 0, 1], bool), "reward": np.ones(6)}
    if buf.sampler.priority == "return":
        data["reward"] = np.array([1e307, 1e307, 1.0, 1.0, 1.0, 1.0])
        with pytest.raises(InvalidArgumentError, match="column 'reward'"):
            buf.extend(data)
        data["reward"] = np.array([np.nan, 1.0, 1.0, 1.0, 1.0, 1.0])
        with pytest.raises(InvalidArgumentError, match="column 'reward'"):
            buf.extend(data)
        data["reward"] = np.ones(6)
        buf.extend(data)
    else:
        with pytest.raises(InvalidArgumentError, match="priorities"):
            buf.extend(data, priorities=np.full(6, 1e308))
        buf.extend(data, priorities=np.ones(6))
    b = buf.sample(8)
    assert (b.data["t"] >= 0).all() and np.isfinite(b.weights).all() and (b.weights > 0).all()


def test_huge_batch_is_refused_with_the_size_it_needs():
    buf = ReplayBuffer(8)
    buf.extend({"x": np.arange(8)})
    with pytest.raises(InsufficientMemoryError, match="batch_size=1,000,000,000,000 would need"):
        buf.sample(10**12)


@pytest.mark.parametrize(
    ("priorities", "error"),
    [
        (["a", "b"], InvalidTypeError),
        ([[1.0], [1.0, 2.0]], InvalidTypeError),
        ([1.0, None], InvalidTypeError),
        ([True, False], InvalidTypeError),
        ([1.0, 2.0, 3.0], InvalidArgumentError),
        ([1.0, -1.0], InvalidArgumentError),
    ],
)
def test_bad_priorities_name_the_argument(priorities, error):
    buf = ReplayBuffer(8, sampler=Prioritized())
    with pytest.raises(error, match="priorities"):
        buf.extend({"x": np.arange(2)}, priorities=priorities)
    assert len(buf) == 0


def test_strings_and_ragged_lists_in_fixed_columns_name_the_column():
    buf = ReplayBuffer(8, spec={"obs": ((2,), np.float32)})
    with pytest.raises(InvalidTypeError, match="column 'obs'"):
        buf.extend({"obs": [[1.0, 2.0], [1.0]]})
    with pytest.raises(InvalidTypeError, match="column 'obs'"):
        buf.extend({"obs": [["a", "b"]]})
    fresh = ReplayBuffer(8)
    with pytest.raises(InvalidTypeError, match="column 'obs'"):
        fresh.extend({"obs": [[1.0, 2.0], [1.0]]})
    with pytest.raises(InvalidTypeError, match="groups"):
        ReplayBuffer(8, admission=GroupBalanced()).extend({"x": np.arange(2)}, groups=[[1], [1, 2]])


def test_ids_must_be_integers():
    buf = ReplayBuffer(8, sampler=Prioritized())
    buf.extend({"x": np.arange(2)})
    with pytest.raises(InvalidTypeError, match="ids"):
        buf.update_priorities(["a", "b"], [1.0, 1.0])


# -- sampler and admission state is checked on load -------------------------------------------------
def filled(sampler, admission=None, groups=False):
    buf = ReplayBuffer(16, sampler=sampler, admission=admission, seed=0)
    data = {"t": np.arange(20), "done": np.arange(20) % 5 == 4, "reward": np.ones(20)}
    g = {"groups": np.arange(20) // 4} if groups else {}
    p = (
        {"priorities": np.linspace(0.1, 2, 20)}
        if getattr(sampler, "uses_priorities", False)
        else {}
    )
    buf.extend(data, **g, **p)
    buf.sample(4)
    return buf


STATES = {
    "uniform": lambda: filled(Uniform()),
    "reshuffled": lambda: filled(Reshuffled()),
    "prioritized": lambda: filled(Prioritized()),
    "rrm": lambda: filled(PrioritizedReshuffled()),
    "trajectories-td": lambda: filled(Trajectories(2, priority="td")),
    "episodes": lambda: filled(Trajectories(None, priority="return")),
    "reservoir": lambda: filled(Uniform(), Reservoir()),
    "balanced": lambda: filled(Uniform(), GroupBalanced(), groups=True),
    "window": lambda: filled(Uniform(), Window(2), groups=True),
}


@pytest.mark.parametrize("name", sorted(STATES))
def test_state_round_trips_and_bad_keys_are_named(name):
    buf = STATES[name]()
    for part in (buf.sampler, buf.admission):
        state = dict(part.state_dict())
        part.load_state_dict(state)  # its own state loads
        with pytest.raises(InvalidStateError, match="unknown key 'bogus'"):
            part.load_state_dict({**state, "bogus": 1})
        for key in state:
            broken = {k: v for k, v in state.items() if k != key}
            with pytest.raises(InvalidStateError, match=f"missing key '{key}'"):
                part.load_state_dict(broken)


@pytest.mark.parametrize(
    ("name", "key", "value", "words"),
    [
        ("prioritized", "beta", -3.0, "beta"),
        ("prioritized", "max_priority", float("nan"), "max_priority"),
        ("prioritized", "priorities", np.full(16, np.nan), "priorities"),
        ("prioritized", "priorities", np.ones(3), "shape"),
        ("rrm", "count", -np.ones(16), "count"),
        ("rrm", "accumulated", "x", "accumulated"),
        ("rrm", "calls", 1.5, "calls"),
        ("reshuffled", "order", np.array([0, 99]), "order"),
        ("reshuffled", "position", -1, "position"),
        ("trajectories-td", "accept", 2.0, "accept"),
        ("trajectories-td", "step_value", np.full(16, np.inf), "step_value"),
        ("reservoir", "seen", -5, "seen"),
        ("balanced", "members", {"0": np.array([0, 0])}, "members"),
        ("window", "free", np.array([0, 1, 2]), "disagree"),
    ],
)
def test_bad_state_values_are_refused_before_anything_changes(name, key, value, words):
    buf = STATES[name]()
    part = buf.sampler if key in buf.sampler.state_dict() else buf.admission
    state = dict(part.state_dict())
    before = {k: np.copy(v) if isinstance(v, np.ndarray) else v for k, v in state.items()}
    with pytest.raises(InvalidStateError, match=words):
        part.load_state_dict({**state, key: value})
    after = part.state_dict()
    for k, v in before.items():
        if isinstance(v, np.ndarray):
            np.testing.assert_array_equal(np.asarray(after[k]), v)


@pytest.mark.parametrize(
    ("capacity", "k", "first", "second"),
    [
        (1, 2, [0, 0, 0, 0, 1], [0, 0, 0, 0, 1, 1, 1, 1, 2]),
        (3, 1, [0, 0, 1], [2, 2, 3]),
        (14, 1, [], (np.arange(29) // 4).tolist()),
    ],
)
def test_window_evicting_items_of_the_same_call_keeps_the_books(capacity, k, first, second):
    # found by the fuzz test: items evicted with their group inside the call that wrote them were
    # still stored, and a slot freed twice in one call was counted twice (len() went negative)
    buf = ReplayBuffer(capacity, admission=Window(k))
    buf.extend({"t": np.arange(len(first))}, groups=np.array(first, dtype=np.int64))
    ids = buf.extend({"t": np.arange(len(second))}, groups=np.array(second))
    stored = buf.contains(ids)
    assert len(buf) == stored.sum() == sum(len(s) for s in buf.admission.members.slots.values())
    assert set(np.array(second)[stored].tolist()) <= set(buf.admission.order)


def test_capacity_and_id_space_are_bounded():
    with pytest.raises(InvalidArgumentError, match="capacity"):
        ReplayBuffer(10**20)
    buf = ReplayBuffer(2**40)  # the largest; only the bookkeeping of FIFO + Uniform is allocated
    buf._table.arrivals = (1 << (63 - buf._table.shift)) - 2  # as if 8 million items had come
    with pytest.raises(InvalidArgumentError, match="can issue"):
        buf.extend({"x": np.arange(3)})


def test_numbers_and_strings_never_cast_into_each_other():
    # found by the fuzz test: a float went into a string column (numpy calls that same_kind)
    buf = ReplayBuffer(8)
    buf.extend({"s": np.array(["x", "y"])})
    with pytest.raises(InvalidTypeError, match="column 's'"):
        buf.add(s=-0.5)
    with pytest.raises(InvalidTypeError, match="column 's'"):
        buf.extend({"s": np.array([1, 2])})
    with pytest.raises(InvalidArgumentError, match="column 's'.*would change"):
        buf.extend({"s": np.array(["long"])})
    buf.add(s="z")
    assert len(buf) == 3


def test_trajectories_need_numeric_done_and_reward_columns():
    for data, words in (
        ({"t": np.arange(2), "done": np.array(["a", "b"])}, "'done'"),
        (
            {"t": np.arange(2), "done": np.zeros(2, bool), "reward": np.array(["x", "y"])},
            "'reward'",
        ),
    ):
        buf = ReplayBuffer(8, sampler=Trajectories(1, priority="return"))
        with pytest.raises(ReplayBankError, match=words):
            buf.extend(data)


def test_trajectory_length_must_fit_the_capacity():
    with pytest.raises(InvalidArgumentError, match="length=50"):
        ReplayBuffer(40, sampler=Trajectories(50))


@pytest.mark.parametrize(
    ("seed", "error"),
    [(-1, InvalidArgumentError), ("a", InvalidTypeError), (1.5, InvalidTypeError)],
)
def test_seed_is_checked(seed, error):
    with pytest.raises(error, match="seed"):
        ReplayBuffer(4, seed=seed)
