"""A separate process that writes to or reads from an episodic store (used by the process tests).

    python worker.py write DB PREFIX N BATCH   # N episodes in transactions of BATCH; prints each
                                               # committed batch's task ids, one per line, flushed
    python worker.py read DB SECONDS           # counts episodes until SECONDS pass; prints counts
"""

from __future__ import annotations

import sys
import time

from replaybank.episodic import Episode, EpisodeStore, Step, Task, Verdict


def episode(tid: str, i: int) -> Episode:
    task = Task(tid, f"request number {i} from {tid}", "fam", 1 + i % 3, (f"out {i}",))
    ok = i % 2 == 0
    return Episode(task, (Step(task.text, f"out {i}" if ok else "wrong"),), Verdict(ok, float(ok)),
                   generation=i % 4, seed=i)


def write(db: str, prefix: str, n: int, batch: int) -> None:
    with EpisodeStore(db, busy_timeout=30.0) as store:
        for start in range(0, n, batch):
            eps = [episode(f"{prefix}-{i}", i) for i in range(start, min(n, start + batch))]
            store.add_many(eps)
            print(" ".join(e.task.id for e in eps), flush=True)


def read(db: str, seconds: float) -> None:
    counts = []
    deadline = time.monotonic() + seconds
    with EpisodeStore(db, readonly=True) as store:
        while time.monotonic() < deadline:
            counts.append(len(store))
            store.episodes(success=True, limit=5)
            time.sleep(0.005)
    print(" ".join(map(str, counts)), flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "write":
        write(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
    else:
        read(sys.argv[2], float(sys.argv[3]))
