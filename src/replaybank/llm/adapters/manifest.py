"""An adapter's manifest in the library (``NAME/replaybank.json``): what it is, checked whole.

A library entry is a PEFT folder (``adapter_model.safetensors``, ``adapter_config.json``) plus
this manifest. Every key is known (an unknown key is refused, so a typo never passes silently),
every value has its type, and the files it names are plain names inside the entry's folder:
a manifest cannot point the loader anywhere else.

==============  =====================================================================
key             value
==============  =====================================================================
schema          ``"replaybank.adapter/2"``
name            the entry's name (a checked name, the folder's name)
skill           what the adapter is for (non-empty text)
domain          its domain, or null
base_model      ``{"fingerprint": 64 hex (model_fingerprint), "name": text or null}``
files           ``{"weights": "adapter_model.safetensors", "config": "adapter_config.json"}``
sha256          the weights file's SHA-256 (64 hex)
config_sha256   ``adapter_config.json``'s SHA-256 (64 hex)
data            the training data's manifest (a JSON object), or null
recipe          the rehearsal recipe it was trained with (a JSON object), or null
examples        example prompts (list of text): what the router matches requests against
figures         measured at registration (see :mod:`.gate`), or null
parents         the adapters a merge was made of (distinct names, not its own), else ``[]``
merge           ``{"combination_type", "weights", "density", "svd_rank"}`` of a merge (one weight
                per parent), or null; present exactly when ``parents`` is not empty
created         UTC time of registration (``YYYY-MM-DDTHH:MM:SSZ``)
source          where it was registered from (text, informative: never opened), or null
signature       HMAC-SHA256 (64 hex) of the manifest without this key, under the library's key
                (:mod:`.library`), or null when registered without a key
==============  =====================================================================

The figures are checked as the gate writes them: ``retention`` and every ``per_family`` value in
``[0, MAX_RETENTION]``, ``floor`` in ``[0, MAX_FLOOR]``, ``domain`` finite, ``n`` a count, ``forced`` a
boolean, and ``passed`` what the retention and the floor say (null without a floor; a failed gate
recorded only when forced).

Example:
    >>> m = new_manifest("tools", skill="tool calls", fingerprint="a" * 64, sha256="b" * 64, config_sha256="c" * 64)
    >>> check_manifest(m, "lib/tools/replaybank.json", "tools").skill
    'tool calls'
    >>> check_manifest({**m, "colour": 1}, "lib/tools/replaybank.json", "tools")
    Traceback (most recent call last):
    ...
    replaybank.llm.adapters.errors.ManifestError: adapter 'tools', field 'colour': lib/tools/replaybank.json: unknown key; known: base_model, config_sha256, created, data, domain, examples, figures, files, merge, name, parents, recipe, schema, sha256, signature, skill, source
"""

from __future__ import annotations

import json
import math
import re
import time
from dataclasses import dataclass, field
from typing import Any

from replaybank.llm.adapters.errors import ManifestError
from replaybank.llm.config.names import is_name

__all__ = ["COMBINATION_TYPES", "DENSITY_TYPES", "MAX_FLOOR", "MAX_RANK", "MAX_RETENTION", "SCHEMA", "Manifest", "check_manifest",
           "new_manifest", "signed_bytes"]

SCHEMA = "replaybank.adapter/2"
#: the largest retention a manifest may hold: a ratio of scores, above 1 when the adapter beats the
#: base model, and as large as a family's item count when the base model gets one item right
MAX_RETENTION = 1000.0
#: the largest retention floor (the gate's)
MAX_FLOOR = 10.0
#: the largest LoRA rank a config or a merge may ask for
MAX_RANK = 4096
#: PEFT's ``add_weighted_adapter`` combination types (:mod:`.merge`)
COMBINATION_TYPES = ("linear", "cat", "svd", "ties", "dare_ties", "dare_linear", "magnitude_prune", "ties_svd",
                     "dare_ties_svd", "dare_linear_svd", "magnitude_prune_svd")
#: the combination types that need ``density`` (the kept share)
DENSITY_TYPES = ("ties", "dare_ties", "dare_linear", "magnitude_prune", "ties_svd", "dare_ties_svd", "dare_linear_svd",
                 "magnitude_prune_svd")
_HEX64 = re.compile(r"[0-9a-f]{64}")
_CREATED = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")
_KEYS = ("schema", "name", "skill", "domain", "base_model", "files", "sha256", "config_sha256", "data", "recipe",
         "examples", "figures", "parents", "merge", "created", "source", "signature")
