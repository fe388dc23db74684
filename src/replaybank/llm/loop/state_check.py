"""The schema of the loop's ``state.json``, checked whole before a resume (or a report) uses it.

Every field the loop and its report read is checked for type, range and finiteness, and the
fields against each other: the rows of ``generations`` are generation 0, 1, ... ``finished`` in
order, each one's ``adapter`` is ``base`` (generation 0) or the 16 hex digits of a saved adapter's
SHA-256, ``adapter`` is the last row's, the config reads back as a :class:`LoopConfig`. A file
that fails is a :class:`~replaybank.llm.loop.state.StateError` naming the file and the field.

Example:
    >>> from replaybank.llm.config.loop import LoopConfig
    >>> state = {"schema": 1, "config": LoopConfig().to_dict(), "finished": 0, "adapter": "base", "generations": []}
    >>> check_state(Path("run/state.json"), state)["finished"]
    0
    >>> check_state(Path("run/state.json"), {**state, "adapter": "../../etc/passwd"})
    Traceback (most recent call last):
    ...
    replaybank.llm.loop.state.StateError: run/state.json: field 'adapter' is '../../etc/passwd', expected 'base' with no generation finished; delete the run folder to start over
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from replaybank.errors import ReplayBankError
from replaybank.llm.config.loop import LoopConfig
from replaybank.llm.config.values import ConfigError

__all__ = ["ADAPTER_HASH", "MAX_GENERATIONS", "StateError", "check_state"]

STATE_SCHEMA = 1
MAX_GENERATIONS = 100_000
#: How a saved adapter is named in ``state.json``: the first 16 hex digits of its SHA-256.
ADAPTER_HASH = re.compile(r"[0-9a-f]{16}")
_SHA256 = re.compile(r"[0-9a-f]{64}")


class StateError(ReplayBankError):
    """``state.json`` is unreadable, from another schema, or from a run with another config."""


StateError.__module__ = "replaybank.llm.loop.state"  # its public path


def check_state(path: Path, state: Any) -> dict[str, Any]:
    """``state`` itself when it is a loop state (see the module doc); nothing is changed.

    Raises:
        StateError: naming ``path`` and the first field that is wrong.
    """
    if not isinstance(state, dict) or state.get("schema") != STATE_SCHEMA:
        found = state.get("schema") if isinstance(state, dict) else type(state).__name__
        raise StateError(f"{path}: loop state schema {found!r}, this replaybank reads {STATE_SCHEMA}")
    for key, kind in (("config", dict), ("finished", int), ("adapter", str), ("generations", list)):
        if not isinstance(state.get(key), kind) or isinstance(state.get(key), bool):
            raise StateError(f"{path}: field {key!r} is {type(state.get(key)).__name__}, expected {kind.__name__}{_ALTERED}")
    finished, rows = state["finished"], state["generations"]
    if not 0 <= finished <= MAX_GENERATIONS:
        raise StateError(f"{path}: field 'finished' is {_shown(finished)}, expected a generation number >= 0{_ALTERED}")
    try:
        LoopConfig.from_dict(state["config"], source=f"{path}: field 'config'")
    except ConfigError as exc:
        raise StateError(f"{exc}{_ALTERED}") from None
    except RecursionError:
        raise StateError(f"{path}: field 'config' is nested too deep to be a loop config{_ALTERED}") from None
    loop = state["config"].get("loop")
    for key in ("lineage", "window", "seed"):  # every run wrote them; the report groups runs by them
        if not isinstance(loop, dict) or key not in loop:
            raise StateError(f"{path}: field 'config.loop.{key}' is missing{_ALTERED}")
    if len(rows) != finished + 1 and not (finished == 0 and not rows):
        raise StateError(
            f"{path}: field 'generations' has {len(rows)} rows but 'finished' is {finished}; expected generations "
            f"0..{finished}, one row each{_ALTERED}"
        )
    for k, row in enumerate(rows):
        _check_row(path, k, row)
    last = rows[-1]["adapter"] if rows else "base"
    if state["adapter"] != last:
        said = "with no generation finished" if last == "base" else f"(generation {finished}'s, as its row records)"
        raise StateError(f"{path}: field 'adapter' is {state['adapter']!r}, expected {last!r} {said}{_ALTERED}")
    _optional(path, state)
    return state


_ALTERED = "; delete the run folder to start over"


def _check_row(path: Path, k: int, row: Any) -> None:
    where = f"generations[{k}]"
    if not isinstance(row, dict):
        raise StateError(f"{path}: field '{where}' is {type(row).__name__}, expected an object{_ALTERED}")
    _field(path, row, where, "generation", lambda v: _int(v) and v == k, f"{k} (rows are in generation order)")
    if k == 0:
        _field(path, row, where, "adapter", lambda v: v == "base", "'base'")
    else:
        _field(path, row, where, "adapter", lambda v: isinstance(v, str) and ADAPTER_HASH.fullmatch(v) is not None,
               "16 hex digits (a saved adapter's SHA-256)")
    for part in ("no_context", "context", "validation"):
        _field(path, row, where, part, lambda v: isinstance(v, dict), "an object")
        for key in ("success", "credit"):
            _field(path, row[part], f"{where}.{part}", key, _share, "a number in [0, 1]")
        levels = row[part].get("levels", {})
        if not isinstance(levels, dict):
            raise StateError(f"{path}: field '{where}.{part}.levels' is {type(levels).__name__}, expected an object{_ALTERED}")
        for lv, got in levels.items():
            if not re.fullmatch(r"[0-9]{1,3}", lv) or not isinstance(got, dict):
                raise StateError(f"{path}: field '{where}.{part}.levels' has entry {lv!r}: expected a level number "
                                 f"with an object{_ALTERED}")
            for key in ("success", "credit"):
                _field(path, got, f"{where}.{part}.levels.{lv}", key, _share, "a number in [0, 1]")
    _field(path, row, where, "retention", lambda v: v is None or _number(v), "a finite number or null")
    _field(path, row, where, "suite", lambda v: isinstance(v, dict), "an object")
    _field(path, row["suite"], f"{where}.suite", "leakage", lambda v: v is None or _share(v), "a number in [0, 1] or null")
    if k == 0:
        return
    _field(path, row, where, "lineage", lambda v: isinstance(v, list) and 0 < len(v) <= k
           and all(_int(g) and 1 <= g <= k for g in v), f"a list of generations in 1..{k}")
    _field(path, row, where, "train_rows", lambda v: _int(v) and v >= 0, "an integer >= 0")
    _field(path, row, where, "seconds", lambda v: _number(v) and v >= 0, "a number >= 0")
    _field(path, row, where, "act", lambda v: isinstance(v, dict), "an object")
    _field(path, row["act"], f"{where}.act", "n", lambda v: _int(v) and v >= 0, "an integer >= 0")
    _field(path, row["act"], f"{where}.act", "success", _share, "a number in [0, 1]")
    _field(path, row, where, "train", lambda v: isinstance(v, dict), "an object")
    _field(path, row["train"], f"{where}.train", "steps", lambda v: _int(v) and v >= 0, "an integer >= 0")


def _optional(path: Path, state: dict[str, Any]) -> None:
    """The fields a state may lack (a run from before they existed, or not yet written)."""
    if "seconds_this_session" in state:
        _field(path, state, "", "seconds_this_session", lambda v: _number(v) and v >= 0, "a number >= 0")
    for key in ("rehearsal", "suite_base"):
        if key in state:
            _field(path, state, "", key, lambda v: isinstance(v, dict), "an object")
    if "rehearsal" in state and "sha256" in state["rehearsal"]:
        _field(path, state["rehearsal"], "rehearsal", "sha256", _sha256, "64 hex digits")
    if "base_model" in state:
        _field(path, state, "", "base_model", _sha256, "64 hex digits (the base model's fingerprint)")


def _field(path: Path, obj: dict[str, Any], where: str, key: str, ok: Any, expected: str) -> None:
    name = f"{where}.{key}" if where else key
    if key not in obj:
        raise StateError(f"{path}: field '{name}' is missing{_ALTERED}")
    if not ok(obj[key]):
        raise StateError(f"{path}: field '{name}' is {_shown(obj[key])}, expected {expected}{_ALTERED}")


def _shown(v: Any) -> str:
    """A short spelling of a value that was refused (containers by their type: they can be deep)."""
    if isinstance(v, int) and not isinstance(v, bool) and abs(v) >= 2**63:
        return "an integer beyond 64 bits"
    if isinstance(v, (str, int, float, bool)) or v is None:
        text = repr(v)
        return text if len(text) <= 80 else text[:77] + "..."
    return f"a {type(v).__name__}"


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and abs(v) < 2**63


def _number(v: Any) -> bool:
    if isinstance(v, int) and not isinstance(v, bool):
        return abs(v) < 2**63
    return isinstance(v, float) and math.isfinite(v)


def _share(v: Any) -> bool:
    return _number(v) and 0 <= v <= 1


def _sha256(v: Any) -> bool:
    return isinstance(v, str) and _SHA256.fullmatch(v) is not None
