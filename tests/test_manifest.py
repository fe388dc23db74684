"""The load path is a trust boundary: a save folder written by a stranger can name paths, keys,
values and arrays, and none of them may be used before it is checked.

Most tests play the hostile author: they edit the manifest or a file and then write matching
checksums (``resign`` / ``replace_array``), because a checksum only detects accidents; what must
stop them is the schema, the path confinement and the consistency checks."""

import json
import os
import shutil
import tracemalloc

import numpy as np
import pytest

from replaybank import (
    CorruptSaveError,
    GroupBalanced,
    Prioritized,
    PrioritizedReshuffled,
    RaggedStorage,
    ReplayBankError,
    ReplayBuffer,
    Reservoir,
    Reshuffled,
    Trajectories,
    Window,
)
from replaybank.cli import main
from replaybank.manifest import digest
from replaybank.npyio import write


def saved(tmp_path, kind="fifo", name="b"):
    rng = np.random.default_rng(0)
    if kind == "fifo":
        buf = ReplayBuffer(64, sampler=Prioritized(), seed=0)
        buf.extend({"obs": rng.random((50, 3), dtype=np.float32), "done": np.arange(50) % 7 == 6})
    elif kind == "slots":
        buf = ReplayBuffer(32, sampler=Reshuffled(), admission=Reservoir(), seed=0)
        buf.extend({"obs": rng.random((50, 3), dtype=np.float32), "a": np.arange(50)})
        buf.sample(5)
    else:
        buf = ReplayBuffer(
            16, admission=GroupBalanced(), storage=RaggedStorage(), sampler=Reshuffled(), seed=0
        )
        rows = [np.arange(k % 5 + 1, dtype=np.int32) for k in range(30)]
        buf.extend({"tok": rows, "y": np.arange(30)}, groups=np.arange(30) % 3)
    buf.save(tmp_path / name)
    return buf, tmp_path / name


def manifest(root):
    return json.loads((root / "manifest.json").read_text())


def resign(root, edit):
    """Apply ``edit`` to the parsed manifest and write it back with a matching checksum."""
    raw = manifest(root)
    edit(raw)
    raw["manifest_sha256"] = digest(raw)
    (root / "manifest.json").write_text(json.dumps(raw))


def replace_array(root, rel, arr, allow_pickle=False):
    """Overwrite a saved file with ``arr`` and give it a matching checksum entry."""
    raw = manifest(root)
    path = root / raw["version"] / rel
    if allow_pickle:
        np.save(path, arr, allow_pickle=True)
        import hashlib

        sha, nbytes = hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_size
    else:
        sha, nbytes = write(path, arr)
    resign(root, lambda m: m["files"].__setitem__(rel, {"sha256": sha, "bytes": nbytes}))


def state_file(root, suffix):
    return next(rel for rel in manifest(root)["files"] if rel.endswith(suffix))


def traced_peak(call):
    """Peak bytes allocated (Python and numpy) while ``call()`` runs."""
    was_tracing = tracemalloc.is_tracing()
    if not was_tracing:
        tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        start, _ = tracemalloc.get_traced_memory()
        call()
        return tracemalloc.get_traced_memory()[1] - start
    finally:
        if not was_tracing:
            tracemalloc.stop()


def refused(root, *match):
    with pytest.raises(CorruptSaveError) as info:
        ReplayBuffer.load(root)
    for text in match:
        assert text in str(info.value), str(info.value)
    return str(info.value)


# -- paths ------------------------------------------------------------------------------------
@pytest.mark.parametrize("version", ["../outside_v", "/tmp", "v000001/../../x", "v1"])
def test_version_must_name_a_folder_inside_the_save(tmp_path, version):
    _, root = saved(tmp_path)
    # the data the hostile manifest points at exists and is complete
    shutil.copytree(root / manifest(root)["version"], tmp_path / "outside_v")
    resign(root, lambda m: m.__setitem__("version", version))
    refused(root, "version")