_FIGURE_KEYS = ("retention", "domain", "per_family", "floor", "passed", "forced", "n")
_MERGE_KEYS = ("combination_type", "weights", "density", "svd_rank")
_MAX_COUNT = 2**53


@dataclass(frozen=True)
class Manifest:
    """A checked manifest (see the module doc); :meth:`to_dict` gives back the JSON object."""

    name: str
    skill: str
    fingerprint: str
    sha256: str
    config_sha256: str = ""
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
    signature: str | None = None
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.raw)


def new_manifest(
    name: str, *, skill: str, fingerprint: str, sha256: str, config_sha256: str, base_name: str | None = None, domain: str | None = None,
    data: dict[str, Any] | None = None, recipe: dict[str, Any] | None = None, examples: list[str] | tuple[str, ...] = (),
    figures: dict[str, Any] | None = None, parents: list[str] | tuple[str, ...] = (), merge: dict[str, Any] | None = None,
    source: str | None = None,
) -> dict[str, Any]:
    """A manifest object for a new entry, unsigned (check it with :func:`check_manifest`)."""
    return {
        "schema": SCHEMA, "name": name, "skill": skill, "domain": domain,
        "base_model": {"fingerprint": fingerprint, "name": base_name},
        "files": {"weights": "adapter_model.safetensors", "config": "adapter_config.json"},
        "sha256": sha256, "config_sha256": config_sha256, "data": data, "recipe": recipe, "examples": list(examples), "figures": figures,
        "parents": list(parents), "merge": merge, "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "source": source, "signature": None,
    }


def signed_bytes(obj: dict[str, Any]) -> bytes:
    """What a manifest's ``signature`` is computed over: the manifest without ``signature``, as
    canonical JSON (sorted keys, no spaces), so it covers the hashes of both files and every field."""
    return json.dumps({k: v for k, v in obj.items() if k != "signature"}, sort_keys=True, separators=(",", ":"),
                      allow_nan=False).encode("utf-8")


def check_manifest(obj: Any, where: str, name: str) -> Manifest:
    """``obj`` checked against the schema; ``where`` (the file) and ``name`` (the entry) go into errors.

    Raises:
        ManifestError: naming the adapter, the field and what was expected.
    """
    def bad(key: str, message: str) -> ManifestError:
        return ManifestError(f"{where}: {message}", adapter=name, field=key)

    if not isinstance(obj, dict):
        raise bad("", f"expected a JSON object, got {type(obj).__name__}")
    if obj.get("schema") != SCHEMA:  # first: another version's manifest differs in its keys too
        raise bad("schema", f"is {obj.get('schema')!r}, expected {SCHEMA!r} (written by another replaybank version? "
                  "register the adapter again)")
    for key in obj:
        if key not in _KEYS:
            raise bad(str(key), f"unknown key; known: {', '.join(sorted(_KEYS))}")
    for key in _KEYS:
        if key not in obj:
            raise bad(key, "missing")
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
        _finite_numbers(obj[key], bad, key)
    examples = obj["examples"]
    if not isinstance(examples, list) or not all(isinstance(e, str) and e.strip() for e in examples):
        raise bad("examples", "expected a list of non-empty prompts")
    parents = obj["parents"]
    if not isinstance(parents, list) or not all(is_name(p) for p in parents):
        raise bad("parents", "expected a list of adapter names")
    if len(set(parents)) != len(parents) or name in parents:
        raise bad("parents", f"expected distinct names other than the adapter's own, got {parents}")
    figures = None if obj["figures"] is None else _figures(obj["figures"], bad)
    merge = None if obj["merge"] is None else _merge(obj["merge"], bad, len(parents))
    if (merge is None) != (not parents):
        raise bad("merge", "a merge record and parents go together: "
                  + ("parents without a merge record" if merge is None else "a merge record without parents"))
    if obj["source"] is not None and not isinstance(obj["source"], str):
        raise bad("source", "expected text or null")
    created = obj["created"]
    if not isinstance(created, str) or _CREATED.fullmatch(created) is None:
        raise bad("created", f"expected a UTC time YYYY-MM-DDTHH:MM:SSZ, got {created!r}")
    signature = None if obj["signature"] is None else _hex(obj["signature"], bad, "signature")
    return Manifest(
        name=name, skill=skill, fingerprint=fingerprint, sha256=_hex(obj["sha256"], bad, "sha256"),
        config_sha256=_hex(obj["config_sha256"], bad, "config_sha256"), base_name=base_name,
        domain=domain, weights=files["weights"], config=files["config"], data=obj["data"], recipe=obj["recipe"],
        examples=tuple(examples), figures=figures, parents=tuple(parents), merge=merge,
        created=created, source=obj["source"], signature=signature, raw=obj,
    )


