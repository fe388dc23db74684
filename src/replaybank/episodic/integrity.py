"""What the episodic store refuses about its file and its records, and its errors.

* **The file**: a regular file or nothing (no symlink, FIFO, device, socket or folder; the same for
  its ``-wal``, ``-shm`` and ``-journal`` files), checked with ``lstat`` before SQLite opens it.
* **Each record read back**: its body is JSON text with finite numbers (``NaN``, ``Infinity`` and
  ``1e999`` are refused), nested no deeper than the JSON reader's recursion limit, and an episode
  every field of which passes :meth:`~replaybank.episodic.episode.Episode.from_dict`; anything else
  is a :class:`CorruptStoreError` naming the episode id.
* **Each experience read back** (an insight or a workflow, :mod:`.experience`): the same JSON rules,
  a level it knows, a record every field of which passes its ``from_dict``, a body whose
  fingerprint is the one it was written with (not altered since), at least one episode of
  provenance; anything else is a :class:`CorruptStoreError` naming the experience id.
"""

from __future__ import annotations

import os
import sqlite3
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from replaybank.errors import ReplayBankError
from replaybank.jsonl import strict_loads

from .episode import Episode, StoredEpisode
from .experience import Insight, Workflow

_SQLITE_MAGIC = b"SQLite format 3\x00"


class StoreError(ReplayBankError):
    """The episodic store cannot be opened, read or written."""


class SchemaVersionError(StoreError):
    """The store was written by a newer (or unknown) schema version."""


class CorruptStoreError(StoreError):
    """The file is not an SQLite database, or is damaged."""


class StoreLockedError(StoreError):
    """Another process held the write lock for longer than ``busy_timeout``."""


def is_locked(err: sqlite3.Error) -> bool:
    """True if SQLite refused because another connection holds a lock (worth a retry)."""
    msg = str(err)
    return isinstance(err, sqlite3.OperationalError) and ("locked" in msg or "busy" in msg)


def translate(err: sqlite3.Error, path: Path, what: str, timeout: float) -> StoreError:
    msg = str(err)
    if is_locked(err):
        return StoreLockedError(
            f"{path}: {what}: the database stayed locked by another process for {timeout:g}s "
            f"(busy_timeout); retry later or open the store with a larger busy_timeout"
        )
    if isinstance(err, sqlite3.DatabaseError) and (
        "not a database" in msg or "malformed" in msg or "corrupt" in msg
    ):
        return CorruptStoreError(f"{path}: {what}: the file is damaged or not an SQLite store ({msg})")
    return StoreError(f"{path}: {what}: {msg}")


