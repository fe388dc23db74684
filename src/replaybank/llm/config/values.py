"""Reading one config section: every key checked against its declared type, bounds and choices.

One reader for every job's config (``replaybank run``'s :class:`replaybank.llm.config.Config`, the
loop's :class:`replaybank.llm.config.loop.LoopConfig`): a section is a dataclass whose fields carry
their help and bounds in ``metadata`` (``min``, ``max``, ``gt``, ``lt``, ``nonempty``; see
:mod:`.schema`), and a wrong key or value is a :class:`ConfigError` naming the file, ``[section] key``,
the value and what was expected, with a "did you mean".

Example:
    >>> from replaybank.llm.config.schema import Training
    >>> section, keys = read_section("run.toml", "training", Training, {"lora_rank": 4})
    >>> section.lora_rank, sorted(keys)
    (4, ['lora_rank'])
    >>> read_section("run.toml", "training", Training, {"lora_rnak": 4})
    Traceback (most recent call last):
    ...
    replaybank.llm.config.ConfigError: run.toml: unknown key [training] lora_rnak; did you mean 'lora_rank'?
"""

from __future__ import annotations

import difflib
import json
import math
import re
from dataclasses import fields
from typing import Any, Literal, TypeVar, get_args, get_type_hints

from replaybank.errors import ReplayBankError

S = TypeVar("S")


class ConfigError(ReplayBankError):
    """An invalid config: the message names the file, the key, the value and what was expected."""


ConfigError.__module__ = "replaybank.llm.config"  # its public path, as tracebacks show it


def read_section(
    source: str, name: str, klass: type[S], values: Any, defaults: dict[str, Any] | None = None
) -> tuple[S, set[str]]:
    """Section ``[name]`` of ``source`` as a ``klass``, and the keys it set.

    ``defaults`` replace the dataclass defaults for keys the file leaves out (a job's own
    defaults for a shared section, declared in :mod:`.schema`).

    Raises:
        ConfigError: ``values`` is not a table, a key is unknown, or a value has the wrong type or
            is out of bounds.
    """
    if not isinstance(values, dict):
        raise ConfigError(f"{source}: [{name}] must be a table, got {values!r}")
    hints = get_type_hints(klass)
    known = {f.name: f for f in fields(klass)}  # type: ignore[arg-type]
    kwargs: dict[str, Any] = dict(defaults or {})
    for key, value in values.items():
        if key not in known:
            raise ConfigError(f"{source}: unknown key [{name}] {key}{did_you_mean(key, known)}")
        kwargs[key] = check_value(source, name, key, value, hints[key], known[key].metadata)
    return klass(**kwargs), set(values)


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (int, str, list)):
        return json.dumps(value)
    if isinstance(value, dict):  # an inline table: {code = 0.8, "my family" = 0.5}
        keys = [k if _BARE_KEY.fullmatch(k) else json.dumps(k) for k in value]
        return "{" + ", ".join(f"{k} = {toml_value(v)}" for k, v in zip(keys, value.values(), strict=True)) + "}"
    raise TypeError(f"cannot write {value!r} as TOML")


def did_you_mean(word: str, options: Any) -> str:
    close = difflib.get_close_matches(word, list(options), n=1, cutoff=0.6)
    if close:
        return f"; did you mean {close[0]!r}?"
    return f"; expected one of: {', '.join(sorted(options))}"


