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


def rate(fn: Callable[[], object], seconds: float, repeats: int = 3) -> float:
    """Calls per second: the best of ``repeats`` timed windows of about ``seconds`` each."""
    fn()
    best = 0.0
    for _ in range(repeats):
        n, start = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - start) < seconds:
            for _ in range(20):
                fn()
            n += 20
        best = max(best, n / elapsed)
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
    from torchrl.data import LazyTensorStorage, TensorDictPrioritizedReplayBuffer, TensorDictReplayBuffer

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
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--capacity", type=int, default=1_000_000)
    parser.add_argument("--trajectory-capacity", type=int, default=10_000_000)
    parser.add_argument("--seconds", type=float, default=1.0, help="length of each timed window")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "buffers.json")
    parser.add_argument("--skip-peers", action="store_true", help="only replaybank and numpy")
    args = parser.parse_args()
    cap, secs = args.capacity, args.seconds
    rng = np.random.default_rng(0)
    fill = data(cap, rng)
    single = {k: v[0] for k, v in data(1, rng).items()}
    chunk = data(1000, rng)
    peers = not args.skip_peers
    use_cpprb, use_trl = peers and have("cpprb"), peers and have("torchrl")
    rows: dict[str, dict[str, float]] = {}

    def record(case: str, who: str, value: float) -> None:
        rows.setdefault(case, {})[who] = value
        print(f"  {case:<34} {who:<12} {value:>14,.0f}/s", flush=True)

    # resident memory of a full buffer vs its raw payload (measured first, on a clean heap)
    before = rss()
    buf = rb.ReplayBuffer(cap, seed=0)
    for s in range(0, cap, 100_000):
        buf.extend({k: v[s : s + 100_000] for k, v in fill.items()})
    memory_ratio = (rss() - before) / payload_bytes(cap)
    print(f"resident memory of a full uniform buffer: {memory_ratio:.3f}x the raw payload", flush=True)

    ring = NumpyRing(cap)
    ring.extend(fill)

    # add: one transition per call, and 1000-transition batches
    print("add", flush=True)
    record("add (1 item)", "numpy", rate(lambda: ring.add(**single), secs))
    record("add (1 item)", "replaybank", rate(lambda: buf.add(**single), secs))
    record("extend (1000 items) x1000", "numpy", 1000 * rate(lambda: ring.extend(chunk), secs))
    record("extend (1000 items) x1000", "replaybank", 1000 * rate(lambda: buf.extend(chunk), secs))
    if use_cpprb:
        import cpprb

        crb = cpprb.ReplayBuffer(cap, cpprb_env())
        crb.add(**fill)
        record("add (1 item)", "cpprb", rate(lambda: crb.add(**single), secs))
        record("extend (1000 items) x1000", "cpprb", 1000 * rate(lambda: crb.add(**chunk), secs))
    if use_trl:
        trl = make_torchrl(cap, prioritized=False)
        trl.extend(to_td(fill))
        td1, tdk = to_td({k: v[None] for k, v in single.items()}), to_td(chunk)
        record("add (1 item)", "torchrl", rate(lambda: trl.extend(td1), secs))
        record("extend (1000 items) x1000", "torchrl", 1000 * rate(lambda: trl.extend(tdk), secs))

    print("uniform sample(256)", flush=True)
    record("uniform sample(256)", "numpy", rate(lambda: ring.sample(BATCH), secs))
    record("uniform sample(256)", "replaybank", rate(lambda: buf.sample(BATCH), secs))
    if use_cpprb:
        record("uniform sample(256)", "cpprb", rate(lambda: crb.sample(BATCH), secs))
    if use_trl:
        record("uniform sample(256)", "torchrl", rate(lambda: trl.sample(), secs))

    shuffled = rb.ReplayBuffer(cap, sampler=rb.Reshuffled(), seed=0)
    for s in range(0, cap, 100_000):
        shuffled.extend({k: v[s : s + 100_000] for k, v in fill.items()})
    record("reshuffled sample(256)", "replaybank", rate(lambda: shuffled.sample(BATCH), secs))
    del shuffled

    print("prioritized sample(256) + update_priorities(256)", flush=True)
    prios = rng.random(BATCH) + 0.1
    per = rb.ReplayBuffer(cap, sampler=rb.Prioritized(alpha=0.6, beta=0.4), seed=0)
    for s in range(0, cap, 100_000):
        per.extend({k: v[s : s + 100_000] for k, v in fill.items()}, priorities=rng.random(100_000) + 0.1)

    def per_step() -> None:
        b = per.sample(BATCH)
        per.update_priorities(b.ids, prios)

    record("PER sample+update(256)", "replaybank", rate(per_step, secs))
    per_rr = rb.ReplayBuffer(cap, sampler=rb.PrioritizedReshuffled(alpha=0.6, beta=0.4), seed=0)
    for s in range(0, cap, 100_000):
        per_rr.extend({k: v[s : s + 100_000] for k, v in fill.items()}, priorities=rng.random(100_000) + 0.1)

    def rr_step() -> None:
        b = per_rr.sample(BATCH)
        per_rr.update_priorities(b.ids, prios)

    record("PER-RR sample+update(256)", "replaybank", rate(rr_step, secs))
    del per_rr, per
    if use_cpprb:
        del crb
        cper = cpprb.PrioritizedReplayBuffer(cap, cpprb_env(), alpha=0.6)
        cper.add(**fill, priorities=rng.random(cap) + 0.1)

        def cpprb_step() -> None:
            s = cper.sample(BATCH, beta=0.4)
            cper.update_priorities(s["indexes"], prios)

        record("PER sample+update(256)", "cpprb", rate(cpprb_step, secs))
        del cper
    if use_trl:
        import torch

        del trl
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

            record("PER sample+update(256)", "torchrl", rate(trl_step, secs))
            del tper

    del buf, ring
    print(f"trajectory slices of 16 from a {args.trajectory_capacity:,}-transition buffer", flush=True)
    tcap = args.trajectory_capacity
    traj = rb.ReplayBuffer(tcap, sampler=rb.Trajectories(16), seed=0)
    flat = rb.ReplayBuffer(tcap, seed=0)
    ep_rng = np.random.default_rng(1)
    for s in range(0, tcap, cap):
        block = {k: v[: min(cap, tcap - s)] for k, v in fill.items()}
        block["done"] = ep_rng.random(len(block["done"])) < 1 / 200  # episodes of ~200 steps
        traj.extend(block)
        flat.extend(block)
    slices = rate(lambda: traj.sample(BATCH // 16), secs)
    uniform_big = rate(lambda: flat.sample(BATCH), secs)
    record("trajectory steps/s (16 x 16)", "replaybank", slices * BATCH)
    record("uniform steps/s (10M buffer)", "replaybank", uniform_big * BATCH)

    ratios = {
        "add (1 item) vs cpprb": ratio(rows, "add (1 item)", "cpprb"),
        "extend (1000) vs cpprb": ratio(rows, "extend (1000 items) x1000", "cpprb"),
        "uniform sample vs cpprb": ratio(rows, "uniform sample(256)", "cpprb"),
        "uniform sample vs numpy gather": ratio(rows, "uniform sample(256)", "numpy"),
        "PER sample+update vs cpprb": ratio(rows, "PER sample+update(256)", "cpprb"),
        "PER sample+update vs torchrl": ratio(rows, "PER sample+update(256)", "torchrl"),
        "reshuffled vs uniform": rows["reshuffled sample(256)"]["replaybank"] / rows["uniform sample(256)"]["replaybank"],
        "trajectory step time vs uniform step time": (uniform_big * BATCH) / (slices * BATCH),
        "resident memory vs raw payload": memory_ratio,
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
    who = ["replaybank", "numpy", "cpprb", "torchrl"]
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
