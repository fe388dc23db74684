"""An adapter library: a folder of LoRA adapters, each a PEFT folder with a checked manifest.

```
LIB/
  index.json        {"schema", "adapters": {name: {skill, domain, sha256, created, retention}}}
  .lock             the lock file (fcntl) every change holds
  .staging/         registrations being written (a crash leaves them here, never in the library)
  NAME/             adapter_model.safetensors, adapter_config.json, replaybank.json (:mod:`.manifest`)
```

**Registration is atomic**: the entry is written whole into ``.staging/``, then, holding the lock,
renamed to ``LIB/NAME`` and the index rewritten (to a temporary file, renamed over it). A
registration that fails (a bad file, the gate, a name taken meanwhile) leaves the library as it
was; two processes registering at once both land (the lock orders them).

**Loading checks before it touches the model**: the manifest's schema, the base model's
fingerprint (:func:`replaybank.llm.eval.decode.model_fingerprint`) against the one recorded, the
weights' SHA-256, the config (data, never code), every tensor (:mod:`.attach`).

What is recorded about an adapter when it enters the library is one :class:`Registration`:
``lib.add("runs/x/adapters/gen3", Registration("tools-v1", skill="tool calls"))``.

Example:
    >>> import tempfile
    >>> lib = AdapterLibrary(Path(tempfile.mkdtemp()) / "lib", create=True)
    >>> lib.names()
    []
"""

from __future__ import annotations

import fcntl
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import KW_ONLY, dataclass
from pathlib import Path
from typing import Any

from replaybank.llm.adapters.attach import attach, check_adapter_config, detach, lora_config
from replaybank.llm.adapters.errors import (
    AdapterExistsError,
    AdapterNotFoundError,
    FingerprintError,
    HashMismatchError,
    LibraryError,
    ManifestError,
)
from replaybank.llm.adapters.gate import Measure, gate
from replaybank.llm.adapters.manifest import Manifest, check_manifest, new_manifest
from replaybank.llm.config.names import is_name
from replaybank.llm.train.peft_files import (
    CONFIG,
    MANIFEST,
    WEIGHTS,
    read_json_object,
    sha256_file,
    write_adapter_folder,
    write_json_atomic,
)

__all__ = ["INDEX_SCHEMA", "AdapterLibrary", "Registration"]

INDEX_SCHEMA = "replaybank.adapter-library/1"
_INDEX, _LOCK, _STAGING = "index.json", ".lock", ".staging"


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
        LibraryError: a name that is not one, or ``examples`` / ``parents`` given as one string,
            naming the field.

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
        for field in ("examples", "parents"):
            value = getattr(self, field)
            if isinstance(value, str):
                raise LibraryError(f"{field} must be a list of strings, got one string {value!r}", adapter=self.name, field=field)
            object.__setattr__(self, field, tuple(value))


