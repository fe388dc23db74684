"""The on-disk layout of a sharded save: one core save per shard plus a global manifest.

Layout of ``path/``::

    manifest.json                    format, the version that is current, per shard: folder,
                                     generation, capacity and the sha256 of its core manifest;
                                     the driver's RNG, write cursor, spec and rate-limiter counts
    v000004/shard-000/ ...           a complete ``ReplayBuffer.save`` of shard 0 (checksummed files)
    v000004/shard-001/ ...

A save writes every shard into a new ``vNNNNNN`` folder, then atomically replaces ``manifest.json``
(``os.replace``) and only then deletes older versions, so a crash at any point leaves a manifest
naming complete shard saves of one moment. Loading trusts nothing it reads: folder names must match
``vNNNNNN`` / ``shard-NNN`` exactly (no path leaves ``path/``), every shard's core manifest must
match the recorded sha256, and the core load verifies every file it reads.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

from ..errors import CorruptSaveError, ReplayBankError

FORMAT = "replaybank-sharded-buffer"
SCHEMA_VERSION = 1
MANIFEST = "manifest.json"
_VERSION = re.compile(r"^v(\d{6})$")
_SHARD = re.compile(r"^shard-(\d{3})$")


def shard_dir_name(index: int) -> str:
    return f"shard-{index:03d}"


def versions(root: Path) -> list[int]:
    if not root.is_dir():
        return []
    return sorted(int(m.group(1)) for p in root.iterdir() if (m := _VERSION.match(p.name)))


def prepare(root: Path) -> tuple[str, Path]:
    """Create ``root`` if needed and return the name and folder of the next version."""
    if root.exists() and not root.is_dir():
        raise ReplayBankError(f"cannot save to {root}: it exists and is not a directory")
    # a checkpoint folder also keeps the shards' generation counters (see shard.py)
    foreign = root.is_dir() and any(p.name != "generations" for p in root.iterdir())
    if foreign and not (root / MANIFEST).exists():
        raise ReplayBankError(
            f"refusing to save into {root}: it is a non-empty directory that is not a sharded replaybank save"
        )
    root.mkdir(parents=True, exist_ok=True)
    number = (versions(root) or [0])[-1] + 1
    version = f"v{number:06d}"
    staging = root / version
    if staging.exists():  # left by a crashed save; never referenced by the manifest
        shutil.rmtree(staging)
    staging.mkdir()
    return version, staging


def sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def commit(root: Path, manifest: dict[str, Any]) -> None:
    """Atomically make ``manifest`` current, then delete the versions it does not name."""
    tmp = root / (MANIFEST + ".tmp")
    with open(tmp, "w") as f:
        json.dump(manifest, f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, root / MANIFEST)
    fd = os.open(root, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    for old in versions(root):
        if f"v{old:06d}" != manifest["version"]:
            shutil.rmtree(root / f"v{old:06d}", ignore_errors=True)


def read(root: Path) -> dict[str, Any]:
    """Read and check the global manifest and every shard's core manifest checksum.

    Returns the manifest with ``shards[i]["path"]`` set to the shard's folder (inside ``root``).
    """
    path = root / MANIFEST
    if not path.is_file():
        raise ReplayBankError(f"{root} is not a sharded replaybank save: {MANIFEST} not found")
    try:
        manifest = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise CorruptSaveError(f"{path}: not valid JSON ({err})") from err
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        got = manifest.get("format") if isinstance(manifest, dict) else type(manifest).__name__
        raise CorruptSaveError(f"{path}: format is {got!r}, expected {FORMAT!r}")
    if manifest.get("schema_version") != SCHEMA_VERSION:
        raise CorruptSaveError(
            f"{path}: schema_version {manifest.get('schema_version')!r} is not supported (expects {SCHEMA_VERSION})"
        )
    version = manifest.get("version")
    if not isinstance(version, str) or not _VERSION.match(version):
        raise CorruptSaveError(f"{path}: 'version' must look like v000001, got {version!r}")
    shards = manifest.get("shards")
    if not isinstance(shards, list) or not shards:
        raise CorruptSaveError(f"{path}: 'shards' must be a non-empty list")
    base = (root / version).resolve()
    for i, shard in enumerate(shards):
        name = shard.get("dir") if isinstance(shard, dict) else None
        if name != shard_dir_name(i) or not _SHARD.match(name):
            raise CorruptSaveError(
                f"{path}: shards[{i}].dir is {name!r}, expected {shard_dir_name(i)!r}"
            )
        folder = base / name
        if folder.resolve().parent != base:  # a symlinked shard folder leading elsewhere
            raise CorruptSaveError(f"{folder}: resolves outside {base}")
        core = folder / "manifest.json"
        if not core.is_file():
            raise CorruptSaveError(f"{core}: missing (the save is incomplete)")
        if sha256_file(core) != shard.get("manifest_sha256"):
            raise CorruptSaveError(f"{core}: checksum mismatch, the shard save was altered or corrupted")
        for key in ("generation", "capacity"):
            if isinstance(shard.get(key), bool) or not isinstance(shard.get(key), int) or shard[key] < 0:
                raise CorruptSaveError(f"{path}: shards[{i}].{key} must be an integer >= 0")
        shard["path"] = str(folder)
    return manifest


def read_core(folder: Path) -> dict[str, Any]:
    """A shard's core manifest as JSON (its checksum was checked by ``read``)."""
    try:
        data = json.loads((folder / "manifest.json").read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise CorruptSaveError(f"{folder / 'manifest.json'}: not valid JSON ({err})") from err
    if not isinstance(data, dict):
        raise CorruptSaveError(f"{folder / 'manifest.json'}: expected a JSON object")
    return data
