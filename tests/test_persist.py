import json
import os
import shutil
import threading

import numpy as np
import pytest

from replaybank import (
    CorruptSaveError,
    MemmapStorage,
    Prioritized,
    RaggedStorage,
    ReplayBankError,
    ReplayBuffer,
    Reshuffled,
    Window,
    persist,
)


def filled(sampler=None, n=50):
    buf = ReplayBuffer(64, sampler=sampler or Reshuffled(), seed=0)
    buf.extend(
        {"obs": np.random.default_rng(0).random((n, 3), dtype=np.float32), "a": np.arange(n)}
    )
    return buf


def test_save_writes_npy_per_column_and_manifest(tmp_path):
    buf = filled()
    buf.save(tmp_path / "b")
    manifest = json.loads((tmp_path / "b" / "manifest.json").read_text())
    version = tmp_path / "b" / manifest["version"]
    assert sorted(p.name for p in (version / "columns").iterdir()) == ["a.npy", "obs.npy"]
    assert manifest["schema_version"] == 2 and manifest["sampler"]["class"] == "Reshuffled"
    assert all(len(meta["sha256"]) == 64 for meta in manifest["files"].values())
    # no pickle anywhere: every file loads with allow_pickle=False
    for rel in manifest["files"]:
        np.load(version / rel, allow_pickle=False)


def test_mid_epoch_resume_is_exact(tmp_path):
    buf = filled()
    buf.sample(7)
    buf.save(tmp_path / "b")
    loaded = ReplayBuffer.load(tmp_path / "b")
    for _ in range(20):
        np.testing.assert_array_equal(buf.sample(9).data["a"], loaded.sample(9).data["a"])


def test_mmap_load_maps_columns(tmp_path):
    buf = filled()
    buf.save(tmp_path / "b")
    loaded = ReplayBuffer.load(tmp_path / "b", mmap=True)
    assert isinstance(loaded.storage.column("obs"), np.memmap)
    loaded.extend(
        {"obs": np.zeros((2, 3), np.float32), "a": [1, 2]}
    )  # copy-on-write: the save is untouched
    again = ReplayBuffer.load(tmp_path / "b")
    assert len(again) == 50


def test_ragged_round_trip(tmp_path):
    buf = ReplayBuffer(8, storage=RaggedStorage(), seed=0)
    rows = [np.arange(k, dtype=np.int32) for k in range(1, 12)]
    buf.extend({"tok": rows, "y": np.arange(11)})
    buf.save(tmp_path / "r")
    loaded = ReplayBuffer.load(tmp_path / "r")
    b1, b2 = buf.sample(5), loaded.sample(5)
    assert [r.tolist() for r in b1["tok"]] == [r.tolist() for r in b2["tok"]]
    for r, y in zip(b2["tok"], b2["y"]):
        assert len(r) == y + 1


def test_resave_replaces_atomically_and_cleans_old_versions(tmp_path):
    buf = filled()
    buf.save(tmp_path / "b")
    buf.extend({"obs": np.ones((5, 3), np.float32), "a": np.arange(5)})
    buf.save(tmp_path / "b")
    versions = [p.name for p in (tmp_path / "b").iterdir() if p.name.startswith("v")]
    assert versions == ["v000002"]
    assert len(ReplayBuffer.load(tmp_path / "b")) == 55


def test_interrupted_save_leaves_previous_save_loadable(tmp_path, monkeypatch):
    buf = filled()
    buf.save(tmp_path / "b")
    buf.extend({"obs": np.ones((5, 3), np.float32), "a": np.arange(5)})

    def crash(*args, **kwargs):
        raise KeyboardInterrupt("power cut")

    monkeypatch.setattr(persist.os, "replace", crash)  # dies just before the manifest switch
    with pytest.raises(KeyboardInterrupt):
        buf.save(tmp_path / "b")
    monkeypatch.undo()
    assert len(ReplayBuffer.load(tmp_path / "b")) == 50
    buf.save(tmp_path / "b")  # and the next save cleans up the half-written version
    assert len(ReplayBuffer.load(tmp_path / "b")) == 55


