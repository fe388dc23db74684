"""An adapter library: a folder of LoRA adapters, each a PEFT folder with a checked manifest.

```
LIB/
  index.json        {"schema", "adapters": {name: {skill, domain, sha256, created, retention}}}
  .lock             the lock file (fcntl) every change holds
  .staging/         registrations being written (a crash leaves them here, never in the library)
  .orphaned/        folders found outside the index that failed their checks, moved aside
  NAME/             adapter_model.safetensors, adapter_config.json, replaybank.json (:mod:`.manifest`)
```

``index.json``, ``.lock``, ``.staging`` and ``.orphaned`` are the library's own: an adapter name
that is one of them, starts with ``.`` or ends with ``.tmp`` is refused. ``.lock`` must be a
regular file and ``.staging`` / ``.orphaned`` real folders inside the library (a symbolic link, a
FIFO, a folder of the wrong kind is refused, never followed); the library's root may be a link
(the user named it) but must lead to a folder.

**Registration is atomic**: the entry is written whole into ``.staging/``, then, holding the lock,
renamed to ``LIB/NAME`` and the index rewritten (to a temporary file, renamed over it). A
registration that fails (a bad file, the gate, a name taken meanwhile) leaves the library as it
was; two processes registering at once both land (the lock orders them). A process killed between
the rename and the index write leaves a complete folder outside the index: the next change
(``add``, ``remove``) finds it, holding the lock, and re-indexes it when its manifest, hashes (and
signature, with a key) check, else moves it to ``.orphaned/``; either way it warns
(:class:`~.errors.LibraryRepairWarning`), and the name can be registered again once it is free.

**Loading checks before it touches the model**: the manifest's schema, its signature when the
library has a key, the base model's fingerprint
(:func:`replaybank.llm.eval.decode.model_fingerprint`) against the one recorded, the SHA-256 of the
weights and of ``adapter_config.json`` (each file read once: the bytes hashed are the bytes
loaded), the config against what replaybank writes and against the model (data, never code), every
tensor (:mod:`.attach`).

**The hashes protect against accidents** (a truncated copy, a file swapped by mistake, a config
edited by hand), not against someone who can write the library: they can rewrite the weights and
the manifest's hashes together. Against that, give the library a key (``key=`` or the environment
variable ``REPLAYBANK_ADAPTER_KEY``, at least 16 bytes): registration then signs each manifest (an
HMAC-SHA256 over it whole, so over both hashes, the base model's fingerprint and the figures), and
every read refuses an entry whose signature is missing or wrong (:class:`~.errors.SignatureError`).
Without a key the signature is neither written nor checked.

What is recorded about an adapter when it enters the library is one :class:`Registration`:
``lib.add("runs/x/adapters/gen3", Registration("tools-v1", skill="tool calls"))``.

Example:
    >>> import tempfile
    >>> lib = AdapterLibrary(Path(tempfile.mkdtemp()) / "lib", create=True)
    >>> lib.names()
    []
    >>> Registration("index.json", skill="s")
    Traceback (most recent call last):
    ...
    replaybank.llm.adapters.errors.LibraryError: adapter 'index.json', field 'name': is the name of one of the library's own files (index.json, .lock, .staging, .orphaned; names starting with '.' or ending in '.tmp'); choose another
"""

from __future__ import annotations

import fcntl
import hashlib
import hmac
import os
import shutil
import stat
import tempfile
import warnings
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import KW_ONLY, dataclass
from pathlib import Path
from typing import Any

