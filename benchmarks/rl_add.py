"""One transition written per env step: replaybank's ``add`` against Stable-Baselines3's, and where
replaybank's time goes.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/rl_add.py [--seconds 0.3] [--rounds 5]

CartPole-shaped transitions (obs and next_obs float32[4], action int64, reward float32, done bool;
the SB3 buffers hold SB3's own dtypes), capacity 10,000, filled before timing. Contestants run in
the same process, interleaved, each figure the best of ``--rounds`` windows of ``--seconds``. The
clock is this process's CPU time (``time.process_time``): on a shared machine a window's wall time
also counts the time other processes held the CPU, which swings between windows; the wall-clock
best is printed alongside. Rows:

* ``add(**item)``, Python scalars: ``buf.add(obs=o, next_obs=o2, action=1, reward=1.0, done=False)``,
  as a CleanRL-style loop calls it;
* ``add(**item)``, numpy scalars (``np.int64``, ``np.float32``, ``np.bool_``);
* ``extend`` of one row (a vector env's ``(1, ...)`` arrays);
* ``replaybank.sb3.ReplayBuffer.add``: SB3's interface, ``n_envs=1`` (timeouts handled);
* SB3's ``ReplayBuffer.add``, the reference (``handle_timeout_termination=True``, its default),
  and without timeout handling (``benchmarks/rl_step.py``'s SB3 column).

Then the parts of the first row, each timed alone: the keyword call itself (building ``**item``),
the column checks (``single.coerce``: shape, dtype, range of every value) and the write (the lock,
the slot, the five stores, the id), of which the five stores alone (``storage.write_one``).
Prints two tables and writes ``benchmarks/results/rl_add.json``.
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
from replaybank import single  # noqa: E402

CAPACITY = 10_000
SPEC = {
    "obs": ((4,), "float32"),
    "next_obs": ((4,), "float32"),
    "action": ((), "int64"),
    "reward": ((), "float32"),
    "done": ((), "bool"),
}


def best_us(
    fns: dict[str, Callable[[], object]], seconds: float, rounds: int
) -> dict[str, dict[str, float]]:
    """Microseconds per call of each function, CPU and wall clock: best of ``rounds`` windows."""
    best = {name: {"cpu": float("inf"), "wall": float("inf")} for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            calls, cpu0, wall0 = 0, time.process_time(), time.perf_counter()
            while time.process_time() - cpu0 < seconds:
                for _ in range(200):
                    fn()
                calls += 200
            cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
            best[name]["cpu"] = min(best[name]["cpu"], cpu / calls * 1e6)
            best[name]["wall"] = min(best[name]["wall"], wall / calls * 1e6)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--seconds", type=float, default=0.3, help="CPU seconds of one timing window"
    )
    parser.add_argument(
        "--rounds", type=int, default=5, help="windows per contestant (best is kept)"
    )
    parser.add_argument("--out", default="benchmarks/results/rl_add.json")
    args = parser.parse_args()

    buf = rb.ReplayBuffer(CAPACITY, spec=SPEC, seed=0)
    o, o2 = np.zeros(4, np.float32), np.ones(4, np.float32)
    for _ in range(CAPACITY):
        buf.add(obs=o, next_obs=o2, action=1, reward=1.0, done=False)
    item = {"obs": o, "next_obs": o2, "action": 1, "reward": 1.0, "done": False}
    np_item = {
        "obs": o,
        "next_obs": o2,
        "action": np.int64(1),
        "reward": np.float32(1.0),
        "done": np.bool_(False),
    }
    row = {"obs": o[None], "next_obs": o2[None], "action": np.array([1]), "reward": np.array([1.0], np.float32),
           "done": np.array([False])}  # fmt: skip
    fns: dict[str, Callable[[], object]] = {
        "add, Python scalars": lambda: buf.add(
            obs=o, next_obs=o2, action=1, reward=1.0, done=False
        ),
        "add, numpy scalars": lambda: buf.add(**np_item),
        "extend, one row": lambda: buf.extend(row),
    }
    versions = {"replaybank": rb.__version__, "numpy": np.__version__}
    try:
        import gymnasium as gym
        import stable_baselines3
        from stable_baselines3.common.buffers import ReplayBuffer as SB3ReplayBuffer

        from replaybank.sb3 import ReplayBuffer as AdapterBuffer
    except ImportError:
        print("stable-baselines3 not installed: its rows are left out")
    else:
        versions["stable_baselines3"] = stable_baselines3.__version__
        spaces = (gym.spaces.Box(-np.inf, np.inf, (4,), np.float32), gym.spaces.Discrete(2))
        theirs = SB3ReplayBuffer(CAPACITY, *spaces, device="cpu")
        plain = SB3ReplayBuffer(CAPACITY, *spaces, device="cpu", handle_timeout_termination=False)
        adapter = AdapterBuffer(CAPACITY, *spaces, device="cpu", seed=0)
        step = (o[None], o2[None], np.array([1]), np.array([1.0], np.float32), np.array([False]))
        for sb in (theirs, plain, adapter):
            for _ in range(CAPACITY):
                sb.add(*step, [{}])
        fns["replaybank.sb3.ReplayBuffer.add"] = lambda: adapter.add(*step, [{}])
        fns["SB3 ReplayBuffer.add (reference)"] = lambda: theirs.add(*step, [{}])
        fns["SB3 add, timeouts not handled"] = lambda: plain.add(*step, [{}])

    # the parts of the first row, each alone
    plan = buf._plan()
    assert plan is not None
    values = single.coerce(plan, item, buf._castable, buf._cast, batched=False)
    assert values is not None
    take_kwargs = lambda **kw: kw  # noqa: E731
    parts: dict[str, Callable[[], object]] = {
        "keyword call (**item)": lambda: take_kwargs(
            obs=o, next_obs=o2, action=1, reward=1.0, done=False
        ),
        "column checks (single.coerce)": lambda: single.coerce(
            plan, item, buf._castable, buf._cast, batched=False
        ),
        "write: lock, slot, stores, id": lambda: buf._write_one(values),
        "  of which the 5 stores": lambda: buf.storage.write_one(3, values),
    }
    load = os.getloadavg()
    us = best_us({**fns, **parts}, args.seconds, args.rounds)
    ref = us.get("SB3 ReplayBuffer.add (reference)", {}).get("cpu")
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} CPUs\n")
    print(f"{'one transition, microseconds':36s} {'CPU':>7s} {'wall':>7s} {'/ SB3':>7s}")
    for name in fns:
        cpu, wall = us[name]["cpu"], us[name]["wall"]
        ratio = f"{cpu / ref:.2f}x" if ref else "-"
        print(f"{name:36s} {cpu:7.2f} {wall:7.2f} {ratio:>7s}")
    print(f"\n{'add, Python scalars: its parts':36s} {'CPU':>7s}")
    for name in parts:
        print(f"{name:36s} {us[name]['cpu']:7.2f}")
    out = {
        "machine": platform.platform(),
        "cpus": os.cpu_count(),
        "load_average": load,
        "versions": versions,
        "capacity": CAPACITY,
        "seconds_per_window": args.seconds,
        "rounds": args.rounds,
        "clock": "process CPU time (best window); wall clock best alongside",
        "us_per_call": us,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
