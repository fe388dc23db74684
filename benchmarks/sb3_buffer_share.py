"""The replay buffer's share of Stable-Baselines3 DQN's step time, and its cost per call, against
SB3's own ``ReplayBuffer`` in the same run (the issue-28 target: ``replaybank.sb3``'s
``PrioritizedReplayBuffer`` no larger a share than SB3's buffer).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/sb3_buffer_share.py --steps 20000 --seeds 0,1

For each seed, three CartPole-v1 runs in one process, in an order that rotates with the seed:
``PERDQN`` on ``replaybank.sb3.PrioritizedReplayBuffer`` (``per``), SB3's ``DQN`` on
``replaybank.sb3.ReplayBuffer`` (``uniform``) and on SB3's ``ReplayBuffer`` (``sb3``). ``--hyper
zoo`` (default) takes RL Zoo's CartPole hyperparameters from ``examples/sb3_per_dqn.py`` (batch 64,
128 gradient steps every 256 env steps); ``--hyper sb3`` SB3's DQN defaults (batch 32, one gradient
step every 4 env steps) with the Zoo's network and learning rate. ``add``, ``sample`` and
``update_priorities`` are timed around each call by thread CPU time and by wall clock (what the
timer itself records around an empty call is measured and taken off); the *CPU share* is their CPU
time over ``learn``'s process CPU time, the *wall share* the same by wall clock, the measure of
``examples/sb3_per_dqn.py``. On a shared machine the wall clock also counts the time other
processes held the CPU, so the CPU share is the steadier one. Numba kernels are compiled and torch
warmed by a short run of each buffer first; no evaluation runs inside the timed ``learn``.

Then the calls alone, outside training (``--micro``, default on): buffers of ``--fill``
CartPole transitions, ``add``, ``sample(batch)`` and ``update_priorities`` with a batch's
|TD errors|, interleaved, process CPU time, best of ``--rounds`` windows of ``--seconds``.
Prints two tables and writes ``benchmarks/results/sb3_buffer_share.json`` (``--out``).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[var] = "1"

import numpy as np  # noqa: E402

KINDS = ("per", "uniform", "sb3")
CALLS = ("add", "sample", "update_priorities")
EXAMPLE = Path(__file__).parents[1] / "examples" / "sb3_per_dqn.py"


def zoo() -> dict[str, Any]:
    """RL Zoo's CartPole-v1 DQN hyperparameters, as the example declares them."""
    spec = importlib.util.spec_from_file_location("sb3_per_dqn", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return dict(module.ZOO)


def hyperparameters(which: str) -> dict[str, Any]:
    hyper = zoo()
    if which == "sb3":  # SB3's DQN defaults for the replay schedule
        hyper.update(batch_size=32, train_freq=4, gradient_steps=1, target_update_interval=10_000)
    return hyper


def timed(fn: Callable[..., Any], clock: dict[str, list[int]], name: str) -> Callable[..., Any]:
    """``fn`` with its wall and thread CPU time added to ``clock[name]`` (``[calls, wall ns, cpu
    ns]``)."""
    wall_ns, cpu_ns = time.perf_counter_ns, time.thread_time_ns
    entry = clock[name]

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        w, c = wall_ns(), cpu_ns()
        try:
            return fn(*args, **kwargs)
        finally:
            entry[2] += cpu_ns() - c
            entry[1] += wall_ns() - w
            entry[0] += 1

    return wrapper


def timer_overhead(rounds: int = 5, calls: int = 20_000) -> tuple[float, float]:
    """What ``timed`` records around a call that does nothing: ``(wall ns, cpu ns)`` per call,
    the least of ``rounds``; subtracted from every timed call."""
    best = [float("inf"), float("inf")]
    for _ in range(rounds):
        clock = {"noop": [0, 0, 0]}
        fn = timed(lambda: None, clock, "noop")
        for _ in range(calls):
            fn()
        best = [min(best[0], clock["noop"][1] / calls), min(best[1], clock["noop"][2] / calls)]
    return best[0], best[1]


def build(kind: str, hyper: dict[str, Any], seed: int) -> Any:
    from stable_baselines3 import DQN

    import replaybank.sb3 as rsb3

    common = {**hyper, "seed": seed, "device": "cpu"}
    if kind == "per":
        return rsb3.PERDQN("MlpPolicy", "CartPole-v1", replay_buffer_kwargs={"alpha": 0.6, "beta": 0.4}, **common)
    if kind == "uniform":
        return DQN("MlpPolicy", "CartPole-v1", replay_buffer_class=rsb3.ReplayBuffer, **common)
    return DQN("MlpPolicy", "CartPole-v1", **common)


def train_run(
    kind: str, hyper: dict[str, Any], seed: int, steps: int, overhead: tuple[float, float]
) -> dict[str, Any]:
    """One ``learn``: the buffer's calls timed (timer overhead taken off), their share of
    ``learn``'s wall time and of its process CPU time."""
    model = build(kind, hyper, seed)
    buffer = model.replay_buffer
    clock = {name: [0, 0, 0] for name in CALLS}
    for name in CALLS:
        if hasattr(buffer, name):
            setattr(buffer, name, timed(getattr(buffer, name), clock, name))
    wall0, cpu0 = time.perf_counter(), time.process_time()
    model.learn(steps)
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    calls = {k: v[0] for k, v in clock.items() if v[0]}
    wall_ns = {k: clock[k][1] - overhead[0] * n for k, n in calls.items()}
    cpu_ns = {k: clock[k][2] - overhead[1] * n for k, n in calls.items()}
    return {
        "buffer": kind,
        "seed": seed,
        "steps": model.num_timesteps,
        "gradient_steps": model._n_updates,
        "wall_s": wall,
        "cpu_s": cpu,
        "buffer_wall_s": sum(wall_ns.values()) / 1e9,
        "buffer_cpu_s": sum(cpu_ns.values()) / 1e9,
        "share_wall": sum(wall_ns.values()) / 1e9 / wall,
        "share_cpu": sum(cpu_ns.values()) / 1e9 / cpu,
        "calls": calls,
        "cpu_us_per_call": {k: cpu_ns[k] / n / 1e3 for k, n in calls.items()},
        "wall_us_per_call": {k: wall_ns[k] / n / 1e3 for k, n in calls.items()},
        "load_average_after": os.getloadavg()[0],
    }


def micro(batch: int, fill: int, seconds: float, rounds: int) -> dict[str, dict[str, float]]:
    """Microseconds per call (process CPU time, best window) of each buffer's calls, outside training."""
    import gymnasium as gym
    import torch
    from stable_baselines3.common.buffers import ReplayBuffer as SB3ReplayBuffer

    import replaybank.sb3 as rsb3

    obs_space, act_space = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32), gym.spaces.Discrete(2)
    buffers = {
        "per": rsb3.PrioritizedReplayBuffer(100_000, obs_space, act_space, device="cpu", seed=0),
        "uniform": rsb3.ReplayBuffer(100_000, obs_space, act_space, device="cpu", seed=0),
        "sb3": SB3ReplayBuffer(100_000, obs_space, act_space, device="cpu"),
    }
    rng = np.random.default_rng(0)
    steps = [
        (rng.standard_normal((1, 4)).astype(np.float32), rng.standard_normal((1, 4)).astype(np.float32),
         rng.integers(0, 2, (1, 1)), np.ones(1, np.float32), rng.random(1) < 0.05)
        for _ in range(256)
    ]  # fmt: skip
    for buf in buffers.values():
        for i in range(fill):
            buf.add(*steps[i % 256], [{}])
    td = torch.rand(batch, 1).abs()
    per = buffers["per"]
    ids = per.sample(batch).ids
    fns: dict[str, Callable[[], object]] = {}
    for kind, buf in buffers.items():
        it = iter(range(1 << 62))
        fns[f"{kind} add"] = lambda buf=buf, it=it: buf.add(*steps[next(it) & 255], [{}])
        fns[f"{kind} sample({batch})"] = lambda buf=buf: buf.sample(batch)
    fns[f"per update_priorities({batch}), tensor"] = lambda: per.update_priorities(ids, td)
    td_np = td.numpy().reshape(-1)
    fns[f"per update_priorities({batch}), numpy"] = lambda: per.update_priorities(ids, td_np)
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(rounds):
        for name, fn in fns.items():
            calls, cpu0 = 0, time.process_time()
            while time.process_time() - cpu0 < seconds:
                for _ in range(100):
                    fn()
                calls += 100
            best[name] = min(best[name], (time.process_time() - cpu0) / calls * 1e6)
    return {name: {"cpu_us": us} for name, us in best.items()}


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kind in KINDS:
        mine = [r for r in runs if r["buffer"] == kind]
        if mine:
            out[kind] = {
                "share_cpu_mean": statistics.fmean(r["share_cpu"] for r in mine),
                "share_wall_mean": statistics.fmean(r["share_wall"] for r in mine),
                "cpu_us_per_call_mean": {
                    c: statistics.fmean(r["cpu_us_per_call"][c] for r in mine) for c in mine[0]["calls"]
                },
            }
    if "per" in out and "sb3" in out:
        by = {(r["buffer"], r["seed"]): r for r in runs}
        seeds = sorted({r["seed"] for r in runs})
        for clock in ("cpu", "wall"):
            diffs = [100 * (by["per", s][f"share_{clock}"] - by["sb3", s][f"share_{clock}"]) for s in seeds]
            out[f"per_minus_sb3_{clock}_share_points"] = diffs
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=20_000, help="env steps per run")
    p.add_argument("--seeds", default="0", help="comma-separated seeds")
    p.add_argument("--hyper", choices=["zoo", "sb3"], default="zoo")
    p.add_argument("--kinds", default=",".join(KINDS), help="which buffers (per, uniform, sb3)")
    p.add_argument("--micro", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--fill", type=int, default=50_000, help="transitions in the buffers timed alone")
    p.add_argument("--seconds", type=float, default=0.3, help="CPU seconds per timing window")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--out", default="benchmarks/results/sb3_buffer_share.json")
    args = p.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    hyper = hyperparameters(args.hyper)
    seeds = [int(s) for s in args.seeds.split(",")]
    kinds = [k for k in args.kinds.split(",") if k]
    load_before = os.getloadavg()
    for kind in kinds:  # compile the numba kernels and warm torch outside the timed runs
        build(kind, {**hyper, "learning_starts": 100, "train_freq": 50, "gradient_steps": 5}, 0).learn(300)
    overhead = timer_overhead()
    runs = []
    for n, seed in enumerate(seeds):
        order = kinds[n % len(kinds):] + kinds[: n % len(kinds)]
        for kind in order:
            r = train_run(kind, hyper, seed, args.steps, overhead)
            runs.append(r)
            calls = "  ".join(f"{c} {us:.1f}" for c, us in r["cpu_us_per_call"].items())
            print(f"seed {seed} {kind:8s} share of CPU {r['share_cpu']:6.2%}, of wall {r['share_wall']:6.2%} "
                  f"({r['cpu_s']:.1f} s CPU, {r['wall_s']:.1f} s wall); CPU us per call: {calls}; "
                  f"load {r['load_average_after']:.2f}", flush=True)  # fmt: skip
    result: dict[str, Any] = {
        "command": "benchmarks/sb3_buffer_share.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "machine": platform.platform(),
        "cpus": os.cpu_count(),
        "load_average_before": load_before,
        "hyper": {k: v for k, v in hyper.items() if k != "policy_kwargs"},
        "timer_overhead_ns": {"wall": overhead[0], "cpu": overhead[1]},
        "runs": runs,
        "summary": summary(runs),
    }
    if runs:
        print(f"\n{'buffer':8s} {'CPU share':>9s} {'wall share':>10s}  CPU us per call (add / sample / update)")
        for kind, s in result["summary"].items():
            if kind in KINDS:
                us = " / ".join(f"{v:.1f}" for v in s["cpu_us_per_call_mean"].values())
                print(f"{kind:8s} {s['share_cpu_mean']:9.2%} {s['share_wall_mean']:10.2%}  {us}")
        if "per_minus_sb3_cpu_share_points" in result["summary"]:
            for clock in ("cpu", "wall"):
                d = result["summary"][f"per_minus_sb3_{clock}_share_points"]
                print(f"PER minus SB3, {clock} share points per seed: " + " / ".join(f"{x:+.2f}" for x in d))
    if args.micro:
        batch = hyper["batch_size"]
        result["micro"] = {"batch": batch, "fill": args.fill, "seconds": args.seconds, "rounds": args.rounds,
                           "load_average": os.getloadavg(), "us": micro(batch, args.fill, args.seconds, args.rounds)}  # fmt: skip
        print(f"\ncalls alone (buffers of {args.fill:,}, CPU us, best of {args.rounds}; "
              f"load {result['micro']['load_average'][0]:.2f})")  # fmt: skip
        for name, v in result["micro"]["us"].items():
            print(f"  {name:38s} {v['cpu_us']:7.2f}")
    result["load_average_after"] = os.getloadavg()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")
    return result


if __name__ == "__main__":
    main()
