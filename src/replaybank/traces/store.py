"""Traces on disk: a folder of ``.npy`` columns and a checksummed JSON manifest.

::

    trace/
      manifest.json   format, schema_version, layers, num_experts, top_k, steps, tokens, meta,
                      columns: {name: {dtype, shape, sha256, bytes}}, manifest_sha256
      request.npy  kind.npy  start.npy  tokens.npy  experts.npy  gates.npy

Loading crosses the same trust boundary as a saved buffer (``npyio``): the manifest is strict
JSON whose own sha256 must match, the file names are derived from the schema (never read from the
manifest), each file must be a regular file inside the folder (no links, no ``..``), its size and
sha256 must match before numpy parses it, no pickle is ever allowed, and the arrays must have the
dtypes and shapes the manifest states. Then the ``Trace`` checks run, so a file that was
re-signed after an edit still fails on what is inconsistent in it (naming field, request, step).

>>> import tempfile, pathlib
>>> from replaybank.traces import synthetic_trace
>>> t = synthetic_trace(requests=2, prompt_tokens=4, decode_tokens=3, layers=2, experts=8,
...                     top_k=2, seed=0)
>>> folder = pathlib.Path(tempfile.mkdtemp()) / "t"
>>> save_trace(t, folder)
>>> load_trace(folder).routing_events
28
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from replaybank.jsonl import strict_loads

from .. import npyio
from ..errors import CorruptSaveError, ReplayBankError
from ..files import check_path, read_regular
from ..schema import INT64_MAX, fields, integer, mapping, text
from .trace import COLUMNS, MAX_EXPERTS, Trace

FORMAT = "replaybank-moe-trace"
SCHEMA_VERSION = 1
MANIFEST = "manifest.json"
MAX_MANIFEST_BYTES = 16 << 20
KEYS = (
    "format",
    "schema_version",
    "layers",
    "num_experts",
    "top_k",
    "steps",
    "tokens",
    "meta",
    "columns",
)
DTYPES = {
    "request": "<i8",
    "kind": "|u1",
    "start": "<i8",
    "tokens": "<i8",
    "experts": "<i2",
    "gates": "<f4",
}


def _digest(manifest: dict[str, Any]) -> str:
    body = {k: v for k, v in manifest.items() if k != "manifest_sha256"}
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


FILES = frozenset({MANIFEST, *(f"{name}.npy" for name in COLUMNS)})


def check_replaceable(root: Path) -> None:
    """``root`` may be replaced by a new trace: it is a folder (not a link) holding only the files
    a trace writes, its manifest among them, each a regular file; or an empty folder. Anything
    else (a file, a link, a folder with other files) is the user's and is never removed.

    Raises:
        ReplayBankError: naming the folder and what in it is not a trace's.
    """
    how = "choose another folder, or move or delete it yourself"
    try:
        mode = os.lstat(root).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(mode):
        raise ReplayBankError(
            f"{root}: overwrite replaces only a trace folder, and this is not a folder; {how}"
        )
    names = sorted(os.listdir(root))
    if not names:
        return
    others = [n for n in names if n not in FILES]
    if others or MANIFEST not in names:
        what = f"holds {others[:5]} besides trace files" if others else f"has no {MANIFEST}"
        raise ReplayBankError(
            f"{root}: not a trace folder ({what}); overwrite replaces only a folder written by "
            f"save_trace / 'traces synth', so nothing else is deleted; {how}"
        )
    for n in names:
        if not stat.S_ISREG(os.lstat(root / n).st_mode):
            raise ReplayBankError(
                f"{root}: not a trace folder ({n} is not a regular file); overwrite replaces "
                f"only a folder written by save_trace / 'traces synth'; {how}"
            )
    try:
        fmt = _strict_json(read_regular(root / MANIFEST, follow_links=False), str(root / MANIFEST))
    except ReplayBankError:
        fmt = None
    if not isinstance(fmt, dict) or fmt.get("format") != FORMAT:
        raise ReplayBankError(
            f"{root}: not a trace folder ({MANIFEST} is not a {FORMAT!r} manifest); overwrite "
            f"replaces only a folder written by save_trace / 'traces synth'; {how}"
        )


def save_trace(trace: Trace, path: str | os.PathLike[str], *, overwrite: bool = False) -> None:
    """Write ``trace`` to the folder ``path`` (see the module doc). The folder appears whole or
    not at all: it is written next to ``path`` and renamed into place.

    ``overwrite=True`` replaces only a folder that :func:`check_replaceable` recognises as a
    trace folder (or an empty one); a folder with anything else in it is never removed.

    Raises:
        ReplayBankError: ``path`` exists and ``overwrite`` is False, or it exists and is not a
            trace folder; ``path`` holds a NUL byte.
    """
    root = check_path(path, what="trace folder")
    if root.exists() or root.is_symlink():
        if not overwrite:
            raise ReplayBankError(f"{root} exists; pass overwrite=True to replace it")
        check_replaceable(root)
    root.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{root.name}.", dir=root.parent))
    try:
        columns = {}
        for name in COLUMNS:
            arr = np.ascontiguousarray(getattr(trace, name), dtype=np.dtype(DTYPES[name]))
            sha, nbytes = npyio.write(tmp / f"{name}.npy", arr)
            columns[name] = {
                "dtype": DTYPES[name],
                "shape": list(arr.shape),
                "sha256": sha,
                "bytes": nbytes,
            }
        manifest: dict[str, Any] = {
            "format": FORMAT,
            "schema_version": SCHEMA_VERSION,
            "layers": [int(v) for v in trace.layers],
            "num_experts": [int(v) for v in trace.num_experts],
            "top_k": trace.top_k,
            "steps": trace.num_steps,
            "tokens": trace.num_tokens,
            "meta": dict(trace.meta),
            "columns": columns,
        }
        manifest["manifest_sha256"] = _digest(manifest)
        with open(tmp / MANIFEST, "w", encoding="utf-8") as f:
            json.dump(manifest, f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        if root.exists():
            check_replaceable(root)  # again, right before: only a trace folder is ever removed
            shutil.rmtree(root)
        os.replace(tmp, root)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _strict_json(data: bytes, where: str) -> Any:
    try:
        return strict_loads(data)
    except (ValueError, UnicodeDecodeError, RecursionError) as err:
        raise CorruptSaveError(f"{where}: not valid JSON ({err})") from None


def read_manifest(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The checked manifest of the trace folder ``path`` (format, version, checksum, keys, types).

    Raises:
        ReplayBankError: ``path`` holds no trace manifest.
        CorruptSaveError: the manifest is malformed, altered or of another schema version.
    """
    root = check_path(path, what="trace folder")
    where = str(root / MANIFEST)
    if not (root / MANIFEST).exists():
        raise ReplayBankError(f"{root} is not a saved trace: {MANIFEST} not found")
    npyio.inside(root, MANIFEST, where)  # a regular file, not a link or a pipe
    if (root / MANIFEST).stat().st_size > MAX_MANIFEST_BYTES:
        raise CorruptSaveError(f"{where}: larger than {MAX_MANIFEST_BYTES} bytes")
    raw = _strict_json((root / MANIFEST).read_bytes(), where)
    try:
        if not isinstance(raw, dict) or raw.get("format") != FORMAT:
            got = raw.get("format") if isinstance(raw, dict) else type(raw).__name__
            raise ReplayBankError(f"format is {got!r}, expected {FORMAT!r}")
        if raw.get("schema_version") != SCHEMA_VERSION:
            raise ReplayBankError(
                f"schema_version {raw.get('schema_version')!r} is not supported (this replaybank "
                f"reads trace schema {SCHEMA_VERSION})"
            )
        if text(raw.get("manifest_sha256"), "manifest_sha256") != _digest(raw):
            raise ReplayBankError(
                "manifest_sha256 does not match the manifest: it was altered or corrupted"
            )
        fields(raw, "manifest", (*KEYS, "manifest_sha256"))
        fields(raw["columns"], "columns", COLUMNS)
        for name in COLUMNS:
            col = fields(
                raw["columns"][name], f"columns.{name}", ("dtype", "shape", "sha256", "bytes")
            )
            if col["dtype"] != DTYPES[name]:
                raise ReplayBankError(
                    f"columns.{name}.dtype = {col['dtype']!r}: expected {DTYPES[name]!r}"
                )
            if not isinstance(col["shape"], list):
                raise ReplayBankError(f"columns.{name}.shape: expected a list of integers")
            for i, d in enumerate(col["shape"]):
                integer(d, f"columns.{name}.shape[{i}]", 0, 1 << 48)
            text(col["sha256"], f"columns.{name}.sha256")
            integer(col["bytes"], f"columns.{name}.bytes", 0, 1 << 56)
        for key in ("top_k", "steps", "tokens"):
            integer(raw[key], key)
        for key in ("layers", "num_experts"):
            if not isinstance(raw[key], list) or not raw[key]:
                raise ReplayBankError(
                    f"{key} = {raw[key]!r}: expected a non-empty list of integers (one per traced "
                    "layer)"
                )
            for i, v in enumerate(raw[key]):
                integer(v, f"{key}[{i}]", 0, MAX_EXPERTS if key == "num_experts" else INT64_MAX)
        meta = mapping(raw["meta"], "meta")
        for key, value in meta.items():
            text(value, f"meta.{key}")
        return raw
    except CorruptSaveError:
        raise
    except ReplayBankError as err:
        raise CorruptSaveError(f"{where}: {err}") from None