def test_files_entries_outside_the_folder_are_refused(tmp_path):
    _, root = saved(tmp_path)
    (tmp_path / "x.npy").write_bytes(b"secret")

    def edit(m):
        m["files"]["../../x.npy"] = m["files"]["columns/obs.npy"]

    resign(root, edit)
    refused(root, "files.../../x.npy", "unknown")
    resign(root, lambda m: m["files"].pop("columns/obs.npy"))
    refused(root, "files.columns/obs.npy", "missing")


@pytest.mark.parametrize("name", ["../../../evil", "/etc/passwd", "..", "a/b", ""])
def test_array_references_must_be_plain_names(tmp_path, name):
    _, root = saved(tmp_path)
    np.save(tmp_path / "evil.npy", np.zeros(64))
    resign(root, lambda m: m["state"]["sampler"].__setitem__("priorities", {"__npy__": name}))
    refused(root, "state.sampler.priorities")


def test_symlinks_are_refused_even_to_identical_files(tmp_path):
    _, root = saved(tmp_path)
    version = root / manifest(root)["version"]
    outside = tmp_path / "copy.npy"
    shutil.copy(version / "columns" / "obs.npy", outside)
    os.remove(version / "columns" / "obs.npy")
    os.symlink(outside, version / "columns" / "obs.npy")
    refused(root, "symbolic link")

    _, root2 = saved(tmp_path, name="c")
    v2 = manifest(root2)["version"]
    shutil.move(root2 / v2, tmp_path / "elsewhere")
    os.symlink(tmp_path / "elsewhere", root2 / v2)
    refused(root2, "symbolic link")

    _, root3 = saved(tmp_path, name="d")
    shutil.move(root3 / "manifest.json", tmp_path / "m.json")
    os.symlink(tmp_path / "m.json", root3 / "manifest.json")
    refused(root3, "symbolic link")


# -- checksums --------------------------------------------------------------------------------
def test_empty_files_table_does_not_disable_checking(tmp_path):
    _, root = saved(tmp_path)
    obs = root / manifest(root)["version"] / "columns" / "obs.npy"
    data = bytearray(obs.read_bytes())
    data[-1] ^= 0xFF
    obs.write_bytes(bytes(data))
    resign(root, lambda m: m.__setitem__("files", {}))
    refused(root, "files.columns/obs.npy", "missing")


def test_unsigned_manifest_edits_are_detected(tmp_path):
    _, root = saved(tmp_path)
    raw = manifest(root)
    raw["state"]["table"]["arrivals"] = 7
    (root / "manifest.json").write_text(json.dumps(raw))
    refused(root, "manifest_sha256")
    raw.pop("manifest_sha256")
    (root / "manifest.json").write_text(json.dumps(raw))
    refused(root, "manifest_sha256")


def test_every_state_array_is_checksummed(tmp_path):
    _, root = saved(tmp_path)
    rel = state_file(root, "priorities.npy")
    path = root / manifest(root)["version"] / rel
    arr = np.load(path)
    arr[3] = 1e6
    np.save(path, arr)  # same size, different bytes
    refused(root, "checksum", "priorities")


