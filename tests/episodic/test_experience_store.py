"""Insights and workflows in the store: provenance, deduplication, checked reads, the v1 -> v2 migration."""

from __future__ import annotations

import json
import sqlite3

import pytest

from replaybank.episodic import SCHEMA_VERSION, Episode, EpisodeStore, Step, Task, Verdict
from replaybank.episodic.experience import Arg, CallTemplate, Insight, Slot, Workflow
from replaybank.episodic.store import CorruptStoreError, SchemaVersionError, StoreError
from replaybank.errors import InvalidArgumentError, InvalidTypeError

# The schema of version 1, as that version wrote it (kept here so that the migration is tested
# against the real old file, not against what this version would make of it).
V1_SCHEMA = """
CREATE TABLE episodes (
    id INTEGER PRIMARY KEY AUTOINCREMENT, fingerprint TEXT NOT NULL UNIQUE, task_id TEXT NOT NULL,
    task_text TEXT NOT NULL, family TEXT NOT NULL, difficulty INTEGER NOT NULL,
    success INTEGER NOT NULL, reward REAL NOT NULL, source TEXT NOT NULL, output TEXT NOT NULL,
    body TEXT NOT NULL);
CREATE TABLE attempts (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    episode_id INTEGER NOT NULL REFERENCES episodes(id) ON DELETE CASCADE,
    generation INTEGER NOT NULL, adapter TEXT NOT NULL, seed INTEGER, replayed TEXT NOT NULL,
    started_at REAL NOT NULL, finished_at REAL NOT NULL);
CREATE INDEX attempts_episode ON attempts(episode_id);
CREATE INDEX attempts_generation ON attempts(generation, episode_id);
CREATE INDEX episodes_task ON episodes(task_id);
CREATE INDEX episodes_success ON episodes(success, id);
PRAGMA user_version = 1;
"""

TASK = Task("t1", "Add tea to the cart, qty 7.", "cart.add", 1, ("<<qx cart.add; sku=tea; qty=7>>",))
EPISODE = Episode(TASK, (Step(TASK.text, TASK.expected[0]),), Verdict(True, 1.0), generation=1)


def workflow(episodes=(1,), generation=1) -> Workflow:
    return Workflow(
        ("Add ", " to the cart, qty ", "."),
        (Slot("s0", "sku", "text", form="verbatim"), Slot("s1", "int", "text", form="verbatim")),
        (CallTemplate("cart.add", (Arg("sku", slot="s0"), Arg("qty", slot="s1"))),),
        family="cart.add", episodes=episodes, generation=generation,
    )


def make_v1(path) -> None:
    con = sqlite3.connect(path)
    con.executescript(V1_SCHEMA)
    con.execute(
        "INSERT INTO episodes (fingerprint, task_id, task_text, family, difficulty, success, reward,"
        " source, output, body) VALUES (?,?,?,?,?,?,?,?,?,?)",
        (EPISODE.fingerprint, TASK.id, TASK.text, TASK.family, 1, 1, 1.0, "agent", EPISODE.output,
         json.dumps(EPISODE.to_dict())),
    )
    con.execute("INSERT INTO attempts (episode_id, generation, adapter, seed, replayed, started_at, finished_at)"
                " VALUES (1, 1, '', NULL, '[]', 0, 0)")
    con.commit()
    con.close()


def tables(path) -> set[str]:
    con = sqlite3.connect(path)
    try:
        return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    finally:
        con.close()


def test_insight_round_trip_provenance_and_dedup(tmp_path):
    with EpisodeStore(tmp_path / "ep.db") as s:
        a, b = s.add(EPISODE), s.add(Episode(TASK, (Step(TASK.text, "no"),), Verdict(False, 0.0), generation=2))
        lesson = Insight("Copy the qty", "when a qty is stated", "Write qty=7 for 'qty 7'.", "failure", (b,), 2)
        first = s.add_insight(lesson)
        again = s.add_insight(Insight(lesson.title, lesson.description, lesson.content, "failure", (a,), 3))
        other = s.add_insight(Insight("Keep the sku", "d", "c", "success", (a,), 3))
        assert first == again != other
        [got] = s.insights(outcome="failure")
        assert got.id == first and got.insight.episodes == (a, b) and got.insight.generation == 2
        assert got.insight.title == "Copy the qty" and got.insight.outcome == "failure"
        assert [x.id for x in s.insights()] == [first, other]
        assert [x.id for x in s.insights(outcome="success")] == [other]
        assert [x.id for x in s.insights(episode=b)] == [first]
        assert [x.id for x in s.insights(limit=1)] == [first]
        assert s.workflows() == []
        s.verify()


def test_workflow_round_trip_and_levels_kept_apart(tmp_path):
    with EpisodeStore(tmp_path / "ep.db") as s:
        e = s.add(EPISODE)
        wid = s.add_workflow(workflow((e,)))
        assert s.add_workflow(workflow((e,), generation=5)) == wid
        [got] = s.workflows()
        assert got.id == wid and got.workflow == workflow((e,))
        assert s.insights() == [] and s.workflows(episode=e + 1) == []


