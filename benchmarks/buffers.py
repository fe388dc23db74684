"""Replay-buffer throughput and memory: replaybank vs a plain numpy ring, cpprb and TorchRL.

Run ``bash benchmarks/setup.sh && .venv-bench/bin/python benchmarks/buffers.py``. Prints a table
and writes ``benchmarks/results/buffers.json``. Every figure is measured in this run, on this
machine, with one thread (OMP/MKL/torch), so the ratios compare like with like. cpprb and TorchRL
columns appear when they are installed (they are not dependencies of replaybank).

Workload (issue #2): capacity 1,000,000; item = obs float32[64], action int64, reward float32,
done bool; batch 256; alpha 0.6, beta 0.4.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable
from pathlib import Path

for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[var] = "1"

import numpy as np  # noqa: E402

import replaybank as rb  # noqa: E402

BATCH = 256


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def rate(fn: Callable[[], object], seconds: float) -> float:
    """Calls per second over one timed window of about ``seconds``."""
    n, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        for _ in range(20):
            fn()
        n += 20
    return n / elapsed


def compare(contestants: dict[str, Callable[[], object]], seconds: float, rounds: int = 3) -> dict[str, float]:
    """Best rate of each contestant over ``rounds`` interleaved windows, so that a burst of load
    from other processes hits every contestant alike instead of whichever ran at that moment."""
    for fn in contestants.values():
        fn()  # warm up (numba compiles, caches fill)
    best = dict.fromkeys(contestants, 0.0)
    for _ in range(rounds):
        for who, fn in contestants.items():
            best[who] = max(best[who], rate(fn, seconds))
    return best


def data(n: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {
        "obs": rng.random((n, 64), dtype=np.float32),
        "action": rng.integers(0, 18, n),
        "reward": rng.random(n, dtype=np.float32),
        "done": rng.random(n) < 0.01,
    }


def payload_bytes(capacity: int) -> int:
    return capacity * (64 * 4 + 8 + 4 + 1)


# -- the contestants ------------------------------------------------------------------------------
class NumpyRing:
    """The memory-bandwidth reference: preallocated arrays, a write pointer, fancy-index gathers."""

    def __init__(self, capacity: int) -> None:
        self.capacity, self.ptr, self.size = capacity, 0, 0
        self.cols = {
            "obs": np.empty((capacity, 64), np.float32),
            "action": np.empty(capacity, np.int64),
            "reward": np.empty(capacity, np.float32),
            "done": np.empty(capacity, bool),
        }
        self.rng = np.random.default_rng(0)

    def add(self, obs, action, reward, done) -> None:  # type: ignore[no-untyped-def]
        p = self.ptr
        c = self.cols
        c["obs"][p] = obs
        c["action"][p] = action
        c["reward"][p] = reward
        c["done"][p] = done
        self.ptr = (p + 1) % self.capacity
        self.size = min(self.size + 1, self.capacity)

    def extend(self, batch: dict[str, np.ndarray]) -> None:
        n = len(batch["action"])
        idx = (self.ptr + np.arange(n)) % self.capacity
        for k, v in batch.items():
            self.cols[k][idx] = v
        self.ptr = (self.ptr + n) % self.capacity
        self.size = min(self.size + n, self.capacity)

    def sample(self, n: int) -> dict[str, np.ndarray]:
        idx = self.rng.integers(0, self.size, n)
        return {k: v[idx] for k, v in self.cols.items()}


def cpprb_env() -> dict:
    return {"obs": {"shape": 64, "dtype": np.float32}, "action": {"dtype": np.int64}, "reward": {"dtype": np.float32}, "done": {"dtype": np.bool_}}


def make_torchrl(capacity: int, prioritized: bool):
    import torch
    from torchrl.data import (
        LazyTensorStorage,
        TensorDictPrioritizedReplayBuffer,
        TensorDictReplayBuffer,
    )

    torch.set_num_threads(1)
    storage = LazyTensorStorage(capacity)
    if prioritized:
        return TensorDictPrioritizedReplayBuffer(alpha=0.6, beta=0.4, storage=storage, batch_size=BATCH)
    return TensorDictReplayBuffer(storage=storage, batch_size=BATCH)


def to_td(batch: dict[str, np.ndarray]):
    import torch
    from tensordict import TensorDict

    return TensorDict({k: torch.from_numpy(v) for k, v in batch.items()}, batch_size=[len(batch["action"])])


def have(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


# -- the cases ------------------------------------------------------------------------------------
def fill_buffer(buf: rb.ReplayBuffer, fill: dict[str, np.ndarray], priorities: np.ndarray | None = None) -> rb.ReplayBuffer:
    step = 100_000
    for s in range(0, len(fill["action"]), step):
        chunk = {k: v[s : s + step] for k, v in fill.items()}
        buf.extend(chunk, priorities=None if priorities is None else priorities[s : s + step])
    return buf


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--capacity", type=int, default=1_000_000)
    parser.add_argument("--trajectory-capacity", type=int, default=10_000_000)
    parser.add_argument("--seconds", type=float, default=0.5, help="length of each timed window")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved windows per contestant (best is kept)")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "buffers.json")
    parser.add_argument("--skip-peers", action="store_true", help="only replaybank and numpy")
    args = parser.parse_args()
    cap = args.capacity
    rng = np.random.default_rng(0)
    fill = data(cap, rng)
    fill_prios = rng.random(cap) + 0.1
    single = {k: v[0] for k, v in data(1, rng).items()}
    chunk = data(1000, rng)
    prios = rng.random(BATCH) + 0.1
    use_cpprb = not args.skip_peers and have("cpprb")
    use_trl = not args.skip_peers and have("torchrl")
    rows: dict[str, dict[str, float]] = {}

    def measure(case: str, contestants: dict[str, Callable[[], object]], scale: float = 1.0) -> None:
        print(case, flush=True)
        for who, value in compare(contestants, args.seconds, args.rounds).items():
            rows.setdefault(case, {})[who] = value * scale
            print(f"  {who:<12} {value * scale:>14,.0f}/s", flush=True)

    # resident memory of a full uniform buffer vs its raw payload (measured first, on a clean heap)
    before = rss()
    buf = fill_buffer(rb.ReplayBuffer(cap, seed=0), fill)
    memory_ratio = (rss() - before) / payload_bytes(cap)
    print(f"resident memory of a full uniform buffer: {memory_ratio:.3f}x the raw payload", flush=True)
    ring = NumpyRing(cap)
    ring.extend(fill)
    peers: dict[str, object] = {}
    if use_cpprb:
        import cpprb

        peers["cpprb"] = crb = cpprb.ReplayBuffer(cap, cpprb_env())
        crb.add(**fill)
    if use_trl:
        peers["torchrl"] = trl = make_torchrl(cap, prioritized=False)
        trl.extend(to_td(fill))
        td1, tdk = to_td({k: v[None] for k, v in single.items()}), to_td(chunk)

    adds: dict[str, Callable[[], object]] = {"replaybank": lambda: buf.add(**single), "numpy": lambda: ring.add(**single)}
    extends: dict[str, Callable[[], object]] = {"replaybank": lambda: buf.extend(chunk), "numpy": lambda: ring.extend(chunk)}
    uniform: dict[str, Callable[[], object]] = {"replaybank": lambda: buf.sample(BATCH), "numpy": lambda: ring.sample(BATCH)}
    if use_cpprb:
        adds["cpprb"] = lambda: crb.add(**single)
        extends["cpprb"] = lambda: crb.add(**chunk)
        uniform["cpprb"] = lambda: crb.sample(BATCH)
    if use_trl:
        adds["torchrl"] = lambda: trl.extend(td1)
        extends["torchrl"] = lambda: trl.extend(tdk)
        uniform["torchrl"] = lambda: trl.sample()
    measure("add (1 item)", adds)
    measure("extend (1000 items) x1000", extends, scale=1000)
    measure("uniform sample(256)", uniform)
    shuffled = fill_buffer(rb.ReplayBuffer(cap, sampler=rb.Reshuffled(), seed=0), fill)
    measure("reshuffled vs uniform sample(256)", {"replaybank": lambda: shuffled.sample(BATCH), "uniform": lambda: buf.sample(BATCH)})

    per = fill_buffer(rb.ReplayBuffer(cap, sampler=rb.Prioritized(alpha=0.6, beta=0.4), seed=0), fill, fill_prios)

    def per_step() -> None:
        b = per.sample(BATCH)
        per.update_priorities(b.ids, prios)

    prioritized: dict[str, Callable[[], object]] = {"replaybank": per_step}
    if use_cpprb:
        cper = cpprb.PrioritizedReplayBuffer(cap, cpprb_env(), alpha=0.6)
        cper.add(**fill, priorities=fill_prios)

        def cpprb_step() -> None:
            s = cper.sample(BATCH, beta=0.4)
            cper.update_priorities(s["indexes"], prios)

        prioritized["cpprb"] = cpprb_step
    if use_trl:
        import torch

        try:
            tper = make_torchrl(cap, prioritized=True)
        except RuntimeError as err:  # its binary sum tree is missing from some builds (TorchRL #3508)
            print(f"  TorchRL prioritized buffer unavailable: {err}", flush=True)
        else:
            tper.extend(to_td(fill))
            tprios = torch.from_numpy(prios)

            def trl_step() -> None:
                s = tper.sample()
                tper.update_priority(s["index"], tprios)

            prioritized["torchrl"] = trl_step
    measure("PER sample+update(256)", prioritized)
    per_rr = fill_buffer(rb.ReplayBuffer(cap, sampler=rb.PrioritizedReshuffled(alpha=0.6, beta=0.4), seed=0), fill, fill_prios)

    def rr_step() -> None:
        b = per_rr.sample(BATCH)
        per_rr.update_priorities(b.ids, prios)

    measure("PER-RR sample+update(256)", {"replaybank": rr_step})

    tcap = args.trajectory_capacity
    print(f"trajectory slices of 16 from a {tcap:,}-transition buffer", flush=True)
    traj = rb.ReplayBuffer(tcap, sampler=rb.Trajectories(16), seed=0)
    flat = rb.ReplayBuffer(tcap, seed=0)
    ep_rng = np.random.default_rng(1)
    for s in range(0, tcap, cap):
        block = {k: v[: min(cap, tcap - s)] for k, v in fill.items()}
        block["done"] = ep_rng.random(len(block["done"])) < 1 / 200  # episodes of ~200 steps
        traj.extend(block)
        flat.extend(block)
    # steps per second: 16 slices of 16 steps vs 256 uniform transitions per call
    measure(
        f"steps/s from a {tcap:,} buffer",
        {"trajectories(16)": lambda: traj.sample(BATCH // 16), "uniform": lambda: flat.sample(BATCH)},
        scale=BATCH,
    )

    big = rows[f"steps/s from a {tcap:,} buffer"]
    ratios = {
        "add (1 item) vs cpprb": ratio(rows, "add (1 item)", "cpprb"),
        "extend (1000) vs cpprb": ratio(rows, "extend (1000 items) x1000", "cpprb"),
        "uniform sample vs cpprb": ratio(rows, "uniform sample(256)", "cpprb"),
        "uniform sample vs numpy gather": ratio(rows, "uniform sample(256)", "numpy"),
        "PER sample+update vs cpprb": ratio(rows, "PER sample+update(256)", "cpprb"),
        "PER sample+update vs torchrl": ratio(rows, "PER sample+update(256)", "torchrl"),
        "reshuffled vs uniform": ratio(rows, "reshuffled vs uniform sample(256)", "uniform"),
        "trajectory step time / uniform step time": big["uniform"] / big["trajectories(16)"],
        "resident memory / raw payload": memory_ratio,
    }
    print_table(rows, ratios)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"capacity": cap, "batch": BATCH, "ops_per_second": rows, "ratios": ratios}, indent=1))
    print(f"\nwrote {args.out}")


def ratio(rows: dict[str, dict[str, float]], case: str, peer: str) -> float | None:
    if peer not in rows.get(case, {}):
        return None
    return rows[case]["replaybank"] / rows[case][peer]


def print_table(rows: dict[str, dict[str, float]], ratios: dict[str, float | None]) -> None:
    who = list(dict.fromkeys(w for values in rows.values() for w in values))
    print("\n| operation (calls/s) | " + " | ".join(who) + " |")
    print("|---|" + "---:|" * len(who))
    for case, values in rows.items():
        cells = [f"{values[w]:,.0f}" if w in values else "-" for w in who]
        print(f"| {case} | " + " | ".join(cells) + " |")
    print("\n| ratio | value |\n|---|---:|")
    for name, value in ratios.items():
        print(f"| {name} | {'-' if value is None else f'{value:.2f}x'} |")


if __name__ == "__main__":
    main()