# -- schema -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "edit, words",
    [
        (lambda m: m.__setitem__("surprise", 1), ["manifest.surprise", "unknown"]),
        (lambda m: m.pop("admission"), ["manifest.admission", "missing"]),
        (lambda m: m["state"].pop("rng"), ["state.rng", "missing"]),
        (lambda m: m["state"]["table"].pop("arrivals"), ["table.arrivals", "missing"]),
        (lambda m: m["state"]["table"].__setitem__("arrivals", -3), ["table.arrivals"]),
        (lambda m: m["state"]["table"].__setitem__("arrivals", 5.0), ["table.arrivals"]),
        (lambda m: m["state"]["table"].__setitem__("arrivals", 10**30), ["table.arrivals"]),
        (lambda m: m["state"]["table"].__setitem__("arrivals", 49), ["admission.count"]),
        (lambda m: m.__setitem__("capacity", 65), ["capacity"]),
        (lambda m: m.__setitem__("capacity", "64"), ["capacity"]),
        (lambda m: m["sampler"]["params"].__setitem__("beta", -3), ["sampler.params"]),
        (lambda m: m["sampler"]["params"].pop("alpha"), ["sampler.params.alpha", "missing"]),
        (lambda m: m["sampler"]["params"].__setitem__("gamma", 1), ["sampler.params.gamma"]),
        # would hang (1) or corrupt memory (-2) in the sum tree's constructor
        # (the constructor's range check, reported as the save's)
        (lambda m: m["sampler"]["params"].__setitem__("branching", 1), ["sampler.params", "branching=1"]),
        (lambda m: m["sampler"]["params"].__setitem__("branching", -2), ["sampler.params", "branching=-2"]),
        (lambda m: m["sampler"]["params"].__setitem__("branching", 1025), ["branching=1025", "1024"]),
        (lambda m: m["sampler"]["params"].__setitem__("branching", 2**64), ["params.branching"]),
        (lambda m: m["sampler"]["params"].__setitem__("branching", 2.5), ["params.branching"]),
        (lambda m: m["sampler"]["params"].__setitem__("alpha", "0.6"), ["params.alpha"]),
        (lambda m: m["sampler"]["params"].__setitem__("alpha", True), ["params.alpha"]),
        (lambda m: m["sampler"].__setitem__("class", "View"), ["sampler.class"]),
        (lambda m: m["admission"].__setitem__("class", "Placement"), ["admission.class"]),
        (lambda m: m["storage"].__setitem__("class", "Path"), ["storage.class"]),
        (lambda m: m["sampler"].__setitem__("params", None), ["sampler.params"]),
        (lambda m: m["state"].__setitem__("sampler", {}), ["sampler.priorities"]),
        (lambda m: m["state"]["sampler"].pop("beta"), ["state.sampler", "beta"]),
        (lambda m: m["state"].__setitem__("admission", []), ["state.admission"]),
        (lambda m: m["state"]["sampler"].__setitem__("max_priority", "x"), ["state.sampler"]),
        (lambda m: m["state"]["spec"]["obs"].__setitem__("dtype", "|O"), ["spec['obs'].dtype"]),
        (lambda m: m["state"]["spec"]["obs"].__setitem__("dtype", "V12"), ["spec['obs'].dtype"]),
        (
            lambda m: m["state"]["spec"]["obs"].__setitem__("dtype", [["a", "<f4"]]),
            ["spec['obs'].dtype"],
        ),
        (lambda m: m["state"]["spec"]["obs"].__setitem__("shape", [-3]), ["spec['obs'].shape"]),
        (lambda m: m["state"]["spec"]["obs"].__setitem__("shape", "3"), ["spec['obs'].shape"]),
        (lambda m: m["state"]["spec"]["obs"].__setitem__("shape", [4]), ["obs"]),
        (lambda m: m["state"]["spec"]["obs"].__setitem__("ragged", 1), ["spec['obs'].ragged"]),
        (lambda m: m["state"]["spec"]["obs"].__setitem__("dtype", "<f8"), ["obs"]),
        (lambda m: m["state"]["spec"].pop("done"), ["files", "done"]),
        (lambda m: m["state"]["rng"].__setitem__("bit_generator", "Evil"), ["rng.bit_generator"]),
        (lambda m: m["state"]["rng"]["state"].__setitem__("state", -1), ["rng.state.state"]),
        (lambda m: m["state"]["rng"]["state"].__setitem__("inc", 1.5), ["rng.state.inc"]),
        (lambda m: m["state"]["rng"].__setitem__("has_uint32", 5), ["rng.has_uint32"]),
        (lambda m: m["state"]["rng"].pop("uinteger"), ["rng.uinteger", "missing"]),
        (lambda m: m["state"]["rng"]["state"].__setitem__("state", 2**200), ["rng"]),
        (lambda m: m.__setitem__("schema_version", 1), ["schema_version 1"]),
        (lambda m: m.__setitem__("format", "zip"), ["format"]),
    ],
)
def test_every_field_is_validated(tmp_path, edit, words):
    _, root = saved(tmp_path)
    resign(root, edit)
    refused(root, *words)