def test_experience_adds_are_refused_naming_the_problem(tmp_path):
    with EpisodeStore(tmp_path / "ep.db") as s:
        e = s.add(EPISODE)
        with pytest.raises(InvalidArgumentError, match="no episodes"):
            s.add_insight(Insight("t", "d", "c", "success"))
        with pytest.raises(InvalidArgumentError, match=r"episodes \[99\] are not in the store"):
            s.add_insight(Insight("t", "d", "c", "success", (e, 99)))
        with pytest.raises(InvalidArgumentError, match="outcome 'meh'"):
            s.add_insight(Insight("t", "d", "c", "meh", (e,)))  # type: ignore[arg-type]
        with pytest.raises(InvalidTypeError, match="title 3 is not a string"):
            s.add_insight(Insight(3, "d", "c", "success", (e,)))  # type: ignore[arg-type]
        with pytest.raises(InvalidTypeError, match="is not an Insight"):
            s.add_insight(workflow((e,)))  # type: ignore[arg-type]
        broken = Workflow(("Add ", "."), workflow().slots, workflow().calls, episodes=(e,))
        with pytest.raises(InvalidArgumentError, match="not well-formed: pattern has 2 pieces for 2 text slots"):
            s.add_workflow(broken)
        assert s.insights() == [] and s.workflows() == []  # nothing half-written


@pytest.mark.parametrize(("sql", "message"), [
    ("UPDATE experiences SET body = replace(body, 'qty', 'QTY')", "experience 1: body does not match its fingerprint"),
    ("UPDATE experiences SET body = '{\"pattern\": 3'", "experience 1: .*Expecting"),
    ("UPDATE experiences SET body = '[1]'", "experience 1: body is a JSON list"),
    ("UPDATE experiences SET outcome = 'failure'", "experience 1: outcome column 'failure' disagrees"),
    ("UPDATE experiences SET generation = -4", r"experience 1: body.generation -4 is not an integer in \[0"),
    ("DELETE FROM provenance", "experience 1: no provenance"),
    ("UPDATE experiences SET body = replace(body, '\"type\": \"sku\"', '\"type\": 5')",
     r"experience 1: body.slots\[0\].type 5 is not a string"),
])
def test_a_tampered_experience_row_is_a_store_error_naming_it(tmp_path, sql, message):
    path = tmp_path / "ep.db"
    with EpisodeStore(path) as s:
        s.add_workflow(workflow((s.add(EPISODE),)))
    con = sqlite3.connect(path)
    con.execute(sql)
    con.commit()
    con.close()
    with EpisodeStore(path, readonly=True) as s:
        with pytest.raises(CorruptStoreError, match=message):
            s.workflows()
        with pytest.raises(CorruptStoreError, match="experience 1"):
            s.verify()
        assert len(s.episodes()) == 1  # the episodes still read


def test_an_experience_of_an_unknown_level_fails_verify(tmp_path):
    path = tmp_path / "ep.db"
    with EpisodeStore(path) as s:
        s.add_workflow(workflow((s.add(EPISODE),)))
    con = sqlite3.connect(path)
    con.execute("UPDATE experiences SET level = 'plan'")
    con.commit()
    con.close()
    with EpisodeStore(path, readonly=True) as s:
        assert s.workflows() == []
        with pytest.raises(CorruptStoreError, match="experience 1: level 'plan' is not"):
            s.verify()


def test_a_version_1_store_migrates_in_place_on_a_write_open(tmp_path):
    path = tmp_path / "v1.db"
    make_v1(path)
    with EpisodeStore(path, readonly=True) as s:  # read-only: read as it is, not migrated
        assert s.schema_version == 1
        assert [e.episode for e in s.episodes()] == [EPISODE]
        assert s.insights() == [] and s.workflows() == []
        s.verify()
        with pytest.raises(StoreError, match="read-only"):
            s.add_insight(Insight("t", "d", "c", "success", (1,)))
    assert "experiences" not in tables(path)
    with EpisodeStore(path) as s:
        assert s.schema_version == SCHEMA_VERSION == 2
        assert [e.episode for e in s.episodes()] == [EPISODE] and s.attempt_count() == 1
        wid = s.add_workflow(workflow((1,)))
        assert s.workflows()[0].id == wid
        s.verify()
    assert {"experiences", "provenance"} <= tables(path)
    with EpisodeStore(path) as s:  # opening again: nothing to migrate, nothing lost
        assert len(s.workflows()) == 1 and len(s) == 1


def test_a_failed_migration_leaves_the_version_1_file_as_it_was(tmp_path):
    path = tmp_path / "v1.db"
    make_v1(path)
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE provenance (x)")  # the migration's second table cannot be created
    con.commit()
    con.close()
    with pytest.raises(StoreError, match="migrate the store from schema version 1 to 2"):
        EpisodeStore(path)
    assert "experiences" not in tables(path)  # the first table was rolled back with it
    with EpisodeStore(path, readonly=True) as s:
        assert s.schema_version == 1 and len(s) == 1


def test_a_newer_schema_is_still_refused(tmp_path):
    path = tmp_path / "ep.db"
    EpisodeStore(path).close()
    con = sqlite3.connect(path)
    con.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    con.close()
    with pytest.raises(SchemaVersionError, match=f"schema version {SCHEMA_VERSION + 1} is newer"):
        EpisodeStore(path)


def test_a_replayed_episode_is_its_own_source_never_merged_with_the_agents(tmp_path):
    replayed = Episode(TASK, EPISODE.steps, EPISODE.verdict, generation=1, replayed=(1,), source="replayed")
    assert replayed.fingerprint != EPISODE.fingerprint  # same task and output, another memory
    assert Episode.from_dict(replayed.to_dict()) == replayed
    with EpisodeStore(tmp_path / "ep.db") as s:
        a, r = s.add(EPISODE), s.add(replayed)
        assert a != r
        assert [e.id for e in s.episodes(source="replayed")] == [r]
        s.verify()
    with pytest.raises(InvalidArgumentError, match="source 'robot' is not one of agent, demo, replayed"):
        Episode.from_dict({**replayed.to_dict(), "source": "robot"})
