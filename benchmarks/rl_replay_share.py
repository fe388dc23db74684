"""Share of DQN step time spent in replay (sample + priority update), CartPole-v1, batch 128.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/rl_replay_share.py [--steps 6000]

Runs the real ``replaybank.rl.dqn.train`` loop for each replay scheme (1,000 exploration steps,
then one gradient step per env step) and reads its timers: ``replay`` = ``buffer.sample`` +
``buffer.update_priorities``; ``extend`` (writing transitions) is reported apart; the share is of
the training loop's wall time, evaluation excluded. Numba kernels are compiled before timing. The
reference row is the least any replay can cost: a plain numpy ring buffer sampled uniformly (no
ids, no weights, no locking), timed in this run. Prints a table, writes
``benchmarks/results/rl_replay_share.json``. Target: replay <= 10% of step time.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path

for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[var] = "1"

import numpy as np  # noqa: E402

import replaybank as rb  # noqa: E402
from replaybank.rl.dqn import REPLAY_NAMES, Args, make_sampler, train  # noqa: E402

BATCH = 128


def warm_up() -> None:
    """Compile the numba tree kernels outside the timed runs."""
    for name in REPLAY_NAMES:
        buf = rb.ReplayBuffer(1000, sampler=make_sampler(name, 0.6, 0.4), seed=0)
        buf.extend({"x": np.zeros(500, np.float32)})
        b = buf.sample(BATCH)
        if b.weights is not None:
            buf.update_priorities(b.ids, np.ones(BATCH))


def numpy_ring_reference(calls: int = 5000) -> float:
    """Microseconds per uniform batch from plain numpy arrays shaped like the DQN's columns."""
    n, rng = 50_000, np.random.default_rng(0)
    cols = {"obs": np.zeros((n, 4), np.float32), "action": np.zeros(n, np.int64), "ret": np.zeros(n, np.float32),
            "discount": np.zeros(n, np.float32), "next_obs": np.zeros((n, 4), np.float32)}
    start = time.perf_counter()
    for _ in range(calls):
        idx = rng.integers(0, n, BATCH)
        _ = {k: v[idx] for k, v in cols.items()}
    return (time.perf_counter() - start) / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6000, help="env steps per scheme (default 6000)")
    parser.add_argument("--out", default="benchmarks/results/rl_replay_share.json")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    warm_up()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in REPLAY_NAMES:
            m = train(Args(replay=name, total_steps=args.steps, learning_starts=1000, batch_size=BATCH,
                           eval_every=args.steps, eval_episodes=1, stop_when_solved=False, out=f"{tmp}/{name}"),
                      log=False)
            g = m["gradient_steps"]
            rows.append({
                "replay": name, "env_steps": m["env_steps"], "gradient_steps": g,
                "step_ms": m["loop_seconds"] / m["env_steps"] * 1e3,
                "replay_us_per_update": m["replay_seconds"] / g * 1e6,
                "replay_share": m["replay_time_share"], "extend_share": m["extend_time_share"],
            })
    ref_us = numpy_ring_reference()
    print(f"DQN on CartPole-v1, batch {BATCH}, {args.steps:,} env steps per scheme (1 thread)\n")
    print(f"{'replay':<16}{'step ms':>9}{'replay us/update':>18}{'replay share':>14}{'extend share':>14}")
    for r in rows:
        print(f"{r['replay']:<16}{r['step_ms']:>9.2f}{r['replay_us_per_update']:>18.0f}"
              f"{r['replay_share']:>14.1%}{r['extend_share']:>14.1%}")
    print(f"{'numpy ring ref':<16}{'':>9}{ref_us:>18.0f}{'':>14}{'':>14}")
    print("\ntarget: replay share <= 10%: " + ", ".join(
        f"{r['replay']} {'met' if r['replay_share'] <= 0.10 else 'MISSED'}" for r in rows))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({
        "batch": BATCH, "steps": args.steps, "rows": rows, "numpy_ring_reference_us": ref_us,
        "machine": {"python": platform.python_version(), "cpu_count": os.cpu_count(),
                    "load_average": os.getloadavg()},
    }, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
