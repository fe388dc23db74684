"""The loop's resumable state: one small JSON file per run folder, replaced atomically.

``state.json`` holds the config the run was started with, the last finished generation, the
hash of the adapter it saved, and every finished generation's measurements. It is written only
after a generation's adapter is saved, so "finished" always means: its attempts are in the store,
its adapter is on disk, and its evaluation is recorded. A killed loop resumes after the last
finished generation; a generation whose attempts are already in the store (the kill came during
consolidation or evaluation) is not acted again: the store write of a generation is one
transaction, so it is there entirely or not at all.

Example:
    >>> import tempfile
    >>> folder = Path(tempfile.mkdtemp())
    >>> s = new_state(LoopConfig().to_dict())
    >>> s["finished"], s["adapter"]
    (0, 'base')
    >>> write_state(folder, s); read_state(folder)["finished"]
    0
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from replaybank.files import read_regular
from replaybank.llm.config.loop import LoopConfig
from replaybank.llm.loop.state_check import STATE_SCHEMA, StateError, check_state

__all__ = ["STATE_FILE", "STATE_SCHEMA", "StateError", "check_inputs", "check_same_config", "check_same_run",
           "new_state", "read_state", "write_state"]

STATE_FILE = "state.json"


def new_state(config: dict[str, Any]) -> dict[str, Any]:
    """The state of a run that has finished no generation."""
    return {"schema": STATE_SCHEMA, "config": config, "finished": 0, "adapter": "base", "generations": []}


def read_state(folder: Path) -> dict[str, Any] | None:
    """The saved state, checked whole (:func:`.state_check.check_state`), or None when the folder
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
        state = json.loads(raw.decode("utf-8"), parse_constant=_refuse_constant)
    except RecursionError:
        raise StateError(f"{path}: not a loop state file (nested too deep); delete the folder to start over") from None
    except ValueError as exc:  # JSONDecodeError, not UTF-8, NaN/Infinity, an integer of thousands of digits
        raise StateError(f"{path}: not a loop state file ({exc}); delete the folder to start over") from None
    return check_state(path, state)


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"non-finite number {name}")


def check_same_config(
    folder: Path, state: dict[str, Any], config: dict[str, Any], defaults: dict[str, Any] | None = None
) -> None:
    """Refuse to resume a run with another config (its store and adapters would be mixed up).

    ``generations`` may grow (a finished run can be extended) and ``library`` change (where the
    generations are registered); nothing else may change. A key the
    run's state does not have (added to the config after the run was written) must be at its
    value in ``defaults``: the behaviour the run had before the key existed
    (:meth:`replaybank.llm.config.loop.LoopConfig.before_keys_existed`).

    Raises:
        StateError: naming the first key that differs.
    """
    old, new = state["config"], config
    for section in sorted(set(old) | set(new)):
        a, b = old.get(section, {}), new.get(section, {})
        for key in sorted(set(a) | set(b)):
            if section == "loop" and key in ("generations", "library"):  # extend a run; register it elsewhere
                continue
            if key not in a:
                default = (defaults or {}).get(section, {}).get(key, _MISSING)
                if b.get(key) == default:
                    continue
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


def check_same_run(folder: Path, state: dict[str, Any], cfg: LoopConfig) -> None:
    """:func:`check_same_config` of a saved run against ``cfg``, the rehearsal recipe compared by
    its values whatever it is called (:meth:`LoopConfig.comparable`), so a run saved before
    ``[loop] recipe`` existed (with ``rehearsal``, ``rehearsal_ratio``, ``kl_weight``,
    ``rehearsal_ce``) resumes under the recipe those keys give.

    Raises:
        StateError: naming the first key that differs (``[recipe] KEY`` for the recipe's).
    """
    saved = {**state, "config": LoopConfig.comparable(state["config"])}
    check_same_config(folder, saved, LoopConfig.comparable(cfg.to_dict()), LoopConfig.before_keys_existed())


def check_inputs(
    folder: Path, state: dict[str, Any], *, base_model: str | None = None, rehearsal: dict[str, Any] | None = None,
    model_name: str = "",
) -> None:
    """Refuse to resume when what the run trains on changed under the same names: the base model's
    weights (``base_model``: :func:`replaybank.llm.eval.generate.model_fingerprint`; the config
    names it ``model_name``) or the rehearsal rows (``rehearsal``: the manifest of
    :func:`.consolidate.rehearsal_rows`, its ``sha256``). A state written before these were
    recorded resumes and records them.

    Raises:
        StateError: naming what changed, its recorded and its current hash.
    """
    old = state.get("base_model")
    if base_model is not None and old is not None and old != base_model:
        raise StateError(
            f"{folder}: [training] base_model = {model_name!r} is not the model this run started with (weights' "
            f"fingerprint {base_model[:16]}, the run recorded {old[:16]}); resume with the model it started with, "
            "or give another --out"
        )
    recorded = state.get("rehearsal", {}).get("sha256")
    if rehearsal is not None and recorded is not None and rehearsal.get("sha256") != recorded:
        raise StateError(
            f"{folder}: the rehearsal rows ({rehearsal.get('source')}) changed since this run started (sha256 "
            f"{str(rehearsal.get('sha256'))[:16]}, the run recorded {recorded[:16]}); restore them, or give another --out"
        )


def write_state(folder: Path, state: dict[str, Any]) -> None:
    """Replace ``state.json`` atomically (write a temporary file, fsync, rename); the temporary
    file is created anew (a link left at its name is removed, never written through)."""
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / (STATE_FILE + ".tmp")
    tmp.unlink(missing_ok=True)  # a leftover (or a link) at the name: removed, not followed
    with open(tmp, "x", encoding="utf-8") as f:  # O_EXCL: never through a link made meanwhile
        json.dump(state, f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, folder / STATE_FILE)


def loop_controller(out: Path, state: dict[str, Any], recipe: Any, seed: int) -> Any:
    """The run's replay controller (None when its recipe has none), restored from ``state`` after
    a finished generation, so a resumed run steers as one that never stopped.

    Raises:
        StateError: a saved controller state of another recipe or sequence (naming the key), or a
            state with a controller for a recipe without one.
    """
    from replaybank.errors import ReplayBankError
    from replaybank.llm.config.controller import recipe_controller

    controller = recipe_controller(recipe, seed) if recipe is not None else None
    saved = state.get("controller")
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