def test_truncated_or_altered_files_are_detected(tmp_path):
    buf = filled()
    buf.save(tmp_path / "b")
    manifest = json.loads((tmp_path / "b" / "manifest.json").read_text())
    col = tmp_path / "b" / manifest["version"] / "columns" / "obs.npy"
    pristine = col.read_bytes()
    with open(col, "r+b") as f:
        f.truncate(len(pristine) - 10)
    with pytest.raises(CorruptSaveError, match="truncated"):
        ReplayBuffer.load(tmp_path / "b")
    altered = bytearray(pristine)
    altered[-1] ^= 0xFF
    col.write_bytes(bytes(altered))
    with pytest.raises(CorruptSaveError, match="checksum"):
        ReplayBuffer.load(tmp_path / "b")
    os.remove(col)
    with pytest.raises(CorruptSaveError, match="missing"):
        ReplayBuffer.load(tmp_path / "b")


def test_bad_paths(tmp_path):
    with pytest.raises(ReplayBankError, match="not a saved replaybank buffer"):
        ReplayBuffer.load(tmp_path)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "precious.txt").write_text("keep me")
    with pytest.raises(ReplayBankError, match="refusing"):
        filled().save(tmp_path / "other")
    assert (tmp_path / "other" / "precious.txt").read_text() == "keep me"
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "manifest.json").write_text("{not json")
    with pytest.raises(CorruptSaveError, match="not valid JSON"):
        ReplayBuffer.load(tmp_path / "junk")


def test_prioritized_state_survives(tmp_path):
    buf = filled(Prioritized())
    b = buf.sample(10)
    buf.update_priorities(b.ids, np.arange(10) + 1.0)
    buf.save(tmp_path / "p")
    loaded = ReplayBuffer.load(tmp_path / "p")
    np.testing.assert_allclose(loaded.sampler.trees.total, buf.sampler.trees.total)
    assert loaded.sampler.max_priority == buf.sampler.max_priority
    shutil.rmtree(tmp_path / "p")


# -- never-written memory is never saved ----------------------------------------------------------
def test_save_writes_zeros_for_slots_never_filled(tmp_path):
    # freed memory full of a pattern is what np.empty would hand back for the next column
    junk = np.full(4096, 7.25)
    del junk
    buf = ReplayBuffer(4096, seed=0)
    buf.extend({"x": np.arange(10, dtype=np.float64)})
    assert not buf.storage.column("x")[10:].any()
    buf.save(tmp_path / "b")
    manifest = json.loads((tmp_path / "b" / "manifest.json").read_text())
    x = np.load(tmp_path / "b" / manifest["version"] / "columns" / "x.npy")
    assert x.shape == (4096,) and x[:10].tolist() == list(range(10)) and not x[10:].any()


def test_save_writes_zeros_for_evicted_slots(tmp_path):
    buf = ReplayBuffer(6, admission=Window(1), seed=0)
    buf.extend({"x": np.arange(1, 5.0)}, groups=[0, 0, 0, 0])
    buf.extend({"x": np.array([9.0])}, groups=[1])  # group 0 leaves: 4 slots emptied
    assert len(buf) == 1
    buf.save(tmp_path / "b")
    manifest = json.loads((tmp_path / "b" / "manifest.json").read_text())
    x = np.load(tmp_path / "b" / manifest["version"] / "columns" / "x.npy")
    assert sorted(x.tolist()) == [0.0] * 5 + [9.0]
    assert ReplayBuffer.load(tmp_path / "b").sample(3).data["x"].tolist() == [9.0] * 3


# -- an interrupted first save leaves the path usable -----------------------------------------------
def test_failed_first_save_leaves_the_path_usable(tmp_path, monkeypatch):
    buf = filled()
    calls = []

    def dies_on_second_file(path, arr, **kw):
        calls.append(path)
        if len(calls) == 2:
            raise OSError("disk full")
        return real(path, arr, **kw)

    real = persist.npyio.write
    monkeypatch.setattr(persist.npyio, "write", dies_on_second_file)
    with pytest.raises(OSError, match="disk full"):
        buf.save(tmp_path / "b")
    monkeypatch.undo()
    assert list((tmp_path / "b").iterdir()) == []  # what it wrote is gone
    buf.save(tmp_path / "b")
    assert len(ReplayBuffer.load(tmp_path / "b")) == 50


