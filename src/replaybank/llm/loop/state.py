"""The loop's resumable state: one small JSON file per run folder, replaced atomically, and its
schema, checked whole before a resume (or a report) uses it.

``state.json`` holds the config the run was started with, the last finished generation, the
hash of the adapter it saved, and every finished generation's measurements. It is written only
after a generation's adapter is saved, so "finished" always means: its attempts are in the store,
its adapter is on disk, and its evaluation is recorded. A killed loop resumes after the last
finished generation; a generation whose attempts are already in the store (the kill came during
consolidation or evaluation) is not acted again: the store write of a generation is one
transaction, so it is there entirely or not at all.

The file is one :class:`LoopState`: a frozen record whose fields are the file's keys in the
order they are written (:meth:`LoopState.to_json`), its rows :class:`.results.GenerationRow`.

On read (:func:`check_state`) every field the loop and its report read is checked for type, range
and finiteness, and the fields against each other: the rows of ``generations`` are generation 0,
1, ... ``finished`` in order, each one's ``adapter`` is ``base`` (generation 0) or the 16 hex
digits of a saved adapter's SHA-256, ``adapter`` is the last row's, the config reads back as a
:class:`LoopConfig`; then every key of every row is read for its type, and the typed state must
write back to the object read (a key the records do not hold would be lost on the next write). A
file that fails is a :class:`StateError` naming the file and the field.

Example:
    >>> import tempfile
    >>> folder = Path(tempfile.mkdtemp())
    >>> s = new_state(LoopConfig().to_dict())
    >>> s.finished, s.adapter, s.generations
    (0, 'base', ())
    >>> write_state(folder, s); read_state(folder) == s
    True
    >>> check_state(Path("run/state.json"), {**s.to_json(), "adapter": "../../etc/passwd"})
    Traceback (most recent call last):
    ...
    replaybank.llm.loop.state.StateError: run/state.json: field 'adapter' is '../../etc/passwd', expected 'base' with no generation finished; delete the run folder to start over
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from replaybank.errors import ReplayBankError
from replaybank.files import read_regular
from replaybank.jsonl import strict_loads
from replaybank.llm.config.loop import WRITTEN_WHEN_SET, LoopConfig
from replaybank.llm.config.values import ConfigError
from replaybank.llm.loop.results import GenerationRow
from replaybank.llm.records import JsonObject, Record, ResultsError, omitted

__all__ = ["ADAPTER_HASH", "MAX_GENERATIONS", "STATE_FILE", "STATE_SCHEMA", "LoopState", "StateError", "check_inputs",
           "check_same_config", "check_same_run", "check_state", "new_state", "read_state", "write_state"]

STATE_FILE = "state.json"
STATE_SCHEMA = 1
MAX_GENERATIONS = 100_000
#: How a saved adapter is named in ``state.json``: the first 16 hex digits of its SHA-256.
ADAPTER_HASH = re.compile(r"[0-9a-f]{16}")
_SHA256 = re.compile(r"[0-9a-f]{64}")


class StateError(ReplayBankError):
    """``state.json`` is unreadable, from another schema, or from a run with another config."""


@dataclass(frozen=True, kw_only=True)
class LoopState(Record):
    """``state.json``: the fields are its keys, written in this order (the optional ones only when set)."""

    schema: int = STATE_SCHEMA
    config: JsonObject
    """The config the run was started (or last resumed) with, as :meth:`LoopConfig.to_dict` wrote it;
    a run from before a key existed keeps its own keys (:meth:`LoopConfig.comparable` reads them)."""
    finished: int = 0
    """The last finished generation (0: only the base model was measured, or nothing yet)."""
    adapter: str = "base"
    """The last finished generation's adapter: ``base``, or 16 hex digits of its SHA-256."""
    generations: tuple[GenerationRow, ...] = ()
    """Generations 0..``finished``, one row each."""
    rehearsal: JsonObject | None = omitted()
    """The rehearsal rows' manifest (:func:`.consolidate.rehearsal_rows`), its ``sha256`` checked on resume."""
    base_model: str | None = omitted()
    """The base model's fingerprint (:func:`replaybank.llm.eval.decode.model_fingerprint`), checked on resume."""
    suite_base: JsonObject | None = omitted()
    """The suite's base-model scores: ``families`` and ``n`` per family."""
    controller: JsonObject | None = omitted()
    """The replay controller's state after the last finished generation (recipes with one)."""
    seconds_this_session: float | None = omitted()
    """Wall time of the last session, setup included."""

    @functools.cached_property
    def loop_config(self) -> LoopConfig:
        """:attr:`config` read as a :class:`LoopConfig` (checked by :func:`check_state` on read)."""
        return LoopConfig.from_dict(dict(self.config), source=f"{STATE_FILE}: field 'config'")

    def add(self, row: GenerationRow) -> LoopState:
        """This state with ``row`` finished: appended, and ``finished`` and ``adapter`` its own."""
        return dataclasses.replace(self, finished=row.generation, adapter=row.adapter,
                                   generations=(*self.generations, row))


