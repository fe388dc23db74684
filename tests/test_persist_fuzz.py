"""Fuzzing the load path with random damage and hostile edits of real saves.

Two kinds of mutation, drawn by hypothesis:

* damage (flipped, truncated, appended or deleted bytes and files; manifest edits without a
  matching checksum): every load must raise a ``ReplayBankError`` (a ``ValueError``) or return a
  buffer whose next batches equal the original's;
* hostile edits (the manifest or a ``.npy`` file changed and every checksum rewritten to match,
  symbolic links to identical files): every load must raise a ``ReplayBankError`` or return a
  buffer that works: its batches hold stored ids, or sampling refuses with a ``ReplayBankError``.
  This holds for edits inside the sampler's and admission's own state too (their
  ``load_state_dict`` and ``check_table`` check it); ``REPLAYBANK_FUZZ_STRICT=0`` holds those
  edits to the load only.

In the suite the 200 examples are a fixed, derandomized set. ``REPLAYBANK_FUZZ_EXAMPLES`` sets
the number of examples and draws them at random, and
``REPLAYBANK_FUZZ_REPORT`` a file to which the outcome counts are written as JSON.
"""

import collections
import json
import os
import shutil
import tempfile
import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from replaybank import (
    GroupBalanced,
    MemmapStorage,
    Prioritized,
    PrioritizedReshuffled,
    RaggedStorage,
    ReplayBankError,
    ReplayBuffer,
    Reservoir,
    Reshuffled,
    Trajectories,
    Uniform,
    Window,
)
from replaybank.manifest import digest
from replaybank.ragged import Ragged

EXAMPLES = int(os.environ.get("REPLAYBANK_FUZZ_EXAMPLES", "200"))
# also sample after hostile edits of sampler/admission state (0: only load those)
STRICT = os.environ.get("REPLAYBANK_FUZZ_STRICT", "1") != "0"
OUTCOMES: collections.Counter = collections.Counter()
ROUNDS, BATCH = 3, 6


def steps(start, n):
    t = np.arange(start, start + n)
    return {
        "obs": np.stack([t, -t], axis=1).astype(np.float32),
        "reward": (t % 3).astype(np.float32),
        "done": t % 5 == 4,
    }


