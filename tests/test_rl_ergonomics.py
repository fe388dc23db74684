"""RL loop ergonomics: torch batches, sample dtypes, the env-axis check on add(),
clear(), Reshuffled(drop_last=True) and the single-row extend path."""

from __future__ import annotations

import doctest
import sys
import warnings

import numpy as np
import pytest

from replaybank import (
    EmptyBufferError,
    Prioritized,
    PrioritizedReshuffled,
    ReplayBankError,
    ReplayBuffer,
    Reservoir,
    Reshuffled,
    Trajectories,
    Uniform,
    single,
    slots,
)
from replaybank import batch as batch_mod
from replaybank.samplers import reshuffled

SPEC = {
    "obs": ((4,), "float32"),
    "action": ((), "int64"),
    "reward": ((), "float64"),
    "done": ((), "bool"),
}


def transitions(n: int, start: int = 0) -> dict[str, np.ndarray]:
    i = np.arange(start, start + n)
    return {
        "obs": np.repeat(i[:, None], 4, axis=1).astype(np.float32),
        "action": i % 2,
        "reward": i * 0.5,
        "done": i % 3 == 2,
    }


def test_doctests_of_the_new_modules() -> None:
    for mod in (batch_mod, single, slots, reshuffled):
        assert doctest.testmod(mod).failed == 0, mod.__name__


# -- sample_dtypes and torch batches ----------------------------------------------------------------
def test_sample_dtypes_convert_the_sampled_copy_only() -> None:
    buf = ReplayBuffer(16, seed=0, sample_dtypes={"reward": "float32", "done": "float32"})
    buf.extend(transitions(8))
    b = buf.sample(5)
    assert b["reward"].dtype == np.float32 and b["done"].dtype == np.float32
    assert b["obs"].dtype == np.float32 and b["action"].dtype == np.int64
    stored = buf.get(b.ids)
    np.testing.assert_array_equal(b["done"], stored["done"].astype(np.float32))
    np.testing.assert_array_equal(b["reward"], stored["reward"].astype(np.float32))
    assert buf.spec is not None and buf.spec["done"].dtype == np.bool_  # storage unchanged
    buf.sample_dtypes = None
    assert buf.sample(2)["done"].dtype == np.bool_


@pytest.mark.parametrize(
    "dtypes, match",
    [
        ({"rewrd": "float32"}, r"sample_dtypes names column\(s\) \['rewrd'\]"),
        ({"done": "U4"}, "bool or numeric dtypes only"),
        ({"done": "not-a-dtype"}, "not a numpy dtype"),
        (["reward"], "mapping of column name"),
    ],
)
def test_bad_sample_dtypes_are_refused_naming_the_entry(dtypes, match) -> None:
    with pytest.raises(ReplayBankError, match=match):
        ReplayBuffer(16, spec=SPEC, sample_dtypes=dtypes)


def test_sample_dtypes_unknown_column_refused_at_first_extend_with_nothing_stored() -> None:
    buf = ReplayBuffer(16, sample_dtypes={"rew": "float32"})
    with pytest.raises(ReplayBankError, match=r"\['rew'\]"):
        buf.extend(transitions(3))
    assert len(buf) == 0 and buf.spec is None


def test_torch_batches_have_the_asked_dtypes_and_match_numpy() -> None:
    torch = pytest.importorskip("torch")
    make = lambda: ReplayBuffer(  # noqa: E731
        32, sampler=Prioritized(), seed=3, sample_dtypes={"reward": "float32", "done": "float32"}
    )
    a, b = make(), make()
    for buf in (a, b):
        buf.extend(transitions(20))
    t = a.sample(8, as_tensors="torch", device="cpu")
    n = b.sample(8)
    assert isinstance(t.ids, np.ndarray) and (t.ids == n.ids).all()
    assert t["reward"].dtype == torch.float32 and t["done"].dtype == torch.float32
    assert t["action"].dtype == torch.int64 and tuple(t["obs"].shape) == (8, 4)
    assert t.weights.dtype == torch.float32
    np.testing.assert_array_equal(t["obs"].numpy(), n["obs"])
    np.testing.assert_array_equal(t.weights.numpy(), n.weights)
    # the TD target the CleanRL port could not compute with bool dones
    target = t["reward"] + 0.99 * (1 - t["done"]) * torch.ones(8)
    assert target.dtype == torch.float32
    assert a.update_priorities(t.ids, np.ones(8)) == 8


