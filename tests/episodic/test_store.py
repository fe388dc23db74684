from __future__ import annotations

import sqlite3

import pytest

from replaybank.episodic import (
    CorruptStoreError,
    Episode,
    EpisodeStore,
    Retention,
    SchemaVersionError,
    Step,
    StoreError,
    StoreLockedError,
    Task,
    Verdict,
    demonstration,
)
from replaybank.errors import ReplayBankError


def ep(tid: str, out: str, ok: bool, gen: int, family: str = "f", **kw) -> Episode:
    t = Task(tid, f"text of {tid}", family, 1, ("right",))
    return Episode(t, (Step(t.text, out, out, "ok"),), Verdict(ok, float(ok), {"f.x": float(ok)}), generation=gen, **kw)


@pytest.fixture
def store(tmp_path):
    with EpisodeStore(tmp_path / "ep.db") as s:
        yield s


def test_round_trip_keeps_every_field(store):
    e = ep("t1", "right", True, 3, adapter="abc123", seed=7, replayed=(4, 5),
           context=({"role": "system", "content": "be brief"},))
    got = store.get(store.add(e))
    assert got.episode == e and got.count == 1 and got.generations == (3,)


def test_duplicates_are_stored_once_and_counted_per_generation(store):
    a = store.add(ep("t1", "right", True, 1))
    b = store.add(ep("t1", "right", True, 2, seed=9))
    c = store.add(ep("t1", "other", False, 2))
    d = store.add(ep("t2", "right", True, 2))
    assert a == b and len({a, c, d}) == 3
    assert len(store) == 3 and store.attempt_count() == 4
    rec = store.get(a)
    assert rec.count == 2 and rec.generations == (1, 2) and rec.episode.generation == 1


def test_queries_by_generation_task_outcome_family(store):
    store.add_many([ep("t1", "right", True, 1, "x"), ep("t1", "wrong", False, 1, "x"),
                    ep("t2", "right", True, 2, "y"), ep("t3", "bad", False, 3, "y")])
    ids = lambda recs: [r.episode.task.id + ":" + r.episode.output for r in recs]  # noqa: E731
    assert ids(store.episodes(generation=1)) == ["t1:right", "t1:wrong"]
    assert ids(store.episodes(generation=[2, 3])) == ["t2:right", "t3:bad"]
    assert ids(store.episodes(generation=[])) == []
    assert ids(store.episodes(task_id="t1", success=True)) == ["t1:right"]
    assert ids(store.episodes(success=False)) == ["t1:wrong", "t3:bad"]
    assert ids(store.episodes(family="y", success=True)) == ["t2:right"]
    assert ids(store.episodes(limit=1)) == ["t1:right"]
    assert store.generations() == [1, 2, 3]
    with pytest.raises(StoreError, match="no episode with id 99"):
        store.get(99)


def test_add_many_is_all_or_nothing(store):
    bad = Episode(Task("t", "x"), (), Verdict(True, 1.0))
    with pytest.raises(ReplayBankError, match="episode 1 .*no steps"):
        store.add_many([ep("t1", "right", True, 1), bad])
    with pytest.raises(ReplayBankError, match=r"reward 1.5 is not in \[0, 1\]"):
        store.add(ep("t1", "right", True, 1).__class__(Task("t", "x"), (Step("x", "y"),), Verdict(True, 1.5)))
    assert len(store) == 0


def test_retention_window_keeps_successes_and_demos(store):
    store.add(demonstration(Task("d", "demo"), ["right"]))
    for g in range(1, 6):
        store.add_many([ep(f"ok{g}", "right", True, g), ep(f"bad{g}", "wrong", False, g)])
    store.add(ep("bad1", "wrong", False, 5))  # seen again in gen 5: still recent
    removed = store.apply_retention(Retention(keep_generations=2))
    left = {r.episode.task.id for r in store.episodes()}
    assert removed == 2  # bad2, bad3 (old failures); bad1 survives, seen in generation 5
    assert left == {"d", "ok1", "ok2", "ok3", "ok4", "ok5", "bad1", "bad4", "bad5"}
    assert store.attempt_count() == 1 + 10 + 1 - 2  # attempts of removed episodes go too
    store.apply_retention(Retention(keep_generations=1, keep_successes=False))
    assert {r.episode.task.id for r in store.episodes()} == {"d", "ok5", "bad5", "bad1"}


