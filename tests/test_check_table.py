"""Sampler/admission state that passes its own checks but disagrees with the restored slot table is
refused by the ``check_table`` hooks (loading it used to succeed, and ``sample`` then raised
IndexError, returned id -1 or NaN weights, or drew empty slots).

Each test saves a buffer, edits one state entry as a hostile author would (re-signing the
checksums, as in test_manifest.py) and checks the load raises ``CorruptSaveError`` naming the key.
"""

import json

import numpy as np
import pytest

from replaybank import (
    CorruptSaveError,
    GroupBalanced,
    Prioritized,
    PrioritizedReshuffled,
    ReplayBuffer,
    Reshuffled,
    Trajectories,
    Window,
)
from replaybank.manifest import digest
from replaybank.npyio import write


def resign(root, edit):
    raw = json.loads((root / "manifest.json").read_text())
    edit(raw)
    raw["manifest_sha256"] = digest(raw)
    (root / "manifest.json").write_text(json.dumps(raw))


def edit_array(root, name, change):
    """Load the saved state array ``name`` (e.g. ``sampler.order``), apply ``change`` (returns the
    new array) and write it back with a matching checksum."""
    raw = json.loads((root / "manifest.json").read_text())
    rel = f"state/{name}.npy"
    path = root / raw["version"] / rel
    arr = change(np.load(path))
    sha, nbytes = write(path, np.ascontiguousarray(arr))
    resign(root, lambda m: m["files"].__setitem__(rel, {"sha256": sha, "bytes": nbytes}))


def refused(root, *words):
    with pytest.raises(CorruptSaveError) as info:
        ReplayBuffer.load(root)
    for word in words:
        assert word in str(info.value), str(info.value)


def saved(tmp_path, sampler, admission=None, n=10, groups=None, **columns):
    buf = ReplayBuffer(16, sampler=sampler, admission=admission, seed=0)
    data = columns or {"x": np.arange(n, dtype=np.float64)}
    buf.extend(data, groups=groups)
    buf.sample(3)
    buf.save(tmp_path / "b")
    ReplayBuffer.load(tmp_path / "b").sample(3)  # the unedited save loads and samples
    return tmp_path / "b"


def put(arr, i, value):
    arr = arr.copy()
    arr[i] = value
    return arr


@pytest.mark.parametrize(
    "change, words",
    [
        (lambda a: put(a, 0, 12), ["order", "12", "table.high = 10"]),  # a slot never filled
        (lambda a: put(a, 1, a[0]), ["order", "twice"]),
    ],
)
def test_reshuffled_order_must_name_filled_slots(tmp_path, change, words):
    root = saved(tmp_path, Reshuffled())
    edit_array(root, "sampler.order", change)
    refused(root, "Reshuffled", *words)


@pytest.mark.parametrize("sampler", [Prioritized, PrioritizedReshuffled])
def test_priority_mass_on_an_empty_slot_is_refused(tmp_path, sampler):
    root = saved(tmp_path, sampler())
    edit_array(root, "sampler.priorities", lambda a: put(a, 13, 1.0))
    refused(root, sampler.__name__, "priorities", "[13]", "holds no item")


def trajectories_save(tmp_path):
    done = np.arange(10) % 4 == 3
    return saved(tmp_path, Trajectories(2, priority="td"), x=np.arange(10.0), done=done)


def test_trajectories_arrival_counter_must_equal_the_tables(tmp_path):
    root = trajectories_save(tmp_path)
    resign(root, lambda m: m["state"]["sampler"].__setitem__("next_arrival", 11))
    refused(root, "next_arrival", "11", "table.arrivals = 10")


def test_trajectories_negative_td_episode_sum_is_refused(tmp_path):
    root = trajectories_save(tmp_path)
    edit_array(root, "sampler.ep_value", lambda a: put(a, 0, -5.0))
    refused(root, "ep_value", "-5.0")


def test_trajectories_td_priority_on_an_empty_slot_is_refused(tmp_path):
    root = trajectories_save(tmp_path)
    edit_array(root, "sampler.step_value", lambda a: put(a, 14, 2.0))
    refused(root, "step_value", "[14]")


def test_trajectories_complex_state_is_refused(tmp_path):
    root = trajectories_save(tmp_path)
    edit_array(root, "sampler.ep_value", lambda a: a.astype(np.complex128))
    refused(root, "ep_value", "complex")


def test_group_balanced_members_must_be_the_occupied_slots(tmp_path):
    root = saved(tmp_path, Reshuffled(), GroupBalanced(), groups=np.arange(10) % 2)
    edit_array(root, "admission.members.0", lambda a: put(a, 0, 15))  # slot 15 is empty
    refused(root, "GroupBalanced", "members", "listed but empty: [15]")


def test_window_members_must_be_the_occupied_slots(tmp_path):
    root = saved(tmp_path, Reshuffled(), Window(2), groups=np.arange(10) // 4)
    raw = json.loads((root / "manifest.json").read_text())
    version = root / raw["version"]
    member = int(np.load(version / "state/admission.members.1.npy")[0])
    free = int(np.load(version / "state/admission.free.npy")[0])
    # swap a member slot with a free one everywhere in Window's own state: consistent within
    # Window, but the table holds an item in `member` and none in `free`
    edit_array(root, "admission.members.1", lambda a: np.where(a == member, free, a))
    edit_array(root, "admission.free", lambda a: np.where(a == free, member, a))
    edit_array(root, "admission.queue", lambda a: np.stack([a[:, 0], np.where(a[:, 1] == member, free, a[:, 1])], 1))
    refused(root, "Window", "members", f"listed but empty: [{free}]")
