import threading

import numpy as np
import pytest

from replaybank import (
    EmptyBufferError,
    GroupBalanced,
    InsufficientMemoryError,
    Prioritized,
    ReplayBankError,
    ReplayBuffer,
    Reservoir,
    Reshuffled,
    Window,
)


def transitions(n, start=0):
    return {
        "obs": np.arange(start, start + n, dtype=np.float32)[:, None].repeat(4, axis=1),
        "action": np.arange(start, start + n, dtype=np.int64),
        "done": np.zeros(n, dtype=bool),
    }


def test_ids_strictly_increase_and_are_never_reused():
    buf = ReplayBuffer(5, seed=0)
    ids = np.concatenate(
        [
            buf.extend(transitions(3)),
            buf.extend(transitions(4)),
            [buf.add(obs=np.zeros(4), action=1, done=True)],
        ]
    )
    assert (np.diff(ids) > 0).all()
    assert len(buf) == 5
    assert buf.contains(ids).tolist() == [False, False, False, True, True, True, True, True]


def test_sampled_data_matches_ids():
    buf = ReplayBuffer(64, seed=1)
    ids = buf.extend(transitions(100))
    batch = buf.sample(32)
    stored = dict(zip(ids.tolist(), range(100)))
    for i, a in zip(batch.ids.tolist(), batch["action"].tolist()):
        assert stored[i] == a
    assert batch.weights is None
    assert batch.data["obs"].shape == (32, 4) and batch.data["obs"].dtype == np.float32


def test_spec_given_up_front_and_get():
    buf = ReplayBuffer(10, spec={"x": ((2,), "float32")}, seed=0)
    ids = buf.extend({"x": np.ones((3, 2))})
    assert buf.get(ids[1:])["x"].tolist() == [[1, 1], [1, 1]]
    with pytest.raises(ReplayBankError, match="expected \\(n, 2\\)"):
        buf.extend({"x": np.ones((3, 3))})


@pytest.mark.parametrize(
    "bad, match",
    [
        ({"obs": np.zeros((2, 5), np.float32), "action": [1, 2], "done": [0, 0]}, "column 'obs'"),
        (
            {"obs": np.zeros((2, 4), np.float32), "action": [1.5, 2.0], "done": [False, True]},
            "column 'action': dtype float64",
        ),
        ({"obs": np.zeros((2, 4), np.float32), "action": [1, 2]}, "missing column"),
        (
            {
                "obs": np.zeros((2, 4), np.float32),
                "action": [1, 2],
                "done": [True, True],
                "extra": [1, 2],
            },
            "unknown column",
        ),
        (
            {"obs": np.zeros((2, 4), np.float32), "action": [1, 2, 3], "done": [True, True]},
            "same count",
        ),
    ],
)
def test_bad_extend_raises_and_changes_nothing(bad, match):
    buf = ReplayBuffer(8, seed=0)
    buf.extend(transitions(3))
    before = buf.state_dict()
    with pytest.raises(ReplayBankError, match=match):
        buf.extend(bad)
    after = buf.state_dict()
    assert len(buf) == 3
    np.testing.assert_array_equal(before["columns"]["action"][:3], after["columns"]["action"][:3])
    assert (
        before["rng"] == after["rng"] and before["table"]["arrivals"] == after["table"]["arrivals"]
    )


@pytest.mark.parametrize("prio", [[1.0, np.nan], [1.0, np.inf], [1.0, -1.0]])
def test_bad_priorities_rejected_all_or_nothing(prio):
    buf = ReplayBuffer(8, sampler=Prioritized(), seed=0)
    ids = buf.extend(transitions(2), priorities=[1.0, 2.0])
    with pytest.raises(ReplayBankError, match="priorities"):
        buf.extend(transitions(2), priorities=prio)
    assert len(buf) == 2
    with pytest.raises(ReplayBankError, match="priorities"):
        buf.update_priorities(ids, prio)
    np.testing.assert_allclose(buf.sampler.trees.total, (1 + 1e-6) ** 0.6 + (2 + 1e-6) ** 0.6)


@pytest.mark.parametrize("capacity", [0, -3, 2.5, True, "10"])
def test_bad_capacity(capacity):
    with pytest.raises(ReplayBankError, match="capacity"):
        ReplayBuffer(capacity)


def test_sampling_errors():
    buf = ReplayBuffer(8, sampler=Reshuffled(), seed=0)
    with pytest.raises(EmptyBufferError):
        buf.sample(2)
    buf.extend(transitions(3))
    with pytest.raises(ReplayBankError, match="larger than the 3 stored"):
        buf.sample(4)
    with pytest.raises(ReplayBankError, match="batch_size"):
        buf.sample(0)