from replaybank.errors import ReplayBankError
from replaybank.files import check_path, file_kind, fsync_dir, open_regular, read_regular
from replaybank.llm.adapters.attach import (
    attach,
    check_adapter_config,
    check_config_fits,
    detach,
    lora_config,
)
from replaybank.llm.adapters.errors import (
    AdapterExistsError,
    AdapterNotFoundError,
    FingerprintError,
    HashMismatchError,
    LibraryError,
    LibraryRepairWarning,
    ManifestError,
    SignatureError,
)
from replaybank.llm.adapters.gate import Measure, gate
from replaybank.llm.adapters.manifest import Manifest, check_manifest, new_manifest, signed_bytes
from replaybank.llm.config.names import is_name
from replaybank.llm.train.peft_files import (
    CONFIG,
    MANIFEST,
    WEIGHTS,
    parse_json_object,
    read_json_object,
    sha256_file,
    tensors_from_bytes,
    write_adapter_folder,
    write_json_atomic,
)

__all__ = ["INDEX_SCHEMA", "KEY_ENV", "AdapterLibrary", "Registration", "name_list", "reserved_name"]

INDEX_SCHEMA = "replaybank.adapter-library/1"
#: the environment variable that gives a library its signing key when ``key=`` is not passed
KEY_ENV = "REPLAYBANK_ADAPTER_KEY"
_INDEX, _LOCK, _STAGING, _ORPHANED = "index.json", ".lock", ".staging", ".orphaned"
_MIN_KEY = 16
_MAX_INDEX_BYTES = 64 << 20
_MAX_MANIFEST_BYTES = 16 << 20
_MAX_CONFIG_BYTES = 1 << 20


def reserved_name(name: str) -> bool:
    """Whether ``name`` is (or could be) one of the library's own files: ``index.json``, a name
    starting with ``.`` (``.lock``, ``.staging``, ``.orphaned``) or ending in ``.tmp`` (the
    index's temporary file); case is ignored, as on a case-insensitive file system."""
    low = name.lower()
    return low == _INDEX or low.startswith(".") or low.endswith(".tmp")


def name_list(value: Any, field: str, error: type[LibraryError] = LibraryError) -> list[str]:
    """``value`` as a list of names, refusing one string (which would be iterated as its characters).

    Raises:
        error: a string, bytes, something not iterable, or an item that is not text; naming ``field``.
    """
    if isinstance(value, (str, bytes)):
        raise error(f"{field} must be a list of adapter names, got one string {value!r} (for one adapter: [{value!r}])",
                    field=field)
    if not isinstance(value, Iterable):
        raise error(f"{field} must be a list of adapter names, got {type(value).__name__}", field=field)
    out = list(value)
    for item in out:
        if not isinstance(item, str):
            raise error(f"{field} must be a list of adapter names, got an item {item!r}", field=field)
    return out


@dataclass(frozen=True)
class Registration:
    """The facts recorded about one adapter when it enters a library (its manifest, :mod:`.manifest`).

    Args:
        name: the library entry's name (letters, digits, ``-``, ``_``, ``.``; not starting with ``.``).
        skill: what the adapter is for, in words (the router and ``replaybank adapters list`` show it).
        domain: the domain it was trained on.
        data, recipe: where its training rows came from and how rehearsal entered; ``None`` takes
            the folder's ``replaybank.json``'s (the loop and the main job record them).
        examples: prompts of the skill (the router's prototypes).
        figures: figures measured elsewhere (``retention``, ``domain``, ...), checked by the gate;
            :meth:`AdapterLibrary.add`'s ``measure`` measures them instead.
        fingerprint, base_name: the base model's fingerprint and name when ``add`` is given no
            base model; else taken from the folder's ``replaybank.json``.
        source: where the adapter came from (default: the folder it was copied from).
        parents, merge: the entries a merged adapter was made of and the merge's settings.

    Raises:
        LibraryError: a name that is not one or is the library's own (:func:`reserved_name`), or
            ``examples`` / ``parents`` given as one string, naming the field.

    Example:
        >>> Registration("qx-tools", skill="tool calls", examples=["list the files"]).examples
        ('list the files',)
    """

    name: str
    _: KW_ONLY
    skill: str
    domain: str | None = None
    data: Mapping[str, Any] | None = None
    recipe: Mapping[str, Any] | None = None
    examples: Sequence[str] = ()
    figures: Mapping[str, Any] | None = None
    fingerprint: str | None = None
    base_name: str | None = None
    source: str | None = None
    parents: Sequence[str] = ()
    merge: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not is_name(self.name) or self.name.startswith("."):
            raise LibraryError("not a name: use letters, digits, '-', '_' and '.'", adapter=str(self.name), field="name")
        if reserved_name(self.name):
            raise LibraryError("is the name of one of the library's own files (index.json, .lock, .staging, .orphaned; "
                               "names starting with '.' or ending in '.tmp'); choose another", adapter=self.name, field="name")
        for field in ("examples", "parents"):
            value = getattr(self, field)
            if isinstance(value, str):
                raise LibraryError(f"{field} must be a list of strings, got one string {value!r}", adapter=self.name, field=field)
            object.__setattr__(self, field, tuple(value))


