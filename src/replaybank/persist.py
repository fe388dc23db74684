"""Saving and loading buffers: a directory of ``.npy`` files plus a JSON manifest. No pickle.

Layout of ``path/``::

    manifest.json            which version is current, the spec, component configs, the JSON
                             part of the state, a sha256 + size for every file, and a sha256 of
                             the manifest itself (see ``replaybank.manifest``)
    v000003/columns/*.npy    one file per column (memory-mappable, ``capacity`` rows; rows of
                             empty slots are zeros), ragged as values + offsets
    v000003/state/*.npy      the array parts of the sampler / admission / slot-table state

Atomicity: a save writes a complete new ``vNNNNNN`` directory, fsyncs it, then replaces
``manifest.json`` with ``os.replace`` (atomic on POSIX) and only then deletes older versions. A crash
at any point leaves a manifest that names a complete, checksummed version, or, for the first save
to a path, no manifest and folders that the next save recognises and removes. A save that raises
removes what it wrote. Saves within one process are serialised; do not save to one path from two
processes at once.

Consistency: the state is taken under the buffer's lock with every array copied (memory-mapped
columns are written while the lock is held instead of copied), so writer threads running during
``save()`` never make the saved table and columns disagree.

Trust: ``load`` treats the folder as untrusted input; see ``replaybank.manifest`` and
``replaybank.npyio`` for what is checked before anything is used.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import stat
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, TypeVar

import numpy as np

from . import npyio
from .buffer_state import SCHEMA_VERSION as STATE_SCHEMA
from .buffer_state import BufferParts
from .errors import CorruptSaveError, ReplayBankError
from .files import fsync_dir
from .manifest import (
    ARRAY_NAME,
    FORMAT,
    MANIFEST,
    MAX_DEPTH,
    SCHEMA_VERSION,
    VERSION_DIR,
    Manifest,
    build,
    describe,
    digest,
)
from .ragged import Ragged
from .spec import check_dtype
from .storage import ColumnarStorage, MemmapStorage, file_stems


class _Loadable(Protocol):
    def load_state_dict(self, state: Any) -> None: ...


B = TypeVar("B", bound=_Loadable)

__all__ = ["save", "load", "read_manifest", "FORMAT", "MANIFEST"]

_SAVING = threading.Lock()
_TMP = MANIFEST + ".tmp"


def _split(tree: Any, where: str, arrays: dict[str, np.ndarray], depth: int = 0) -> Any:
    """Replace numpy arrays in a nested state by ``{"__npy__": name}``, collecting them in
    ``arrays``; refuse what a load would refuse (non-finite numbers, odd dtypes, deep nesting)."""
    if depth > MAX_DEPTH:
        raise ReplayBankError(f"cannot save: {where} is nested more than {MAX_DEPTH} levels deep")
    if isinstance(tree, np.ndarray):
        if tree.dtype.kind not in "biufc" or tree.dtype.fields is not None:
            raise ReplayBankError(f"cannot save: {where} has dtype {tree.dtype}")
        name = re.sub(r"[^A-Za-z0-9_.-]", "_", where.removeprefix("state."))[:180]
        if name in arrays or not ARRAY_NAME.fullmatch(name):
            name = f"{name}.{len(arrays)}".lstrip(".")
        arrays[name] = tree
        return {"__npy__": name}
    if isinstance(tree, dict):
        if "__npy__" in tree:
            raise ReplayBankError(f"cannot save: {where} has a key '__npy__', which is reserved")
        return {str(k): _split(v, f"{where}.{k}", arrays, depth + 1) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return [_split(v, f"{where}.{i}", arrays, depth + 1) for i, v in enumerate(tree)]
    if isinstance(tree, np.generic):
        tree = tree.item()
    if isinstance(tree, float) and not math.isfinite(tree):
        raise ReplayBankError(f"cannot save: {where} = {tree} is not a finite number")
    return tree


def _join(tree: Any, arrays: dict[str, np.ndarray]) -> Any:
    if isinstance(tree, dict):
        if "__npy__" in tree:
            return arrays[tree["__npy__"]]
        return {k: _join(v, arrays) for k, v in tree.items()}
    if isinstance(tree, list):
        return [_join(v, arrays) for v in tree]
    return tree


# state arrays one entry per slot, for the samplers that allocate per-slot memory when bound
_PER_SLOT = {"Prioritized": "priorities", "PrioritizedReshuffled": "priorities", "Trajectories": "episode"}


def _check_capacity(capacity: int, state: dict[str, Any], sampler: Any, admission: Any) -> None:
    """Before ``capacity`` sizes any allocation: every part that allocates per-slot memory must
    have saved an array of ``capacity`` entries, so memory follows the save's size and an edited
    ``capacity`` (up to 2**48) cannot make the loader allocate gigabytes."""
    need = []
    if type(admission).__name__ != "Fifo":  # a SlotTable (and the admission's own per-slot arrays)
        need.append(("table", "ids"))
    if type(sampler).__name__ in _PER_SLOT:
        need.append(("sampler", _PER_SLOT[type(sampler).__name__]))
    for part, key in need:
        value = state[part].get(key) if isinstance(state[part], dict) else None
        n = len(value) if isinstance(value, (list, np.ndarray)) and np.ndim(value) >= 1 else None
        if n != capacity:
            raise ReplayBankError(
                f"state.{part}.{key}: expected {capacity:,} entries (one per slot of the capacity), got "
                f"{'no array' if n is None else f'{n:,}'}"
            )



def _versions(root: Path) -> list[int]:
    return sorted(int(m.group(1)) for p in root.iterdir() if (m := VERSION_DIR.fullmatch(p.name)))


def _is_dir(path: Path) -> bool:
    return stat.S_ISDIR(os.lstat(path).st_mode)


def _leftover(entry: Path) -> bool:
    """Is ``entry`` something an interrupted save leaves behind: a stale ``manifest.json.tmp``, or
    a version folder holding nothing but ``columns/`` and ``state/`` folders of ``.npy`` files?"""
    if entry.name == _TMP:
        return stat.S_ISREG(os.lstat(entry).st_mode)
    if not VERSION_DIR.fullmatch(entry.name) or not _is_dir(entry):
        return False
    for sub in entry.iterdir():
        if sub.name not in ("columns", "state") or not _is_dir(sub):
            return False
        for file in sub.iterdir():
            if not file.name.endswith(".npy") or not stat.S_ISREG(os.lstat(file).st_mode):
                return False
    return True


def _prepare(root: Path) -> None:
    """Make ``root`` ready for a new version: refuse folders that are not replaybank saves, and
    remove what an interrupted first save left (the folder then has no manifest)."""
    if root.exists() and not root.is_dir():
        raise ReplayBankError(f"cannot save to {root}: it exists and is not a directory")
    if not root.exists():
        root.mkdir(parents=True)
        return
    manifest = root / MANIFEST
    if manifest.exists():
        try:
            ok = json.loads(manifest.read_bytes()).get("format") == FORMAT
        except (OSError, ValueError, AttributeError, RecursionError):
            ok = False
        if not ok:
            raise ReplayBankError(
                f"refusing to save into {root}: its {MANIFEST} is not a replaybank manifest; "
                "choose another path or delete it"
            )
        return
    entries = list(root.iterdir())
    if not all(_leftover(e) for e in entries):
        raise ReplayBankError(
            f"refusing to save into {root}: it is a non-empty directory that is not a replaybank save"
        )
    for entry in entries:  # an interrupted first save: nothing in it was ever loadable
        if entry.name == _TMP:
            entry.unlink()
        else:
            shutil.rmtree(entry)


def save(buffer: BufferParts, path: str | os.PathLike[str]) -> None:
    """Write ``buffer`` to directory ``path`` atomically (see the module doc).

    Raises:
        ReplayBankError: ``path`` is a file or a folder that is not a replaybank save, or the
            buffer holds something a save cannot represent (a user-defined sampler class, a
            column dtype a load refuses, a non-finite number in its state). Nothing is changed
            at ``path`` then.
    """
    root = Path(path)
    for name, col in (buffer.spec or {}).items():  # what a load would refuse, refused now
        try:
            check_dtype(col.dtype, f"column {name!r} dtype")
        except ReplayBankError as err:
            raise ReplayBankError(f"cannot save: {err}") from None
    configs = {
        "storage": describe("storage", buffer.storage),
        "sampler": describe("sampler", buffer.sampler),
        "admission": describe("admission", buffer.admission),
    }
    with _SAVING:
        _prepare(root)
        number = (_versions(root) or [0])[-1] + 1
        version = f"v{number:06d}"
        staging = root / version
        try:
            _write_version(buffer, root, staging, version, configs)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            (root / _TMP).unlink(missing_ok=True)
            raise
        for old in _versions(root):
            if old != number and _is_dir(root / f"v{old:06d}"):
                shutil.rmtree(root / f"v{old:06d}", ignore_errors=True)


def _write_version(
    buffer: BufferParts, root: Path, staging: Path, version: str, configs: dict[str, Any]
) -> None:
    (staging / "columns").mkdir(parents=True)
    (staging / "state").mkdir()
    files: dict[str, dict[str, Any]] = {}

    def put(rel: str, arr: np.ndarray, **kw: Any) -> None:
        sha, nbytes = npyio.write(staging / rel, arr, **kw)
        files[rel] = {"sha256": sha, "bytes": nbytes}

    def put_columns(columns: dict[str, Any], holes: np.ndarray) -> None:
        stems = file_stems(columns)
        for name, col in columns.items():
            if isinstance(col, Ragged):
                put(f"columns/{stems[name]}.values.npy", col.values)
                put(f"columns/{stems[name]}.offsets.npy", col.offsets)
            else:  # rows [0, high), padded with zero rows to the capacity
                put(f"columns/{stems[name]}.npy", col, rows=buffer.capacity, holes=holes)

    on_disk = isinstance(buffer.storage, MemmapStorage)  # too big to copy: write under the lock
    if on_disk:
        state = buffer.stream_state(put_columns)
    else:
        state = buffer.state_dict()
        put_columns(state.pop("columns"), np.zeros(0, dtype=np.int64))
    del state["schema_version"], state["capacity"]  # top-level fields of the manifest
    arrays: dict[str, np.ndarray] = {}
    json_state = _split(state, "state", arrays)
    for name, arr in arrays.items():
        put(f"state/{name}.npy", arr)
    for folder in ("columns", "state", ""):
        fsync_dir(staging / folder)
    manifest: dict[str, Any] = {
        "format": FORMAT,
        "schema_version": SCHEMA_VERSION,
        "version": version,
        "capacity": buffer.capacity,
        **{kind: _split(config, kind, {}) for kind, config in configs.items()},
        "state": json_state,
        "files": files,
    }
    manifest["manifest_sha256"] = digest(manifest)
    tmp = root / _TMP
    with open(tmp, "w") as f:
        json.dump(manifest, f, indent=1, allow_nan=False)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, root / MANIFEST)
    fsync_dir(root)


def read_manifest(root: str | os.PathLike[str]) -> Manifest:
    """The checked manifest of the save at ``root`` (files are not hashed; ``load`` does that)."""
    return Manifest.read(Path(root))


def load(
    path: str | os.PathLike[str],
    make: Callable[..., B],
    *,
    mmap: bool | None = None,
    directory: str | os.PathLike[str] | None = None,
) -> B:
    """Load a save into ``make(capacity, sampler=, admission=, storage=)``; see ``ReplayBuffer.load``.

    ``make`` is the buffer class (``ReplayBuffer.load`` passes its own), so that this module never
    imports ``buffer.py``. Every check (manifest schema and checksum, path confinement, each file's
    size, sha256 and header, the state against the spec and capacity) runs before the buffer is
    returned; any failure is a ``CorruptSaveError`` naming the file and key.
    """
    root = Path(path)
    m = Manifest.read(root)
    where = str(m.path)
    base = npyio.inside(root, m.version, f"{where}: version", folder=True)
    on_disk = m.raw["storage"]["class"] == "MemmapStorage"
    extra = {"directory": base / "columns"} if on_disk else {}
    try:
        storage: ColumnarStorage = build("storage", m.raw["storage"], "storage", **extra)
    except ReplayBankError as err:
        raise CorruptSaveError(f"{where}: {err}") from None
    # a MemmapStorage save maps its own saved files (copy-on-write) unless told otherwise
    mapped = on_disk if mmap is None else bool(mmap)
    if directory is not None:  # mapped, then copied into the new files page by page
        storage, mapped = MemmapStorage(directory), True
    elif on_disk and not mapped:
        storage = ColumnarStorage()

    def read(rel: str, *, mmap: bool = False) -> np.ndarray:
        file = npyio.inside(base, rel, f"{where}: files[{rel!r}]")
        return npyio.read(file, f"{where}: files[{rel!r}]", *m.files[rel], mmap=mmap)

    arrays = {name: read(rel) for name, rel in m.arrays.items()}
    columns: dict[str, Any] = {}
    for name, rels in m.columns.items():
        if len(rels) == 2:
            columns[name] = Ragged(read(rels[0]), read(rels[1]))
        else:
            columns[name] = read(rels[0], mmap=mapped)
    for name, col in columns.items():  # before the capacity sizes any allocation
        if not isinstance(col, Ragged) and (col.ndim == 0 or len(col) != m.capacity):
            raise CorruptSaveError(
                f"{where}: columns[{name!r}] has shape {col.shape}, "
                f"expected {m.capacity} rows (the capacity)"
            )
    state = _join(m.raw["state"], arrays)
    state.update(schema_version=STATE_SCHEMA, capacity=m.capacity, columns=columns)
    try:
        sampler = build("sampler", m.raw["sampler"], "sampler")
        admission = build("admission", m.raw["admission"], "admission")
        _check_capacity(m.capacity, state, sampler, admission)
        buffer = make(m.capacity, sampler=sampler, admission=admission, storage=storage)
    except ReplayBankError as err:
        if isinstance(err, MemoryError):  # a real save too big for this machine
            raise
        raise CorruptSaveError(f"{where}: {err}") from None
    storage.copy_on_restore = directory is not None  # else adopt the arrays just read or mapped
    try:
        buffer.load_state_dict(state)
    except ReplayBankError as err:
        raise CorruptSaveError(f"{where}: state.{err}") from None
    return buffer
