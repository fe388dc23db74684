"""Replay speed of the expert-cache simulator against a plain-Python reference, in the same run.

Run ``PYTHONPATH=src .venv/bin/python benchmarks/traces_sim.py [--events N]``. Builds a synthetic
trace of N routing events (tokens x layers; default 1,000,000 = 8 layers x 125,000 tokens, 64
experts, top-2, Zipf 1.0, stickiness 0.3, 16-token prefills and 112 decode steps per request, 8
requests at a time), then times, best of ``--rounds``:

* ``simulate(policy="lru")`` per step and per token (unions and next-use built inside the timing),
* ``compare`` of all six policies (pred included) on the same events,
* ``reference.lru_from_trace``, a plain-Python replay (sets and an ``OrderedDict``), once,

checks that the simulator's LRU counts equal the reference's, prints a table and writes JSON to
``benchmarks/results/traces_sim.json``. The target is LRU over 1,000,000 events in
<= 5 s. The first call compiles the numba kernel (or loads it from numba's cache); it is timed
apart as ``warm-up``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[var] = "1"

from replaybank.traces import compare, simulate, synthetic_trace  # noqa: E402
from replaybank.traces.kernel import get_kernel, replay  # noqa: E402
from replaybank.traces.reference import lru_from_trace  # noqa: E402

OUT = Path(__file__).resolve().parent / "results" / "traces_sim.json"


def best(fn, rounds: int):  # type: ignore[no-untyped-def]
    times, value = [], None
    for _ in range(rounds):
        start = time.perf_counter()
        value = fn()
        times.append(time.perf_counter() - start)
    return min(times), value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=1_000_000, help="routing events (tokens x layers)")
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--experts", type=int, default=64)
    parser.add_argument("--top-k", type=int, default=2)
    parser.add_argument("--capacity", type=int, default=32, help="experts cached per layer")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    prompt, decode = 16, 112
    requests = max(1, args.events // (args.layers * (prompt + decode)))
    start = time.perf_counter()
    trace = synthetic_trace(
        requests=requests, prompt_tokens=prompt, decode_tokens=decode, layers=args.layers,
        experts=args.experts, top_k=args.top_k, zipf=1.0, stickiness=0.3, concurrent=8, seed=0,
    )
    t_make = time.perf_counter() - start
    n = trace.routing_events
    start = time.perf_counter()
    simulate(trace, "lru", args.capacity)
    t_warm = time.perf_counter() - start
    rows = {}
    rows["lru, per step"], step = best(lambda: simulate(trace, "lru", args.capacity), args.rounds)
    rows["lru, per token"], token = best(
        lambda: simulate(trace, "lru", args.capacity, semantics="token"), args.rounds
    )
    rows["all 6 policies, per step"], comp = best(lambda: compare(trace, args.capacity), args.rounds)
    rows["plain-Python lru, per step"], ref = best(lambda: lru_from_trace(trace, args.capacity), 1)
    same = [(c.hits, c.misses) for c in step.layers] == ref
    compiled = get_kernel() is not replay
    print(
        f"{n:,} routing events ({args.layers} layers x {trace.num_tokens:,} tokens, {trace.num_steps:,} "
        f"steps), {args.experts} experts, top-{args.top_k}, capacity {args.capacity}; trace built in "
        f"{t_make:.1f} s; kernel {'numba' if compiled else 'interpreted'}, warm-up {t_warm:.2f} s\n"
    )
    print(f"{'replay':<30}{'seconds':>9}{'M events/s':>12}{'vs reference':>14}")
    ref_s = rows["plain-Python lru, per step"]
    for name, secs in rows.items():
        print(f"{name:<30}{secs:>9.3f}{n / secs / 1e6:>12.2f}{ref_s / secs:>13.1f}x")
    print(f"\nLRU counts equal the reference's: {same}; target LRU <= 5 s: {rows['lru, per step'] <= 5}")
    print("\n" + comp.table())
    print(f"\nper token, LRU: misses {token.total.misses:,}, miss rate {token.total.miss_rate:.4f}")
    result = {
        "events": n, "layers": args.layers, "tokens": trace.num_tokens, "steps": trace.num_steps,
        "experts": args.experts, "top_k": args.top_k, "capacity": args.capacity,
        "kernel": "numba" if compiled else "interpreted", "warmup_s": t_warm, "seconds": rows,
        "lru_equals_reference": same, "target_met": rows["lru, per step"] <= 5,
        "comparison": comp.to_dict(), "per_token_lru": token.total.to_dict(),
        "machine": {"cpu_count": os.cpu_count(), "python": platform.python_version(),
                    "load_average": os.getloadavg()},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
