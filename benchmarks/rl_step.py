"""Per-step replay cost of a CleanRL-style DQN loop: replaybank against Stable-Baselines3's buffer.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/rl_step.py [--seconds 0.4]

CartPole-shaped transitions (obs and next_obs float32[4], action int64, reward float32, done),
capacity 10,000 (CleanRL's ``buffer_size``), batch 128; the buffer is filled before timing. Each
figure is the best of 3 windows of ``--seconds`` of this process's CPU time, contestants
interleaved so that load from other processes hits all alike. Rows:

* ``add``: one transition. replaybank ``add(**item)``; SB3 ``add(obs, next_obs, action, reward,
  done, infos)`` with a vector env's ``(1, ...)`` arrays, as its off-policy algorithms call it.
* ``extend (1 row)``: replaybank ``extend`` of the vector env's ``(1, ...)`` arrays.
* ``sample(128)``: replaybank numpy; ``as_tensors="torch"`` with ``sample_dtypes`` (reward and
  done float32); SB3 returns torch tensors.
* ``per env step``: one write + 1/10 of a sample (CleanRL trains every 10 steps).

SB3 columns are left out when stable-baselines3 is not installed. Prints a table and writes
``benchmarks/results/rl_step.json``. Targets: ``extend`` of one row <= 2x ``add``;
replaybank's write + sample per env step <= SB3's.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from collections.abc import Callable
from pathlib import Path

for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[var] = "1"

import numpy as np  # noqa: E402

import replaybank as rb  # noqa: E402

CAPACITY, BATCH, TRAIN_EVERY = 10_000, 128, 10


def replaybank_buffer() -> rb.ReplayBuffer:
    spec = {
        "obs": ((4,), "float32"),
        "next_obs": ((4,), "float32"),
        "action": ((), "int64"),
        "reward": ((), "float32"),
        "done": ((), "bool"),
    }
    buf = rb.ReplayBuffer(CAPACITY, spec=spec, seed=0, sample_dtypes={"done": "float32"})
    rng = np.random.default_rng(0)
    buf.extend(
        {
            "obs": rng.normal(size=(CAPACITY, 4)).astype(np.float32),
            "next_obs": rng.normal(size=(CAPACITY, 4)).astype(np.float32),
            "action": rng.integers(0, 2, CAPACITY),
            "reward": np.ones(CAPACITY, np.float32),
            "done": rng.random(CAPACITY) < 0.05,
        }
    )
    return buf


def sb3_buffer() -> object | None:
    try:
        import gymnasium as gym
        from stable_baselines3.common.buffers import ReplayBuffer
    except ImportError:
        return None
    buf = ReplayBuffer(
        CAPACITY,
        gym.spaces.Box(-np.inf, np.inf, (4,), np.float32),
        gym.spaces.Discrete(2),
        device="cpu",
        handle_timeout_termination=False,
    )
    obs = np.zeros((1, 4), np.float32)
    for _ in range(CAPACITY):
        buf.add(obs, obs, np.array([1]), np.array([1.0], np.float32), np.array([False]), [{}])
    return buf


def best_us(fns: dict[str, Callable[[], object]], seconds: float, rounds: int = 3) -> dict[str, float]:
    """Microseconds of this process's CPU time per call of each function: best of ``rounds``
    interleaved windows (on a shared machine wall time also counts the neighbours' turns)."""
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(rounds):
        for name, fn in fns.items():
            calls, start = 0, time.process_time()
            while time.process_time() - start < seconds:
                for _ in range(50):
                    fn()
                calls += 50
            best[name] = min(best[name], (time.process_time() - start) / calls * 1e6)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=0.4, help="length of one timing window")
    parser.add_argument("--out", default="benchmarks/results/rl_step.json")
    args = parser.parse_args()

    rbuf, sbuf = replaybank_buffer(), sb3_buffer()
    o = np.zeros(4, np.float32)
    o1 = o[None]
    a1, r1, d1 = np.array([1]), np.array([1.0], np.float32), np.array([False])
    fns: dict[str, Callable[[], object]] = {
        "rb add": lambda: rbuf.add(obs=o, next_obs=o, action=1, reward=1.0, done=False),
        "rb extend1": lambda: rbuf.extend({"obs": o1, "next_obs": o1, "action": a1, "reward": r1, "done": d1}),
        "rb sample": lambda: rbuf.sample(BATCH),
    }
    try:
        import torch

        torch.set_num_threads(1)
        fns["rb sample torch"] = lambda: rbuf.sample(BATCH, as_tensors="torch")
    except ImportError:
        pass
    if sbuf is not None:
        fns["sb3 add"] = lambda: sbuf.add(o1, o1, a1, r1, d1, [{}])  # type: ignore[attr-defined]
        fns["sb3 sample"] = lambda: sbuf.sample(BATCH)  # type: ignore[attr-defined]
    us = best_us(fns, args.seconds)

    def step(write: str, sample: str) -> float | None:
        if write not in us or sample not in us:
            return None
        return us[write] + us[sample] / TRAIN_EVERY

    rows = [
        ("add (1 transition)", us["rb add"], us.get("sb3 add")),
        ("extend (1 row of a vector env)", us["rb extend1"], us.get("sb3 add")),
        ("sample(128), numpy", us["rb sample"], None),
        ("sample(128), torch tensors", us.get("rb sample torch"), us.get("sb3 sample")),
        ("per env step: extend + sample/10 (torch)", step("rb extend1", "rb sample torch"), step("sb3 add", "sb3 sample")),
        ("per env step: add + sample/10 (torch)", step("rb add", "rb sample torch"), step("sb3 add", "sb3 sample")),
    ]
    fmt = lambda v: "-" if v is None else f"{v:.2f}"  # noqa: E731
    print(f"{'microseconds per call':44s} {'replaybank':>11s} {'SB3':>9s} {'ratio':>7s}")
    for name, mine, theirs in rows:
        ratio = "-" if mine is None or theirs is None else f"{mine / theirs:.2f}x"
        print(f"{name:44s} {fmt(mine):>11s} {fmt(theirs):>9s} {ratio:>7s}")
    extend_vs_add = us["rb extend1"] / us["rb add"]
    print(f"extend of one row / add: {extend_vs_add:.2f}x (target <= 2x)")
    versions = {"replaybank": rb.__version__, "numpy": np.__version__}
    if sbuf is not None:
        import stable_baselines3

        versions["stable_baselines3"] = stable_baselines3.__version__
    out = {
        "machine": platform.platform(),
        "load_average": os.getloadavg(),
        "clock": "process CPU time",
        "cpus": os.cpu_count(),
        "versions": versions,
        "capacity": CAPACITY,
        "batch": BATCH,
        "seconds_per_window": args.seconds,
        "us_per_call": us,
        "extend_one_over_add": extend_vs_add,
        "rows": [{"name": n, "replaybank_us": m, "sb3_us": t} for n, m, t in rows],
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