class AdapterLibrary:
    """The library in folder ``root`` (``create=True`` makes it when absent).

    ``key`` (text or bytes, at least 16 bytes; default: the environment variable
    ``REPLAYBANK_ADAPTER_KEY`` when set) signs every manifest registered and is checked on every
    read (see the module doc); without one, nothing is signed or checked.

    Raises:
        LibraryError: ``root`` is not a library folder (absent without ``create``, a file, a FIFO,
            a link that leads nowhere or in a loop, unreadable), or ``key`` is too short.
    """

    def __init__(self, root: Path | str, *, create: bool = False, key: str | bytes | None = None) -> None:
        self.root = check_path(root, error=LibraryError, what="library")
        self._key = _library_key(key)
        try:
            mode = os.stat(self.root).st_mode
        except FileNotFoundError:
            if not create:
                raise LibraryError(f"{self.root}: no adapter library here (create it with `replaybank adapters add`)",
                                   field="library") from None
            try:
                self.root.mkdir(parents=True, exist_ok=True)
                mode = os.stat(self.root).st_mode
            except OSError as exc:  # a dangling link, a parent that is a file, no permission
                raise LibraryError(f"{self.root}: cannot create the library here ({exc.strerror or exc})",
                                   field="library") from None
        except OSError as exc:  # a link loop (ELOOP), a parent that is a file (ENOTDIR), EACCES
            raise LibraryError(f"{self.root}: not a library folder ({exc.strerror or exc})", field="library") from None
        if not stat.S_ISDIR(mode):
            raise LibraryError(f"{self.root}: is {file_kind(mode)}, not an adapter library folder", field="library")

    def __repr__(self) -> str:
        return f"AdapterLibrary({str(self.root)!r}, signed={self._key is not None})"

    # -- reading ------------------------------------------------------------------------------

    def names(self) -> list[str]:
        """The registered adapters' names, sorted."""
        return sorted(self.index())

    def index(self) -> dict[str, dict[str, Any]]:
        """``{name: {skill, domain, sha256, created, retention}}`` from ``index.json`` (checked)."""
        path = self.root / _INDEX
        if not path.exists() and not path.is_symlink():
            return {}
        obj = read_json_object(path, "the library index", error=ManifestError, max_bytes=_MAX_INDEX_BYTES)
        if obj.get("schema") != INDEX_SCHEMA or not isinstance(obj.get("adapters"), dict):
            raise ManifestError(f"{path}: not a library index (schema {obj.get('schema')!r}, expected {INDEX_SCHEMA!r})",
                                field="schema")
        for name, row in obj["adapters"].items():
            if not is_name(name) or reserved_name(name) or not isinstance(row, dict):
                raise ManifestError(f"{path}: {name!r} is not an adapter name with an object", adapter=str(name), field="adapters")
        return obj["adapters"]

    def folder(self, name: str) -> Path:
        """``LIB/NAME``: a registered adapter's real folder (not a link).

        Raises:
            AdapterNotFoundError: not a name, not registered, or no folder for it.
        """
        if not isinstance(name, str) or not is_name(name) or reserved_name(name):
            raise AdapterNotFoundError(f"{name!r} is not an adapter name", adapter=str(name), field="name")
        path = self.root / name
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            mode = 0
        if name not in self.index() or not stat.S_ISDIR(mode):
            known = ", ".join(self.names()) or "none"
            raise AdapterNotFoundError(f"{self.root}: no such adapter (registered: {known})", adapter=name, field="name")
        return path

    def manifest(self, name: str) -> Manifest:
        """The adapter's checked manifest (its files regular files inside its folder; its signature
        when the library has a key).

        Raises:
            AdapterNotFoundError, ManifestError: see :func:`~replaybank.llm.adapters.manifest.check_manifest`.
            SignatureError: the library has a key and the signature is missing or wrong.
        """
        self.folder(name)
        return self._entry_manifest(name)

    def verify(self, name: str) -> Manifest:
        """:meth:`manifest`, and the SHA-256 of the weights and of the adapter config, and the config checked.

        Raises:
            HashMismatchError: the weights or the config changed since registration.
            ManifestError: a config that is not a LoRA config as replaybank writes it.
        """
        m = self.manifest(name)
        self._entry_files(name, m, keep_weights=False)
        return m

    def adapter_config(self, name: str) -> dict[str, Any]:
        """The adapter's ``adapter_config.json``, its hash and its keys checked (:func:`~.attach.check_adapter_config`)."""
        return self._entry_config(name, self.manifest(name))

    def load(self, name: str, model: Any, *, adapter_name: str | None = None) -> Any:
        """Put adapter ``name`` onto ``model`` (a bare base model or a PEFT model) and activate it.

        Returns:
            The PEFT model (``model`` itself when it already was one).

        Raises:
            FingerprintError: ``model`` is not the base model the adapter was registered for.
            ManifestError: the config does not fit ``model`` (:func:`~.attach.check_config_fits`).
            HashMismatchError, SignatureError, AdapterError: see :meth:`verify` and :func:`~.attach.attach`.
        """
        from replaybank.llm.eval.decode import model_fingerprint

        m = self.manifest(name)
        weights, cfg = self._entry_files(name, m, keep_weights=True)
        fingerprint = model_fingerprint(model)
        if fingerprint != m.fingerprint:
            raise FingerprintError(
                f"recorded base model {m.base_name or '?'} ({m.fingerprint[:16]}) is not this model ({fingerprint[:16]}); "
                "load it onto the model it was trained on", adapter=name, field="base_model.fingerprint")
        where = str(self.root / name / m.config)
        check_config_fits(cfg, model, where, name)
        config = lora_config(cfg, where, name)
        path = self.root / name / m.weights
        return attach(model, path, config, adapter_name or name, state=tensors_from_bytes(weights or b"", path))[0]

    # -- changing -----------------------------------------------------------------------------

    def add(
        self, adapter: Path | str | Any, registration: Registration, *, adapter_name: str = "default",
        base_model: Any = None, measure: Measure | None = None, floor: float | None = None, force: bool = False,
    ) -> Manifest:
        """Register ``adapter`` (a PEFT folder, or a PEFT model's adapter ``adapter_name``) as ``registration.name``.

        Args:
            adapter: a PEFT folder (a path) or a PEFT model.
            registration: what is recorded about it (:class:`Registration`).
            adapter_name: which of the model's adapters (a model only).
            base_model: the base model (needed for ``measure``; its fingerprint is recorded, and the
                config is checked against it).
            measure: measures the base model with the adapter active (:mod:`.gate`), instead of
                the registration's ``figures``. Either goes through the gate with ``floor``/``force``.

        Raises:
            AdapterExistsError: the name is taken. GateError: below the floor, not forced.
            FingerprintError: ``base_model`` is not the model the folder's manifest records.
            HashMismatchError: the folder's weights are not what its ``replaybank.json`` records.
            ManifestError, AdapterError, LibraryError: bad files or arguments, naming the field.
        """
        reg, name = registration, registration.name
        if not isinstance(reg, Registration):
            raise LibraryError(f"registration must be a Registration, got {type(reg).__name__}", field="registration")
        folder = Path(adapter) if isinstance(adapter, (str, os.PathLike)) else None
        model = adapter if folder is None else None
        if model is None and folder is None:
            raise LibraryError("adapter must be a PEFT folder (a path) or a PEFT model, got None", adapter=name, field="adapter")
        if name in self.index():
            raise AdapterExistsError(f"{self.root}: already registered (remove it first)", adapter=name, field="name")
        staging = self._new_staging(name)
        try:
            given = self._stage(name, staging, folder, model, adapter_name)
            fingerprint, base_name = self._fingerprint(name, base_model, reg.fingerprint, reg.base_name, given)
            shown = folder / CONFIG if folder is not None else Path(f"{name}/{CONFIG}")  # errors name the source
            raw = read_regular(staging / CONFIG, error=ManifestError, follow_links=False, what="adapter_config.json",
                               max_bytes=_MAX_CONFIG_BYTES)
            cfg = check_adapter_config(_config_object(raw, shown, name), str(shown), name)
            if base_model is not None:
                check_config_fits(cfg, base_model, str(shown), name)
            figures = self._measure(name, staging, base_model, measure) if measure is not None else reg.figures
            checked = gate(name, figures or {}, floor=floor, force=force) if figures is not None or floor is not None else None
            manifest = new_manifest(
                name, skill=reg.skill, fingerprint=fingerprint, sha256=sha256_file(staging / WEIGHTS),
                config_sha256=sha256_file(staging / CONFIG), base_name=base_name,
                domain=reg.domain, data=dict(reg.data) if reg.data is not None else given.get("data"),
                recipe=dict(reg.recipe) if reg.recipe is not None else given.get("recipe"), examples=list(reg.examples),
                figures=checked, parents=list(reg.parents), merge=dict(reg.merge) if reg.merge is not None else None,
                source=reg.source if reg.source is not None else (str(folder) if folder is not None else None),
            )
            result = check_manifest(manifest, f"{name}/{MANIFEST}", name)  # first: only checked JSON is signed
            if self._key is not None:
                manifest["signature"] = self._sign(manifest)
                result = check_manifest(manifest, f"{name}/{MANIFEST}", name)
            write_json_atomic(staging / MANIFEST, manifest)
            _fsync_folder(staging)
            with self._locked():
                index = self._repair(self.index())
                if name in index:
                    raise AdapterExistsError(f"{self.root}: registered meanwhile by another process", adapter=name, field="name")
                if os.path.lexists(self.root / name):
                    raise AdapterExistsError(f"{self.root / name}: exists and is not a folder of the library's; remove it "
                                             "to register this name", adapter=name, field="name")
                os.rename(staging, self.root / name)
                fsync_dir(self.root)
                index[name] = _row(result)
                self._write_index(index)
            return result
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    def remove(self, name: str) -> None:
        """Unregister ``name`` and delete its folder (the index first: a crash leaves no dangling entry)."""
        with self._locked():
            self._repair(self.index())
            path = self.folder(name)
            index = self.index()
            index.pop(name)
            self._write_index(index)
            trash = Path(tempfile.mkdtemp(prefix=f"removed-{name}-", dir=self._own_folder(_STAGING)))
            os.rename(path, trash / name)
        shutil.rmtree(trash, ignore_errors=True)

    # -- inside -------------------------------------------------------------------------------

    def _entry_manifest(self, name: str) -> Manifest:
        """``LIB/NAME``'s manifest checked (schema, files regular, signature), whether indexed or not."""
        folder = self.root / name
        path = folder / MANIFEST
        manifest = check_manifest(read_json_object(path, "the adapter's manifest", error=ManifestError,
                                                   max_bytes=_MAX_MANIFEST_BYTES), str(path), name)
        for key, file in (("files.weights", manifest.weights), ("files.config", manifest.config)):
            if (folder / file).is_symlink() or not (folder / file).is_file():
                raise ManifestError(f"{folder / file}: missing or not a regular file", adapter=name, field=key)
        if self._key is not None:
            if manifest.signature is None:
                raise SignatureError(f"{path}: unsigned, and this library has a key ({KEY_ENV} or key=): it was registered "
                                     "without the key, or its signature was removed; register it again with the key",
                                     adapter=name, field="signature")
            if not hmac.compare_digest(self._sign(manifest.raw), manifest.signature):
                raise SignatureError(f"{path}: the signature is not this library key's: the manifest (its hashes, figures "
                                     "or any other field) changed since it was signed, or another key signed it",
                                     adapter=name, field="signature")
        return manifest

    def _entry_config(self, name: str, m: Manifest) -> dict[str, Any]:
        """The entry's adapter config: read once, hashed against the manifest, parsed, checked."""
        path = self.root / name / m.config
        raw = read_regular(path, error=ManifestError, follow_links=False, what="adapter_config.json",
                           max_bytes=_MAX_CONFIG_BYTES)
        digest = hashlib.sha256(raw).hexdigest()
        if digest != m.config_sha256:
            raise HashMismatchError(f"{path}: sha256 {digest[:16]} is not the registered {m.config_sha256[:16]}; the "
                                    "adapter config changed since registration", adapter=name, field="config_sha256")
        return check_adapter_config(_config_object(raw, path, name), str(path), name)

    def _entry_files(self, name: str, m: Manifest, *, keep_weights: bool) -> tuple[bytes | None, dict[str, Any]]:
        """The weights' hash and the config checked; the weights' bytes (the ones hashed) when ``keep_weights``."""
        path = self.root / name / m.weights
        if keep_weights:
            data: bytes | None = read_regular(path, error=ManifestError, follow_links=False, what="the weights file")
            digest = hashlib.sha256(data or b"").hexdigest()
        else:
            data, digest = None, sha256_file(path)
        if digest != m.sha256:
            raise HashMismatchError(f"{path}: sha256 {digest[:16]} is not the registered {m.sha256[:16]}; "
                                    "the weights changed since registration", adapter=name, field="sha256")
        return data, self._entry_config(name, m)

    def _sign(self, manifest: dict[str, Any]) -> str:
        return hmac.new(self._key or b"", signed_bytes(manifest), hashlib.sha256).hexdigest()

    def _repair(self, index: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        """Folders of the library that the index lacks (a registration killed between its rename and
        its index write): re-indexed when they check, else moved to ``.orphaned/``; warned either
        way. Called holding the lock; returns the index as it now is."""
        changed = False
        for entry in sorted(os.listdir(self.root)):
            if entry in index or not is_name(entry) or reserved_name(entry):
                continue
            path = self.root / entry
            if not stat.S_ISDIR(os.lstat(path).st_mode):
                continue  # a file or a link is no entry; add refuses its name
            try:
                m = self._entry_manifest(entry)
                self._entry_files(entry, m, keep_weights=False)
            except ReplayBankError as exc:
                aside = self._move_aside(entry)
                warnings.warn(f"{path}: a folder not in the library's index (a registration killed before its index "
                              f"write, or not the library's) fails its checks ({exc}); moved to {aside}",
                              LibraryRepairWarning, stacklevel=3)
                continue
            index[entry] = _row(m)
            changed = True
            warnings.warn(f"{path}: a registration killed before its index write; its manifest and hashes check, so it "
                          "is now in the index", LibraryRepairWarning, stacklevel=3)
        if changed:
            self._write_index(index)
        return index

    def _move_aside(self, entry: str) -> Path:
        aside = Path(tempfile.mkdtemp(prefix=f"{entry}-", dir=self._own_folder(_ORPHANED))) / entry
        os.rename(self.root / entry, aside)
        return aside

    def _stage(self, name: str, staging: Path, folder: Path | None, model: Any, adapter_name: str) -> dict[str, Any]:
        """The weights and config into ``staging``; the source folder's ``replaybank.json`` (or {})."""
        if model is not None:
            write_adapter_folder(model, staging, {}, adapter_name=adapter_name)
            return {}
        src = Path(folder)  # type: ignore[arg-type]
        for file in (WEIGHTS, CONFIG):
            if (src / file).is_symlink() or not (src / file).is_file():
                raise LibraryError(f"{src / file}: missing or not a regular file (a PEFT folder has {WEIGHTS} and {CONFIG})",
                                   adapter=name, field="folder")
            _copy_regular(src / file, staging / file, name, _MAX_CONFIG_BYTES if file == CONFIG else None)
        given: dict[str, Any] = {}
        if (src / MANIFEST).exists() or (src / MANIFEST).is_symlink():
            given = read_json_object(src / MANIFEST, "the folder's replaybank.json", error=ManifestError,
                                     max_bytes=_MAX_MANIFEST_BYTES)
            recorded = given.get("sha256")
            if recorded is not None and recorded != sha256_file(staging / WEIGHTS):
                raise HashMismatchError(f"{src / WEIGHTS}: sha256 does not match {src / MANIFEST}; the file changed",
                                        adapter=name, field="sha256")
        return given

    def _fingerprint(
        self, name: str, base_model: Any, fingerprint: str | None, base_name: str | None, given: dict[str, Any],
    ) -> tuple[str, str | None]:
        field = given.get("base_model")
        recorded: dict[str, Any] = field if isinstance(field, dict) else {}
        if base_model is not None:
            from replaybank.llm.eval.decode import model_fingerprint

            fingerprint = model_fingerprint(base_model)
            if recorded.get("fingerprint") not in (None, fingerprint):
                raise FingerprintError(f"the folder's replaybank.json records base model {str(recorded['fingerprint'])[:16]}, "
                                       f"not this one ({fingerprint[:16]})", adapter=name, field="base_model.fingerprint")
        fingerprint = fingerprint or recorded.get("fingerprint")
        if not fingerprint:
            raise LibraryError("unknown base model: pass base_model= (or --base MODEL) or fingerprint=",
                               adapter=name, field="base_model.fingerprint")
        return str(fingerprint), base_name or recorded.get("name")

    def _measure(self, name: str, staging: Path, base_model: Any, measure: Measure) -> Mapping[str, Any]:
        if base_model is None:
            raise LibraryError("measuring an adapter needs base_model=", adapter=name, field="base_model")
        config_path = staging / CONFIG
        cfg = check_adapter_config(read_json_object(config_path, "adapter_config.json", error=ManifestError,
                                                    max_bytes=_MAX_CONFIG_BYTES), str(config_path), name)
        check_config_fits(cfg, base_model, str(config_path), name)
        peft_model, wrapped = attach(base_model, staging / WEIGHTS, lora_config(cfg, str(config_path), name), f"candidate-{name}")
        try:
            return measure(peft_model)
        finally:
            detach(peft_model, f"candidate-{name}", wrapped)

    def _own_folder(self, part: str) -> Path:
        """``LIB/part`` (``.staging``, ``.orphaned``), created when absent; a real folder, never a link."""
        path = self.root / part
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            try:
                path.mkdir()
                return path
            except FileExistsError:  # made meanwhile: checked below like any other
                mode = os.lstat(path).st_mode
            except OSError as exc:
                raise LibraryError(f"{path}: cannot create the library's {part} folder ({exc.strerror or exc})",
                                   field=part) from None
        if stat.S_ISLNK(mode):
            raise LibraryError(f"{path}: is a symbolic link; the library's {part} must be a real folder inside it, or "
                               "registrations would be written wherever it leads (remove the link)", field=part)
        if not stat.S_ISDIR(mode):
            raise LibraryError(f"{path}: is {file_kind(mode)}; the library's {part} must be a folder (remove it)", field=part)
        return path

    def _new_staging(self, name: str) -> Path:
        """A fresh folder under ``.staging/``, checked to be inside the library after it is made."""
        parent = self._own_folder(_STAGING)
        staging = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=parent))
        if os.path.realpath(staging.parent) != os.path.join(os.path.realpath(self.root), _STAGING):
            os.rmdir(staging)  # .staging was swapped for a link meanwhile: the empty folder made there goes
            raise LibraryError(f"{parent}: changed into a link while a registration began; refused", field=_STAGING)
        return staging

    @contextmanager
    def _locked(self) -> Iterator[None]:
        path = self.root / _LOCK
        flags = os.O_RDWR | os.O_CREAT | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        try:
            fd = os.open(path, flags, 0o644)
        except OSError as exc:  # a link (ELOOP), a folder (EISDIR), a socket (ENXIO), no permission
            try:
                mode = os.lstat(path).st_mode
            except OSError:
                mode = stat.S_IFREG
            what = f"is {file_kind(mode)}" if not stat.S_ISREG(mode) else f"cannot be opened ({exc.strerror or exc})"
            raise LibraryError(f"{path}: the library's lock file {what}; it must be a regular file inside the library "
                               "(it holds nothing: remove it)", field=_LOCK) from None
        try:
            mode = os.fstat(fd).st_mode
            if not stat.S_ISREG(mode):
                raise LibraryError(f"{path}: the library's lock file is {file_kind(mode)}; it must be a regular file "
                                   "(it holds nothing: remove it)", field=_LOCK)
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing releases the lock

    def _write_index(self, index: dict[str, Any]) -> None:
        try:
            write_json_atomic(self.root / _INDEX, {"schema": INDEX_SCHEMA, "adapters": dict(sorted(index.items()))})
        except OSError as exc:  # index.json.tmp a folder, a full disk
            raise LibraryError(f"{self.root / _INDEX}: cannot write the library index ({exc.strerror or exc})",
                               field=_INDEX) from None