def load_trace(path: str | os.PathLike[str], *, mmap: bool = False) -> Trace:
    """The trace saved in the folder ``path``, after every check of the module doc.

    ``mmap=True`` maps the large columns copy-on-write instead of reading them into memory.

    Raises:
        ReplayBankError: ``path`` is not a trace folder.
        CorruptSaveError: a file is missing, truncated, altered, or inconsistent with the rest;
            the message names the file or field, and for a bad row the request and the step.
    """
    root = check_path(path, what="trace folder")
    raw = read_manifest(root)
    arrays: dict[str, np.ndarray] = {}
    for name in COLUMNS:
        col = raw["columns"][name]
        where = f"{root / (name + '.npy')}"
        file = npyio.inside(root, f"{name}.npy", where)
        arr = npyio.read(
            file, where, col["sha256"], col["bytes"], mmap=mmap and name in ("experts", "gates")
        )
        if arr.dtype != np.dtype(DTYPES[name]) or list(arr.shape) != col["shape"]:
            raise CorruptSaveError(
                f"{where}: holds {arr.dtype} {list(arr.shape)}, the manifest says "
                f"{col['dtype']} {col['shape']}"
            )
        arrays[name] = arr
    shape = arrays["experts"].shape
    declared = (len(raw["layers"]), raw["tokens"], raw["top_k"])
    if shape != declared or len(arrays["request"]) != raw["steps"]:
        raise CorruptSaveError(
            f"{root / MANIFEST}: declares {raw['steps']} steps and experts of shape {declared}, "
            f"the files hold {len(arrays['request'])} steps and {shape} (inconsistent trace)"
        )
    try:
        return Trace(
            **arrays,
            num_experts=tuple(raw["num_experts"]),
            layers=tuple(raw["layers"]),
            meta=dict(raw["meta"]),
        )
    except ReplayBankError as err:
        raise CorruptSaveError(f"{root}: {err}") from None