def test_torch_without_torch_names_the_extra_and_samples_nothing(monkeypatch) -> None:
    buf = ReplayBuffer(8, sampler=Reshuffled(), seed=0)
    buf.extend(transitions(4))
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch -> ImportError
    with pytest.raises(ImportError, match=r"replaybank\[torch\]"):
        buf.sample(4, as_tensors="torch")
    monkeypatch.undo()
    assert sorted(buf.sample(4)["action"].tolist()) == [0, 0, 1, 1]  # a whole epoch still ahead


def test_bad_as_tensors_and_device_arguments() -> None:
    buf = ReplayBuffer(8, seed=0)
    buf.extend(transitions(4))
    with pytest.raises(ReplayBankError, match="expected None or 'torch'"):
        buf.sample(2, as_tensors="jax")  # type: ignore[arg-type]
    with pytest.raises(ReplayBankError, match="needs as_tensors='torch'"):
        buf.sample(2, device="cpu")
    pytest.importorskip("torch")
    with pytest.raises(ReplayBankError, match="not a torch device"):
        buf.sample(2, as_tensors="torch", device="gpu:banana")


def test_ragged_columns_refuse_tensors() -> None:
    pytest.importorskip("torch")
    from replaybank import RaggedStorage

    buf = ReplayBuffer(8, storage=RaggedStorage(), seed=0)
    buf.extend({"tokens": [np.arange(3), np.arange(5)]})
    with pytest.raises(ReplayBankError, match="column 'tokens' is ragged"):
        buf.sample(2, as_tensors="torch")


# -- add() with a vector env's arrays ---------------------------------------------------------------
def test_add_with_a_leading_env_axis_is_refused_before_the_spec_is_inferred() -> None:
    buf = ReplayBuffer(8)
    with pytest.raises(ReplayBankError, match="leading axis of length 1 .*extend"):
        buf.add(obs=np.zeros((1, 4)), action=np.array([1]), reward=np.array([0.5]), done=np.array([False]))
    with pytest.raises(ReplayBankError, match="leading axis of length 3"):
        buf.add(obs=np.zeros((3, 4)), action=np.zeros(3, int), reward=np.zeros(3))
    assert len(buf) == 0 and buf.spec is None


def test_add_with_a_leading_env_axis_is_refused_once_the_spec_is_known() -> None:
    buf = ReplayBuffer(8, spec=SPEC)
    with pytest.raises(ReplayBankError, match="leading axis of length 2"):
        buf.add(obs=np.zeros((2, 4)), action=np.zeros(2, int), reward=np.zeros(2), done=np.zeros(2, bool))
    assert len(buf) == 0
    ids = buf.extend(transitions(2))  # the way the message points to
    assert len(ids) == 2


def test_add_of_items_that_merely_look_batched_still_works() -> None:
    buf = ReplayBuffer(8)  # two vector columns of the same length, and a scalar: one item
    buf.add(obs=np.zeros(4), next_obs=np.ones(4), reward=1.0)
    assert buf.spec is not None and buf.spec["obs"].shape == (4,)
    per_agent = ReplayBuffer(8, spec={"obs": ((3, 4), "float64"), "reward": ((3,), "float64")})
    per_agent.add(obs=np.zeros((3, 4)), reward=np.zeros(3))  # declared: no guess needed
    assert len(per_agent) == 1


# -- the single-row paths ---------------------------------------------------------------------------
@pytest.mark.parametrize("sampler", [Uniform(), Prioritized(), Reshuffled()])
def test_extend_of_one_row_equals_add_and_the_batch_path(sampler) -> None:
    rows = transitions(7)
    fast, by_add, slow = (ReplayBuffer(5, spec=SPEC, sampler=type(sampler)(), seed=1) for _ in range(3))
    for i in range(7):
        one = {k: v[i : i + 1] for k, v in rows.items()}
        fast.extend(one)
        by_add.add(**{k: v[i] for k, v in rows.items()})
    ids = slow.extend(rows)[-5:]
    for buf in (fast, by_add):
        assert len(buf) == len(slow) == 5 and buf.contains(ids).all()
        np.testing.assert_equal(buf.get(ids), slow.get(ids))
    for _ in range(3):  # the same draws: the same slots hold the same items
        expected = slow.sample(5).data
        for buf in (fast, by_add):
            np.testing.assert_equal(buf.sample(5).data, expected)