class AdapterLibrary:
    """The library in folder ``root`` (``create=True`` makes it when absent).

    Raises:
        LibraryError: ``root`` is not a library folder (absent without ``create``, a file).
    """

    def __init__(self, root: Path | str, *, create: bool = False) -> None:
        self.root = Path(root)
        if not self.root.is_dir():
            if not create:
                raise LibraryError(f"{self.root}: no adapter library here (create it with `replaybank adapters add`)")
            self.root.mkdir(parents=True, exist_ok=True)

    # -- reading ------------------------------------------------------------------------------

    def names(self) -> list[str]:
        """The registered adapters' names, sorted."""
        return sorted(self.index())

    def index(self) -> dict[str, dict[str, Any]]:
        """``{name: {skill, domain, sha256, created, retention}}`` from ``index.json`` (checked)."""
        path = self.root / _INDEX
        if not path.exists() and not path.is_symlink():
            return {}
        obj = read_json_object(path, "the library index", error=ManifestError)
        if obj.get("schema") != INDEX_SCHEMA or not isinstance(obj.get("adapters"), dict):
            raise ManifestError(f"{path}: not a library index (schema {obj.get('schema')!r}, expected {INDEX_SCHEMA!r})",
                                field="schema")
        for name, row in obj["adapters"].items():
            if not is_name(name) or not isinstance(row, dict):
                raise ManifestError(f"{path}: {name!r} is not an adapter name with an object", adapter=str(name), field="adapters")
        return obj["adapters"]

    def folder(self, name: str) -> Path:
        """``LIB/NAME``: a registered adapter's real folder (not a link).

        Raises:
            AdapterNotFoundError: not a name, not registered, or no folder for it.
        """
        if not is_name(name) or name.startswith("."):
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
        """The adapter's checked manifest (its files regular files inside its folder).

        Raises:
            AdapterNotFoundError, ManifestError: see :func:`~replaybank.llm.adapters.manifest.check_manifest`.
        """
        folder = self.folder(name)
        path = folder / MANIFEST
        manifest = check_manifest(read_json_object(path, "the adapter's manifest", error=ManifestError), str(path), name)
        for key, file in (("files.weights", manifest.weights), ("files.config", manifest.config)):
            if (folder / file).is_symlink() or not (folder / file).is_file():
                raise ManifestError(f"{folder / file}: missing or not a regular file", adapter=name, field=key)
        return manifest

    def verify(self, name: str) -> Manifest:
        """:meth:`manifest`, and the weights' SHA-256 and the adapter config checked.

        Raises:
            HashMismatchError: the weights changed since registration.
            ManifestError: a config that is not a loadable LoRA config.
        """
        m = self.manifest(name)
        folder = self.root / name
        digest = sha256_file(folder / m.weights)
        if digest != m.sha256:
            raise HashMismatchError(f"{folder / m.weights}: sha256 {digest[:16]} is not the registered {m.sha256[:16]}; "
                                    "the weights changed since registration", adapter=name, field="sha256")
        self.adapter_config(name)
        return m

    def adapter_config(self, name: str) -> dict[str, Any]:
        """The adapter's ``adapter_config.json``, checked (:func:`~.attach.check_adapter_config`)."""
        path = self.root / name / self.manifest(name).config
        return check_adapter_config(read_json_object(path, "adapter_config.json", error=ManifestError), str(path), name)

    def load(self, name: str, model: Any, *, adapter_name: str | None = None) -> Any:
        """Put adapter ``name`` onto ``model`` (a bare base model or a PEFT model) and activate it.

        Returns:
            The PEFT model (``model`` itself when it already was one).

        Raises:
            FingerprintError: ``model`` is not the base model the adapter was registered for.
            HashMismatchError, ManifestError, AdapterError: see :meth:`verify` and :func:`~.attach.attach`.
        """
        from replaybank.llm.eval.decode import model_fingerprint

        m = self.verify(name)
        fingerprint = model_fingerprint(model)
        if fingerprint != m.fingerprint:
            raise FingerprintError(
                f"recorded base model {m.base_name or '?'} ({m.fingerprint[:16]}) is not this model ({fingerprint[:16]}); "
                "load it onto the model it was trained on", adapter=name, field="base_model.fingerprint")
        config = lora_config(self.adapter_config(name), str(self.root / name / m.config), name)
        return attach(model, self.root / name / m.weights, config, adapter_name or name)[0]

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
            base_model: the base model (needed for ``measure``; its fingerprint is recorded).
            measure: measures the base model with the adapter active (:mod:`.gate`), instead of
                the registration's ``figures``. Either goes through the gate with ``floor``/``force``.

        Raises:
            AdapterExistsError: the name is taken. GateError: below the floor, not forced.
            FingerprintError: ``base_model`` is not the model the folder's manifest records.
            HashMismatchError: the folder's weights are not what its ``replaybank.json`` records.
            ManifestError, AdapterError, LibraryError: bad files or arguments, naming the field.
        """
        reg, name = registration, registration.name
        folder = Path(adapter) if isinstance(adapter, (str, os.PathLike)) else None
        model = adapter if folder is None else None
        if model is None and folder is None:
            raise LibraryError("adapter must be a PEFT folder (a path) or a PEFT model, got None", adapter=name, field="adapter")
        if name in self.index():
            raise AdapterExistsError(f"{self.root}: already registered (remove it first)", adapter=name, field="name")
        staging = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=self._staging()))
        try:
            given = self._stage(name, staging, folder, model, adapter_name)
            fingerprint, base_name = self._fingerprint(name, base_model, reg.fingerprint, reg.base_name, given)
            shown = folder / CONFIG if folder is not None else Path(f"{name}/{CONFIG}")  # errors name the source
            check_adapter_config(read_json_object(staging / CONFIG, "adapter_config.json", error=ManifestError), str(shown), name)
            figures = self._measure(name, staging, base_model, measure) if measure is not None else reg.figures
            checked = gate(name, figures or {}, floor=floor, force=force) if figures is not None or floor is not None else None
            manifest = new_manifest(
                name, skill=reg.skill, fingerprint=fingerprint, sha256=sha256_file(staging / WEIGHTS), base_name=base_name,
                domain=reg.domain, data=dict(reg.data) if reg.data is not None else given.get("data"),
                recipe=dict(reg.recipe) if reg.recipe is not None else given.get("recipe"), examples=list(reg.examples),
                figures=checked, parents=list(reg.parents), merge=dict(reg.merge) if reg.merge is not None else None,
                source=reg.source if reg.source is not None else (str(folder) if folder is not None else None),
            )
            result = check_manifest(manifest, f"{name}/{MANIFEST}", name)
            write_json_atomic(staging / MANIFEST, manifest)
            _fsync_folder(staging)
            with self._locked():
                index = self.index()
                if name in index:
                    raise AdapterExistsError(f"{self.root}: registered meanwhile by another process", adapter=name, field="name")
                if os.path.lexists(self.root / name):
                    raise AdapterExistsError(f"{self.root / name}: exists but is not registered (left by a crash, or not "
                                             "the library's); remove it to register this name", adapter=name, field="name")
                os.rename(staging, self.root / name)
                index[name] = {"skill": reg.skill, "domain": reg.domain, "sha256": result.sha256, "created": result.created,
                               "retention": checked["retention"] if checked else None}
                self._write_index(index)
            return result
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    def remove(self, name: str) -> None:
        """Unregister ``name`` and delete its folder (the index first: a crash leaves no dangling entry)."""
        with self._locked():
            path = self.folder(name)
            index = self.index()
            index.pop(name)
            self._write_index(index)
            trash = Path(tempfile.mkdtemp(prefix=f"removed-{name}-", dir=self._staging()))
            os.rename(path, trash / name)
        shutil.rmtree(trash, ignore_errors=True)

    # -- inside -------------------------------------------------------------------------------

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
            shutil.copyfile(src / file, staging / file)
        given: dict[str, Any] = {}
        if (src / MANIFEST).exists() or (src / MANIFEST).is_symlink():
            given = read_json_object(src / MANIFEST, "the folder's replaybank.json", error=ManifestError)
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
        cfg = check_adapter_config(read_json_object(config_path, "adapter_config.json", error=ManifestError), str(config_path), name)
        peft_model, wrapped = attach(base_model, staging / WEIGHTS, lora_config(cfg, str(config_path), name), f"candidate-{name}")
        try:
            return measure(peft_model)
        finally:
            detach(peft_model, f"candidate-{name}", wrapped)

    def _staging(self) -> Path:
        path = self.root / _STAGING
        path.mkdir(exist_ok=True)
        return path

    @contextmanager
    def _locked(self) -> Iterator[None]:
        fd = os.open(self.root / _LOCK, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing releases the lock

    def _write_index(self, index: dict[str, Any]) -> None:
        write_json_atomic(self.root / _INDEX, {"schema": INDEX_SCHEMA, "adapters": dict(sorted(index.items()))})


def _fsync_folder(folder: Path) -> None:
    for path in folder.iterdir():
        with open(path, "rb") as f:
            os.fsync(f.fileno())