KILLED_SAVE = """
import os, sys, time
import numpy as np
from replaybank import ReplayBuffer, persist
buf = ReplayBuffer(64, seed=0)
buf.extend({"obs": np.zeros((50, 3), np.float32), "a": np.arange(50)})
def stall(*args):  # the version folder is complete, the manifest not yet switched
    open(sys.argv[2], "w").close()
    time.sleep(600)
persist.os.replace = stall
buf.save(sys.argv[1])
"""


def test_first_save_killed_mid_way_leaves_the_path_usable(tmp_path):
    import signal
    import subprocess
    import sys
    import time

    ready = tmp_path / "ready"
    child = subprocess.Popen([sys.executable, "-c", KILLED_SAVE, str(tmp_path / "b"), str(ready)])
    try:
        deadline = time.monotonic() + 120
        while not ready.exists():
            assert child.poll() is None and time.monotonic() < deadline, "child died early"
            time.sleep(0.05)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    names = sorted(p.name for p in (tmp_path / "b").iterdir())
    assert names == ["manifest.json.tmp", "v000001"]  # what kill -9 leaves
    with pytest.raises(ReplayBankError, match="not a saved replaybank buffer"):
        ReplayBuffer.load(tmp_path / "b")
    buf = filled()
    buf.save(tmp_path / "b")
    assert sorted(p.name for p in (tmp_path / "b").iterdir()) == ["manifest.json", "v000001"]
    assert len(ReplayBuffer.load(tmp_path / "b")) == 50


def test_leftovers_are_cleaned_only_when_they_are_clearly_a_save(tmp_path):
    (tmp_path / "b" / "v000001" / "columns").mkdir(parents=True)
    (tmp_path / "b" / "v000001" / "columns" / "obs.npy").write_bytes(b"partial")
    (tmp_path / "b" / "v000001" / "notes.txt").write_text("mine")
    with pytest.raises(ReplayBankError, match="refusing"):
        filled().save(tmp_path / "b")
    assert (tmp_path / "b" / "v000001" / "notes.txt").read_text() == "mine"
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "manifest.json").write_text('{"name": "my web app"}')
    (tmp_path / "c" / "v000001").mkdir()
    with pytest.raises(ReplayBankError, match="not a replaybank manifest"):
        filled().save(tmp_path / "c")
    assert (tmp_path / "c" / "v000001").is_dir()


# -- concurrent writers --------------------------------------------------------------------------
@pytest.mark.parametrize("memmap", [False, True])
def test_save_is_a_consistent_snapshot_under_concurrent_writers(tmp_path, memmap):
    """Each item's row holds its own arrival number; every saved id must find its own row."""
    storage = MemmapStorage(tmp_path / "live") if memmap else None
    buf = ReplayBuffer(20_000, storage=storage, seed=0)
    width = 32
    buf.extend({"x": np.zeros((1, width))})
    stop = threading.Event()

    def writer():
        arrival = 1
        while not stop.is_set():
            buf.extend({"x": np.repeat(np.arange(arrival, arrival + 64.0)[:, None], width, 1)})
            arrival += 64

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        for k in range(6):
            buf.save(tmp_path / f"s{k}")
    finally:
        stop.set()
        thread.join()
    for k in range(6):
        loaded = ReplayBuffer.load(tmp_path / f"s{k}")
        ids = loaded._table.ids_of(np.arange(len(loaded)))
        x = loaded.get(ids)["x"]
        np.testing.assert_array_equal(x, np.repeat((ids >> loaded._table.shift)[:, None], width, 1))


# -- memory-mapped buffers come back memory-mapped ------------------------------------------------
def test_memmap_storage_reloads_memory_mapped(tmp_path):
    buf = ReplayBuffer(64, storage=MemmapStorage(tmp_path / "live"), seed=0)
    buf.extend({"obs": np.arange(150, dtype=np.float32).reshape(50, 3), "a": np.arange(50)})
    buf.save(tmp_path / "b")
    loaded = ReplayBuffer.load(tmp_path / "b")
    assert isinstance(loaded.storage, MemmapStorage)
    assert isinstance(loaded.storage.column("obs"), np.memmap)
    loaded.extend({"obs": np.full((20, 3), -1, np.float32), "a": np.arange(20)})
    again = ReplayBuffer.load(tmp_path / "b")  # copy-on-write: the save is untouched
    assert len(again) == 50 and again.storage.column("a")[:50].tolist() == list(range(50))
    assert ReplayBuffer.load(tmp_path / "b", mmap=False).storage.column("obs").__class__ is np.ndarray