def test_extend_of_one_row_keeps_the_checks() -> None:
    buf = ReplayBuffer(4, spec=SPEC)
    bad = {**{k: v[:1] for k, v in transitions(1).items()}, "action": np.array([1.5])}
    with pytest.raises(ReplayBankError, match="action"):
        buf.extend(bad)
    with pytest.raises(ReplayBankError, match="does not fit int8"):
        small = ReplayBuffer(4, spec={"x": ((), "int8")})
        small.extend({"x": np.array([300])})
    assert len(buf) == 0


SCALARS = [0, 1, -1, 255, 256, 300, -129, 2**63 - 1, 2**63, 2**64, True, False, 0.0, 1.5, -0.1, 1e38,
           3.5e38, 1e40, -1e40, float("inf"), float("nan"), np.float32(2.5), np.int64(7), np.bool_(True)]


@pytest.mark.parametrize("cast", ["checked", "unsafe"])
@pytest.mark.parametrize("dtype", ["float32", "float64", "int8", "uint8", "int64", "bool", "float16"])
def test_add_of_scalars_stores_or_refuses_exactly_as_the_batch_path(dtype, cast) -> None:
    # add() takes Python scalars without building arrays: every value must end as the general
    # path (extend of a one-row array) ends it, stored the same or refused the same
    for value in SCALARS:
        fast = ReplayBuffer(4, spec={"x": ((), dtype), "y": ((2,), "float32")}, cast=cast)
        slow = ReplayBuffer(4, spec={"x": ((), dtype), "y": ((2,), "float32")}, cast=cast)
        outcome = []
        writes = ((fast, lambda: fast.add(x=value, y=np.ones(2, np.float32))),  # noqa: B023 (called at once)
                  (slow, lambda: slow.extend({"x": np.asarray(value)[None], "y": np.ones((1, 2), np.float32)})))  # noqa: B023
        for buf, write in writes:
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                try:
                    write()
                    got = buf.get(np.array([0]))["x"]
                    outcome.append(("stored", got.dtype, got.tobytes()))
                except (ReplayBankError, OverflowError) as err:
                    outcome.append(("refused", type(err)))
        assert outcome[0] == outcome[1], (dtype, cast, value, outcome)
        assert len(fast) == len(slow)


def test_add_of_python_scalars_keeps_the_sampler_row_checks() -> None:
    buf = ReplayBuffer(8, sampler=Trajectories(2), spec={"obs": ((2,), "float32"), "done": ((), "float32")})
    buf.add(obs=np.zeros(2, np.float32), done=0.0)
    with pytest.raises(ReplayBankError, match="episode ends must be True/False"):
        buf.add(obs=np.zeros(2, np.float32), done=0.5)
    buf.add(obs=np.zeros(2, np.float32), done=1.0)
    assert len(buf) == 2


# -- clear() ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("sampler", [Uniform(), Reshuffled(), Prioritized(), PrioritizedReshuffled()])
def test_clear_empties_and_never_reissues_an_id(sampler, tmp_path) -> None:
    buf = ReplayBuffer(6, sampler=sampler, seed=0)
    old = buf.extend(transitions(9))
    if sampler.uses_priorities:
        buf.update_priorities(old[-6:], np.arange(6) + 10.0)
    buf.clear()
    assert len(buf) == 0 and buf.spec is not None
    with pytest.raises(EmptyBufferError):
        buf.sample(1)
    assert not buf.contains(old).any()
    if sampler.uses_priorities:
        assert buf.update_priorities(old[-6:], np.ones(6)) == 0  # stale ids are skipped
        assert sampler.max_priority == 1.0
    new = buf.extend(transitions(4, start=100))
    assert new.min() > old.max()
    got = buf.sample(4)
    assert set(got.ids.tolist()) <= set(new.tolist())
    assert set(got["action"].tolist()) <= {0, 1} and got["obs"].min() >= 100
    buf.save(tmp_path / "b")  # a cleared ring saves and loads with its restart point
    back = ReplayBuffer.load(tmp_path / "b")
    assert len(back) == 4 and (back.contains(new)).all() and not back.contains(old).any()
    np.testing.assert_equal(back.sample(3).data, buf.sample(3).data)
    assert int(back.extend(transitions(1))[0]) == int(buf.extend(transitions(1))[0])