def check_value(source: str, section: str, key: str, value: Any, hint: Any, meta: Any) -> Any:
    where = f"{source}: [{section}] {key} = {value!r}"
    choices = get_args(hint) if getattr(hint, "__origin__", None) is Literal else ()
    if choices:
        if value not in choices:
            raise ConfigError(f"{where}: expected one of {', '.join(map(repr, choices))}{did_you_mean(str(value), choices)}")
        return value
    if hint is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: expected true or false")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where}: expected an integer")
        if "max" not in meta and not -(2**63) <= value < 2**63:  # keys with a max say their range below
            raise ConfigError(f"{where}: expected an integer that fits in 64 bits")
    elif hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{where}: expected a number")
        try:
            value = float(value)
        except OverflowError:  # an integer beyond float range
            raise ConfigError(f"{where}: expected a finite number") from None
        if not math.isfinite(value):
            raise ConfigError(f"{where}: expected a finite number, got {value}")
    elif hint is str:
        if not isinstance(value, str):
            raise ConfigError(f"{where}: expected a string")
        if meta.get("device"):
            try:
                parse_device(value)
            except ValueError as exc:
                raise ConfigError(f"{where}: {exc}") from None
        if meta.get("nonempty") and not value.strip():
            raise ConfigError(f"{where}: expected a non-empty string")
    elif hint == list[int]:
        if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            raise ConfigError(f"{where}: expected a list of integers")
        return list(value)
    elif hint == list[str]:
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{where}: expected a list of strings")
        if meta.get("nonempty") and any(not v.strip() for v in value):
            raise ConfigError(f"{where}: expected non-empty strings, got an empty entry")
        return list(value)
    if isinstance(value, (int, float)):
        lo = meta.get("min", meta.get("gt"))
        if "min" in meta and value < meta["min"]:
            raise ConfigError(f"{where}: expected a value >= {meta['min']}" + upper_bound(meta))
        if "gt" in meta and value <= meta["gt"]:
            raise ConfigError(f"{where}: expected a value > {meta['gt']}" + upper_bound(meta))
        if "lt" in meta and value >= meta["lt"]:
            raise ConfigError(f"{where}: expected a value in [{lo}, {meta['lt']})")
        if "max" in meta and value > meta["max"]:
            bracket = "[" if "min" in meta else "("
            raise ConfigError(f"{where}: expected a value in {bracket}{lo}, {meta['max']}]")
    return value


def parse_device(text: str) -> tuple[str, int | None]:
    """``auto``, ``cpu``, ``cuda`` or ``cuda:N`` -> ``(kind, index)``; torch is not imported.

    Raises:
        ValueError: any other spelling (the caller names the key and the file).

    Example:
        >>> parse_device("cuda:3"), parse_device("cpu")
        (('cuda', 3), ('cpu', None))
    """
    if text in ("auto", "cpu", "cuda"):
        return text, None
    kind, _, index = text.partition(":")
    if kind == "cuda" and index.isdigit() and str(int(index)) == index:
        return "cuda", int(index)
    raise ValueError(f"expected auto, cpu, cuda or cuda:N (N = 0, 1, ...), got {text!r}")


def upper_bound(meta: Any) -> str:
    return f" and <= {meta['max']}" if "max" in meta else ""


_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
_KEY_PART = r'(?:[A-Za-z0-9_-]+|"(?:[^"\\]|\\.)*"|\'[^\']*\')'
_DOTTED = rf"{_KEY_PART}(?:\s*\.\s*{_KEY_PART})*"
_HEADER = re.compile(rf"\s*\[\[?\s*({_DOTTED})\s*\]\]?\s*(?:#.*)?$")
_ASSIGN = re.compile(rf"\s*({_DOTTED})\s*=")


def _key_path(text: str) -> list[str]:
    parts = re.findall(_KEY_PART, text)
    return [json.loads(p) if p.startswith('"') else p.strip("'") for p in parts]


def key_line(text: str, path: list[str]) -> int | None:
    """The 1-based line of the TOML ``text`` that sets the key ``path`` (``["evaluation",
    "retention_floor", "code"]``), or else its nearest enclosing key; None when none is found.

    A line scan, not a parser (``tomllib`` keeps no positions): it follows ``[table]`` headers and
    ``a.b = ...`` keys (bare or quoted); a key set inside an inline table is found at the line of
    the table's key. Good enough to point at a line in a config file's error message.

    Example:
        >>> text = "[evaluation]\\nseeds = 3\\nretention_floor = {code = 2.0}\\n\\n[evaluation.x]\\ny = 1\\n"
        >>> key_line(text, ["evaluation", "retention_floor", "code"]), key_line(text, ["evaluation", "x", "y"])
        (3, 6)
        >>> key_line(text, ["training", "seed"]) is None
        True
    """
    table: list[str] = []
    best: tuple[int, int] | None = None  # (depth matched, line)
    for number, line in enumerate(text.splitlines(), start=1):
        header = _HEADER.match(line)
        if header:
            table = _key_path(header.group(1))
            full = table
        else:
            assign = _ASSIGN.match(line)
            if not assign:
                continue
            full = table + _key_path(assign.group(1))
        depth = len(full)
        if depth >= 2 and full == path[:depth] and (best is None or depth > best[0]):
            best = (depth, number)
    return None if best is None else best[1]
