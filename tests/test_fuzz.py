"""Hypothesis fuzz of the public API.

Random constructor parameters, then random sequences of ``extend`` / ``add`` / ``sample`` /
``update_priorities`` with valid and invalid inputs. Every call either succeeds with the buffer's
invariants intact (ids strictly increasing, sampled ids issued and stored, weights finite in
(0, 1]) or raises a ``ReplayBankError`` that is a ``ValueError`` or ``TypeError`` and says what was
wrong; any other exception fails the test. ``FUZZ_EXAMPLES`` raises the number of examples for a
long run (the suite uses 150).
"""

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from replaybank import (
    Fifo,
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
)

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "150"))

# numbers users might pass: mostly sensible, one time in ten not
bad_number = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([True, False, None, "0.5", 10**30, -(10**30), 2**64 - 1, 1e308, -1, 1 + 1j]),
)
bad_int = st.sampled_from([True, 0, -2, 1, 2.5, None, "3", 10**20])


def often(good, bad):
    return st.integers(0, 9).flatmap(lambda i: bad if i == 0 else good)


anything = often(st.floats(0, 2), bad_number)
small_int = often(st.integers(1, 12), bad_int)


@st.composite
def samplers(draw):
    kind = draw(
        st.sampled_from(["uniform", "reshuffled", "per", "rrm", "traj", "traj-td", "traj-ret"])
    )
    if kind == "uniform":
        return Uniform()
    if kind == "reshuffled":
        return Reshuffled()
    kwargs = {}
    for name in ("alpha", "beta", "eps"):
        if draw(st.booleans()):
            kwargs[name] = draw(anything)
    if kind in ("per", "rrm"):
        if draw(st.booleans()):
            kwargs["branching"] = draw(small_int)
        return (Prioritized if kind == "per" else PrioritizedReshuffled)(**kwargs)
    length = draw(st.one_of(st.none(), small_int, small_int))
    priority = {"traj": None, "traj-td": "td", "traj-ret": "return"}[kind]
    reverse = draw(often(st.booleans(), st.just(1)))
    return Trajectories(length, reverse, priority=priority, **kwargs)


@st.composite
def admissions(draw, time_order=False):
    kinds = st.sampled_from(["fifo", "reservoir", "balanced", "window"])
    kind = draw(often(st.just("fifo"), kinds) if time_order else kinds)
    if kind == "window":
        return Window(draw(small_int))
    return {"fifo": Fifo, "reservoir": Reservoir, "balanced": GroupBalanced}[kind]()


def column_values(draw, n):
    """The four columns, each well formed most of the time."""
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    cols = {
        "t": np.arange(n),
        "done": rng.random(n) < 0.3,
        "reward": rng.normal(size=n).astype(np.float32),
        "obs": rng.normal(size=(n, 2)).astype(np.float32),
    }
    mutation = draw(
        st.sampled_from(
            [None] * 12
            + ["dtype", "huge", "ragged", "strings", "drop", "extra", "done", "nan", "shape"]
        )
    )
    name = draw(st.sampled_from(sorted(cols)))
    if mutation == "dtype":
        cols[name] = cols[name].astype(
            draw(st.sampled_from([np.float64, np.int8, np.uint64, np.complex64, bool]))
        )
    elif mutation == "huge":
        cols[name] = np.full(cols[name].shape, draw(st.sampled_from([1e40, 2**63, -1e300, 300])))
    elif mutation == "ragged":
        cols[name] = [[1.0] * (i % 3 + 1) for i in range(n)]
    elif mutation == "strings":
        cols[name] = ["x"] * n
    elif mutation == "drop":
        del cols[name]
    elif mutation == "extra":
        cols["bogus"] = np.zeros(n)
    elif mutation == "done":
        cols["done"] = rng.choice([0.0, 1.0, 0.5], size=n)
    elif mutation == "nan":
        cols["reward"] = np.full(n, np.nan, dtype=np.float32)
    elif mutation == "shape":
        cols[name] = np.zeros((n + 1, 3))
    return cols


def priorities_for(draw, n, wanted):
    usual = ["good"] * 8 + ["scalar"] if wanted else ["none"] * 9
    odd = ["none", "good", "nan", "neg", "huge", "len", "str", "complex", "ragged"]
    kind = draw(often(st.sampled_from(usual), st.sampled_from(odd)))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    return {
        "none": None,
        "good": rng.lognormal(0, 2, n),
        "scalar": draw(anything),
        "nan": np.full(n, np.nan),
        "neg": -np.ones(n),
        "huge": np.full(n, 1e308),
        "len": np.ones(n + 1),
        "str": ["a"] * n,
        "complex": np.ones(n) * (1 + 1j),
        "ragged": [[1.0], [1.0, 2.0]],
    }[kind]