def buffers(tmp):
    """One buffer per kind of state a save holds (ring and slot tables, ragged columns, every
    sampler and admission), each fed and sampled a little."""
    out = {}
    buf = ReplayBuffer(24, sampler=Prioritized(), seed=1)
    buf.extend(steps(0, 30), priorities=np.arange(30) % 4 + 0.5)
    out["prioritized-fifo"] = buf
    buf = ReplayBuffer(24, sampler=Reshuffled(), admission=Reservoir(), seed=2)
    buf.extend(steps(0, 40))
    buf.sample(5)
    out["reshuffled-reservoir"] = buf
    buf = ReplayBuffer(24, sampler=PrioritizedReshuffled(), admission=Window(2), seed=3)
    buf.extend(steps(0, 30), groups=np.arange(30) // 8)
    buf.sample(4)
    out["rrm-window"] = buf
    buf = ReplayBuffer(16, storage=RaggedStorage(), admission=GroupBalanced(), seed=4)
    cols = steps(0, 25)
    cols["tok"] = [np.arange(k % 4 + 1, dtype=np.int32) + k for k in range(25)]
    buf.extend(cols, groups=np.arange(25) % 3)
    out["ragged-balanced"] = buf
    buf = ReplayBuffer(24, sampler=Trajectories(3, priority="td"), seed=5)
    buf.extend(steps(0, 30))
    out["trajectories"] = buf
    buf = ReplayBuffer(24, sampler=Uniform(), storage=MemmapStorage(tmp / "live"), seed=6)
    buf.extend(steps(0, 20))
    out["memmap"] = buf
    return out


def draw(buf):
    out = []
    for _ in range(ROUNDS):
        b = buf.sample(BATCH)
        ids = b.ids.values if isinstance(b.ids, Ragged) else b.ids
        data = {k: (v.values, v.offsets) if isinstance(v, Ragged) else (v,) for k, v in b.data.items()}
        out.append((np.array(ids), {k: [np.array(a) for a in v] for k, v in data.items()}, b.weights))
    return out


def same(a, b):
    for (ia, da, wa), (ib, db, wb) in zip(a, b):
        if not np.array_equal(ia, ib) or da.keys() != db.keys():
            return False
        if any(not all(np.array_equal(x, y) for x, y in zip(da[k], db[k])) for k in da):
            return False
        if (wa is None) != (wb is None) or (wa is not None and not np.array_equal(wa, wb)):
            return False
    return True


@pytest.fixture(scope="module")
def saves(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fuzz")
    out = {}
    for name, buf in buffers(tmp).items():
        buf.save(tmp / name)
        out[name] = (tmp / name, len(buf), draw(buf))
    yield out
    report = os.environ.get("REPLAYBANK_FUZZ_REPORT")
    if report:
        Path(report).write_text(json.dumps(dict(sorted(OUTCOMES.items())), indent=1))


TRAVERSAL = ["../x", "/etc/passwd", "..", "v000001/../../x", "./x", "a/b", "", "~", "|O", "V8"]
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.sampled_from([0, 1, -1, 2**31, 2**63, 2**64, 10**40])
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
    | st.sampled_from(TRAVERSAL)
)
VALUES = st.recursive(
    SCALARS | st.builds(lambda s: {"__npy__": s}, st.sampled_from(TRAVERSAL) | st.text(max_size=8)),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)


def nodes(tree, path=()):
    """Every (path, value) in a JSON tree."""
    yield path, tree
    if isinstance(tree, dict):
        for k, v in tree.items():
            yield from nodes(v, (*path, k))
    elif isinstance(tree, list):
        for i, v in enumerate(tree):
            yield from nodes(v, (*path, i))


def tweak(value, data):
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return data.draw(st.sampled_from([value + 1, value - 1, -value - 1, 0, 2**63, value * 2]))
    if isinstance(value, float):
        return data.draw(st.sampled_from([-value - 1.0, value * 2 + 1, 0.0, 1e308, float(int(value))]))
    if isinstance(value, str):
        return data.draw(st.sampled_from([value + "x", value[:-1], value.upper(), *TRAVERSAL]))
    if isinstance(value, list):
        return value[:-1] if value else [0]
    return data.draw(VALUES)


def edit_json(raw, data):
    """One random edit of the manifest; returns the key path it touched."""
    path, value = data.draw(st.sampled_from(list(nodes(raw))[1:]))
    parent = raw
    for key in path[:-1]:
        parent = parent[key]
    op = data.draw(st.sampled_from(["delete", "replace", "tweak", "add", "retype"]))
    key = path[-1]
    if op == "delete":
        del parent[key]
    elif op == "replace":
        parent[key] = data.draw(VALUES)
    elif op == "tweak":
        parent[key] = tweak(value, data)
    elif op == "add":
        target = value if isinstance(value, dict) else parent
        if isinstance(target, dict):
            target[data.draw(st.text(min_size=1, max_size=6))] = data.draw(VALUES)
        else:
            target.append(data.draw(VALUES))
    else:
        parent[key] = str(value) if not isinstance(value, str) else [value]
    return ".".join(map(str, path))


def edit_array(root, raw, data):
    """Replace one .npy file by a plausible-looking but different array, checksums rewritten."""
    rel = data.draw(st.sampled_from(sorted(raw["files"])))
    path = root / raw["version"] / rel
    arr = np.load(path)
    how = data.draw(st.sampled_from(["value", "dtype", "shape", "object", "bool-bytes", "empty"]))
    if how == "value" and arr.size:
        flat = arr.reshape(-1).copy()
        i = data.draw(st.integers(0, flat.size - 1))
        big = {"b": True, "i": -(2**62), "u": 2**63, "f": -1e300, "c": 1e300}.get(arr.dtype.kind, 0)
        value = data.draw(st.sampled_from([0, 1, -1, big, flat[i].item() + 1]))
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                flat[i] = value
            except (OverflowError, ValueError, TypeError):  # -1 into uint8 and the like
                flat[i] = 0
        arr = flat.reshape(arr.shape)
    elif how == "dtype":
        arr = arr.astype(data.draw(st.sampled_from(["<i4", "<f8", "<u8", "|b1", "<f2", "<c16"])))
    elif how == "shape":
        arr = arr.reshape(-1)[: data.draw(st.integers(0, max(arr.size - 1, 0)))]
    elif how == "object":
        arr = np.array([{"evil": 1}] * max(len(arr), 1), dtype=object)
    elif how == "bool-bytes":
        arr = np.full(arr.shape, 2, np.uint8).view(bool) if arr.dtype == bool else arr[::-1].copy()
    else:
        arr = np.zeros((0, *arr.shape[1:]), arr.dtype)
    np.save(path, arr, allow_pickle=True)
    import hashlib

    raw["files"][rel] = {"sha256": hashlib.sha256(path.read_bytes()).hexdigest(), "bytes": path.stat().st_size}
    return rel


def resign(root, raw):
    raw["manifest_sha256"] = digest(raw)
    (root / "manifest.json").write_text(json.dumps(raw))


def damage(root, data):
    """Random byte-level damage to one file, or removal of one."""
    files = sorted(p for p in root.rglob("*") if p.is_file())
    path = data.draw(st.sampled_from(files))
    blob = bytearray(path.read_bytes())
    how = data.draw(st.sampled_from(["flip", "truncate", "append", "delete", "rename-version"]))
    if how == "flip" and blob:
        i = data.draw(st.integers(0, len(blob) - 1))
        blob[i] ^= data.draw(st.integers(1, 255))
        path.write_bytes(bytes(blob))
    elif how == "truncate" and blob:
        path.write_bytes(bytes(blob[: data.draw(st.integers(0, len(blob) - 1))]))
    elif how == "append":
        path.write_bytes(bytes(blob) + data.draw(st.binary(min_size=1, max_size=16)))
    elif how == "delete":
        path.unlink()
    else:
        version = json.loads((root / "manifest.json").read_text())["version"]
        (root / version).rename(root / "v999999")
    return f"{how}:{path.relative_to(root)}"


def works(buf):
    """Sampling a hostile-but-accepted buffer either refuses cleanly or returns stored items."""
    for _ in range(ROUNDS):
        try:
            b = buf.sample(BATCH)
        except ReplayBankError:
            return "loaded, sampling refused"
        ids = b.ids.values if isinstance(b.ids, Ragged) else np.asarray(b.ids).ravel()
        assert buf.contains(ids).all(), "sampled ids that are not stored"
    return "loaded, differs, samples stored items"


@settings(
    max_examples=EXAMPLES,
    derandomize="REPLAYBANK_FUZZ_EXAMPLES" not in os.environ,  # the suite runs a fixed set
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_every_load_refuses_or_is_exact(saves, data):
    name = data.draw(st.sampled_from(sorted(saves)))
    base, size, expected = saves[name]
    mode = data.draw(st.sampled_from(["damage", "json", "json-signed", "npy-signed", "symlink"]))
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "save"
        shutil.copytree(base, root, symlinks=True)
        raw = json.loads((root / "manifest.json").read_text())
        where = ""
        if mode == "damage":
            where = damage(root, data)
        elif mode in ("json", "json-signed"):
            where = edit_json(raw, data)
            if mode == "json":
                (root / "manifest.json").write_text(json.dumps(raw))
            else:
                resign(root, raw)
        elif mode == "npy-signed":
            where = edit_array(root, raw, data)
            resign(root, raw)
        else:
            rel = data.draw(st.sampled_from(sorted(raw["files"])))
            target = root / raw["version"] / rel
            outside = Path(tmp) / "outside.npy"
            shutil.copy(target, outside)
            target.unlink()
            target.symlink_to(outside)
        try:
            buf = ReplayBuffer.load(root)
        except ReplayBankError as err:
            OUTCOMES[f"{mode}: refused ({type(err).__name__})"] += 1
            return
        except Exception as err:  # anything else breaks the contract
            OUTCOMES[f"{mode}: FAILED {type(err).__name__}"] += 1
            raise AssertionError(f"{mode} at {where}: {type(err).__name__}: {err}") from err
        component_state = where.startswith(("state.sampler", "state.admission", "sampler", "admission"))
        if mode == "npy-signed":
            component_state = where.startswith("state/") and "table" not in where
        component_state = component_state and not STRICT
        try:
            equal = len(buf) == size and same(draw(buf), expected)
        except ReplayBankError:
            equal = False
        except Exception:
            if not component_state:
                raise
            equal = False
        if equal:
            OUTCOMES[f"{mode}: loaded, batches equal"] += 1
            return
        if mode in ("damage", "json", "symlink"):
            OUTCOMES[f"{mode}: FAILED undetected"] += 1
            raise AssertionError(f"{mode} at {where} went undetected and changed the batches")
        if component_state:
            OUTCOMES[f"{mode}: loaded, differs (sampler/admission state)"] += 1
            return
        OUTCOMES[f"{mode}: {works(ReplayBuffer.load(root))}"] += 1
