"""Sharded buffer throughput on Ray against the in-process buffer, and the cost of a round trip.

Run ``.venv/bin/python benchmarks/dist.py`` (needs the ``dist`` extra). Prints a table and writes
``benchmarks/results/dist.json``. Every figure is measured in this run, on this machine:

* every items/s figure is the best of two ``--seconds`` windows;
* ``add``: items/s written in batches of ``--chunk`` (256) items: in-process ``extend``; sharded
  ``extend`` one call at a time (latency bound); sharded ``extend_async`` with ``--depth`` calls in
  flight spread over the shards (the aggregate rate many actors would see);
* ``sample+update``: sampled transitions/s of ``sample(256)`` + ``update_priorities`` (PER, alpha
  0.6, beta 0.4) on a full buffer: in-process; sharded one call at a time (what one learner sees:
  two round trips per sample, one per update); sharded with ``--depth`` independent samplers in
  flight (``sample_async``, the aggregate of several learners or a prefetching one);
* ``round trip``: microseconds (mean over 1 s) of a no-op actor call (``ping``), of the per-shard stats call
  sampling starts with, against an in-process method call.

Workload (as ``benchmarks/buffers.py``): item = obs float32[64], action int64, reward float32,
done bool; capacity ``--capacity`` in total (split over the shards). RLlib's
``PrioritizedEpisodeReplayBuffer`` is not measured: see docs/dist.md.
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

BATCH = 256


def data(n: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {
        "obs": rng.random((n, 64), dtype=np.float32),
        "action": rng.integers(0, 18, n),
        "reward": rng.random(n, dtype=np.float32),
        "done": rng.random(n) < 0.01,
    }


def rate(step: Callable[[], int], seconds: float, rounds: int = 2) -> float:
    """Items per second of ``step`` (which returns how many items it handled): the best of
    ``rounds`` windows of ``seconds`` (load from other processes on this shared machine only ever
    slows a window down)."""
    step()  # warm up
    best = 0.0
    for _ in range(rounds):
        items, start = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - start) < seconds:
            items += step()
        best = max(best, items / elapsed)
    return best


def per_call_us(call: Callable[[], object], seconds: float) -> float:
    call()
    n, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        call()
        n += 1
    return elapsed / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--capacity", type=int, default=200_000)
    parser.add_argument("--chunk", type=int, default=256)
    parser.add_argument("--depth", type=int, default=8, help="calls in flight for the async rows")
    parser.add_argument("--seconds", type=float, default=3.0, help="timed window per figure")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "dist.json")
    args = parser.parse_args()

    import ray

    from replaybank.dist import ShardedReplayBuffer

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    rng = np.random.default_rng(0)
    chunk = data(args.chunk, rng)
    fill = data(10_000, rng)
    results: dict[str, dict[str, float]] = {"add": {}, "sample+update": {}}

    def sampler() -> rb.Prioritized:
        return rb.Prioritized(alpha=0.6, beta=0.4)

    # -- in process ---------------------------------------------------------------------------
    local = rb.ReplayBuffer(args.capacity, sampler=sampler(), seed=0)

    def local_add() -> int:
        local.extend(chunk)
        return args.chunk

    results["add"]["in-process"] = rate(local_add, args.seconds)
    while len(local) < args.capacity:
        local.extend(fill)
    prio = rng.random(BATCH)

    def local_step() -> int:
        b = local.sample(BATCH)
        local.update_priorities(b.ids, prio)
        return BATCH

    results["sample+update"]["in-process"] = rate(local_step, args.seconds)

    # -- sharded ------------------------------------------------------------------------------
    round_trip: dict[str, float] = {"in-process call": per_call_us(lambda: len(local), 0.5)}
    for shards in (1, 2):
        buf = ShardedReplayBuffer(shards, args.capacity, sampler=sampler(), seed=0)
        for s in range(shards):  # start every actor and load its compiled kernels (numba cache)
            buf.extend(chunk, shard=s)
        buf.sample(BATCH)

        def add_sync(buf: ShardedReplayBuffer = buf) -> int:
            buf.extend(chunk)
            return args.chunk

        def add_async(buf: ShardedReplayBuffer = buf) -> int:
            buf.get([buf.extend_async(chunk) for _ in range(args.depth)])
            return args.chunk * args.depth

        results["add"][f"{shards} shard(s), sync"] = rate(add_sync, args.seconds)
        results["add"][f"{shards} shard(s), {args.depth} in flight"] = rate(add_async, args.seconds)
        while len(buf) < args.capacity:
            buf.get([buf.extend_async(fill) for _ in range(4)])

        def step_sync(buf: ShardedReplayBuffer = buf) -> int:
            b = buf.sample(BATCH)
            buf.update_priorities(b.ids, prio)
            return BATCH

        def step_async(buf: ShardedReplayBuffer = buf) -> int:
            pending = [buf.sample_async(BATCH) for _ in range(args.depth)]
            refs = []
            for p in pending:
                refs += buf.update_priorities_async(p.result().ids, prio)
            buf.get(refs)
            return BATCH * args.depth

        results["sample+update"][f"{shards} shard(s), sync"] = rate(step_sync, args.seconds)
        results["sample+update"][f"{shards} shard(s), {args.depth} in flight"] = rate(step_async, args.seconds)
        if shards == 1:
            shard = buf.shards[0]
            round_trip["actor call (ping)"] = per_call_us(lambda shard=shard: ray.get(shard.ping.remote()), 1.0)
            round_trip["stats of every shard"] = per_call_us(buf.stats, 1.0)
            round_trip["sample(256) + update"] = per_call_us(step_sync, 1.0)
        buf.close()
    ray.shutdown()

    print(f"capacity {args.capacity:,}, batch {BATCH}, chunk {args.chunk}, {os.cpu_count()} cores, "
          f"load average {os.getloadavg()[0]:.1f}")
    print(f"{'case':<16} {'contestant':<28} {'items/s':>12}")
    for case, row in results.items():
        for who, value in row.items():
            print(f"{case:<16} {who:<28} {value:>12,.0f}")
    print(f"{'round trip':<16} {'call':<28} {'us/call':>12}")
    for who, value in round_trip.items():
        print(f"{'round trip':<16} {who:<28} {value:>12,.1f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "workload": {"capacity": args.capacity, "batch": BATCH, "chunk": args.chunk, "depth": args.depth,
                     "item": "obs float32[64], action int64, reward float32, done bool",
                     "sampler": "Prioritized(alpha=0.6, beta=0.4)"},
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "ray": ray.__version__,
                    "load_average_1min_at_end": os.getloadavg()[0]},
        "items_per_second": results,
        "round_trip_us": round_trip,
        "rllib": "not measured: ray[rllib] is not installed (see docs/dist.md)",
    }, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
