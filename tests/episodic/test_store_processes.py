"""Crash safety and multi-process access of the episodic store, with real OS processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from replaybank.episodic import EpisodeStore

WORKER = str(Path(__file__).with_name("worker.py"))
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}


def _spawn(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, WORKER, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV
    )


def test_sigkill_mid_write_keeps_every_committed_episode(tmp_path):
    """8 writers killed with SIGKILL at random moments while writing batches of 7 episodes.

    After each kill the store opens, passes SQLite's integrity check, holds every batch the writer
    reported committed, and holds whole batches only (a transaction is all or nothing).
    """
    db = str(tmp_path / "ep.db")
    rng = np.random.default_rng(0)
    batch, kills, committed_total = 7, 8, 0
    for k in range(kills):
        proc = _spawn("write", db, f"k{k}", "100000", str(batch))
        assert proc.stdout is not None
        reported = [proc.stdout.readline().split()]  # the writer is up and has committed once
        time.sleep(float(rng.uniform(0.0, 0.3)))
        os.kill(proc.pid, signal.SIGKILL)
        # read the rest through the same buffered reader as the first line: communicate() reads the
        # raw pipe and would drop lines readline() had already buffered (seen: two batches "lost")
        out = proc.stdout.read()
        assert proc.stderr is not None
        proc.stderr.read()
        proc.wait()
        assert proc.returncode == -signal.SIGKILL
        reported += [line.split() for line in out.splitlines() if line.strip()]
        with EpisodeStore(db) as store:
            store.verify()
            stored = {r.episode.task.id for r in store.episodes() if r.episode.task.id.startswith(f"k{k}-")}
        ids = {tid for line in reported for tid in line}
        assert ids <= stored, f"kill {k}: committed episodes lost"
        # the batch whose COMMIT was under way when the kill came may be on disk without having
        # been reported (its WAL frames were written, the fsync had not returned); never half of one
        assert len(stored) % batch == 0 and len(stored) - len(ids) in (0, batch)
        committed_total += len(stored)
    with EpisodeStore(db) as store:
        assert len(store) == committed_total > kills * batch


def test_two_writers_and_two_readers_lose_nothing(tmp_path):
    """Two processes each write 150 episodes, one transaction each, while two processes read."""
    db = str(tmp_path / "ep.db")
    EpisodeStore(db).close()  # create the schema first so the readers can open read-only
    n = 150
    writers = [_spawn("write", db, name, str(n), "1") for name in ("a", "b")]
    readers = [_spawn("read", db, "2.0") for _ in range(2)]
    outs = [p.communicate(timeout=120) for p in writers + readers]
    for p, (_, err) in zip(writers + readers, outs):
        assert p.returncode == 0, err
    for _, (out, _) in zip(readers, outs[2:]):
        counts = [int(c) for c in out.split()]
        assert counts and counts == sorted(counts)  # readers see a growing store, never an error
    with EpisodeStore(db) as store:
        ids = {r.episode.task.id for r in store.episodes()}
        assert len(store) == store.attempt_count() == 2 * n
    assert ids == {f"{w}-{i}" for w in ("a", "b") for i in range(n)}


def test_writers_racing_to_create_a_new_store(tmp_path):
    """Three processes open a store that does not exist yet: one creates the schema, none fails."""
    db = str(tmp_path / "new" / "ep.db")
    writers = [_spawn("write", db, name, "20", "1") for name in ("a", "b", "c")]
    for p in writers:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    with EpisodeStore(db) as store:
        assert len(store) == store.attempt_count() == 60
