"""The run's output folder: refused unless it is empty or an earlier run (with ``force``), written
as ``OUT.partial/`` (keyed by the config) and renamed to ``OUT`` only when the run is complete.

A seed's finished results (``seeds/seed<N>.json``), and each arm's within it
(``arms/seed<N>-<arm>.json``), are written atomically, so a rerun of an interrupted run with the
same config reads them back instead of running that seed or arm again.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import TypeVar

from replaybank.errors import ReplayBankError
from replaybank.files import read_regular
from replaybank.llm.config.names import safe_folder, write_inside
from replaybank.llm.results import JsonObject, Record, ResultsError

R = TypeVar("R", bound=Record)


class OutputError(ReplayBankError):
    """The output folder cannot be used."""


def check_out_dir(out: Path, force: bool) -> None:
    """Refuse an ``out`` that holds anything unless ``force`` (and never a folder that is not a run).

    Raises:
        OutputError: ``out`` is a non-empty folder of something else (always), or an earlier run
            (without ``force``).
    """
    if not out.exists():
        return
    if not out.is_dir():
        raise OutputError(f"{out}: exists and is not a folder; choose another --out")
    if not any(out.iterdir()):
        return
    if not (out / "metrics.json").is_file():
        raise OutputError(f"{out}: exists and is not a replaybank run folder (no metrics.json); choose another --out")
    if not force:
        raise OutputError(f"{out}: holds an earlier run's output; pass --force to replace it, or choose another --out")


def partial_dir(out: Path, config: JsonObject, n_seeds: int, force: bool) -> Path:
    """``OUT.partial/``, created, stamped with a hash of ``config`` and ``n_seeds``.

    Raises:
        OutputError: it holds leftovers of a run with another config (without ``force``; with
            ``force`` they are removed).
    """
    partial = out.with_name(out.name + ".partial")
    key = hashlib.sha256(json.dumps([config, n_seeds], sort_keys=True).encode()).hexdigest()
    stamp = partial / "config.sha256"
    if partial.exists() and (not stamp.is_file() or stamp.read_text().strip() != key):
        if not force:
            raise OutputError(
                f"{partial}: leftovers of an interrupted run with another config; rerun that config to resume "
                "it, or pass --force to discard them"
            )
        shutil.rmtree(partial)
    partial.mkdir(parents=True, exist_ok=True)
    write_inside(partial, stamp.name, key.encode())  # a link at the stamp is refused, never written through
    return partial


def finish(partial: Path, out: Path) -> None:
    """Drop checkpoints, per-arm files, empty folders and the stamp from ``partial``; rename it."""
    for leftover in partial.glob("*/checkpoint.pt"):
        leftover.unlink()
    for empty in partial.iterdir():
        if empty.is_dir() and not any(empty.iterdir()):
            empty.rmdir()
    (partial / "config.sha256").unlink(missing_ok=True)  # removed by hand while the run went on: the results stand
    shutil.rmtree(partial / "arms", ignore_errors=True)  # the seeds' files hold every arm
    if out.exists():
        shutil.rmtree(out)  # only reached with force (check_out_dir) or for an empty folder
    partial.rename(out)


def read_result(partial: Path, name: str, kind: type[R]) -> R | None:
    """The results ``name`` (``seeds/seed0``, ``arms/seed0-naive``) an earlier, interrupted run
    finished, read as ``kind``, or None.

    Raises:
        OutputError: the file is not a JSON object of ``kind`` (naming the bad key).
    """
    done = _result_path(partial, name)
    if not os.path.lexists(done):
        return None
    raw = read_regular(done, error=OutputError, follow_links=False)  # a FIFO would block forever
    try:
        data = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError):
        data = None
    if not isinstance(data, dict):
        raise OutputError(f"{done}: expected the results of an earlier run (a JSON object); delete it to rerun")
    try:
        return kind.from_json(data, str(done))
    except ResultsError as exc:
        raise OutputError(f"{exc}; delete it to rerun") from exc


def write_result(partial: Path, name: str, result: Record) -> None:
    """Finished results (every measurement and generated answer) in ``<name>.json``, atomically."""
    path = _result_path(partial, name)
    safe_folder(partial, *Path(name).parent.parts)  # seeds/, arms/: the run's own folders, not links
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.unlink(missing_ok=True)  # a leftover, or a link at the name: removed, never written through
    with open(tmp, "x", encoding="utf-8") as f:
        f.write(json.dumps(result.to_json(), indent=1, sort_keys=True, default=str))
    os.replace(tmp, path)


def _result_path(partial: Path, name: str) -> Path:
    """``partial/<name>.json``, refused when ``name`` (an arm's name comes from the config) would
    leave ``partial`` or the file is a symbolic link."""
    path = partial / f"{name}.json"
    if os.path.isabs(name) or ".." in Path(name).parts or path.is_symlink():
        raise OutputError(f"{path}: results must be a plain file inside {partial}; rename the arm {name!r}")
    return path