def check_error(err):
    assert isinstance(err, ReplayBankError) and isinstance(err, (ValueError, TypeError)), repr(err)
    assert len(str(err)) > 10, repr(err)


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(st.data())
def test_public_api_fuzz(data):
    draw = data.draw
    try:
        sampler = draw(samplers())
        buf = ReplayBuffer(
            draw(often(st.integers(1, 40), bad_int)),
            sampler=sampler,
            admission=draw(admissions(getattr(sampler, "needs_time_order", False))),
            seed=draw(st.integers(0, 100)),
            cast=draw(often(st.sampled_from(["checked", "checked", "unsafe"]), st.just("bogus"))),
        )
    except ReplayBankError as err:
        check_error(err)
        event(f"constructor refused: {str(err)[:50]}")
        return
    last_id = -1
    sampled = np.zeros(0, dtype=np.int64)
    for _ in range(draw(st.integers(1, 12))):
        op = draw(st.sampled_from(["extend", "extend", "add", "sample", "sample", "update"]))
        try:
            if op == "extend":
                n = draw(st.integers(0, 30))
                usual = "good" if buf.admission.requires_groups else None
                groups = draw(often(st.just(usual), st.sampled_from([None, "good", "bad"])))
                g = {None: None, "good": np.arange(n) // 4, "bad": ["g"] * n}[groups]
                ids = buf.extend(
                    column_values(draw, n),
                    priorities=priorities_for(draw, n, buf.sampler.uses_priorities),
                    groups=g,
                )
                assert ids.dtype == np.int64 and len(ids) == n
                if n:
                    assert ids[0] > last_id and (np.diff(ids) > 0).all()
                    last_id = int(ids[-1])
            elif op == "add":
                item = {
                    k: v[0]
                    for k, v in column_values(draw, 1).items()
                    if isinstance(v, np.ndarray) and len(v)
                }
                item_id = buf.add(**item)
                assert item_id > last_id
                last_id = item_id
            elif op == "sample":
                batch = buf.sample(
                    draw(often(st.integers(1, 50), st.sampled_from([0, -1, True, 2.5, 10**12])))
                )
                ids = np.asarray(batch.ids.values if hasattr(batch.ids, "values") else batch.ids)
                assert ids.size and buf.contains(ids).all()
                if batch.weights is not None:
                    w = batch.weights
                    assert np.isfinite(w).all() and (w > 0).all() and (w <= 1).all(), w
                sampled = ids
            else:
                which = draw(often(st.just("sampled"), st.sampled_from(["random", "strings"])))
                ids = {
                    "sampled": sampled,
                    "random": np.arange(draw(st.integers(0, 5))),
                    "strings": ["a"],
                }[which]
                n = len(ids)
                buf.update_priorities(ids, priorities_for(draw, n, True))
        except ReplayBankError as err:
            check_error(err)
            event(f"{op} refused: {type(err).__name__}")
        else:
            event(f"{op} ok")
        assert 0 <= len(buf) <= buf.capacity
        members = getattr(buf.admission, "members", None)
        if members is not None:  # the admission's books agree with the buffer's
            assert sum(len(s) for s in members.slots.values()) == len(buf)


@pytest.mark.parametrize("kernels", ["numpy"])
def test_public_api_fuzz_numpy_kernels(kernels, monkeypatch):
    monkeypatch.setenv("REPLAYBANK_KERNELS", kernels)
    test_public_api_fuzz()


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    values=st.lists(st.integers(-5, 5), max_size=6),
    offsets=st.one_of(
        st.lists(st.integers(-2, 8), max_size=5),
        st.lists(st.floats(-1, 8), min_size=1, max_size=3),
        st.lists(st.booleans(), min_size=1, max_size=3),
    ),
)
def test_ragged_extend_stores_exactly_its_rows_or_refuses_naming_the_offsets(values, offsets):
    """A ``Ragged`` handed to ``extend`` is stored row for row as its offsets say, or refused with a
    ``ReplayBankError`` naming ``columns['t'].offsets``; offsets past the values, decreasing,
    negative, float or bool offsets were cut silently (or raised ``IndexError``)."""
    from replaybank import Ragged, RaggedStorage

    vals, offs = np.array(values, dtype=np.int64), np.array(offsets)
    good = (offs.dtype.kind in "iu" and len(offs) >= 2 and offs[0] == 0 and offs[-1] == len(vals)
            and bool((np.diff(offs) >= 0).all()))
    buf = ReplayBuffer(16, storage=RaggedStorage(), spec={"t": ((), np.int64, True)})
    if not good:
        if len(offs) == 1 and offs.dtype.kind in "iu" and offs[0] == 0 == len(vals):
            return  # no rows: nothing to store, nothing wrong
        with pytest.raises(ReplayBankError, match=r"columns\['t'\]\.offsets"):
            buf.extend({"t": Ragged(vals, offs)})
        assert len(buf) == 0
        return
    ids = buf.extend({"t": Ragged(vals, offs)})
    stored = buf.get(ids)["t"]
    assert [r.tolist() for r in stored] == [vals[a:b].tolist() for a, b in zip(offs[:-1], offs[1:])]


def test_memmap_storage_refuses_a_nul_byte_and_an_uncreatable_directory(tmp_path):
    from replaybank import MemmapStorage

    with pytest.raises(ReplayBankError, match=r"MemmapStorage\(directory=.*\): a path cannot hold a NUL byte"):
        MemmapStorage(str(tmp_path / "a\0b"))
    (tmp_path / "file").write_text("x")
    buf = ReplayBuffer(4, storage=MemmapStorage(tmp_path / "file" / "sub"))
    with pytest.raises(ReplayBankError, match=r"MemmapStorage\(directory=.*sub'\): cannot create it"):
        buf.add(x=np.float32(1.0))