def test_retention_cap_drops_failures_first_then_oldest_successes(store):
    store.add(demonstration(Task("d", "demo"), ["right"]))
    for g in range(1, 5):
        store.add_many([ep(f"ok{g}", "right", True, g), ep(f"bad{g}", "wrong", False, g)])
    assert store.apply_retention(Retention(max_episodes=5)) == 4
    assert {r.episode.task.id for r in store.episodes()} == {"d", "ok1", "ok2", "ok3", "ok4"}
    assert store.apply_retention(Retention(max_episodes=2)) == 3
    assert {r.episode.task.id for r in store.episodes()} == {"d", "ok4"}
    with pytest.raises(ReplayBankError, match="max_episodes must be a positive int"):
        Retention(max_episodes=0)


def test_newer_schema_is_refused_naming_file_and_versions(tmp_path):
    path = tmp_path / "ep.db"
    EpisodeStore(path).close()
    con = sqlite3.connect(path)
    con.execute("PRAGMA user_version = 7")
    con.close()
    with pytest.raises(SchemaVersionError, match=r"ep\.db: episodic store schema version 7 .* reads \(2\)"):
        EpisodeStore(path)
    with pytest.raises(SchemaVersionError):
        EpisodeStore(path, readonly=True)


def test_corrupt_and_foreign_files_are_clear_errors(tmp_path):
    text = tmp_path / "notes.db"
    text.write_text("hello, this is not a database\n" * 10)
    with pytest.raises(CorruptStoreError, match=r"notes\.db: not an SQLite database"):
        EpisodeStore(text)
    damaged = tmp_path / "damaged.db"
    with EpisodeStore(damaged) as s:
        s.add_many([ep(f"t{i}", "x" * 500, True, 1) for i in range(50)])
    with sqlite3.connect(damaged) as con:  # fold the WAL into the main file
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    raw = bytearray(damaged.read_bytes())
    raw[100:4096 * 3] = b"\xff" * (4096 * 3 - 100)  # trash the schema page and the next pages
    damaged.write_bytes(bytes(raw))
    with pytest.raises(CorruptStoreError, match=r"damaged\.db"):
        with EpisodeStore(damaged) as s:
            s.verify()
            s.episodes()
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as con:
        con.execute("CREATE TABLE users (name TEXT)")
    with pytest.raises(StoreError, match=r"tables \['users'\] but no episodic schema"):
        EpisodeStore(other)
    with pytest.raises(StoreError, match="no such episodic store"):
        EpisodeStore(tmp_path / "missing.db", readonly=True)


def test_a_held_write_lock_gives_a_bounded_wait_then_a_clear_error(tmp_path):
    path = tmp_path / "ep.db"
    EpisodeStore(path).close()
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        with EpisodeStore(path, busy_timeout=0.2) as s:
            assert len(s) == 0  # readers are not blocked by the writer
            with pytest.raises(StoreLockedError, match=r"ep\.db: add episodes: .* locked .* 0\.2s"):
                s.add(ep("t1", "right", True, 1))
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    with EpisodeStore(path) as s:
        s.add(ep("t1", "right", True, 1))
        assert len(s) == 1


class _RefusedOpens(EpisodeStore):
    """A store whose first ``refusals`` opens are answered "database is locked" without waiting,
    as SQLite answers two processes switching one new file to WAL at the same moment."""

    refusals = 0

    def _open_steps(self) -> int:
        if type(self).refusals > 0:
            type(self).refusals -= 1
            raise sqlite3.OperationalError("database is locked")
        return super()._open_steps()


def test_an_open_refused_as_locked_is_tried_again_until_the_busy_timeout(tmp_path):
    _RefusedOpens.refusals = 3
    with _RefusedOpens(tmp_path / "ep.db", busy_timeout=5.0) as s:
        s.add(ep("t1", "right", True, 1))
        assert len(s) == 1 and _RefusedOpens.refusals == 0
    _RefusedOpens.refusals = 10**9  # locked for good: a bounded wait, then the clear error
    with pytest.raises(StoreLockedError, match=r"ep\.db: open: .* locked .* 0\.05s"):
        _RefusedOpens(tmp_path / "ep.db", busy_timeout=0.05)
    _RefusedOpens.refusals = 0


def test_readonly_store_refuses_writes(tmp_path):
    path = tmp_path / "ep.db"
    EpisodeStore(path).close()
    with EpisodeStore(path, readonly=True) as s:
        with pytest.raises(StoreError, match="opened read-only"):
            s.add(ep("t1", "right", True, 1))
