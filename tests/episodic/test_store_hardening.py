"""The store refuses what would hang, poison or be misread, naming the field or the id."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys

import numpy as np
import pytest

from replaybank.episodic import (
    CorruptStoreError,
    Episode,
    EpisodeStore,
    SchemaVersionError,
    Step,
    StoreError,
    Task,
    Verdict,
)
from replaybank.errors import ReplayBankError


def ep(**kw) -> Episode:
    t = Task("t1", "2+2?", "f", 1, ("4",))
    return Episode(t, (Step(t.text, "4", "4", "ok"),), Verdict(True, 1.0), **{"generation": 1, **kw})


def _run_bounded(code: str, *args: str) -> subprocess.CompletedProcess:
    # a child process, so that a regression hangs the child for 20 s, not the suite
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=20,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_is_refused_at_once_by_the_store_and_the_cli(tmp_path):
    fifo = tmp_path / "ep.db"
    os.mkfifo(fifo)
    with pytest.raises(StoreError, match="not a regular file"):
        EpisodeStore(fifo)
    with pytest.raises(StoreError, match="not a regular file"):
        EpisodeStore(fifo, readonly=True)
    done = _run_bounded("import sys; from replaybank.cli import main; sys.exit(main())", "store", "inspect", str(fifo))
    assert done.returncode != 0 and "not a regular file" in done.stderr
    os.remove(fifo)
    os.mkfifo(f"{fifo}-wal")
    with pytest.raises(StoreError, match="wal file: not a regular file"):
        EpisodeStore(fifo)


def test_symlinks_are_refused_on_open_and_on_write(tmp_path):
    real = tmp_path / "real.db"
    with EpisodeStore(real) as s:
        s.add(ep())
    link = tmp_path / "link.db"
    link.symlink_to(real)
    for readonly in (True, False):
        with pytest.raises(StoreError, match="is a symlink"):
            EpisodeStore(link, readonly=readonly)
    dangling = tmp_path / "dangling.db"
    dangling.symlink_to(tmp_path / "elsewhere" / "x.db")
    with pytest.raises(StoreError, match="is a symlink"):
        EpisodeStore(dangling)
    assert not (tmp_path / "elsewhere").exists()


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({"seed": float("nan")}, "seed"),
        ({"generation": "abc"}, "generation"),
        ({"generation": 1.5}, "generation"),
        ({"generation": -1}, "generation"),
        ({"replayed": ("x",)}, r"replayed\[0\]"),
        ({"replayed": (-3,)}, r"replayed\[0\]"),
        ({"adapter": 5}, "adapter"),
        ({"seed": 2**64}, "seed"),
        ({"started_at": float("inf")}, "started_at"),
        ({"context": ({"role": 1},),}, r"context\[0\]"),
        ({"source": "oracle"}, "source"),
    ],
)
def test_bad_fields_are_refused_by_add_naming_the_field(tmp_path, kw, field):
    with EpisodeStore(tmp_path / "ep.db") as store:
        with pytest.raises(ReplayBankError, match=rf"episode 0 \(task 't1'\)[:.]? ?.*{field}"):
            store.add(ep(**kw))
        assert len(store) == 0 and store.episodes() == []


@pytest.mark.parametrize(
    ("task", "field"),
    [(Task("t1", "x", difficulty="hard"), "difficulty"), (Task("t1", "x", expected="4"), "expected"),
     (Task("t1", "\ud800"), "text")],
)
def test_bad_task_fields_are_refused(tmp_path, task, field):
    bad = Episode(task, (Step("x", "4"),), Verdict(True, 1.0))
    with EpisodeStore(tmp_path / "ep.db") as store, pytest.raises(ReplayBankError, match=f"task.{field}"):
        store.add(bad)


def test_numpy_scalars_are_taken_and_stored_as_python_numbers(tmp_path):
    e = Episode(Task("t", "x", difficulty=np.int64(2)), (Step("x", "4"),),
                Verdict(np.bool_(True), np.float32(0.5), {"a": np.float64(0.25)}),
                generation=np.int64(3), seed=np.int32(7), replayed=(np.int64(1),))
    with EpisodeStore(tmp_path / "ep.db") as store:
        got = store.get(store.add(e)).episode
    assert (got.verdict.reward, got.generation, got.seed, got.task.difficulty) == (0.5, 3, 7, 2)
    assert type(got.verdict.reward) is float and type(got.generation) is int


def _tamper(path, body: str) -> None:
    con = sqlite3.connect(path)
    con.execute("UPDATE episodes SET body = ? WHERE id = 1", (body,))
    con.commit()
    con.close()


@pytest.mark.parametrize(
    ("body", "why"),
    [
        ("not json", "Expecting value"),
        ("[" * 200_000 + "]" * 200_000, "nested too deep"),
        ('{"task": {"id": "t1", "text": "x"}, "steps": [{"prompt": "x", "output": "4"}],'
         ' "verdict": {"success": true, "reward": 1e999}}', "out of range"),
        ('{"task": {"id": "t1", "text": "x"}, "verdict": {"success": true, "reward": 1}}', "missing key 'steps'"),
        ('{"task": {"id": "t1", "text": "x"}, "steps": [{"prompt": "x", "output": "4"}],'
         ' "verdict": {"success": true, "reward": NaN}}', "NaN is not a number JSON allows"),
        ('{"task": {"id": "t1", "text": "x"}, "steps": [{"prompt": "x", "output": "4"}],'
         ' "verdict": {"success": true, "reward": 1}, "generation": "abc"}', "generation"),
        ("[1, 2]", "not a mapping"),
    ],
    ids=["not-json", "deep", "1e999", "no-steps", "nan", "generation", "list"],
)
def test_a_tampered_body_is_a_library_error_naming_the_id_and_verify_reports_it(tmp_path, body, why):
    path = tmp_path / "ep.db"
    with EpisodeStore(path) as store:
        store.add(ep())
        store.add(Episode(Task("t2", "y"), (Step("y", "5"),), Verdict(False, 0.0)))
    _tamper(path, body)
    with EpisodeStore(path, readonly=True) as store:
        with pytest.raises(CorruptStoreError, match=rf"episode 1: .*{why}"):
            store.get(1)
        with pytest.raises(CorruptStoreError, match="episode 1"):
            store.episodes()
        assert store.get(2).episode.task.id == "t2"  # the other episode still reads
        with pytest.raises(CorruptStoreError, match=rf"1 bad records: episode 1: .*{why}"):
            store.verify()


def test_verify_reports_an_altered_body_and_attempt_columns(tmp_path):
    path = tmp_path / "ep.db"
    with EpisodeStore(path) as store:
        store.add(ep())
        store.verify()
    body = ep().to_dict()
    body["steps"][0]["output"] = "5"
    _tamper(path, json.dumps(body))
    con = sqlite3.connect(path)
    con.execute("UPDATE attempts SET seed = 'abc'")
    con.commit()
    con.close()
    with EpisodeStore(path, readonly=True) as store, pytest.raises(CorruptStoreError) as err:
        store.verify()
    assert "does not match its fingerprint" in str(err.value) and "attempt 1: a column" in str(err.value)


def test_a_negative_schema_version_is_refused_on_open(tmp_path):
    path = tmp_path / "ep.db"
    EpisodeStore(path).close()
    con = sqlite3.connect(path)
    con.execute("PRAGMA user_version = -1")
    con.close()
    for readonly in (False, True):
        with pytest.raises(SchemaVersionError, match="schema version -1 is not a version"):
            EpisodeStore(path, readonly=readonly)


def test_verdict_with_a_numpy_float_reward_is_valid_input(tmp_path):
    with EpisodeStore(tmp_path / "ep.db") as store:
        store.add(Episode(Task("t", "x"), (Step("x", "4"),), Verdict(True, np.float32(0.5))))
        assert store.episodes()[0].episode.verdict.reward == 0.5


@pytest.mark.parametrize("busy", [float("nan"), float("inf"), -1, "10"])
def test_a_bad_busy_timeout_is_refused(tmp_path, busy):
    with pytest.raises(ReplayBankError, match="busy_timeout"):
        EpisodeStore(tmp_path / "ep.db", busy_timeout=busy)


def test_a_tampered_attempt_generation_names_the_episode(tmp_path):
    path = tmp_path / "ep.db"
    with EpisodeStore(path) as store:
        store.add(ep())
    con = sqlite3.connect(path)
    con.execute("UPDATE attempts SET generation = 'abc'")
    con.commit()
    con.close()
    with EpisodeStore(path, readonly=True) as store:
        with pytest.raises(CorruptStoreError, match="episode 1: attempt generation 'abc' is not an integer"):
            store.get(1)
        with pytest.raises(CorruptStoreError, match="attempt 1: a column"):
            store.verify()


def test_verify_reports_columns_that_disagree_with_the_body(tmp_path):
    path = tmp_path / "ep.db"
    with EpisodeStore(path) as store:
        store.add(ep())
        store.add(Episode(Task("t2", "y", "g", 2), (Step("y", "5"),), Verdict(False, 0.25)))
        store.verify()
    con = sqlite3.connect(path)
    con.execute("UPDATE episodes SET success = 0 WHERE id = 1")  # a failure now, to success= filters
    con.commit()
    con.close()
    with EpisodeStore(path, readonly=True) as store:
        with pytest.raises(CorruptStoreError, match="1 bad records: episode 1: its columns disagree"):
            store.verify()


def _bomb(depth: int, kind: str):
    x: object = "leaf"
    for _ in range(depth):
        x = {"a": x} if kind == "dict" else [x]
    return x


@pytest.mark.parametrize("kind", ["dict", "list"])
@pytest.mark.parametrize("where", ["message", "content", "context"])
def test_a_nested_context_bomb_is_refused_naming_the_field_and_the_bound(tmp_path, kind, where):
    from replaybank.episodic.fields import MAX_DEPTH

    bomb = _bomb(100_000, kind)
    context = {"message": (bomb,), "content": ({"role": "user", "content": bomb},), "context": bomb}[where]
    with EpisodeStore(tmp_path / "ep.db") as store:
        with pytest.raises(ReplayBankError, match=rf"episode 0\.context.*nested deeper than {MAX_DEPTH} levels"):
            store.add(ep(context=context))
        cyclic: list = []
        cyclic.append(cyclic)
        with pytest.raises(ReplayBankError, match="nested deeper than"):
            store.add(ep(context=(cyclic,)))
        assert len(store) == 0


def test_a_stored_body_nested_past_the_bound_but_within_json_is_corrupt(tmp_path):
    path = tmp_path / "ep.db"
    with EpisodeStore(path) as store:
        store.add(ep())
    body = ep().to_dict()
    body["context"] = [_bomb(50, "dict")]
    _tamper(path, json.dumps(body))
    with EpisodeStore(path, readonly=True) as store, pytest.raises(CorruptStoreError, match="nested deeper than"):
        store.get(1)


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"limit": "1; DROP TABLE episodes"}, r"limit '1; DROP TABLE episodes' is not an integer \(str\)"),
        ({"limit": "3"}, r"limit '3' is not an integer"),
        ({"limit": 1.5}, r"limit 1.5 is not an integer \(float\)"),
        ({"limit": True}, r"limit True is not an integer \(bool\)"),
        ({"limit": -1}, r"limit -1 is not an integer in \[0, "),
        ({"generation": "1; DROP TABLE episodes"}, r"generation .* is not an integer \(str\)"),
        ({"generation": [1, "2"]}, r"generation\[1\] '2' is not an integer"),
        ({"task_id": ["t1"]}, r"task_id \['t1'\] is not a string"),
        ({"success": "yes"}, r"success 'yes' is not True or False"),
    ],
)
def test_bad_query_arguments_are_refused_by_name_and_never_reach_the_sql(tmp_path, kw, match):
    with EpisodeStore(tmp_path / "ep.db") as store:
        store.add(ep())
        with pytest.raises(ReplayBankError, match=r"EpisodeStore\.episodes " + match):
            store.episodes(**kw)
        assert len(store) == 1 and [r.id for r in store.episodes(limit=1)] == [1]
        assert store.episodes(limit=0) == []
        with pytest.raises(ReplayBankError, match=r"EpisodeStore\.get episode_id '1' is not an integer"):
            store.get("1")  # type: ignore[arg-type]
