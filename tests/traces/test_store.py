"""Traces on disk: round trip, and every kind of damage refused with a message that says where."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pytest

from replaybank import npyio
from replaybank.errors import CorruptSaveError, ReplayBankError
from replaybank.traces import load_trace, read_manifest, save_trace, synthetic_trace
from replaybank.traces.store import _digest


@pytest.fixture()
def saved(tmp_path: Path) -> Path:
    t = synthetic_trace(requests=3, prompt_tokens=4, decode_tokens=5, layers=2, experts=8, top_k=2, seed=0)
    save_trace(t, tmp_path / "t")
    return tmp_path / "t"


def resign(root: Path, name: str, arr: np.ndarray) -> None:
    """Replace a column and re-sign it and the manifest, as a careful forger would."""
    sha, nbytes = npyio.write(root / f"{name}.npy", arr)
    manifest = json.loads((root / "manifest.json").read_text())
    manifest["columns"][name].update(sha256=sha, bytes=nbytes, shape=list(arr.shape))
    manifest["manifest_sha256"] = _digest(manifest)
    (root / "manifest.json").write_text(json.dumps(manifest))


def test_round_trip_keeps_every_column(saved: Path) -> None:
    t = synthetic_trace(requests=3, prompt_tokens=4, decode_tokens=5, layers=2, experts=8, top_k=2, seed=0)
    for mmap in (False, True):
        back = load_trace(saved, mmap=mmap)
        assert isinstance(back.experts, np.memmap) == mmap  # mapped, not copied, when asked
        for name in ("request", "kind", "start", "tokens", "experts", "gates"):
            assert np.array_equal(getattr(back, name), getattr(t, name)), name
        assert (back.num_experts, back.layers, dict(back.meta)) == (t.num_experts, t.layers, dict(t.meta))
    assert read_manifest(saved)["schema_version"] == 1
    assert sorted(p.name for p in saved.iterdir()) == sorted(
        ["manifest.json", "request.npy", "kind.npy", "start.npy", "tokens.npy", "experts.npy", "gates.npy"]
    )


def test_save_refuses_to_overwrite_unless_asked(saved: Path) -> None:
    t = load_trace(saved)
    with pytest.raises(ReplayBankError, match="exists; pass overwrite=True"):
        save_trace(t, saved)
    save_trace(t, saved, overwrite=True)
    assert [p.name for p in saved.parent.iterdir()] == ["t"]  # no temporary folder left behind


def test_truncated_and_altered_files_are_refused(saved: Path) -> None:
    data = (saved / "experts.npy").read_bytes()
    (saved / "experts.npy").write_bytes(data[:-6])
    with pytest.raises(CorruptSaveError, match=r"experts.npy has \d+ bytes, the manifest says \d+ \(truncated\?\)"):
        load_trace(saved)
    (saved / "experts.npy").write_bytes(data[:-2] + bytes([data[-2] ^ 1]) + data[-1:])
    with pytest.raises(CorruptSaveError, match="experts.npy checksum mismatch"):
        load_trace(saved)


def test_a_resigned_but_inconsistent_trace_names_field_request_and_step(saved: Path) -> None:
    t = load_trace(saved)
    experts = t.experts.copy()
    experts[1, 20, 0] = 8  # token 20 = request 2's position 2 (9 tokens per request, in order)
    resign(saved, "experts", experts)
    with pytest.raises(
        CorruptSaveError,
        match=r"experts\[layer 1, token 20, slot 0\] = 8: layer 1 has 8 experts .*\(request 2, step 12: prefill at position 2\)",
    ):
        load_trace(saved)
    resign(saved, "experts", t.experts)
    resign(saved, "tokens", t.tokens[:-1])
    with pytest.raises(CorruptSaveError, match="tokens: 17 rows, but request has 18"):
        load_trace(saved)
    resign(saved, "tokens", t.tokens)
    manifest = json.loads((saved / "manifest.json").read_text())
    manifest["steps"] = 17
    manifest["manifest_sha256"] = _digest(manifest)
    (saved / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(CorruptSaveError, match="declares 17 steps .* the files hold 18 steps"):
        load_trace(saved)


def test_manifest_damage_is_caught(saved: Path) -> None:
    path = saved / "manifest.json"
    good = json.loads(path.read_text())
    cases = [
        ({**good, "top_k": 3}, "manifest_sha256 does not match"),
        ({**good, "schema_version": 2}, "schema_version 2 is not supported"),
        ({**good, "format": "other"}, "format is 'other'"),
    ]
    extra = {**good, "pickle": True}
    extra["manifest_sha256"] = _digest(extra)
    cases.append((extra, r"manifest.pickle: unknown key"))
    bad_dtype = json.loads(json.dumps(good))
    bad_dtype["columns"]["gates"]["dtype"] = "|O"
    bad_dtype["manifest_sha256"] = _digest(bad_dtype)
    cases.append((bad_dtype, r"columns.gates.dtype = '\|O': expected '<f4'"))
    for manifest, message in cases:
        path.write_text(json.dumps(manifest))
        with pytest.raises(CorruptSaveError, match=message):
            load_trace(saved)
    path.write_text('{"format": NaN}')
    with pytest.raises(CorruptSaveError, match="not valid JSON"):
        load_trace(saved)


def test_object_arrays_links_and_missing_files_are_refused(saved: Path, tmp_path: Path) -> None:
    # an object-dtype (pickled) column, correctly signed, is refused before numpy unpickles it
    keep = {name: (saved / name).read_bytes() for name in ("request.npy", "manifest.json")}
    obj = np.array([{"x": 1}] * 18, dtype=object)
    with open(saved / "request.npy", "wb") as f:
        np.save(f, obj, allow_pickle=True)
    raw = (saved / "request.npy").read_bytes()
    manifest = json.loads((saved / "manifest.json").read_text())
    manifest["columns"]["request"].update(sha256=hashlib.sha256(raw).hexdigest(), bytes=len(raw))
    manifest["manifest_sha256"] = _digest(manifest)
    (saved / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(CorruptSaveError, match="dtype object is refused"):
        load_trace(saved)
    for name, data in keep.items():
        (saved / name).write_bytes(data)
    other = tmp_path / "elsewhere.npy"
    os.replace(saved / "gates.npy", other)
    with pytest.raises(CorruptSaveError, match="gates.npy is missing"):
        load_trace(saved)
    os.symlink(other, saved / "gates.npy")
    with pytest.raises(CorruptSaveError, match="gates.npy is a symbolic link"):
        load_trace(saved)
    with pytest.raises(ReplayBankError, match="is not a saved trace"):
        load_trace(tmp_path)


@pytest.mark.parametrize("key", ["layers", "num_experts"])
@pytest.mark.parametrize("value", [2, None, "2", [], [1.5, 2], [True, 1]])
def test_manifest_layers_and_num_experts_must_be_lists_of_integers(saved: Path, key: str, value: object) -> None:
    path = saved / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest[key] = value
    manifest["manifest_sha256"] = _digest(manifest)
    path.write_text(json.dumps(manifest))
    with pytest.raises(CorruptSaveError, match=rf"manifest.json: {key}(\[0\])? = .*expected"):
        load_trace(saved)


def test_a_resigned_overflowing_token_count_is_refused_at_load(saved: Path) -> None:
    t = load_trace(saved)
    tokens = t.tokens.copy()
    tokens[0] = 2**63 - 1
    resign(saved, "tokens", tokens)
    with pytest.raises(CorruptSaveError, match=r"tokens\[0\] = 9223372036854775807: more than the 27 token rows"):
        load_trace(saved)


def test_overwrite_replaces_only_a_trace_folder(saved: Path, tmp_path: Path) -> None:
    t = load_trace(saved)
    user = tmp_path / "mine"
    user.mkdir()
    for i in range(5):
        (user / f"notes{i}.txt").write_text("keep me")
    with pytest.raises(ReplayBankError, match=r"mine: not a trace folder \(holds \['notes0.txt', .*overwrite replaces only"):
        save_trace(t, user, overwrite=True)
    assert sorted(p.name for p in user.iterdir()) == [f"notes{i}.txt" for i in range(5)]
    # a trace folder with one extra file of the user's is not replaced either
    (saved / "notes.txt").write_text("keep me")
    with pytest.raises(ReplayBankError, match=r"holds \['notes.txt'\] besides trace files"):
        save_trace(t, saved, overwrite=True)
    (saved / "notes.txt").unlink()
    # trace file names without a trace manifest, a plain file, a link: refused
    fake = tmp_path / "fake"
    fake.mkdir()
    (fake / "manifest.json").write_text('{"format": "something else"}')
    with pytest.raises(ReplayBankError, match="manifest.json is not a 'replaybank-moe-trace' manifest"):
        save_trace(t, fake, overwrite=True)
    (tmp_path / "file").write_text("keep me")
    with pytest.raises(ReplayBankError, match="file: overwrite replaces only a trace folder, and this is not a folder"):
        save_trace(t, tmp_path / "file", overwrite=True)
    (tmp_path / "link").symlink_to(user)
    with pytest.raises(ReplayBankError, match="link: overwrite replaces only a trace folder"):
        save_trace(t, tmp_path / "link", overwrite=True)
    assert (tmp_path / "file").read_text() == "keep me" and (user / "notes0.txt").exists()
    save_trace(t, saved, overwrite=True)  # a trace folder is replaced
    (tmp_path / "empty").mkdir()
    save_trace(t, tmp_path / "empty", overwrite=True)  # so is an empty one
    assert load_trace(tmp_path / "empty").num_steps == t.num_steps


def test_paths_with_a_nul_byte_are_named(saved: Path) -> None:
    t = load_trace(saved)
    for call in (lambda: save_trace(t, str(saved) + "\0x"), lambda: load_trace(str(saved) + "\0x"),
                 lambda: read_manifest(str(saved) + "\0x")):  # fmt: skip
        with pytest.raises(ReplayBankError, match=r"trace folder = .*: the path holds a NUL byte"):
            call()
