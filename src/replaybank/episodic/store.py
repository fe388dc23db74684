"""The episodic store: every attempt of the agent, kept in one SQLite file (stdlib ``sqlite3``).

Guarantees:

* **Crash-safe.** WAL journal, ``synchronous=FULL``, one transaction per write (``add`` or
  ``add_many``): a process killed at any point leaves every committed episode readable and no
  half-written one.
* **Many readers, one writer**, from any number of processes. A write takes the write lock up
  front (``BEGIN IMMEDIATE``) and waits for it at most ``busy_timeout`` seconds, then raises
  :class:`StoreLockedError`. Readers never wait for a writer (WAL). Opening waits the same way,
  including when processes race to create the same new file.
* **Schema-versioned** (``PRAGMA user_version``). A file written by a newer schema is refused with
  :class:`SchemaVersionError`; a file that is not SQLite, or is damaged, with :class:`CorruptStoreError`.
* **Deduplicated.** Two attempts with the same task id and the same output are one *episode* with
  two *attempts*: the episode keeps the first attempt's context, verdict and timestamps; every
  attempt keeps its generation, adapter, seed and replayed ids, so queries by generation stay exact.

* **Levels of experience** (:mod:`.experience`): besides episodes, the store keeps insights
  (``add_insight`` / ``insights``) and workflows (``add_workflow`` / ``workflows``), each linked to
  the episodes it was drawn from (its provenance) and deduplicated by content, like episodes.

Schema (version 2)::

    episodes(id, fingerprint UNIQUE, task_id, task_text, family, difficulty,
             success, reward, source, output, body JSON)      -- one row per distinct task+output
    attempts(id, episode_id -> episodes ON DELETE CASCADE, generation, adapter, seed,
             replayed JSON, started_at, finished_at)          -- one row per recorded attempt
    experiences(id, level, fingerprint UNIQUE, outcome, generation, created_at,
                body JSON)                                    -- one row per distinct insight/workflow
    provenance(experience_id -> experiences ON DELETE CASCADE, episode_id)
                                                              -- the episodes it was drawn from

Version 1 had the first two tables only. A version-1 file opened for writing is migrated in place,
in one transaction (the two new tables, then the version); opened read-only it is read as it is
(it has no experiences). Provenance names episode ids, which are never reused: a link to an
episode that retention removed still says which episode it was.

Example:
    >>> import tempfile, os
    >>> from replaybank.episodic.episode import Episode, Step, Task, Verdict
    >>> path = os.path.join(tempfile.mkdtemp(), "ep.db")
    >>> ep = Episode(Task("t1", "2+2?"), (Step("2+2?", "4"),), Verdict(True, 1.0), generation=1)
    >>> with EpisodeStore(path) as store:
    ...     ids = [store.add(ep), store.add(ep)]      # the same task + output: stored once
    ...     rec = store.get(ids[0])
    >>> ids[0] == ids[1], rec.count, rec.generations
    (True, 2, (1,))
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from replaybank.errors import InvalidArgumentError, InvalidTypeError, ReplayBankError

from .episode import Episode, StoredEpisode, check_episode
from .experience import (
    OUTCOMES,
    Insight,
    Outcome,
    StoredInsight,
    StoredWorkflow,
    Workflow,
    workflow_problems,
)
from .fields import flag, integer, items, real, text
from .integrity import (
    CorruptStoreError,
    SchemaVersionError,
    StoredExperience,
    StoreError,
    StoreLockedError,
    check_store_file,
    experience_problems,
    is_locked,
    record_problems,
    stored_episode,
    stored_experience,
    translate,
)

__all__ = [
    "SCHEMA_VERSION", "CorruptStoreError", "EpisodeStore", "Retention", "SchemaVersionError",
    "StoreError", "StoreLockedError",
]

SCHEMA_VERSION = 2
_MAX_BUSY_S = 2**31 / 1000  # PRAGMA busy_timeout takes a C int of milliseconds
_OPEN_RETRY_S = 0.01  # pause between tries of an open that SQLite refused as locked
#: attempts whose columns are not of the schema's types (a tampered file)
BAD_ATTEMPTS = (
    "SELECT id FROM attempts WHERE typeof(generation) != 'integer' OR generation < 0"
    " OR typeof(adapter) != 'text' OR typeof(seed) NOT IN ('integer', 'null')"
    " OR typeof(started_at) NOT IN ('real', 'integer')"
    " OR typeof(finished_at) NOT IN ('real', 'integer') OR json_valid(replayed) = 0"
)

_SCHEMA = """
CREATE TABLE episodes (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    fingerprint TEXT NOT NULL UNIQUE,
    task_id TEXT NOT NULL,
    task_text TEXT NOT NULL,
    family TEXT NOT NULL,
    difficulty INTEGER NOT NULL,
    success INTEGER NOT NULL,
    reward REAL NOT NULL,
    source TEXT NOT NULL,
    output TEXT NOT NULL,
    body TEXT NOT NULL
);
CREATE TABLE attempts (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    episode_id INTEGER NOT NULL REFERENCES episodes(id) ON DELETE CASCADE,
    generation INTEGER NOT NULL,
    adapter TEXT NOT NULL,
    seed INTEGER,
    replayed TEXT NOT NULL,
    started_at REAL NOT NULL,
    finished_at REAL NOT NULL
);
CREATE INDEX attempts_episode ON attempts(episode_id);
CREATE INDEX attempts_generation ON attempts(generation, episode_id);
CREATE INDEX episodes_task ON episodes(task_id);
CREATE INDEX episodes_success ON episodes(success, id);
"""

#: what version 2 adds to version 1 (a fresh store is created with both; a v1 file migrates by this)
_SCHEMA_V2 = """
CREATE TABLE experiences (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    level TEXT NOT NULL,
    fingerprint TEXT NOT NULL UNIQUE,
    outcome TEXT NOT NULL,
    generation INTEGER NOT NULL,
    created_at REAL NOT NULL,
    body TEXT NOT NULL
);
CREATE TABLE provenance (
    experience_id INTEGER NOT NULL REFERENCES experiences(id) ON DELETE CASCADE,
    episode_id INTEGER NOT NULL,
    PRIMARY KEY (experience_id, episode_id)
);
CREATE INDEX experiences_level ON experiences(level, outcome, id);
CREATE INDEX provenance_episode ON provenance(episode_id);
"""
#: an experience row as read back: (id, level, body, provenance ids, generation, fingerprint, outcome)
_EXPERIENCE_ROWS = (
    "SELECT x.id, x.level, x.body, GROUP_CONCAT(p.episode_id), x.generation, x.fingerprint, x.outcome"
    " FROM experiences x LEFT JOIN provenance p ON p.experience_id = x.id"
)


@dataclass(frozen=True)
class Retention:
    """Which episodes :meth:`EpisodeStore.apply_retention` keeps. Demonstrations are always kept;
    replayed episodes are kept or removed as the agent's own.

    Args:
        keep_generations: keep episodes attempted in the last N generations (counting back from
            the newest generation in the store); older ones are removed, except successes when
            ``keep_successes`` (they are what consolidation trains on).
        max_episodes: then, if more episodes remain, remove failures before successes, each
            oldest first (by last generation, then id), until this many remain.
        keep_successes: exempt successes from ``keep_generations``.
    """

    keep_generations: int | None = None
    max_episodes: int | None = None
    keep_successes: bool = True

    def __post_init__(self) -> None:
        for name in ("keep_generations", "max_episodes"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ReplayBankError(f"Retention.{name} must be a positive int or None, got {value!r}")


class EpisodeStore:
    """An episodic experience store in one SQLite file.

    Args:
        path: the database file; created (with its folder) unless ``readonly``.
        readonly: open without write access (``inspect`` uses this); the file must exist.
        busy_timeout: seconds a write (or the first open) waits for another process's lock.

    Raises:
        SchemaVersionError, CorruptStoreError, StoreLockedError, StoreError: see the module doc.
    """

    def __init__(self, path: str | Path, *, readonly: bool = False, busy_timeout: float = 10.0) -> None:
        self.path = Path(path)
        self.readonly = readonly
        self.busy_timeout = real(busy_timeout, "EpisodeStore busy_timeout", low=0.0, high=_MAX_BUSY_S)
        check_store_file(self.path, readonly)
        if not readonly:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        mode = "ro" if readonly else "rwc"
        try:
            self._conn = sqlite3.connect(
                f"{self.path.resolve().as_uri()}?mode={mode}",
                uri=True,
                timeout=self.busy_timeout,
                isolation_level=None,  # we issue BEGIN/COMMIT ourselves
            )
        except sqlite3.Error as err:
            raise translate(err, self.path, "open", self.busy_timeout) from err
        try:
            self._setup()
        except BaseException:
            self._conn.close()
            raise

    def _setup(self) -> None:
        deadline = time.monotonic() + self.busy_timeout
        while True:
            try:
                version = self._open_steps()
                break
            except sqlite3.Error as err:
                # SQLite answers "locked" at once, without waiting in its busy handler, when two
                # connections switch a new file to WAL at the same moment: wait and try again
                if not is_locked(err) or time.monotonic() >= deadline:
                    raise translate(err, self.path, "open", self.busy_timeout) from err
                time.sleep(_OPEN_RETRY_S)
        if version < 0:
            raise SchemaVersionError(
                f"{self.path}: episodic store schema version {version} is not a version any "
                f"replaybank writes (1..{SCHEMA_VERSION}); the file was altered"
            )
        if version > SCHEMA_VERSION:
            raise SchemaVersionError(
                f"{self.path}: episodic store schema version {version} is newer than the version "
                f"this replaybank reads ({SCHEMA_VERSION}); upgrade replaybank to open it"
            )
        self.schema_version = version

    def _open_steps(self) -> int:
        """Set the connection up, create or migrate the schema; returns the schema version."""
        c = self._conn
        c.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}")
        c.execute("PRAGMA foreign_keys = ON")
        if not self.readonly:
            c.execute("PRAGMA journal_mode = WAL")
            c.execute("PRAGMA synchronous = FULL")
        version = self._version()
        if version == 0:
            if self.readonly:
                raise StoreError(f"{self.path}: empty or not initialised as an episodic store")
            with self._write("create the schema"):
                if self._version() == 0:  # another process may have won the race
                    self._create()
            version = self._version()
        if version == 1 and not self.readonly:
            with self._write("migrate the store from schema version 1 to 2"):
                if self._version() == 1:  # another process may have migrated it meanwhile
                    self._run(_SCHEMA_V2)
                    self._conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            version = self._version()
        return version

    def _version(self) -> int:
        return int(self._conn.execute("PRAGMA user_version").fetchone()[0])

    def _create(self) -> None:
        tables = [r[0] for r in self._conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        if tables:
            raise StoreError(
                f"{self.path}: an SQLite database with tables {sorted(tables)} but no episodic "
                "schema version; refusing to write into it"
            )
        self._run(_SCHEMA + _SCHEMA_V2)
        self._conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def _run(self, script: str) -> None:
        # statement by statement: executescript would COMMIT the caller's transaction
        for statement in script.split(";"):
            if statement.strip():
                self._conn.execute(statement)

    @contextmanager
    def _write(self, what: str) -> Iterator[sqlite3.Connection]:
        """One transaction holding the write lock from its start; rolled back on any error."""
        if self.readonly:
            raise StoreError(f"{self.path}: opened read-only, cannot {what}")
        try:
            self._conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as err:
            raise translate(err, self.path, what, self.busy_timeout) from err
        try:
            yield self._conn
            self._conn.execute("COMMIT")
        except BaseException as err:
            if self._conn.in_transaction:
                self._conn.execute("ROLLBACK")
            if isinstance(err, sqlite3.Error):
                raise translate(err, self.path, what, self.busy_timeout) from err
            raise

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        """The rows of a read-only SQL statement, sqlite errors translated to replaybank ones."""
        try:
            return self._conn.execute(sql, params).fetchall()
        except sqlite3.Error as err:
            raise translate(err, self.path, "read", self.busy_timeout) from err

    # -- writing -------------------------------------------------------------------------------

    def add(self, episode: Episode) -> int:
        """Record one attempt; returns its episode id (an existing id if it is a duplicate)."""
        return self.add_many([episode])[0]

    def add_many(self, episodes: Sequence[Episode]) -> list[int]:
        """Record attempts in one transaction (all or none); returns their episode ids."""
        episodes = [check_episode(ep, i) for i, ep in enumerate(items(episodes, "add_many: episodes"))]
        ids: list[int] = []
        with self._write("add episodes") as c:
            for ep in episodes:
                row = c.execute("SELECT id FROM episodes WHERE fingerprint = ?", (ep.fingerprint,)).fetchone()
                if row is None:
                    cur = c.execute(
                        "INSERT INTO episodes (fingerprint, task_id, task_text, family, difficulty,"
                        " success, reward, source, output, body) VALUES (?,?,?,?,?,?,?,?,?,?)",
                        (ep.fingerprint, ep.task.id, ep.task.text, ep.task.family, ep.task.difficulty,
                         int(ep.verdict.success), ep.verdict.reward, ep.source, ep.output,
                         json.dumps(ep.to_dict(), ensure_ascii=False)),
                    )
                    episode_id = int(cur.lastrowid or 0)
                else:
                    episode_id = int(row[0])
                c.execute(
                    "INSERT INTO attempts (episode_id, generation, adapter, seed, replayed, started_at,"
                    " finished_at) VALUES (?,?,?,?,?,?,?)",
                    (episode_id, ep.generation, ep.adapter, ep.seed, json.dumps(list(ep.replayed)),
                     ep.started_at, ep.finished_at),
                )
                ids.append(episode_id)
        return ids

    def add_insight(self, insight: Insight) -> int:
        """Record an insight with its provenance, in one transaction; returns its id.

        The same insight again (same :attr:`~.experience.Insight.fingerprint`: title, description,
        content and outcome) is one record: its episodes are added to the first one's provenance,
        and the first one's id is returned.

        Raises:
            InvalidTypeError, InvalidArgumentError: a field of the wrong type, no episodes, or an
                episode id the store does not hold (named).
        """
        if not isinstance(insight, Insight):
            raise InvalidTypeError(f"add_insight: {type(insight).__name__} is not an Insight")
        return self._add_experience(Insight.from_dict(insight.to_dict(), "add_insight: insight"))

    def add_workflow(self, workflow: Workflow) -> int:
        """Record a workflow with its provenance, in one transaction; returns its id (deduplicated
        as :meth:`add_insight`).

        Raises:
            InvalidTypeError, InvalidArgumentError: as :meth:`add_insight`, or a workflow that is
                not well-formed (:func:`~.experience.workflow_problems`, each problem named).
        """
        if not isinstance(workflow, Workflow):
            raise InvalidTypeError(f"add_workflow: {type(workflow).__name__} is not a Workflow")
        workflow = Workflow.from_dict(workflow.to_dict(), "add_workflow: workflow")
        problems = workflow_problems(workflow)
        if problems:
            raise InvalidArgumentError(f"add_workflow: not well-formed: {'; '.join(problems)}")
        return self._add_experience(workflow)

    def _add_experience(self, record: Insight | Workflow) -> int:
        what = f"add_{record.level}"
        if not record.episodes:
            raise InvalidArgumentError(f"{what}: no episodes; an experience needs its provenance "
                                       "(the store ids of the episodes it was drawn from)")
        with self._write(f"add an {record.level}") as c:
            wanted = sorted(set(record.episodes))
            marks = ",".join("?" * len(wanted))
            held = {int(r[0]) for r in c.execute(f"SELECT id FROM episodes WHERE id IN ({marks})", wanted)}
            missing = [e for e in wanted if e not in held]
            if missing:
                raise InvalidArgumentError(f"{what}: episodes {missing} are not in the store {self.path}")
            row = c.execute("SELECT id FROM experiences WHERE fingerprint = ?", (record.fingerprint,)).fetchone()
            if row is None:
                cur = c.execute(
                    "INSERT INTO experiences (level, fingerprint, outcome, generation, created_at, body)"
                    " VALUES (?,?,?,?,?,?)",
                    (record.level, record.fingerprint, record.outcome, record.generation, time.time(),
                     json.dumps(record.content_dict(), ensure_ascii=False)),
                )
                experience_id = int(cur.lastrowid or 0)
            else:
                experience_id = int(row[0])
            c.executemany("INSERT OR IGNORE INTO provenance (experience_id, episode_id) VALUES (?, ?)",
                          [(experience_id, e) for e in wanted])
        return experience_id

    def apply_retention(self, policy: Retention) -> int:
        """Remove episodes (and their attempts) that ``policy`` does not keep; returns how many."""
        removed = 0
        with self._write("apply retention") as c:
            if policy.keep_generations is not None:
                latest = c.execute("SELECT MAX(generation) FROM attempts").fetchone()[0]
                if latest is not None:
                    cutoff = int(latest) - policy.keep_generations + 1
                    keep_ok = " AND success = 0" if policy.keep_successes else ""
                    removed += c.execute(
                        "DELETE FROM episodes WHERE source IN ('agent', 'replayed')" + keep_ok + " AND id IN ("
                        " SELECT episode_id FROM attempts GROUP BY episode_id"
                        " HAVING MAX(generation) < ?)",
                        (cutoff,),
                    ).rowcount
            if policy.max_episodes is not None:
                total = c.execute("SELECT COUNT(*) FROM episodes").fetchone()[0]
                excess = int(total) - policy.max_episodes
                if excess > 0:
                    removed += c.execute(
                        "DELETE FROM episodes WHERE id IN ("
                        " SELECT e.id FROM episodes e JOIN attempts a ON a.episode_id = e.id"
                        " WHERE e.source IN ('agent', 'replayed') GROUP BY e.id"
                        " ORDER BY e.success ASC, MAX(a.generation) ASC, e.id ASC LIMIT ?)",
                        (excess,),
                    ).rowcount
        return removed

    # -- reading -------------------------------------------------------------------------------

    def episodes(
        self,
        *,
        generation: int | Sequence[int] | None = None,
        task_id: str | None = None,
        success: bool | None = None,
        family: str | None = None,
        source: str | None = None,
        limit: int | None = None,
    ) -> list[StoredEpisode]:
        """Episodes matching every given filter, by id ascending.

        Args:
            generation: episodes attempted in this generation (or any of these generations).
            task_id, family, source: exact matches.
            success: True for successes, False for failures.
            limit: at most this many (the lowest ids); an integer >= 0.

        Raises:
            InvalidTypeError, InvalidArgumentError: an argument of the wrong type or range, named
                (a ``bool`` is not an integer; ``limit="5"`` is refused, not converted).
        """
        where: list[str] = []
        params: list[Any] = []
        if generation is not None:
            if isinstance(generation, Sequence) and not isinstance(generation, (str, bytes)):
                gens: list[Any] = list(generation)
            else:
                gens = [integer(generation, "EpisodeStore.episodes generation (an integer or a list of them)", low=0)]
            marks = ",".join("?" * len(gens)) or "NULL"
            where.append(f"e.id IN (SELECT episode_id FROM attempts WHERE generation IN ({marks}))")
            params += [integer(g, f"EpisodeStore.episodes generation[{k}]", low=0) for k, g in enumerate(gens)]
        for column, value in (("task_id", task_id), ("family", family), ("source", source)):
            if value is not None:
                where.append(f"e.{column} = ?")
                params.append(text(value, f"EpisodeStore.episodes {column}"))
        if success is not None:
            where.append("e.success = ?")
            params.append(int(flag(success, "EpisodeStore.episodes success")))
        if limit is not None:
            params.append(integer(limit, "EpisodeStore.episodes limit", low=0))
        # every value is a bound parameter: no text of an argument is ever part of the SQL
        sql = (
            "SELECT e.id, e.body, COUNT(a.id), GROUP_CONCAT(DISTINCT a.generation)"
            " FROM episodes e JOIN attempts a ON a.episode_id = e.id"
            + (" WHERE " + " AND ".join(where) if where else "")
            + " GROUP BY e.id ORDER BY e.id"
            + (" LIMIT ?" if limit is not None else "")
        )
        return [stored_episode(self.path, row) for row in self.query(sql, params)]

    def get(self, episode_id: int) -> StoredEpisode:
        """The episode with this id. Raises :class:`StoreError` if there is none."""
        rows = self.query(
            "SELECT e.id, e.body, COUNT(a.id), GROUP_CONCAT(DISTINCT a.generation)"
            " FROM episodes e JOIN attempts a ON a.episode_id = e.id WHERE e.id = ? GROUP BY e.id",
            (integer(episode_id, "EpisodeStore.get episode_id", low=0),),
        )
        if not rows:
            raise StoreError(f"{self.path}: no episode with id {episode_id}")
        return stored_episode(self.path, rows[0])

    def insights(
        self, *, outcome: Outcome | None = None, episode: int | None = None, limit: int | None = None
    ) -> list[StoredInsight]:
        """Insights matching every given filter, by id ascending.

        Args:
            outcome: ``"success"`` or ``"failure"``: drawn from successes, or from failures.
            episode: drawn from this episode (its id is in the provenance).
            limit: at most this many (the lowest ids); an integer >= 0.

        Raises:
            InvalidTypeError, InvalidArgumentError: an argument of the wrong type or value, named.
            CorruptStoreError: a row that does not read back as an insight (naming its id).
        """
        if outcome is not None and text(outcome, "EpisodeStore.insights outcome") not in OUTCOMES:
            raise InvalidArgumentError(f"EpisodeStore.insights outcome {outcome!r} is not 'success' or 'failure'")
        rows = self._experiences("insight", outcome, episode, limit, "EpisodeStore.insights")
        return [StoredInsight(r.id, r.record) for r in rows if isinstance(r.record, Insight)]

    def workflows(self, *, episode: int | None = None, limit: int | None = None) -> list[StoredWorkflow]:
        """Workflows, by id ascending; ``episode`` and ``limit`` as for :meth:`insights`.

        Raises:
            CorruptStoreError: a row that does not read back as a workflow (naming its id).
        """
        rows = self._experiences("workflow", None, episode, limit, "EpisodeStore.workflows")
        return [StoredWorkflow(r.id, r.record) for r in rows if isinstance(r.record, Workflow)]

    def _experiences(
        self, level: str, outcome: str | None, episode: int | None, limit: int | None, what: str
    ) -> list[StoredExperience]:
        if self.schema_version < 2:  # a version-1 file opened read-only: no experiences yet
            return []
        where: list[str] = ["x.level = ?"]
        params: list[Any] = [level]
        if outcome is not None:
            where.append("x.outcome = ?")
            params.append(outcome)
        if episode is not None:
            where.append("x.id IN (SELECT experience_id FROM provenance WHERE episode_id = ?)")
            params.append(integer(episode, f"{what} episode", low=0))
        sql = _EXPERIENCE_ROWS + " WHERE " + " AND ".join(where) + " GROUP BY x.id ORDER BY x.id"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(integer(limit, f"{what} limit", low=0))
        return [stored_experience(self.path, row) for row in self.query(sql, params)]

    def generations(self) -> list[int]:
        """The distinct generations with at least one attempt, ascending."""
        return [int(r[0]) for r in self.query("SELECT DISTINCT generation FROM attempts ORDER BY 1")]

    def __len__(self) -> int:
        return int(self.query("SELECT COUNT(*) FROM episodes")[0][0])

    def attempt_count(self) -> int:
        return int(self.query("SELECT COUNT(*) FROM attempts")[0][0])

    def verify(self) -> None:
        """Check the file and every record: SQLite's integrity check, then each episode's body
        read back and checked as :meth:`get` would (JSON, depth, every field, its fingerprint)
        and each attempt's columns typed as the schema says.

        Raises:
            CorruptStoreError: naming the damage, or the first (up to 5) bad episode ids.
        """
        result = [str(r[0]) for r in self.query("PRAGMA integrity_check")]
        if result != ["ok"]:
            raise CorruptStoreError(f"{self.path}: integrity check failed: {'; '.join(result[:5])}")
        bad = record_problems(self.path, self.query(
            "SELECT e.id, e.body, COUNT(a.id), GROUP_CONCAT(DISTINCT a.generation), e.fingerprint,"
            " e.task_id, e.task_text, e.family, e.difficulty, e.success, e.reward, e.source, e.output"
            " FROM episodes e LEFT JOIN attempts a ON a.episode_id = e.id GROUP BY e.id ORDER BY e.id"
        ))
        bad += [f"attempt {a}: a column of the wrong type" for (a,) in self.query(BAD_ATTEMPTS)]
        if self.schema_version >= 2:
            bad += experience_problems(self.path, self.query(_EXPERIENCE_ROWS + " GROUP BY x.id ORDER BY x.id"))
        if bad:
            more = f" (and {len(bad) - 5} more)" if len(bad) > 5 else ""
            raise CorruptStoreError(f"{self.path}: {len(bad)} bad records: {'; '.join(bad[:5])}{more}")

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> EpisodeStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