def _library_key(key: str | bytes | None) -> bytes | None:
    if key is None:
        env = os.environ.get(KEY_ENV)
        if not env:
            return None
        key, where = env, KEY_ENV
    else:
        where = "key"
    if isinstance(key, str):
        key = key.encode("utf-8")
    if not isinstance(key, (bytes, bytearray)) or len(key) < _MIN_KEY:
        raise LibraryError(f"{where}: a signing key must be text or bytes of at least {_MIN_KEY} bytes", field="key")
    return bytes(key)


def _config_object(raw: bytes, path: Path, name: str) -> dict[str, Any]:
    """``adapter_config.json``'s bytes parsed (``path`` names it in errors, with the adapter)."""
    try:
        return parse_json_object(raw, path, "adapter_config.json", ManifestError)
    except ManifestError as exc:
        raise ManifestError(str(exc), adapter=name, field="adapter_config") from None


def _row(m: Manifest) -> dict[str, Any]:
    """The index's row for a checked manifest."""
    return {"skill": m.skill, "domain": m.domain, "sha256": m.sha256, "created": m.created,
            "retention": m.figures["retention"] if m.figures else None}


def _copy_regular(src: Path, dst: Path, name: str, max_bytes: int | None) -> None:
    """``src`` (a regular file, not a link) copied to the new file ``dst``, at most ``max_bytes`` long."""
    copied = 0
    with open_regular(src, error=LibraryError, follow_links=False) as f, open(dst, "xb") as out:
        for block in iter(lambda: f.read(1 << 20), b""):
            copied += len(block)
            if max_bytes is not None and copied > max_bytes:
                raise LibraryError(f"{src}: larger than {max_bytes} bytes; refused", adapter=name, field="folder")
            out.write(block)


def _fsync_folder(folder: Path) -> None:
    for path in folder.iterdir():
        with open(path, "rb") as f:
            os.fsync(f.fileno())
    fsync_dir(folder)

