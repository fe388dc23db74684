"""Replay-buffer throughput and memory: replaybank vs a plain numpy ring, cpprb and TorchRL.

Run ``bash benchmarks/setup.sh && .venv-bench/bin/python benchmarks/buffers.py``. Prints a table
and writes ``benchmarks/results/buffers.json``; the prioritized step split (``--per-sizes``, issue
30) is printed after it and written to ``benchmarks/results/per_split.json`` (``--only per`` runs
just that part). Every figure is measured in this run, on this
machine, with one thread (OMP/MKL/torch), so the ratios compare like with like. cpprb and TorchRL
columns appear when they are installed (they are not dependencies of replaybank).

Workload: capacity 1,000,000; item = obs float32[64], action int64, reward float32,
done bool; batch 256; alpha 0.6, beta 0.4.

The prioritized split times, in the same loop and so with the caches as a real step leaves them,
each part of replaybank's ``sample(256)`` + ``update_priorities(256)`` as a direct call: the tree
walk and the importance weights (one compiled call; the weights are timed again alone and
subtracted), the row gather (``storage.read``, i.e. numpy ``take`` per column) and the priority
update (the tree write); "Python overhead" is the step measured through the public API minus
those four (it goes slightly negative when noise exceeds it). cpprb and TorchRL are timed through their public calls only. The split is
timed with this thread's CPU clock by default (``--clock wall`` for wall time), so that on a shared
machine the time other processes hold the core is not counted; their cache pollution still is.
The split also times ``PrioritizedReshuffled`` and ``Trajectories(16, priority="td")`` (16 slices
of 16 steps, up to 10^6 items) against ``Prioritized``.
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


# -- the prioritized step, split -------------------------------------------------------
# The split's clock. "cpu" (default): this thread's CPU time, so that on a shared machine the
# time other processes hold the core is not counted (their cache pollution still is); "wall":
# perf_counter. Set from --clock.
CLOCK: Callable[[], float] = time.thread_time


def fill_repeating(extend: Callable[[dict[str, np.ndarray], np.ndarray], object], n: int,
                   block: dict[str, np.ndarray], prios: np.ndarray) -> None:
    """Write ``n`` items by repeating ``block`` (so 10^7 items need no 10^7-row source array)."""
    size, step = len(block["action"]), 100_000
    for s in range(0, n, step):
        k = min(step, n - s)
        lo = s % size
        extend({key: v[lo : lo + k] for key, v in block.items()}, prios[lo : lo + k])


def replaybank_parts(buf: rb.ReplayBuffer, prios: np.ndarray, rng: np.random.Generator) -> dict[str, float]:
    """Seconds of each part of one step, measured in place (one step; the caller repeats). The
    walk and the weights are one compiled call (``stratified``); the weights are timed again on
    their own right after it, with the leaves as hot as the fused call had them, and subtracted."""
    s = buf.sampler
    trees, storage = s.trees, buf.storage  # type: ignore[attr-defined]
    u = rng.random(BATCH)
    clock = CLOCK
    t0 = clock()
    slots, _ = trees.stratified(u, s.beta)  # type: ignore[attr-defined]
    t1 = clock()
    trees.weights(slots, s.beta)
    t2 = clock()
    storage.read(slots)
    t3 = clock()
    if hasattr(trees, "update_powered"):
        trees.update_powered(slots, prios, s.eps, s.alpha)  # type: ignore[attr-defined]
    else:  # replaybank without its prioritized fast paths (for a before/after run of this script)
        trees.update(slots, (prios + s.eps) ** s.alpha)
    t4 = clock()
    return {"walk": (t1 - t0) - (t2 - t1), "weights": t2 - t1, "gather": t3 - t2, "update": t4 - t3}


def timed_step(sample: Callable[[], object], update: Callable[[object], object]) -> dict[str, float]:
    clock = CLOCK
    t0 = clock()
    got = sample()
    t1 = clock()
    update(got)
    t2 = clock()
    return {"sample": t1 - t0, "update": t2 - t1}


def best_mean(step: Callable[[], dict[str, float]], seconds: float, best: dict[str, float]) -> None:
    """Run ``step`` for about ``seconds``; keep, per key, the lowest mean seen over rounds (the
    whole step's mean decides which round is kept, so the parts of one round add up)."""
    sums: dict[str, float] = {}
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        for key, value in step().items():
            sums[key] = sums.get(key, 0.0) + value
        n += 1
    means = {key: value / n for key, value in sums.items()}
    if sum(means.values()) < sum(best.get(key, np.inf) for key in means):
        best.update(means)


Steps = dict[str, Callable[[], dict[str, float]]]


def interleaved(steps: Steps, seconds: float, rounds: int) -> dict[str, dict[str, float]]:
    """Microseconds per call of each step's parts, best round of each, rounds interleaved."""
    best: dict[str, dict[str, float]] = {who: {} for who in steps}
    for step in steps.values():
        step()  # warm up (numba compiles, caches fill)
    for _ in range(rounds):
        for who, step in steps.items():
            best_mean(step, seconds, best[who])
    return {who: {k: v * 1e6 for k, v in b.items()} for who, b in best.items()}


class Workload:
    """The items every contestant is filled with, and the priorities every update sets."""

    def __init__(self, largest: int) -> None:
        rng = np.random.default_rng(0)
        self.block = data(min(largest, 1_000_000), rng)
        self.block_prios = rng.random(len(self.block["action"])) + 0.1
        self.prios = rng.random(BATCH) + 0.1
        self.rng = np.random.default_rng(1)

    def replaybank(self, n: int, sampler: rb.samplers.Sampler) -> rb.ReplayBuffer:
        buf = rb.ReplayBuffer(n, sampler=sampler, seed=0)
        fill_repeating(lambda c, p: buf.extend(c, priorities=p), n, self.block, self.block_prios)
        return buf

    def step(self, buf: rb.ReplayBuffer, batch: int = BATCH) -> Callable[[], dict[str, float]]:
        return lambda: timed_step(lambda: buf.sample(batch), lambda b: buf.update_priorities(b.ids, self.prios))  # type: ignore[attr-defined]


def per_vs_peers(n: int, w: Workload, seconds: float, rounds: int, use_cpprb: bool, use_trl: bool
                 ) -> tuple[dict[str, dict[str, float]], dict[str, str]]:
    """replaybank's step (whole and split) against cpprb's and TorchRL's, all alive together."""
    per = w.replaybank(n, rb.Prioritized(alpha=0.6, beta=0.4))
    steps: Steps = {"replaybank": w.step(per), "replaybank parts": lambda: replaybank_parts(per, w.prios, w.rng)}
    notes: dict[str, str] = {}
    if use_cpprb:
        import cpprb

        cper = cpprb.PrioritizedReplayBuffer(n, cpprb_env(), alpha=0.6)
        fill_repeating(lambda c, p: cper.add(**c, priorities=p), n, w.block, w.block_prios)
        steps["cpprb"] = lambda: timed_step(lambda: cper.sample(BATCH, beta=0.4),
                                            lambda s: cper.update_priorities(s["indexes"], w.prios))  # type: ignore[index]
    if use_trl:
        import torch

        try:
            tper = make_torchrl(n, prioritized=True)
            fill_repeating(lambda c, p: tper.extend(to_td(c)), n, w.block, w.block_prios)
        except RuntimeError as err:  # its binary sum tree is missing from some builds (TorchRL #3508)
            notes["torchrl"] = f"unavailable: {str(err).splitlines()[0]}"
            print(f"  TorchRL prioritized buffer {notes['torchrl']}", flush=True)
        else:
            tprios = torch.from_numpy(w.prios)
            steps["torchrl"] = lambda: timed_step(tper.sample, lambda s: tper.update_priority(s["index"], tprios))  # type: ignore[index]
    return interleaved(steps, seconds, rounds), notes


# a third buffer of 10^7 rows (2.7 GB) next to the other two does not fit the shared machine
TRAJECTORY_MAX = 1_000_000


def variants_vs_per(n: int, w: Workload, seconds: float, rounds: int) -> dict[str, dict[str, float]]:
    """PrioritizedReshuffled, and Trajectories with TD priorities (16 slices of 16 steps: the same
    256 rows per call), against Prioritized at the same size (after the peers are freed)."""
    per = w.replaybank(n, rb.Prioritized(alpha=0.6, beta=0.4))
    rr = w.replaybank(n, rb.PrioritizedReshuffled(alpha=0.6, beta=0.4))
    steps = {"Prioritized": w.step(per), "PrioritizedReshuffled": w.step(rr)}
    if n <= TRAJECTORY_MAX:
        trajectories = w.replaybank(n, rb.Trajectories(16, priority="td", alpha=0.6, beta=0.4))
        steps["Trajectories(16, td)"] = w.step(trajectories, BATCH // 16)
    return interleaved(steps, seconds, rounds)


def per_split(sizes: list[int], seconds: float, rounds: int, use_cpprb: bool, use_trl: bool) -> dict[str, object]:
    """Microseconds per call of each contestant's prioritized step at each size, and replaybank's
    split; contestants of one size are alive together and their timing windows interleaved."""
    w = Workload(max(sizes))
    out: dict[str, object] = {}
    for n in sizes:
        print(f"prioritized step split, {n:,} items", flush=True)
        us, notes = per_vs_peers(n, w, seconds, rounds, use_cpprb, use_trl)
        parts = us.pop("replaybank parts")
        total = step_us(us["replaybank"])
        split = {**parts, "python overhead": total - sum(parts.values()), "step": total}
        variants = variants_vs_per(n, w, seconds, rounds)
        us["Prioritized (second pass)"] = variants.pop("Prioritized")
        us.update(variants)
        out[str(n)] = {"us_per_call": us, "replaybank_split_us": split, "notes": notes}
        print_split(n, us, split, notes)
    return out


def step_us(row: dict[str, float]) -> float:
    return row["sample"] + row["update"]


def print_split(n: int, us: dict[str, dict[str, float]], split: dict[str, float], notes: dict[str, str]) -> None:
    print(f"\n| {n:,} items: us per call | sample(256) | update(256) | step | replaybank step speed-up |")
    print("|---|---:|---:|---:|---:|")
    mine = step_us(us["replaybank"])
    for who, row in us.items():
        print(f"| {who} | {row['sample']:.1f} | {row['update']:.1f} | {step_us(row):.1f} | {step_us(row) / mine:.2f}x |")
    for who, why in notes.items():
        print(f"| {who} | {why} | | | |")
    print("\n| replaybank step, split (us) | " + " | ".join(split) + " |")
    print("|---|" + "---:|" * len(split))
    print("| | " + " | ".join(f"{v:.1f}" for v in split.values()) + " |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--capacity", type=int, default=1_000_000)
    parser.add_argument("--trajectory-capacity", type=int, default=10_000_000)
    parser.add_argument("--seconds", type=float, default=0.5, help="length of each timed window")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved windows per contestant (best is kept)")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "buffers.json")
    parser.add_argument("--skip-peers", action="store_true", help="only replaybank and numpy")
    parser.add_argument("--per-sizes", default="100000,1000000,10000000",
                        help="buffer sizes of the prioritized split, comma-separated ('' skips it)")
    parser.add_argument("--per-out", type=Path, default=Path(__file__).parent / "results" / "per_split.json")
    parser.add_argument("--only", choices=("all", "per"), default="all", help="'per': only the prioritized split")
    parser.add_argument("--clock", choices=("cpu", "wall"), default="cpu",
                        help="the split's clock: this thread's CPU time (default) or wall time")
    args = parser.parse_args()
    global CLOCK
    CLOCK = time.thread_time if args.clock == "cpu" else time.perf_counter
    use_cpprb = not args.skip_peers and have("cpprb")
    use_trl = not args.skip_peers and have("torchrl")
    sizes = [int(float(x)) for x in args.per_sizes.split(",") if x.strip()]
    if args.only == "per":
        run_per_split(args, sizes, use_cpprb, use_trl)
        return
    classic(args, use_cpprb, use_trl)  # its buffers are freed before the split fills its own
    if sizes:
        run_per_split(args, sizes, use_cpprb, use_trl)


def classic(args: argparse.Namespace, use_cpprb: bool, use_trl: bool) -> None:
    """The table of add, extend, uniform / reshuffled / prioritized sampling at one size."""
    cap = args.capacity
    rng = np.random.default_rng(0)
    fill = data(cap, rng)
    fill_prios = rng.random(cap) + 0.1
    single = {k: v[0] for k, v in data(1, rng).items()}
    chunk = data(1000, rng)
    prios = rng.random(BATCH) + 0.1
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


def run_per_split(args: argparse.Namespace, sizes: list[int], use_cpprb: bool, use_trl: bool) -> None:
    result = per_split(sizes, args.seconds, args.rounds, use_cpprb, use_trl)
    ratios = {}
    for n, case in result.items():
        us = case["us_per_call"]  # type: ignore[index]
        mine = step_us(us["replaybank"])
        ratios[n] = {f"step vs {who}": step_us(us[who]) / mine for who in ("cpprb", "torchrl") if who in us}
        second = step_us(us["Prioritized (second pass)"])
        ratios[n]["PrioritizedReshuffled vs Prioritized (speed)"] = second / step_us(us["PrioritizedReshuffled"])
        if "Trajectories(16, td)" in us:
            ratios[n]["Trajectories(16, td) vs Prioritized (speed)"] = second / step_us(us["Trajectories(16, td)"])
        ratios[n]["update_priorities(256) us"] = us["replaybank"]["update"]
    keys = list(dict.fromkeys(k for r in ratios.values() for k in r))
    print("\n| size | " + " | ".join(keys) + " |")
    print("|---|" + "---:|" * len(keys))
    for n, r in ratios.items():
        cells = ["-" if k not in r else f"{r[k]:.1f}" if k.endswith(" us") else f"{r[k]:.2f}x" for k in keys]
        print(f"| {int(n):,} | " + " | ".join(cells) + " |")
    args.per_out.parent.mkdir(parents=True, exist_ok=True)
    load = os.getloadavg()
    args.per_out.write_text(json.dumps({
        "batch": BATCH, "alpha": 0.6, "beta": 0.4, "obs": "float32[64]", "threads": 1,
        "seconds_per_window": args.seconds, "rounds": args.rounds, "clock": args.clock,
        "load_average_at_end": load, "cpus": os.cpu_count(),
        "sizes": result, "ratios": ratios,
    }, indent=1))
    print(f"\nwrote {args.per_out} ({args.clock} clock; load average at the end: {load[0]:.2f} on {os.cpu_count()} CPUs)")


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
