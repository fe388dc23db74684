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
done bool; capacity ``--capacity`` in total (split over the shards).

RLlib (only where ``ray.rllib`` imports, e.g. ``bash benchmarks/setup.sh --rllib`` then
``.venv-bench-rllib/bin/python benchmarks/dist.py``; otherwise skipped with the reason printed):
``PrioritizedEpisodeReplayBuffer(capacity, alpha=0.6)``, in process like replaybank's in-process
buffer, its windows interleaved with that buffer's. It stores episodes, so each 256-row write is
cut at the ``done`` flags into ``SingleAgentEpisode`` chunks (every chunk a closed episode: T steps,
T+1 observations, numpy-converted), ``add``-ed as one list; items/s count time steps. Its
``add`` figure is taken on a full buffer (evicting whole episodes), as replaybank's wraps around.
Sampling is ``sample(num_items=256, n_step=1, beta=0.4)`` (one-step transitions
``o_t, a_t, r_t, o_t+1`` with IS weights) + ``update_priorities``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
import uuid
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


def interleaved(steps: dict[str, Callable[[], int]], seconds: float, rounds: int = 2) -> dict[str, float]:
    """:func:`rate` for several contestants at once, their windows alternating (A B A B), so a
    burst of load from other processes hits both rather than one."""
    for step in steps.values():
        step()  # warm up
    best = dict.fromkeys(steps, 0.0)
    for _ in range(rounds):
        for who, step in steps.items():
            items, start = 0, time.perf_counter()
            while (elapsed := time.perf_counter() - start) < seconds:
                items += step()
            best[who] = max(best[who], items / elapsed)
    return best


def rllib_contestant(capacity: int, chunk: dict[str, np.ndarray], prio: np.ndarray,
                     seed: int) -> tuple[Callable[[], int], Callable[[], int]] | str:
    """The ``add`` and ``sample+update`` steps of RLlib's ``PrioritizedEpisodeReplayBuffer`` on
    the same rows (see the module docstring), its buffer already full; or why it is skipped."""
    try:
        from ray.rllib.env.single_agent_episode import SingleAgentEpisode
        from ray.rllib.utils.replay_buffers import PrioritizedEpisodeReplayBuffer
    except ImportError as exc:
        return f"ray.rllib is not importable here ({exc}); run it in .venv-bench-rllib (benchmarks/setup.sh --rllib)"
    n = len(chunk["reward"])
    ends = [int(i) + 1 for i in np.flatnonzero(chunk["done"])]
    bounds = [0, *[e for e in ends if e < n], n]
    episodes = []
    for a, b in zip(bounds[:-1], bounds[1:]):
        last = bool(chunk["done"][b - 1])
        obs = [chunk["obs"][i % n] for i in range(a, b + 1)]  # T steps, T+1 observations
        eps = SingleAgentEpisode(observations=obs, actions=list(chunk["action"][a:b]),
                                 rewards=list(chunk["reward"][a:b]), terminated=last, truncated=not last,
                                 len_lookback_buffer=0)
        episodes.append(eps.to_numpy() if hasattr(eps, "to_numpy") else eps.finalize())
    buf = PrioritizedEpisodeReplayBuffer(capacity, alpha=0.6)
    buf.rng = np.random.default_rng(seed)

    def add() -> int:
        for eps in episodes:  # fresh ids: a known id would be concatenated to its stored episode
            eps.id_ = uuid.uuid4().hex
        buf.add(episodes)
        return n

    for _ in range(capacity // n + 2):  # fill: it evicts to stay at or just under capacity
        add()

    def step() -> int:
        buf.sample(num_items=BATCH, n_step=1, beta=0.4, gamma=0.99)
        buf.update_priorities(prio)
        return BATCH

    return add, step


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

    load_start = os.getloadavg()[0]
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

    while len(local) < args.capacity:
        local.extend(fill)
    prio = rng.random(BATCH)

    def local_step() -> int:
        b = local.sample(BATCH)
        local.update_priorities(b.ids, prio)
        return BATCH

    # -- RLlib, in process, windows interleaved with the in-process buffer's ---------------------
    rllib = rllib_contestant(args.capacity, chunk, prio, seed=0)
    adds: dict[str, Callable[[], int]] = {"in-process": local_add}
    steps: dict[str, Callable[[], int]] = {"in-process": local_step}
    if isinstance(rllib, str):
        print(f"RLlib skipped: {rllib}")
    else:
        adds["rllib PrioritizedEpisode"], steps["rllib PrioritizedEpisode"] = rllib
    results["add"].update(interleaved(adds, args.seconds))
    results["sample+update"].update(interleaved(steps, args.seconds))

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
          f"load average {load_start:.1f} at the start, {os.getloadavg()[0]:.1f} at the end")
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
                    "load_average_1min_at_start": load_start,
                    "load_average_1min_at_end": os.getloadavg()[0]},
        "items_per_second": results,
        "round_trip_us": round_trip,
        "rllib": (rllib if isinstance(rllib, str) else
                  "PrioritizedEpisodeReplayBuffer(capacity, alpha=0.6), in process, windows interleaved "
                  "with in-process; add: each 256-row write cut at done into closed SingleAgentEpisode "
                  "chunks (T+1 obs each), items = time steps, on a full buffer; sample(num_items=256, "
                  "n_step=1, beta=0.4) + update_priorities"),
    }, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