def test_manifest_json_must_be_strict(tmp_path):
    _, root = saved(tmp_path)
    text = (root / "manifest.json").read_text()
    (root / "manifest.json").write_text(text.replace('"max_priority": 1.0', '"max_priority": NaN'))
    refused(root, "not valid JSON")
    (root / "manifest.json").write_text(text[:-1] + ', "format": "replaybank-buffer"}')
    refused(root, "appears twice")
    (root / "manifest.json").write_text(text.replace('"max_priority": 1.0', '"max_priority": 1e999'))
    refused(root, "not valid JSON", "1e999")
    (root / "manifest.json").write_text("[" * 100_000 + "]" * 100_000)
    refused(root, "not valid JSON")


# -- arrays -----------------------------------------------------------------------------------
def test_object_arrays_are_refused_before_numpy_reads_them(tmp_path):
    _, root = saved(tmp_path)
    replace_array(root, "columns/obs.npy", np.array([{"a": 1}] * 64, dtype=object), True)
    refused(root, "dtype object")


@pytest.mark.parametrize(
    "arr, words",
    [
        (np.zeros((63, 3), np.float32), ["columns['obs']", "(63, 3)", "the capacity"]),
        (np.zeros((64, 4), np.float32), ["columns['obs']", "shape"]),
        (np.zeros((64, 3), np.float64), ["columns['obs']", "dtype"]),
        (np.zeros(64, dtype=[("a", "<f4"), ("b", "<f8")]), ["refused"]),
    ],
)
def test_columns_must_fit_the_spec_and_capacity(tmp_path, arr, words):
    _, root = saved(tmp_path)
    replace_array(root, "columns/obs.npy", arr)
    refused(root, *words)


def test_npy_header_must_account_for_every_byte(tmp_path):
    _, root = saved(tmp_path)
    path = root / manifest(root)["version"] / "columns" / "obs.npy"
    head = path.read_bytes()[:128].replace(b"(64, 3)", b"(99, 3)")
    data = head + path.read_bytes()[128:]
    path.write_bytes(data)
    import hashlib

    sha = hashlib.sha256(data).hexdigest()
    resign(root, lambda m: m["files"].__setitem__("columns/obs.npy", {"sha256": sha, "bytes": len(data)}))
    refused(root, "obs.npy", "does not fill")


def test_bool_bytes_other_than_0_and_1_are_refused(tmp_path):
    _, root = saved(tmp_path)
    replace_array(root, "columns/done.npy", np.full(64, 2, np.uint8).view(bool))
    refused(root, "bool bytes")


@pytest.mark.parametrize(
    "change, words",
    [
        (lambda ids: ids.__setitem__(0, ids[1]), ["table.ids[0]"]),  # an id of another slot
        (lambda ids: ids.__setitem__(0, -5), ["table.ids[0]"]),
        (lambda ids: ids.__setitem__(3, -1), ["table.size"]),
        (lambda ids: ids.__setitem__(0, ids[0] + (10_000 << 6)), ["table.ids[0]"]),
    ],
)
def test_slot_table_must_be_consistent(tmp_path, change, words):
    _, root = saved(tmp_path, "slots")
    rel = state_file(root, "table.ids.npy")
    ids = np.load(root / manifest(root)["version"] / rel)
    change(ids)
    replace_array(root, rel, ids)
    refused(root, *words)


def test_ragged_offsets_must_be_consistent(tmp_path):
    _, root = saved(tmp_path, "ragged")
    rel = state_file(root, "tok.offsets.npy")
    offsets = np.load(root / manifest(root)["version"] / rel)
    offsets[2], offsets[3] = offsets[3], offsets[2]
    replace_array(root, rel, offsets)
    refused(root, "columns['tok'].offsets")


def test_component_state_errors_name_the_key(tmp_path):
    _, root = saved(tmp_path, "ragged")
    resign(root, lambda m: m["state"]["admission"].pop("seen"))
    message = refused(root, "state.admission")
    assert "seen" in message