def test_update_priorities_skips_overwritten_and_rejects_unknown_ids():
    buf = ReplayBuffer(4, sampler=Prioritized(alpha=1.0, eps=0.0), seed=0)
    old = buf.extend(transitions(4))
    new = buf.extend(transitions(2, start=4))  # overwrites the first two slots
    assert buf.update_priorities(np.concatenate([old, new]), np.full(6, 3.0)) == 4
    leaves = buf.sampler.trees.leaves
    assert leaves.tolist() == [3.0, 3.0, 3.0, 3.0]
    with pytest.raises(ReplayBankError, match="never issued"):
        buf.update_priorities([new[-1] + (1 << 40)], [1.0])
    with pytest.raises(ReplayBankError, match="never issued"):
        buf.update_priorities([-1], [1.0])


def test_uniform_buffer_rejects_priorities_and_groups():
    buf = ReplayBuffer(4, seed=0)
    with pytest.raises(ReplayBankError, match="ignores them"):
        buf.extend(transitions(2), priorities=[1, 2])
    with pytest.raises(ReplayBankError, match="ignores them"):
        buf.extend(transitions(2), groups=[1, 2])
    with pytest.raises(ReplayBankError, match="no priorities"):
        ids = buf.extend(transitions(2))
        buf.update_priorities(ids, [1, 2])


def test_group_admissions_need_groups():
    for admission in (GroupBalanced(), Window(2)):
        buf = ReplayBuffer(4, admission=admission, seed=0)
        with pytest.raises(ReplayBankError, match="needs groups"):
            buf.extend(transitions(2))
        with pytest.raises(ReplayBankError, match="one per item"):
            buf.extend(transitions(2), groups=[1, 2, 3])


def test_memory_is_checked_before_allocating():
    with pytest.raises(InsufficientMemoryError, match="bytes") as err:
        ReplayBuffer(10**12, spec={"obs": ((64,), "float32")})
    assert "MemmapStorage" in str(err.value)


def test_window_keeps_last_k_groups_and_refills_holes():
    buf = ReplayBuffer(6, admission=Window(2), seed=0)
    for g in range(4):
        buf.extend(transitions(2, start=10 * g), groups=np.full(2, g))
    assert sorted(buf.sample(50).data["action"].tolist())[0] >= 20
    assert len(buf) == 4
    seen = set(buf.get(buf.sample(64).ids)["action"].tolist())
    assert seen == {20, 21, 30, 31}


def test_threads_extend_and_sample_concurrently():
    buf = ReplayBuffer(10_000, sampler=Prioritized(), seed=0)
    buf.extend(transitions(10))
    errors = []

    def writer(k):
        try:
            for i in range(200):
                buf.extend(transitions(5, start=k * 10_000 + i * 5), priorities=np.ones(5))
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    def reader():
        try:
            for _ in range(200):
                b = buf.sample(16)
                buf.update_priorities(b.ids, np.ones(16) * 2)
        except Exception as e:  # pragma: no cover
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(3)] + [
        threading.Thread(target=reader) for _ in range(2)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(buf) == 10 + 3 * 200 * 5
    actions = buf.get(buf.sample(5000).ids)["action"]
    assert len(set(actions.tolist())) > 2000
    np.testing.assert_allclose(buf.sampler.trees.total, buf.sampler.trees.leaves.sum(), rtol=1e-9)


def test_reservoir_batch_larger_than_capacity():
    buf = ReplayBuffer(5, admission=Reservoir(), seed=0)
    ids = buf.extend(transitions(50))
    assert len(buf) == 5 and buf.contains(ids).sum() == 5


def test_single_add_fast_path_validates_like_extend():
    buf = ReplayBuffer(3, sampler=Prioritized(), seed=0)
    buf.extend(transitions(1))
    ids = [buf.add(obs=np.ones(4, np.float64), action=np.int32(i), done=False) for i in range(4)]
    assert buf.contains(ids).tolist() == [False, True, True, True]
    assert sorted(buf.get(ids[1:])["action"].tolist()) == [1, 2, 3]
    assert buf.sampler.trees.leaves.tolist() == [buf.sampler.trees.leaves[0]] * 3
    with pytest.raises(ReplayBankError, match="column 'obs'"):
        buf.add(obs=np.ones(5), action=1, done=False)
    with pytest.raises(ReplayBankError, match="dtype float64"):
        buf.add(obs=np.ones(4), action=1.5, done=False)
    with pytest.raises(ReplayBankError, match="missing column"):
        buf.add(obs=np.ones(4), action=1)
    assert len(buf) == 3 and buf.contains(ids).tolist() == [False, True, True, True]
