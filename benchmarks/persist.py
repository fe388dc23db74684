"""Save and load throughput of ``ReplayBuffer.save`` / ``ReplayBuffer.load``.

Run ``PYTHONPATH=src .venv/bin/python benchmarks/persist.py [--capacity N] [--fill F]``. Prints the
best of ``--rounds`` wall times for save, load and ``load(mmap=True)`` of one buffer (obs float32[64],
action int64, reward float32, done bool; Prioritized sampler), and the MB/s of the column data.
Every save verifies nothing; every load verifies every sha256. The page cache is warm (the files
were just written), so this measures CPU cost (hashing, copying), not the disk.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[var] = "1"

import numpy as np  # noqa: E402

import replaybank as rb  # noqa: E402


def best(fn, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--capacity", type=int, default=500_000)
    parser.add_argument("--fill", type=float, default=1.0, help="fraction of the capacity filled")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    n = int(args.capacity * args.fill)
    buf = rb.ReplayBuffer(args.capacity, sampler=rb.Prioritized(), seed=0)
    buf.extend(
        {
            "obs": rng.random((n, 64), dtype=np.float32),
            "action": rng.integers(0, 18, n),
            "reward": rng.random(n, dtype=np.float32),
            "done": rng.random(n) < 0.005,
        }
    )
    mb = buf.storage.nbytes / 1e6
    root = Path(tempfile.mkdtemp(prefix="rb-bench-"))
    try:
        path = root / "save"
        t_save = best(lambda: buf.save(path), args.rounds)
        t_load = best(lambda: rb.ReplayBuffer.load(path), args.rounds)
        t_mmap = best(lambda: rb.ReplayBuffer.load(path, mmap=True), args.rounds)
    finally:
        shutil.rmtree(root)
    print(f"capacity {args.capacity:,}, {n:,} items, {mb:.0f} MB of columns, best of {args.rounds}")
    for name, t in (("save", t_save), ("load", t_load), ("load(mmap=True)", t_mmap)):
        print(f"  {name:<16} {t:7.3f} s  {mb / t:7.0f} MB/s")


if __name__ == "__main__":
    main()