# -- inspect ----------------------------------------------------------------------------------
def test_inspect_refuses_an_altered_save_clearly(tmp_path, capsys):
    _, root = saved(tmp_path)
    resign(root, lambda m: m.__setitem__("version", "../x"))
    assert main(["inspect", str(root)]) == 2
    err = capsys.readouterr().err
    assert "version" in err and "Traceback" not in err


def test_inspect_verify_checks_the_files(tmp_path, capsys):
    _, root = saved(tmp_path, "slots")
    assert main(["inspect", "--verify", str(root)]) == 0
    assert "every file and field verified" in capsys.readouterr().out
    obs = root / manifest(root)["version"] / "columns" / "obs.npy"
    obs.write_bytes(obs.read_bytes()[:-1] + b"\x00")
    assert main(["inspect", str(root)]) == 0  # the manifest alone is intact
    assert main(["inspect", "--verify", str(root)]) == 2
    assert "checksum" in capsys.readouterr().err


def test_errors_are_value_errors(tmp_path):
    _, root = saved(tmp_path)
    resign(root, lambda m: m["state"].__setitem__("table", None))
    with pytest.raises(ValueError):
        ReplayBuffer.load(root)
    assert issubclass(CorruptSaveError, ReplayBankError)


def test_pipes_and_files_in_place_of_folders_are_refused_without_blocking(tmp_path):
    _, root = saved(tmp_path)
    version = root / manifest(root)["version"]
    os.remove(version / "columns" / "obs.npy")
    os.mkfifo(version / "columns" / "obs.npy")  # opening it for reading would block forever
    resign(root, lambda m: m["files"].__setitem__("columns/obs.npy", {"sha256": "0" * 64, "bytes": 0}))
    refused(root, "obs.npy", "not a regular file")

    _, root2 = saved(tmp_path, name="c")
    v2 = root2 / manifest(root2)["version"]
    shutil.rmtree(v2)
    v2.write_bytes(b"not a folder")
    refused(root2, "not a folder")


def test_headers_with_absurd_shapes_are_refused(tmp_path):
    _, root = saved(tmp_path)
    path = root / manifest(root)["version"] / "columns" / "obs.npy"
    header = b"{'descr': '<f4', 'fortran_order': False, 'shape': (281474976710656, 281474976710656, 0), }"
    header = header.ljust(127 - 10) + b"\n"
    data = b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header
    path.write_bytes(data)
    import hashlib

    entry = {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
    resign(root, lambda m: m["files"].__setitem__("columns/obs.npy", entry))
    refused(root, "obs.npy")


@pytest.mark.parametrize(
    "sampler, admission, key",
    [
        (Prioritized, None, "state.sampler.priorities"),
        (PrioritizedReshuffled, None, "state.sampler.priorities"),
        (lambda: Trajectories(2), None, "state.sampler.episode"),
        (Reshuffled, Reservoir, "state.table.ids"),
        (Reshuffled, lambda: Window(2), "state.table.ids"),
    ],
)
def test_an_edited_capacity_cannot_make_the_loader_allocate(tmp_path, sampler, admission, key):
    # an empty save has no column to pin the capacity; RR-M at 2**27 slots used to take ~18 GB
    buf = ReplayBuffer(8, sampler=sampler(), admission=admission() if admission else None)
    buf.save(tmp_path / "b")
    resign(tmp_path / "b", lambda m: m.__setitem__("capacity", 2**27))
    # tracemalloc sees numpy's allocations as they are made, even pages never touched, and its
    # peak starts here; the process's peak RSS cannot see one that stays below an earlier peak
    peak = traced_peak(lambda: refused(tmp_path / "b", key, "134,217,728 entries", "got 8"))
    assert peak < 32 * 2**20, f"the refused load allocated {peak:,} bytes at its peak"  # 2**27 slots: >= 128 MiB


def test_an_edited_capacity_without_per_slot_memory_loads_cheaply(tmp_path):
    # Uniform + Fifo keep nothing per slot: the capacity costs nothing until items are stored
    ReplayBuffer(8).save(tmp_path / "b")
    resign(tmp_path / "b", lambda m: m.__setitem__("capacity", 2**27))
    assert ReplayBuffer.load(tmp_path / "b").capacity == 2**27
