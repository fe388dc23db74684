import json
import os
import shutil

import numpy as np
import pytest

from replaybank import (
    CorruptSaveError,
    Prioritized,
    RaggedStorage,
    ReplayBankError,
    ReplayBuffer,
    Reshuffled,
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
    assert manifest["schema_version"] == 1 and manifest["sampler"]["class"] == "Reshuffled"
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