def _finite_numbers(value: Any, bad: Any, key: str) -> None:
    """Refuse a NaN or infinite number, or a value JSON has no type for, anywhere in ``value`` (a
    record kept as given), naming its dotted path: the manifest is then canonical JSON that can be
    written and signed."""
    if isinstance(value, float) and not math.isfinite(value):
        raise bad(key, f"is {value!r}: expected a finite number (a record holds JSON numbers only)")
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                raise bad(key, f"has the key {k!r}: expected text keys (a JSON object)")
            _finite_numbers(v, bad, f"{key}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _finite_numbers(v, bad, f"{key}[{i}]")
    elif value is not None and not isinstance(value, (str, int, float)):  # bool is an int
        raise bad(key, f"is a {type(value).__name__}: expected a JSON value (text, a number, a list, an object)")


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


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= _MAX_COUNT


def _retention(value: Any) -> bool:
    return _number(value) and 0 <= value <= MAX_RETENTION


def _figures(value: Any, bad: Any) -> dict[str, Any]:
    fig = _object(value, bad, "figures", _FIGURE_KEYS)
    if fig["retention"] is not None and not _retention(fig["retention"]):
        raise bad("figures.retention", f"expected a finite number in [0, {MAX_RETENTION:g}] or null, got {fig['retention']!r}")
    if fig["floor"] is not None and not (_number(fig["floor"]) and 0 <= fig["floor"] <= MAX_FLOOR):
        raise bad("figures.floor", f"expected a fraction in [0, {MAX_FLOOR:g}] or null, got {fig['floor']!r}")
    if fig["domain"] is not None and not _number(fig["domain"]):
        raise bad("figures.domain", f"expected a finite number or null, got {fig['domain']!r}")
    per_family = fig["per_family"]
    if not isinstance(per_family, dict) or not all(
            isinstance(k, str) and k and (v is None or _retention(v)) for k, v in per_family.items()):
        raise bad("figures.per_family", f"expected {{family: ratio in [0, {MAX_RETENTION:g}] or null}}")
    if fig["passed"] is not None and not isinstance(fig["passed"], bool):
        raise bad("figures.passed", f"expected true, false or null, got {fig['passed']!r}")
    if not isinstance(fig["forced"], bool):
        raise bad("figures.forced", f"expected true or false, got {fig['forced']!r}")
    if fig["n"] is not None and not _count(fig["n"]):
        raise bad("figures.n", f"expected a count (an integer in [0, 2**53]) or null, got {fig['n']!r}")
    retention, floor = fig["retention"], fig["floor"]
    if floor is None:
        if fig["passed"] is not None or fig["forced"]:
            raise bad("figures.passed", "without a floor nothing was gated: passed must be null and forced false, got "
                      f"passed {fig['passed']!r}, forced {fig['forced']!r}")
    else:
        passed = retention is not None and retention >= floor
        if fig["passed"] is not passed:
            raise bad("figures.passed", f"is {fig['passed']!r}, but retention {retention!r} against the floor {floor!r} "
                      f"gives {passed!r}")
        if fig["forced"] == passed:
            raise bad("figures.forced", "a failed gate is recorded only when forced, and a passed one is never forced; "
                      f"got passed {passed!r}, forced {fig['forced']!r}")
    return fig


def _merge(value: Any, bad: Any, n_parents: int) -> dict[str, Any]:
    rec = _object(value, bad, "merge", _MERGE_KEYS)
    kind = rec["combination_type"]
    if kind not in COMBINATION_TYPES:
        raise bad("merge.combination_type", f"{kind!r} is not one of {', '.join(COMBINATION_TYPES)}")
    weights = rec["weights"]
    if not isinstance(weights, list) or len(weights) != n_parents or not all(_number(w) for w in weights):
        raise bad("merge.weights", f"expected {n_parents} finite numbers (one per parent), got {weights!r}")
    density = rec["density"]
    if density is None and kind in DENSITY_TYPES:
        raise bad("merge.density", f"combination type {kind!r} needs a density, got null")
    if density is not None and not (_number(density) and 0 < density <= 1):
        raise bad("merge.density", f"expected a share in (0, 1] or null, got {density!r}")
    rank = rec["svd_rank"]
    if rank is not None and not (_count(rank) and 1 <= rank <= MAX_RANK):
        raise bad("merge.svd_rank", f"expected a rank in [1, {MAX_RANK}] or null, got {rank!r}")
    return rec
