"""An adapter's manifest in the library (``NAME/replaybank.json``): what it is, checked whole.

A library entry is a PEFT folder (``adapter_model.safetensors``, ``adapter_config.json``) plus
this manifest. Every key is known (an unknown key is refused, so a typo never passes silently),
every value has its type, and the files it names are plain names inside the entry's folder:
a manifest cannot point the loader anywhere else.

==============  =====================================================================
key             value
==============  =====================================================================
schema          ``"replaybank.adapter/1"``
name            the entry's name (a checked name, the folder's name)
skill           what the adapter is for (non-empty text)
domain          its domain, or null
base_model      ``{"fingerprint": 64 hex (model_fingerprint), "name": text or null}``
files           ``{"weights": "adapter_model.safetensors", "config": "adapter_config.json"}``
sha256          the weights file's SHA-256 (64 hex)
data            the training data's manifest (a JSON object), or null
recipe          the rehearsal recipe it was trained with (a JSON object), or null
examples        example prompts (list of text): what the router matches requests against
figures         measured at registration (see :mod:`.gate`), or null
parents         the adapters a merge was made of (names), else ``[]``
merge           ``{"combination_type", "weights", "density", "svd_rank"}`` of a merge, or null
created         UTC time of registration (ISO 8601 text)
source          where it was registered from (text, informative: never opened), or null
==============  =====================================================================

Example:
    >>> m = new_manifest("tools", skill="tool calls", fingerprint="a" * 64, sha256="b" * 64)
    >>> check_manifest(m, "lib/tools/replaybank.json", "tools").skill
    'tool calls'
    >>> check_manifest({**m, "colour": 1}, "lib/tools/replaybank.json", "tools")
    Traceback (most recent call last):
    ...
    replaybank.llm.adapters.errors.ManifestError: adapter 'tools', field 'colour': lib/tools/replaybank.json: unknown key; known: base_model, created, data, domain, examples, figures, files, merge, name, parents, recipe, schema, sha256, skill, source
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass, field
from typing import Any

from replaybank.llm.adapters.errors import ManifestError
from replaybank.llm.config.names import is_name

__all__ = ["SCHEMA", "Manifest", "check_manifest", "new_manifest"]

SCHEMA = "replaybank.adapter/1"
_HEX64 = re.compile(r"[0-9a-f]{64}")
_KEYS = ("schema", "name", "skill", "domain", "base_model", "files", "sha256", "data", "recipe", "examples",
         "figures", "parents", "merge", "created", "source")
_FIGURE_KEYS = ("retention", "domain", "per_family", "floor", "passed", "forced", "n")
_MERGE_KEYS = ("combination_type", "weights", "density", "svd_rank")


@dataclass(frozen=True)
class Manifest:
    """A checked manifest (see the module doc); :meth:`to_dict` gives back the JSON object."""

    name: str
    skill: str
    fingerprint: str
    sha256: str
    base_name: str | None = None
    domain: str | None = None
    weights: str = "adapter_model.safetensors"
    config: str = "adapter_config.json"
    data: dict[str, Any] | None = None
    recipe: dict[str, Any] | None = None
    examples: tuple[str, ...] = ()
    figures: dict[str, Any] | None = None
    parents: tuple[str, ...] = ()
    merge: dict[str, Any] | None = None
    created: str = ""
    source: str | None = None
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.raw)


def new_manifest(
    name: str, *, skill: str, fingerprint: str, sha256: str, base_name: str | None = None, domain: str | None = None,
    data: dict[str, Any] | None = None, recipe: dict[str, Any] | None = None, examples: list[str] | tuple[str, ...] = (),
    figures: dict[str, Any] | None = None, parents: list[str] | tuple[str, ...] = (), merge: dict[str, Any] | None = None,
    source: str | None = None,
) -> dict[str, Any]:
    """A manifest object for a new entry (check it with :func:`check_manifest`)."""
    return {
        "schema": SCHEMA, "name": name, "skill": skill, "domain": domain,
        "base_model": {"fingerprint": fingerprint, "name": base_name},
        "files": {"weights": "adapter_model.safetensors", "config": "adapter_config.json"},
        "sha256": sha256, "data": data, "recipe": recipe, "examples": list(examples), "figures": figures,
        "parents": list(parents), "merge": merge, "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "source": source,
    }


def check_manifest(obj: Any, where: str, name: str) -> Manifest:
    """``obj`` checked against the schema; ``where`` (the file) and ``name`` (the entry) go into errors.

    Raises:
        ManifestError: naming the adapter, the field and what was expected.
    """
    def bad(key: str, message: str) -> ManifestError:
        return ManifestError(f"{where}: {message}", adapter=name, field=key)

    if not isinstance(obj, dict):
        raise bad("", f"expected a JSON object, got {type(obj).__name__}")
    for key in obj:
        if key not in _KEYS:
            raise bad(str(key), f"unknown key; known: {', '.join(sorted(_KEYS))}")
    for key in _KEYS:
        if key not in obj:
            raise bad(key, "missing")
    if obj["schema"] != SCHEMA:
        raise bad("schema", f"is {obj['schema']!r}, expected {SCHEMA!r} (written by another replaybank version?)")
    if obj["name"] != name or not is_name(name):
        raise bad("name", f"is {obj['name']!r}, expected the folder's name {name!r}")
    skill = _text(obj["skill"], bad, "skill")
    domain = None if obj["domain"] is None else _text(obj["domain"], bad, "domain")
    base = _object(obj["base_model"], bad, "base_model", ("fingerprint", "name"))
    fingerprint = _hex(base["fingerprint"], bad, "base_model.fingerprint")
    base_name = None if base["name"] is None else _text(base["name"], bad, "base_model.name")
    files = _object(obj["files"], bad, "files", ("weights", "config"))
    for key, value in files.items():
        # a plain name: the loader never leaves the entry's folder
        if not is_name(value) or value.endswith(".tmp"):
            raise bad(f"files.{key}", f"{value!r} is not a file name inside the adapter's folder")
    for key in ("data", "recipe"):
        if obj[key] is not None and not isinstance(obj[key], dict):
            raise bad(key, f"expected a JSON object or null, got {type(obj[key]).__name__}")
    examples = obj["examples"]
    if not isinstance(examples, list) or not all(isinstance(e, str) and e.strip() for e in examples):
        raise bad("examples", "expected a list of non-empty prompts")
    parents = obj["parents"]
    if not isinstance(parents, list) or not all(is_name(p) for p in parents):
        raise bad("parents", "expected a list of adapter names")
    figures = None if obj["figures"] is None else _figures(obj["figures"], bad)
    merge = None if obj["merge"] is None else _object(obj["merge"], bad, "merge", _MERGE_KEYS)
    if obj["source"] is not None and not isinstance(obj["source"], str):
        raise bad("source", "expected text or null")
    return Manifest(
        name=name, skill=skill, fingerprint=fingerprint, sha256=_hex(obj["sha256"], bad, "sha256"), base_name=base_name,
        domain=domain, weights=files["weights"], config=files["config"], data=obj["data"], recipe=obj["recipe"],
        examples=tuple(examples), figures=figures, parents=tuple(parents), merge=merge,
        created=_text(obj["created"], bad, "created"), source=obj["source"], raw=obj,
    )


def _text(value: Any, bad: Any, key: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise bad(key, f"expected non-empty text, got {value!r}")
    return value


def _hex(value: Any, bad: Any, key: str) -> str:
    if not isinstance(value, str) or _HEX64.fullmatch(value) is None:
        raise bad(key, f"{value!r} is not 64 lower-case hex digits")
    return value


def _object(value: Any, bad: Any, key: str, keys: tuple[str, ...]) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise bad(key, f"expected a JSON object, got {type(value).__name__}")
    for k in value:
        if k not in keys:
            raise bad(f"{key}.{k}", f"unknown key; known: {', '.join(keys)}")
    for k in keys:
        if k not in value:
            raise bad(f"{key}.{k}", "missing")
    return value


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _figures(value: Any, bad: Any) -> dict[str, Any]:
    fig = _object(value, bad, "figures", _FIGURE_KEYS)
    for key in ("retention", "domain", "floor"):
        if fig[key] is not None and not _number(fig[key]):
            raise bad(f"figures.{key}", f"expected a finite number or null, got {fig[key]!r}")
    if not isinstance(fig["per_family"], dict) or not all(v is None or _number(v) for v in fig["per_family"].values()):
        raise bad("figures.per_family", "expected {family: number or null}")
    for key in ("passed", "forced"):
        if fig[key] is not None and not isinstance(fig[key], bool):
            raise bad(f"figures.{key}", f"expected true, false or null, got {fig[key]!r}")
    if fig["n"] is not None and (not isinstance(fig["n"], int) or isinstance(fig["n"], bool) or fig["n"] < 0):
        raise bad("figures.n", f"expected a count or null, got {fig['n']!r}")
    return fig