def check_regular(path: Path, what: str) -> bool:
    """True if ``path`` is a regular file, False if nothing is there; a symlink, FIFO, device,
    socket or folder raises :class:`StoreError` (without opening it)."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return False
    except OSError as err:
        raise StoreError(f"{what}: cannot stat ({err})") from None
    if stat.S_ISLNK(mode):
        raise StoreError(f"{what}: is a symlink; an episodic store must be a regular file (not followed)")
    if stat.S_ISDIR(mode):
        raise StoreError(f"{what}: is a directory, expected an episodic store file")
    if not stat.S_ISREG(mode):
        raise StoreError(f"{what}: not a regular file (a FIFO, device or socket); refusing to open it")
    return True


def _generation(g: str) -> int:
    if not g.isdigit():
        raise ValueError(f"attempt generation {g[:40]!r} is not an integer >= 0")
    return int(g)


def stored_episode(path: Path, row: Sequence[Any]) -> StoredEpisode:
    """A row ``(id, body, attempts, generations)`` read back, every part checked.

    Raises:
        CorruptStoreError: naming the episode id (never a crash in json, never a half-read episode).
    """
    eid = row[0]
    try:
        if not isinstance(row[1], str):
            raise ValueError(f"body is {type(row[1]).__name__}, not JSON text")
        body = strict_loads(row[1])
        episode = Episode.from_dict(body, "body")
        gens = tuple(sorted(_generation(g) for g in str(row[3]).split(","))) if row[3] is not None else ()
    except RecursionError:
        raise CorruptStoreError(f"{path}: episode {eid}: body nested too deep to be an episode") from None
    except (ValueError, TypeError) as err:  # JSONDecodeError and ReplayBankError included
        raise CorruptStoreError(f"{path}: episode {eid}: {err}") from None
    return StoredEpisode(int(eid), episode, int(row[2]), gens)


def check_store_file(path: Path, readonly: bool) -> None:
    """Refuse anything at ``path`` (or its ``-wal``/``-shm``/``-journal`` files) but a regular
    SQLite file, before SQLite opens it: SQLite would block forever opening a FIFO (and read a
    device), and a symlink could point the store, and its writes, outside the folder named."""
    for extra in ("-wal", "-shm", "-journal"):
        check_regular(Path(f"{path}{extra}"), f"{path}: its {extra[1:]} file")
    if not check_regular(path, str(path)):
        if readonly:
            raise StoreError(f"{path}: no such episodic store")
        return
    try:  # non-blocking and not following links, in case it was swapped since the check
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    except OSError as err:
        raise StoreError(f"{path}: cannot open ({err})") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise StoreError(f"{path}: not a regular file, expected an episodic store file")
        head = os.read(fd, len(_SQLITE_MAGIC))
    finally:
        os.close(fd)
    if head and head != _SQLITE_MAGIC:
        raise CorruptStoreError(
            f"{path}: not an SQLite database (header {head[:16]!r}); point at a store written by EpisodeStore"
        )


def record_problems(path: Path, rows: Sequence[Sequence[Any]]) -> list[str]:
    """What is wrong with each episode row ``(id, body, attempts, generations, fingerprint,
    task_id, task_text, family, difficulty, success, reward, source, output)``: a body that does
    not read back, one altered after it was written (its fingerprint no longer matches), columns
    that queries filter on but that disagree with the body, an episode with no attempt."""
    bad: list[str] = []
    for row in rows:
        try:
            stored = stored_episode(path, row)
        except CorruptStoreError as err:
            bad.append(str(err).removeprefix(f"{path}: "))
            continue
        if stored.episode.fingerprint != row[4]:
            bad.append(f"episode {row[0]}: body does not match its fingerprint (altered)")
        elif len(row) > 5 and _columns(stored.episode) != tuple(row[5:13]):
            bad.append(f"episode {row[0]}: its columns disagree with its body (altered)")
        elif not stored.count:
            bad.append(f"episode {row[0]}: no attempt recorded")
    return bad


def _columns(ep: Episode) -> tuple[Any, ...]:
    """The episode's values as ``add`` writes them into the episodes table's columns."""
    t, v = ep.task, ep.verdict
    return (t.id, t.text, t.family, t.difficulty, int(v.success), v.reward, ep.source, ep.output)


@dataclass(frozen=True)
class StoredExperience:
    """An experience row read back: its id and record (provenance and generation filled in)."""

    id: int
    record: Insight | Workflow


def stored_experience(path: Path, row: Sequence[Any]) -> StoredExperience:
    """A row ``(id, level, body, provenance ids, generation, fingerprint, outcome)`` read back,
    every part checked (see the module doc).

    Raises:
        CorruptStoreError: naming the experience id.
    """
    xid = row[0]
    try:
        if not isinstance(row[2], str):
            raise ValueError(f"body is {type(row[2]).__name__}, not JSON text")
        body = strict_loads(row[2])
        if not isinstance(body, dict):
            raise ValueError(f"body is a JSON {type(body).__name__}, not an object")
        if row[3] is None:
            raise ValueError("no provenance: it names no episode it was drawn from")
        ids = str(row[3]).split(",")
        if not all(e.isdigit() for e in ids):
            raise ValueError(f"provenance episode ids {str(row[3])[:40]!r} are not integers >= 0")
        provenance = {"episodes": sorted(int(e) for e in ids), "generation": row[4]}
        record: Insight | Workflow
        if row[1] == "insight":
            record = Insight.from_dict({**body, **provenance}, "body")
        elif row[1] == "workflow":
            record = Workflow.from_dict({**body, **provenance}, "body")
        else:
            raise ValueError(f"level {str(row[1])[:40]!r} is not 'insight' or 'workflow'")
        if record.fingerprint != row[5]:
            raise ValueError("body does not match its fingerprint (altered)")
        if record.outcome != row[6]:
            raise ValueError(f"outcome column {str(row[6])[:20]!r} disagrees with its body (altered)")
    except RecursionError:
        raise CorruptStoreError(f"{path}: experience {xid}: body nested too deep") from None
    except (ValueError, TypeError) as err:  # JSONDecodeError and ReplayBankError included
        raise CorruptStoreError(f"{path}: experience {xid}: {err}") from None
    return StoredExperience(int(xid), record)


def experience_problems(path: Path, rows: Sequence[Sequence[Any]]) -> list[str]:
    """What is wrong with each experience row (as :func:`stored_experience` reads it)."""
    bad: list[str] = []
    for row in rows:
        try:
            stored_experience(path, row)
        except CorruptStoreError as err:
            bad.append(str(err).removeprefix(f"{path}: "))
    return bad