def new_state(config: JsonObject) -> LoopState:
    """The state of a run that has finished no generation."""
    return LoopState(config=config)


def read_state(folder: Path) -> LoopState | None:
    """The saved state, checked whole (:func:`check_state`), or None when the folder
    has none.

    Raises:
        StateError: a link, FIFO or folder where the file should be; not JSON (or nested too deep);
            another schema version; a field missing, of the wrong type or range, or inconsistent
            with the others (generation rows, adapter hashes, the config).
    """
    path = folder / STATE_FILE
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(mode):
        kind = "a symbolic link" if stat.S_ISLNK(mode) else "not a regular file"
        raise StateError(f"{path}: is {kind}; a run folder holds its own state.json (remove it to start over)")
    raw = read_regular(path, error=StateError, follow_links=False)  # swapped since the lstat: still refused
    try:
        state = strict_loads(raw)
    except RecursionError:
        raise StateError(f"{path}: not a loop state file (nested too deep); delete the folder to start over") from None
    except ValueError as exc:  # JSONDecodeError, not UTF-8, NaN/Infinity, an integer of thousands of digits
        raise StateError(f"{path}: not a loop state file ({exc}); delete the folder to start over") from None
    return check_state(path, state)


def check_state(path: Path, state: Any) -> LoopState:
    """``state`` (the object read from ``path``) as a :class:`LoopState` when it is a loop state (the
    checks: the module doc); its :meth:`~LoopState.to_json` is ``state`` again.

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
    unknown = [key for key in state if key not in _KEYS]
    if unknown:
        raise StateError(f"{path}: field {unknown[0]!r} is not a loop state field (expected {', '.join(_KEYS)}){_ALTERED}")
    try:  # every key of a row of the right type, not only those checked above
        rows = tuple(GenerationRow.from_json(row, f"{path}: generations[{k}]") for k, row in enumerate(rows))
    except ResultsError as exc:
        raise StateError(f"{exc}{_ALTERED}") from None
    typed = LoopState(
        schema=STATE_SCHEMA, config=state["config"], finished=finished, adapter=state["adapter"], generations=rows,
        rehearsal=state.get("rehearsal"), base_model=state.get("base_model"), suite_base=state.get("suite_base"),
        controller=state.get("controller"), seconds_this_session=state.get("seconds_this_session"),
    )
    lost = _first_difference(state, typed.to_json())
    if lost is not None:  # written back, the file would lose (or change) it
        raise StateError(f"{path}: field {lost!r} is not one a loop state writes back{_ALTERED}")
    return typed


_ALTERED = "; delete the run folder to start over"
_KEYS = tuple(f.name for f in dataclasses.fields(LoopState))


def _first_difference(read: Any, written: Any, where: str = "") -> str | None:
    """The first key (dotted, ``[k]`` for list items) where ``written`` differs from ``read``; None when equal."""
    if isinstance(read, dict) and isinstance(written, dict):
        for key in [*read, *(k for k in written if k not in read)]:
            name = f"{where}.{key}" if where else str(key)
            if key not in read or key not in written:
                return name
            found = _first_difference(read[key], written[key], name)
            if found is not None:
                return found
        return None
    if isinstance(read, list) and isinstance(written, list) and len(read) == len(written):
        for k, (a, b) in enumerate(zip(read, written, strict=True)):
            found = _first_difference(a, b, f"{where}[{k}]")
            if found is not None:
                return found
        return None
    return None if read == written and type(read) is type(written) else where


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
    for key in ("rehearsal", "suite_base", "controller"):
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


def check_same_config(
    folder: Path, state: LoopState, config: dict[str, Any], defaults: dict[str, Any] | None = None
) -> None:
    """Refuse to resume a run with another config (its store and adapters would be mixed up).

    ``generations`` may grow (a finished run can be extended) and ``library`` change (where the
    generations are registered); nothing else may change. A key the
    run's state does not have (added to the config after the run was written) must be at its
    value in ``defaults``: the behaviour the run had before the key existed
    (:meth:`replaybank.llm.config.loop.LoopConfig.before_keys_existed`), or, for the keys of
    :data:`~replaybank.llm.config.loop.WRITTEN_WHEN_SET`, the default a run leaves out of its state.

    ``generations`` may not fall below the generations the run finished: a run is never cut
    back silently to fewer generations than its state, store and adapters hold.

    Raises:
        StateError: naming the first key that differs, or both numbers of generations.
    """
    old, new = state.config, config
    wanted, finished = new.get("loop", {}).get("generations"), state.finished
    if isinstance(wanted, int) and wanted < finished:
        raise StateError(
            f"{folder}: holds a loop run that finished {finished} generations, but [loop] generations = "
            f"{wanted}; set generations to at least {finished} to resume it ({finished} reports the "
            "finished run, more extends it), or give another --out to start a new run"
        )
    for section in sorted(set(old) | set(new)):
        a, b = _section(old, section), _section(new, section)
        for key in sorted(set(a) | set(b)):
            if section == "loop" and key in ("generations", "library"):  # extend a run; register it elsewhere
                continue
            if key not in a:
                default = (defaults or {}).get(section, {}).get(key, _MISSING)
                if b.get(key) == default:
                    continue
                if section == "loop" and key in WRITTEN_WHEN_SET:  # left out of state.json at its default
                    raise StateError(
                        f"{folder}: holds a loop run with [{section}] {key} = {default!r}, not {b.get(key)!r}; "
                        "resume it with its own config, or give another --out"
                    )
                raise StateError(
                    f"{folder}: holds a loop run written before [{section}] {key} existed (it ran as "
                    f"{key} = {default!r}), not {b.get(key)!r}; resume it with its own config, or give another --out"
                )
            if a.get(key) != b.get(key):
                raise StateError(
                    f"{folder}: holds a loop run with [{section}] {key} = {a.get(key)!r}, not {b.get(key)!r}; "
                    "resume it with its own config, or give another --out"
                )


_MISSING = object()


def _section(config: JsonObject, name: str) -> dict[str, object]:
    """A section of a config as saved (``{}`` when the config has none)."""
    section = config.get(name, {})
    return section if isinstance(section, dict) else {}


def check_same_run(folder: Path, state: LoopState, cfg: LoopConfig) -> None:
    """:func:`check_same_config` of a saved run against ``cfg``, the rehearsal recipe compared by
    its values whatever it is called (:meth:`LoopConfig.comparable`), so a run saved before
    ``[loop] recipe`` existed (with ``rehearsal``, ``rehearsal_ratio``, ``kl_weight``,
    ``rehearsal_ce``) resumes under the recipe those keys give.

    Raises:
        StateError: naming the first key that differs (``[recipe] KEY`` for the recipe's).
    """
    saved = dataclasses.replace(state, config=LoopConfig.comparable(dict(state.config)))
    check_same_config(folder, saved, LoopConfig.comparable(cfg.to_dict()), LoopConfig.before_keys_existed())


def check_inputs(
    folder: Path, state: LoopState, *, base_model: str | None = None, rehearsal: JsonObject | None = None,
    model_name: str = "",
) -> None:
    """Refuse to resume when what the run trains on changed under the same names: the base model's
    weights (``base_model``: :func:`replaybank.llm.eval.decode.model_fingerprint`; the config
    names it ``model_name``) or the rehearsal rows (``rehearsal``: the manifest of
    :func:`.consolidate.rehearsal_rows`, its ``sha256``). A state written before these were
    recorded resumes and records them.

    Raises:
        StateError: naming what changed, its recorded and its current hash.
    """
    old = state.base_model
    if base_model is not None and old is not None and old != base_model:
        raise StateError(
            f"{folder}: [training] base_model = {model_name!r} is not the model this run started with (weights' "
            f"fingerprint {base_model[:16]}, the run recorded {old[:16]}); resume with the model it started with, "
            "or give another --out"
        )
    recorded = None if state.rehearsal is None else state.rehearsal.get("sha256")
    if rehearsal is not None and isinstance(recorded, str) and rehearsal.get("sha256") != recorded:
        raise StateError(
            f"{folder}: the rehearsal rows ({rehearsal.get('source')}) changed since this run started (sha256 "
            f"{str(rehearsal.get('sha256'))[:16]}, the run recorded {recorded[:16]}); restore them, or give another --out"
        )


def write_state(folder: Path, state: LoopState) -> None:
    """Replace ``state.json`` with ``state`` (:meth:`LoopState.to_json`, indented by one) atomically
    (write a temporary file, fsync, rename); the temporary file is created anew (a link left at its
    name is removed, never written through)."""
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / (STATE_FILE + ".tmp")
    tmp.unlink(missing_ok=True)  # a leftover (or a link) at the name: removed, not followed
    with open(tmp, "x", encoding="utf-8") as f:  # O_EXCL: never through a link made meanwhile
        json.dump(state.to_json(), f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, folder / STATE_FILE)


def loop_controller(out: Path, state: LoopState, recipe: Any, seed: int) -> Any:
    """The run's replay controller (None when its recipe has none), restored from ``state`` after
    a finished generation, so a resumed run steers as one that never stopped.

    Raises:
        StateError: a saved controller state of another recipe or sequence (naming the key), or a
            state with a controller for a recipe without one.
    """
    from replaybank.llm.config.controller import recipe_controller

    controller = recipe_controller(recipe, seed) if recipe is not None else None
    saved = state.controller
    if saved is None:
        return controller
    if controller is None:
        raise StateError(f"{out / STATE_FILE}: field 'controller' holds a replay controller's state, but the recipe has "
                         "none (a run of another recipe)")
    try:
        controller.load_state_dict(saved)
    except ReplayBankError as exc:
        raise StateError(f"{out / STATE_FILE}: field 'controller': {exc}") from None
    return controller