def test_load_into_a_directory_continues_on_disk(tmp_path):
    buf = filled()
    buf.save(tmp_path / "b")
    loaded = ReplayBuffer.load(tmp_path / "b", directory=tmp_path / "disk")
    assert isinstance(loaded.storage, MemmapStorage) and loaded.storage.directory == tmp_path / "disk"
    assert sorted(p.name for p in (tmp_path / "disk").iterdir()) == ["a.npy", "obs.npy"]
    for _ in range(5):
        np.testing.assert_array_equal(buf.sample(8).data["a"], loaded.sample(8).data["a"])
    loaded.extend({"obs": np.ones((3, 3), np.float32), "a": [7, 8, 9]})
    loaded.storage.flush()
    on_disk = np.load(tmp_path / "disk" / "a.npy")
    assert on_disk[:53].tolist() == list(range(50)) + [7, 8, 9]


def test_unsafe_column_names_stay_inside_the_folders(tmp_path):
    buf = ReplayBuffer(8, storage=MemmapStorage(tmp_path / "live" / "deep"), seed=0)
    buf.extend({"../../escape": np.arange(3), "x.values": np.arange(3), "ok": np.arange(3)})
    assert not (tmp_path / "escape.npy").exists()
    files = sorted(p.name for p in (tmp_path / "live" / "deep").iterdir())
    assert files == ["col.0.npy", "col.2.npy", "ok.npy"]
    buf.save(tmp_path / "b")
    assert not (tmp_path / "escape.npy").exists() and not (tmp_path / "b" / "escape.npy").exists()
    loaded = ReplayBuffer.load(tmp_path / "b")
    for _ in range(3):
        a, b = buf.sample(4), loaded.sample(4)
        for name in ("../../escape", "x.values", "ok"):
            np.testing.assert_array_equal(a[name], b[name])


def test_save_refuses_what_load_could_not_read(tmp_path):
    class Mine(Reshuffled):
        pass

    buf = ReplayBuffer(8, sampler=Mine(), seed=0)
    with pytest.raises(ReplayBankError, match="sampler is Mine"):
        buf.save(tmp_path / "b")
    assert not (tmp_path / "b").exists()
    dates = ReplayBuffer(8, seed=0)  # extend already refuses what save could not write
    with pytest.raises(ReplayBankError, match="column 't' dtype"):
        dates.extend({"t": np.array(["2026-01-01"], dtype="datetime64[s]")})


@pytest.mark.parametrize("admission", [None, Window(2)])
def test_a_never_written_buffer_round_trips(tmp_path, admission):
    buf = ReplayBuffer(16, sampler=Prioritized(), admission=admission, seed=0)
    buf.save(tmp_path / "b")
    loaded = ReplayBuffer.load(tmp_path / "b")
    assert len(loaded) == 0 and loaded.spec is None
    groups = {} if admission is None else {"groups": [0, 0, 1]}
    for b in (buf, loaded):
        b.extend({"x": np.arange(3.0)}, **groups)
    np.testing.assert_array_equal(buf.sample(5).data["x"], loaded.sample(5).data["x"])


def test_a_mapped_buffer_can_be_saved_over_its_own_save(tmp_path):
    buf = filled()
    buf.save(tmp_path / "b")
    mapped = ReplayBuffer.load(tmp_path / "b", mmap=True)
    for b in (buf, mapped):
        b.extend({"obs": np.full((20, 3), 5, np.float32), "a": np.arange(100, 120)})
    mapped.save(tmp_path / "b")  # the old version's files are unlinked while still mapped
    again = ReplayBuffer.load(tmp_path / "b")
    for _ in range(4):
        np.testing.assert_array_equal(buf.sample(9).data["a"], again.sample(9).data["a"])
