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
    >>> s = new_state({"loop": {"seed": 0}})
    >>> s["finished"], s["adapter"]
    (0, 'base')
    >>> write_state(folder, s); read_state(folder)["finished"]
    0
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from replaybank.errors import ReplayBankError
from replaybank.llm.config.loop import LoopConfig

STATE_SCHEMA = 1
STATE_FILE = "state.json"


class StateError(ReplayBankError):
    """``state.json`` is unreadable, from another schema, or from a run with another config."""


def new_state(config: dict[str, Any]) -> dict[str, Any]:
    """The state of a run that has finished no generation."""
    return {"schema": STATE_SCHEMA, "config": config, "finished": 0, "adapter": "base", "generations": []}


def read_state(folder: Path) -> dict[str, Any] | None:
    """The saved state, or None when the folder has none.

    Raises:
        StateError: not JSON, another schema version, or missing fields.
    """
    path = folder / STATE_FILE
    if not path.is_file():
        return None
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise StateError(f"{path}: not a loop state file ({exc}); delete the folder to start over") from None
    if not isinstance(state, dict) or state.get("schema") != STATE_SCHEMA:
        found = state.get("schema") if isinstance(state, dict) else type(state).__name__
        raise StateError(f"{path}: loop state schema {found!r}, this replaybank reads {STATE_SCHEMA}")
    for key, kind in (("config", dict), ("finished", int), ("adapter", str), ("generations", list)):
        if not isinstance(state.get(key), kind):
            raise StateError(f"{path}: field {key!r} is {type(state.get(key)).__name__}, expected {kind.__name__}")
    if isinstance(state["finished"], bool) or state["finished"] < 0:
        raise StateError(f"{path}: field 'finished' is {state['finished']!r}, expected a generation number >= 0")
    return state


def check_same_config(
    folder: Path, state: dict[str, Any], config: dict[str, Any], defaults: dict[str, Any] | None = None
) -> None:
    """Refuse to resume a run with another config (its store and adapters would be mixed up).

    ``generations`` may grow (a finished run can be extended); nothing else may change. A key the
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
            if section == "loop" and key == "generations":
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


def write_state(folder: Path, state: dict[str, Any]) -> None:
    """Replace ``state.json`` atomically (write a temporary file, fsync, rename)."""
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / (STATE_FILE + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(state, f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, folder / STATE_FILE)