def test_clear_restarts_a_reshuffled_epoch() -> None:
    buf = ReplayBuffer(8, sampler=Reshuffled(), seed=0)
    buf.extend(transitions(8))
    buf.sample(3)
    buf.clear()
    new = buf.extend(transitions(4, start=50))
    seen = np.concatenate([buf.sample(2).ids, buf.sample(2).ids])
    assert sorted(seen.tolist()) == sorted(new.tolist())


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"admission": Reservoir()}, "needs Fifo admission"),
        ({"sampler": Trajectories(2)}, "cannot restart Trajectories"),
    ],
)
def test_clear_refuses_what_it_cannot_restart_and_changes_nothing(kwargs, match) -> None:
    buf = ReplayBuffer(8, seed=0, **kwargs)
    ids = buf.extend(transitions(5))
    with pytest.raises(ReplayBankError, match=match):
        buf.clear()
    assert len(buf) == 5 and buf.contains(ids).all()


# -- Reshuffled(drop_last=True) ---------------------------------------------------------------------
def test_drop_last_never_repeats_an_item_within_a_batch() -> None:
    plain = ReplayBuffer(10, sampler=Reshuffled(), seed=0)
    dropping = ReplayBuffer(10, sampler=Reshuffled(drop_last=True), seed=0)
    for buf in (plain, dropping):
        buf.extend(transitions(10))
    plain_repeats = 0
    for _ in range(200):
        a, b = plain.sample(4).ids, dropping.sample(4).ids
        plain_repeats += len(a) - len(np.unique(a))
        assert len(np.unique(b)) == 4
    assert plain_repeats > 0  # the behaviour drop_last exists for
    # 2 whole batches per 10-item epoch, so each epoch serves 8 distinct items
    buf = ReplayBuffer(10, sampler=Reshuffled(drop_last=True), seed=1)
    buf.extend(transitions(10))
    for _ in range(5):
        epoch = np.concatenate([buf.sample(4).ids, buf.sample(4).ids])
        assert len(np.unique(epoch)) == 8
    assert buf.sampler.epoch == 5  # type: ignore[attr-defined]


def test_drop_last_batch_larger_than_the_buffer_is_a_clear_error() -> None:
    buf = ReplayBuffer(10, sampler=Reshuffled(drop_last=True), seed=0)
    buf.extend(transitions(3))
    with pytest.raises(ReplayBankError, match=r"batch_size=4 .* 3 stored items and Reshuffled\(drop_last=True\)"):
        buf.sample(4)
    assert len(buf) == 3 and len(buf.sample(3)) == 3


def test_drop_last_survives_save_and_old_saves_load(tmp_path) -> None:
    import json

    from replaybank.manifest import digest

    buf = ReplayBuffer(10, sampler=Reshuffled(drop_last=True), seed=0)
    buf.extend(transitions(10))
    buf.sample(4)
    buf.save(tmp_path / "b")
    back = ReplayBuffer.load(tmp_path / "b")
    assert back.sampler.drop_last is True  # type: ignore[attr-defined]
    np.testing.assert_array_equal(back.sample(4).ids, buf.sample(4).ids)
    raw = json.loads((tmp_path / "b" / "manifest.json").read_text())
    del raw["sampler"]["params"]["drop_last"]  # a save written before the parameter existed
    raw["manifest_sha256"] = digest(raw)
    (tmp_path / "b" / "manifest.json").write_text(json.dumps(raw))
    assert ReplayBuffer.load(tmp_path / "b").sampler.drop_last is False  # type: ignore[attr-defined]
    with pytest.raises(ReplayBankError, match="drop_last"):
        Reshuffled(drop_last=1)  # type: ignore[arg-type]
