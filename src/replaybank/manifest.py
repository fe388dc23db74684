"""The manifest of a saved buffer: its schema, its own checksum, and the files it may name.

``manifest.json`` is the one file a loader reads before anything else, so it is checked whole
before any of it is used:

* it is plain JSON (no ``NaN``/``Infinity`` or overflowing numbers, no repeated keys), at most
  64 MiB;
* ``manifest_sha256`` is the sha256 of the rest of the manifest in canonical form (keys sorted,
  no spaces), so any change to it is caught, not just changes to the ``.npy`` files;
* every key is known and present, with the type and range the schema says (``Manifest.parse``);
* the files it names are derived, not trusted: one per column (from the spec) and one per
  ``{"__npy__": name}`` reference in the state, each in its own folder with a plain name, and
  ``files`` must give a sha256 and size for exactly those.

A checksum detects accidents, not intent: whoever can write the folder can write matching
checksums. What stops a hostile save is the rest: the schema, the confinement of every path to the
save folder, the checks of every array against the spec and capacity, and no pickle anywhere.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from replaybank.jsonl import strict_loads

from . import admission as admission_mod
from . import samplers as samplers_mod
from . import storage as storage_mod
from .errors import CorruptSaveError, ReplayBankError
from .schema import boolean, fields, integer, mapping, real, text
from .spec import ColumnSpec
from .storage import file_stems

FORMAT = "replaybank-buffer"
MANIFEST = "manifest.json"
SCHEMA_VERSION = 2  # of the manifest; 1 had no manifest checksum and trusted its fields
MAX_MANIFEST_BYTES = 64 << 20
MAX_CAPACITY = 1 << 48
MAX_DEPTH = 32
VERSION_DIR = re.compile(r"v(\d{6})")
ARRAY_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,199}")
SHA256 = re.compile(r"[0-9a-f]{64}")
KEYS = (
    "format",
    "schema_version",
    "version",
    "capacity",
    "storage",
    "sampler",
    "admission",
    "state",
    "files",
)
STATE_KEYS = ("spec", "rng", "table", "sampler", "admission")

# The classes a save may name, with the constructor arguments recorded for each.
SAMPLERS: dict[str, tuple[str, ...]] = {
    "Uniform": (),
    "Reshuffled": ("drop_last",),
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
}
ADMISSIONS: dict[str, tuple[str, ...]] = {
    "Fifo": (),
    "Reservoir": (),
    "GroupBalanced": (),
    "Window": ("k",),
}
STORAGES: dict[str, tuple[str, ...]] = {
    "ColumnarStorage": ("check_memory",),
    "RaggedStorage": ("check_memory",),
    "MemmapStorage": (),
}
# parameters added after saves already existed: a save without them loads with these defaults
ADDED_LATER: dict[str, dict[str, Any]] = {"Reshuffled": {"drop_last": False}}

def _optional(check: Callable[[Any, str], Any]) -> Callable[[Any, str], Any]:
    return lambda value, where: None if value is None else check(value, where)


def _choice(*options: Any) -> Callable[[Any, str], Any]:
    def check(value: Any, where: str) -> Any:
        if value not in options or isinstance(value, bool) != isinstance(options[0], bool):
            raise ReplayBankError(f"{where} = {value!r}: expected one of {list(options)}")
        return value

    return check


# The type of every recorded parameter. Ranges are the constructors' (``checks.check_int`` /
# ``check_real``, e.g. ``Prioritized(branching)`` in [2, 1024]): one source of truth, and ``build``
# reports their refusal as a ``CorruptSaveError``. Integers are held to int64 here only.
def _int(value: Any, where: str) -> int:
    return integer(value, where, -(2**63))


PARAMS: dict[str, Callable[[Any, str], Any]] = {
    "alpha": real,
    "beta": real,
    "eps": real,
    "branching": _int,
    "length": _optional(_int),
    "reverse": boolean,
    "priority": _choice(None, "td", "return"),
    "done_key": text,
    "reward_key": text,
    "k": _int,
    "drop_last": boolean,
    "check_memory": boolean,
}
_MODULES = {"sampler": samplers_mod, "admission": admission_mod, "storage": storage_mod}
_REGISTRY = {"sampler": SAMPLERS, "admission": ADMISSIONS, "storage": STORAGES}


def digest(manifest: dict[str, Any]) -> str:
    """sha256 of ``manifest`` (without ``manifest_sha256``) in canonical JSON."""
    body = {k: v for k, v in manifest.items() if k != "manifest_sha256"}
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def describe(kind: str, obj: Any) -> dict[str, Any]:
    """``{"class", "params"}`` of a sampler, admission or storage, for rebuilding it on load.

    Raises ``ReplayBankError`` for a class a save cannot name (e.g. a user-defined sampler)."""
    name = type(obj).__name__
    registry = _REGISTRY[kind]
    if name not in registry or getattr(_MODULES[kind], name) is not type(obj):
        raise ReplayBankError(
            f"cannot save a buffer whose {kind} is {name}: saves can name only {sorted(registry)}"
        )
    return {"class": name, "params": {p: getattr(obj, p) for p in registry[name]}}


def build(kind: str, config: Any, where: str, **extra: Any) -> Any:
    """Construct the sampler/admission/storage a manifest names, after checking the class and the
    exact set of parameters; what the constructor raises is reported with ``where``."""
    fields(config, where, ("class", "params"))
    name = config["class"]
    registry = _REGISTRY[kind]
    if not isinstance(name, str) or name not in registry:
        raise CorruptSaveError(
            f"{where}.class = {name!r}: expected one of {sorted(registry)}"
        )
    later = ADDED_LATER.get(name, {})
    required = [p for p in registry[name] if p not in later]
    params = {**later, **fields(config["params"], f"{where}.params", required, later)}
    for key, value in params.items():
        PARAMS[key](value, f"{where}.params.{key}")
    cls: Callable[..., Any] = getattr(_MODULES[kind], name)
    try:
        if name == "Trajectories":
            return cls(params.pop("length"), params.pop("reverse"), **params)
        return cls(**params, **extra)
    except (ValueError, TypeError, KeyError, OverflowError) as err:
        raise CorruptSaveError(f"{where}.params: {name} refuses them ({err})") from err


def references(tree: Any, where: str, found: dict[str, str], depth: int = 0) -> None:
    """Collect the ``{"__npy__": name}`` references of ``tree`` into ``found`` (name -> key),
    checking each is exactly that one key with a plain file name, referenced once."""
    if depth > MAX_DEPTH:
        raise ReplayBankError(f"{where}: nested more than {MAX_DEPTH} levels deep")
    if isinstance(tree, dict):
        if "__npy__" in tree:
            name = tree["__npy__"]
            if len(tree) != 1 or not isinstance(name, str) or not ARRAY_NAME.fullmatch(name):
                raise ReplayBankError(
                    f"{where}: an array reference must be {{\"__npy__\": name}} with a plain file "
                    f"name (letters, digits, '_', '.', '-'), got {tree!r}"
                )
            if name in found:
                raise ReplayBankError(f"{where}: array {name!r} is also referenced at {found[name]}")
            found[name] = where
            return
        for key, value in tree.items():
            references(value, f"{where}.{key}", found, depth + 1)
    elif isinstance(tree, list):
        for i, value in enumerate(tree):
            references(value, f"{where}[{i}]", found, depth + 1)


@dataclass
class Manifest:
    """A parsed, checked manifest. ``files`` maps each file (relative to the version folder) to
    ``(sha256, bytes)``; ``columns`` maps each column to its file(s)."""

    path: Path
    raw: dict[str, Any]
    version: str
    capacity: int
    spec: dict[str, ColumnSpec]
    columns: dict[str, tuple[str, ...]]
    arrays: dict[str, str]  # state array name -> its file
    files: dict[str, tuple[str, int]]

    @classmethod
    def read(cls, root: Path) -> Manifest:
        """Read and check ``root/manifest.json`` (see the module doc).

        Raises:
            ReplayBankError: ``root`` holds no manifest.
            CorruptSaveError: anything in it is malformed, altered or unknown; the message
                names the file and the key.
        """
        from .npyio import inside

        path = root / MANIFEST
        if not (root / MANIFEST).exists():
            raise ReplayBankError(f"{root} is not a saved replaybank buffer: {MANIFEST} not found")
        inside(root, MANIFEST, str(path))  # a regular file, not a symlink or a pipe
        if path.stat().st_size > MAX_MANIFEST_BYTES:
            raise CorruptSaveError(f"{path}: larger than {MAX_MANIFEST_BYTES} bytes")
        try:
            raw = strict_loads(path.read_bytes())
        except (ValueError, UnicodeDecodeError, RecursionError) as err:
            raise CorruptSaveError(f"{path}: not valid JSON ({err})") from None
        try:
            return cls.parse(path, raw)
        except CorruptSaveError:
            raise
        except ReplayBankError as err:
            raise CorruptSaveError(f"{path}: {err}") from None

    @classmethod
    def parse(cls, path: Path, raw: Any) -> Manifest:
        if not isinstance(raw, dict) or raw.get("format") != FORMAT:
            got = raw.get("format") if isinstance(raw, dict) else type(raw).__name__
            raise ReplayBankError(f"format is {got!r}, expected {FORMAT!r}")
        if raw.get("schema_version") != SCHEMA_VERSION:
            raise ReplayBankError(
                f"schema_version {raw.get('schema_version')!r} is not supported: this replaybank "
                f"reads schema {SCHEMA_VERSION} (load it with the replaybank that saved it)"
            )
        stored = text(raw.get("manifest_sha256"), "manifest_sha256")
        if stored != digest(raw):
            raise ReplayBankError(
                "manifest_sha256 does not match the manifest: it was altered or corrupted"
            )
        fields(raw, "manifest", (*KEYS, "manifest_sha256"))
        version = text(raw["version"], "version")
        if not VERSION_DIR.fullmatch(version):
            raise ReplayBankError(
                f"version = {version!r}: expected a folder name like 'v000001' inside the save"
            )
        capacity = integer(raw["capacity"], "capacity", 1, MAX_CAPACITY)
        for kind in ("storage", "sampler", "admission"):
            fields(raw[kind], kind, ("class", "params"))
        state = fields(raw["state"], "state", STATE_KEYS)
        spec = {
            name: ColumnSpec.from_json(col, f"state.spec[{name!r}]")
            for name, col in mapping(state["spec"], "state.spec").items()
        }
        stems = file_stems(spec)
        columns: dict[str, tuple[str, ...]] = {
            name: (f"columns/{stems[name]}.values.npy", f"columns/{stems[name]}.offsets.npy")
            if col.ragged
            else (f"columns/{stems[name]}.npy",)
            for name, col in spec.items()
        }
        found: dict[str, str] = {}
        references(state, "state", found)
        arrays = {name: f"state/{name}.npy" for name in found}
        expected = [rel for rels in columns.values() for rel in rels] + list(arrays.values())
        entries = fields(raw["files"], "files", expected)
        files = {}
        for rel in expected:
            meta = fields(entries[rel], f"files[{rel!r}]", ("sha256", "bytes"))
            sha = text(meta["sha256"], f"files[{rel!r}].sha256")
            if not SHA256.fullmatch(sha):
                raise ReplayBankError(f"files[{rel!r}].sha256 = {sha!r}: expected 64 hex digits")
            files[rel] = (sha, integer(meta["bytes"], f"files[{rel!r}].bytes", 0, 1 << 56))
        return cls(path, raw, version, capacity, spec, columns, arrays, files)

    def count(self) -> int:
        """Items stored, from the slot table (a FIFO ring stores only its arrival count)."""
        table = mapping(self.raw["state"]["table"], "state.table")
        if "size" in table:
            return integer(table["size"], "state.table.size", 0, self.capacity)
        arrivals = integer(table.get("arrivals"), "state.table.arrivals")
        base = integer(table.get("base", 0), "state.table.base", 0, arrivals)  # set by clear()
        return min(arrivals - base, self.capacity)
