"""Saving and loading buffers: a directory of ``.npy`` files plus a JSON manifest. No pickle.

Layout of ``path/``::

    manifest.json            which version is current, the spec, component configs, the JSON
                             part of the state, and a sha256 + size for every file
    v000003/columns/*.npy    one file per column (memory-mappable), ragged as values + offsets
    v000003/state/*.npy      the array parts of the sampler / admission / slot-table state

Atomicity: a save writes a complete new ``vNNNNNN`` directory, fsyncs it, then replaces
``manifest.json`` with ``os.replace`` (atomic on POSIX) and only then deletes older versions. A crash
at any point leaves a manifest that names a complete, checksummed version.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from . import admission as admission_mod
from . import samplers as samplers_mod
from .errors import CorruptSaveError, ReplayBankError
from .storage import ColumnarStorage, RaggedStorage

if TYPE_CHECKING:
    from .buffer import ReplayBuffer

FORMAT = "replaybank-buffer"
MANIFEST = "manifest.json"
_VERSION_DIR = re.compile(r"^v(\d{6})$")


def _config(obj: Any) -> dict[str, Any]:
    """Constructor arguments of a sampler or admission policy, for rebuilding it on load."""
    names = {
        "Prioritized": ("alpha", "beta", "eps", "branching"),
        "PrioritizedReshuffled": ("alpha", "beta", "eps", "branching"),
        "Trajectories": (
            "length",
            "reverse",
            "priority",
            "alpha",
            "beta",
            "eps",
            "done_key",
            "reward_key",
        ),
        "Window": ("k",),
    }.get(type(obj).__name__, ())
    return {name: getattr(obj, name) for name in names}


def _build(module: Any, kind: str, spec: dict[str, Any]) -> Any:
    cls = getattr(module, spec["class"], None)
    if cls is None:
        raise CorruptSaveError(f"manifest names unknown {kind} {spec['class']!r}")
    params = dict(spec["params"])
    if spec["class"] == "Trajectories":
        return cls(params.pop("length"), params.pop("reverse"), **params)
    return cls(**params)


def _split(tree: Any, prefix: str, arrays: dict[str, np.ndarray]) -> Any:
    """Replace numpy arrays in a nested state by {"__npy__": name}, collecting them in ``arrays``."""
    if isinstance(tree, np.ndarray):
        name = re.sub(r"[^A-Za-z0-9_.-]", "_", prefix)
        arrays[name] = tree
        return {"__npy__": name}
    if isinstance(tree, dict):
        return {str(k): _split(v, f"{prefix}.{k}", arrays) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return [_split(v, f"{prefix}.{i}", arrays) for i, v in enumerate(tree)]
    if isinstance(tree, np.generic):
        return tree.item()
    return tree


def _join(tree: Any, load: Any) -> Any:
    if isinstance(tree, dict):
        if set(tree) == {"__npy__"}:
            return load(tree["__npy__"])
        return {k: _join(v, load) for k, v in tree.items()}
    if isinstance(tree, list):
        return [_join(v, load) for v in tree]
    return tree


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _versions(path: Path) -> list[int]:
    return sorted(int(m.group(1)) for p in path.iterdir() if (m := _VERSION_DIR.match(p.name)))


def save(buffer: ReplayBuffer, path: str | os.PathLike[str]) -> None:
    root = Path(path)
    if root.exists() and not root.is_dir():
        raise ReplayBankError(f"cannot save to {root}: it exists and is not a directory")
    if root.is_dir() and any(root.iterdir()) and not (root / MANIFEST).exists():
        raise ReplayBankError(
            f"refusing to save into {root}: it is a non-empty directory that is not a replaybank save"
        )
    root.mkdir(parents=True, exist_ok=True)
    number = (_versions(root) or [0])[-1] + 1
    version = f"v{number:06d}"
    staging = root / version
    if staging.exists():  # left by a crashed save; never referenced by the manifest
        shutil.rmtree(staging)
    (staging / "columns").mkdir(parents=True)
    (staging / "state").mkdir()

    state = buffer.state_dict()
    columns = state.pop("columns")
    arrays: dict[str, np.ndarray] = {}
    json_state = _split(state, "buffer", arrays)
    files: dict[str, dict[str, Any]] = {}
    for folder, items in (("columns", columns), ("state", arrays)):
        for name, arr in items.items():
            rel = f"{folder}/{name}.npy"
            target = staging / rel
            with open(target, "wb") as f:
                np.save(f, np.ascontiguousarray(arr), allow_pickle=False)
                f.flush()
                os.fsync(f.fileno())
            files[rel] = {"sha256": _sha256(target), "bytes": target.stat().st_size}
    _fsync_dir(staging / "columns")
    _fsync_dir(staging / "state")
    _fsync_dir(staging)

    manifest = {
        "format": FORMAT,
        "schema_version": state["schema_version"],
        "version": version,
        "capacity": buffer.capacity,
        "storage": type(buffer.storage).__name__,
        "sampler": {"class": type(buffer.sampler).__name__, "params": _config(buffer.sampler)},
        "admission": {
            "class": type(buffer.admission).__name__,
            "params": _config(buffer.admission),
        },
        "state": json_state,
        "columns": sorted(columns),
        "files": files,
    }
    tmp = root / (MANIFEST + ".tmp")
    with open(tmp, "w") as f:
        json.dump(manifest, f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, root / MANIFEST)
    _fsync_dir(root)
    for old in _versions(root):
        if old != number:
            shutil.rmtree(root / f"v{old:06d}", ignore_errors=True)


def read_manifest(root: Path) -> dict[str, Any]:
    path = root / MANIFEST
    if not path.exists():
        raise ReplayBankError(f"{root} is not a saved replaybank buffer: {MANIFEST} not found")
    try:
        manifest = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise CorruptSaveError(f"{path}: not valid JSON ({err})") from err
    if manifest.get("format") != FORMAT:
        raise CorruptSaveError(f"{path}: format is {manifest.get('format')!r}, expected {FORMAT!r}")
    return manifest


def load(path: str | os.PathLike[str], *, mmap: bool = False) -> ReplayBuffer:
    from .buffer import SCHEMA_VERSION, ReplayBuffer

    root = Path(path)
    manifest = read_manifest(root)
    if manifest.get("schema_version") != SCHEMA_VERSION:
        raise CorruptSaveError(
            f"{root / MANIFEST}: schema_version {manifest.get('schema_version')!r} is not supported "
            f"by this replaybank (expects {SCHEMA_VERSION})"
        )
    base = root / manifest["version"]
    for rel, meta in manifest["files"].items():
        file = base / rel
        if not file.exists():
            raise CorruptSaveError(f"{file}: missing (the save is incomplete)")
        if file.stat().st_size != meta["bytes"]:
            raise CorruptSaveError(
                f"{file}: {file.stat().st_size} bytes, manifest says {meta['bytes']} (truncated?)"
            )
        if _sha256(file) != meta["sha256"]:
            raise CorruptSaveError(f"{file}: checksum mismatch, the file was altered or corrupted")

    def load_array(rel: str, mode: Literal["c"] | None = None) -> np.ndarray:
        try:
            return np.asanyarray(np.load(base / rel, allow_pickle=False, mmap_mode=mode))
        except ValueError as err:
            raise CorruptSaveError(f"{base / rel}: not a readable .npy file ({err})") from err

    state = _join(manifest["state"], lambda name: load_array(f"state/{name}.npy"))
    state["columns"] = {
        name: load_array(f"columns/{name}.npy", "c" if mmap else None)
        for name in manifest["columns"]
    }
    storage = RaggedStorage() if manifest["storage"] == "RaggedStorage" else ColumnarStorage()
    buffer = ReplayBuffer(
        int(manifest["capacity"]),
        sampler=_build(samplers_mod, "sampler", manifest["sampler"]),
        admission=_build(admission_mod, "admission", manifest["admission"]),
        storage=storage,
    )
    storage.copy_on_restore = not mmap
    buffer.load_state_dict(state)
    return buffer
