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
from pathlib import Path
from typing import Any, Literal, TypeVar, get_args, get_type_hints

import tomllib

from replaybank.errors import ReplayBankError
from replaybank.files import read_regular

S = TypeVar("S")


class ConfigError(ReplayBankError):
    """An invalid config: the message names the file, the key, the value and what was expected."""


ConfigError.__module__ = "replaybank.llm.config"  # its public path, as tracebacks show it


def read_toml(path: str | Path) -> tuple[dict[str, Any], str]:
    """The TOML file ``path`` as ``(data, text)``; a UTF-8 byte-order mark is dropped (Windows
    editors write one; TOML itself does not allow it).

    Raises:
        ConfigError: a missing or unreadable file, not a regular file (a FIFO, device or folder), not UTF-8, invalid TOML (with its line and
            column), or arrays and tables nested too deep to read.
    """
    p = Path(path)
    raw = read_regular(p, error=ConfigError, what="config file")  # a FIFO would block forever
    try:
        text = raw.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise ConfigError(f"{p}:{line}: not valid UTF-8 (byte 0x{raw[exc.start]:02x}); re-encode the file as UTF-8") from None
    try:
        return tomllib.loads(text), text
    except tomllib.TOMLDecodeError as exc:
        # tomllib (before 3.14) gives the place only in its message: "(at line 3, column 7)" or "(at end of document)"
        found = re.search(r"\(at line (\d+), column \d+\)$", str(exc))
        line = int(found.group(1)) if found else text.count("\n") + (not text.endswith("\n"))
        raise ConfigError(f"{p}:{max(line, 1)}: invalid TOML ({exc})") from None
    except RecursionError:  # tomllib recurses once per nesting level
        raise ConfigError(f"{p}: invalid config: arrays or tables nested too deep to read") from None


def read_section(
    source: str, name: str, klass: type[S], values: Any, defaults: dict[str, Any] | None = None,
    text: str | None = None,
) -> tuple[S, set[str]]:
    """Section ``[name]`` of ``source`` as a ``klass``, and the keys it set.

    ``defaults`` replace the dataclass defaults for keys the file leaves out (a job's own
    defaults for a shared section, declared in :mod:`.schema`). With ``text`` (the TOML file's
    text) an error names the line of the key too: ``run.toml:7: [recipes.x] ratio = 1.0: ...``.

    Raises:
        ConfigError: ``values`` is not a table, a key is unknown, or a value has the wrong type or
            is out of bounds.
    """
    if not isinstance(values, dict):
        raise ConfigError(f"{at(source, text, name)}: [{name}] must be a table, got {shown(values)}")
    hints = get_type_hints(klass)
    known = {f.name: f for f in fields(klass)}  # type: ignore[arg-type]
    kwargs: dict[str, Any] = dict(defaults or {})
    for key, value in values.items():
        where = at(source, text, name, key)
        if key not in known:
            raise ConfigError(f"{where}: unknown key [{name}] {key}{did_you_mean(key, known)}")
        kwargs[key] = check_value(where, name, key, value, hints[key], known[key].metadata)
    return klass(**kwargs), set(values)


def at(source: str, text: str | None, table: str, key: str | None = None) -> str:
    r"""``source:LINE`` where ``key`` of ``[table]`` is written in ``text`` (else the table's header
    line, or the first of its sub-tables' headers), or ``source`` alone when none is found or there
    is no text.

    Example:
        >>> at("run.toml", "[loop]\nseed = 1\n\n[recipes.mine]\nratio = 2\n", "recipes.mine", "ratio")
        'run.toml:5'
        >>> at("run.toml", None, "loop", "seed")
        'run.toml'
    """
    line = key_line(text, table, key) if text else None
    return f"{source}:{line}" if line is not None else source


def key_line(text: str, table: str, key: str | None = None) -> int | None:
    r"""The 1-based line of ``key = ...`` inside ``[table]`` of the TOML ``text``; the line of the
    table's header when the key is not written there (or ``key`` is None); the line of
    ``name = {...}`` when the table is written inline (``[recipes]`` then ``mine = {ratio = 2}``);
    the first sub-table's header when only those are written (``[arms.x]`` for ``arms``); None
    when the table is not in the text. A scan of the text, not a parser: enough to point at a
    line, never used to read a value.

    Example:
        >>> text = '[recipes."self-distill"]\n# a comment\nkl_to_base = 0\n[recipes]\nx = { ratio = 2 }\n'
        >>> key_line(text, "recipes.self-distill", "kl_to_base"), key_line(text, "recipes.x", "ratio")
        (3, 5)
        >>> key_line(text, "recipes.self-distill", "mix_by"), key_line(text, "loop", "seed") is None
        (1, True)
    """
    want = _dotted(table)
    header: int | None = None
    parent = want[:-1]
    inline: int | None = None
    child: int | None = None
    current: tuple[str, ...] = ()
    for n, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if line.startswith("[") and not line.startswith("[["):
            current = _dotted(line[1:line.find("]")] if "]" in line else line[1:])
            if current == want and header is None:
                header = n
            elif current[: len(want)] == want and child is None:  # [arms.x] for an unknown [arms]
                child = n
            continue
        name, eq, _ = line.partition("=")
        if not eq or line.startswith("#"):
            continue
        path = current + _dotted(name)
        if key is not None and path == (*want, key):
            return n
        if parent and path == want and inline is None:
            inline = n
    return header if header is not None else inline if inline is not None else child


def _dotted(name: str) -> tuple[str, ...]:
    """``recipes."a.b" . c`` -> ``("recipes", "a.b", "c")`` (TOML's dotted keys, quotes removed)."""
    parts: list[str] = []
    buf, quote = "", ""
    for ch in name.strip():
        if quote:
            if ch == quote:
                quote = ""
            else:
                buf += ch
        elif ch in "\"'":
            quote = ch
        elif ch == ".":
            parts.append(buf.strip())
            buf = ""
        else:
            buf += ch
    parts.append(buf.strip())
    return tuple(parts)


_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def table_name(section: str, name: str) -> str:
    """``section.name`` as TOML writes it: the name quoted when it is not a bare key, so
    :func:`key_line` finds ``[recipes."my.recipe"]``.

    Example:
        >>> table_name("recipes", "mine"), table_name("recipes", "my.recipe")
        ('recipes.mine', 'recipes."my.recipe"')
    """
    return f"{section}.{name}" if _BARE_KEY.fullmatch(name) else f"{section}.{json.dumps(name)}"


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
    where = f"{source}: [{section}] {key} = {shown(value)}"
    choices = get_args(hint) if getattr(hint, "__origin__", None) is Literal else ()
    if choices:
        if value not in choices:
            raise ConfigError(f"{where}: expected one of {', '.join(map(repr, choices))}{did_you_mean(shown(value), choices)}")
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
    elif hint == list[float]:
        if not isinstance(value, list) or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
            raise ConfigError(f"{where}: expected a list of numbers")
        return [float(v) for v in value]
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


def shown(value: Any) -> str:
    """``repr(value)`` for an error message, or its type when it has none (an integer of thousands
    of digits, a list nested too deep to print)."""
    try:
        return repr(value)
    except (ValueError, RecursionError):
        return f"<a {type(value).__name__} too large to show>"


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
    if "max" in meta:
        return f" and <= {meta['max']}"
    return f" and < {meta['lt']}" if "lt" in meta else ""
