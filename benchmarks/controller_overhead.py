"""What steering the replay ratio costs: one controller update against the mixer and a LoRA step.

Run ``python benchmarks/controller_overhead.py`` (numpy only, one thread, about a minute). One
update is what a run does after each evaluation: :func:`summarize` over the last 50 evaluations,
``controller.update`` and ``Mixer.set_shares``. It is timed (median of repeats) per controller
and number of rehearsal sources, next to the mixer's own per-batch cost measured in the same run,
and as a share of two step times: the recorded CPU LoRA step of ``benchmarks/llm_step.py``
(``benchmarks/results/llm_step.json``) and 30 ms, a stand-in for a fast GPU step of a small model
(no GPU step is measured here). The shares assume the worst case, an update after every step;
an update every ``k`` steps costs ``1/k`` of that. Target: <= 2% of step time.

Writes ``benchmarks/results/controller_overhead.json``.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np

from replaybank.controllers import MixLimits, make_controller, summarize
from replaybank.mixing import Mixer

RESULTS = Path(__file__).parent / "results"
GPU_STEP_S = 0.030
BATCH, HISTORY, CALLS, REPEATS = 8, 50, 200, 7


def cpu_step_s() -> float:
    rows = json.loads((RESULTS / "llm_step.json").read_text())["rows"]
    return float(next(r["s_per_step"] for r in rows if r["runner"] == "replaybank"))


def median_s(call, calls: int) -> float:
    times = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        for _ in range(calls):
            call()
        times.append((time.perf_counter() - start) / calls)
    return float(np.median(times))


def controller(kind: str, limits: MixLimits):
    rng = np.random.default_rng(0)
    if kind == "fixed":
        return make_controller("fixed", limits, shares=0.1 / limits.n)
    if kind == "proxy":
        return make_controller("proxy", limits, weights=[-1.0, 8.0, 0.0, 0.0, 0.0, 6.0, 0.0])
    return make_controller("bandit", limits, rng=rng, feedback="sampled" if kind.endswith("sampled") else "full")


def update_cost(kind: str, n: int) -> float:
    """Median seconds of one update (summarize + update + set_shares); a batch is drawn between
    updates, outside the timer, so that set_shares acts on a running stream."""
    limits = MixLimits(tuple(f"d{i}" for i in range(n)), floor=0.01, max_share=0.5)
    ctl = controller(kind, limits)
    avail = [True] * n
    mixer = Mixer([1 << 20] + [512] * n, ctl.mixture(avail), BATCH, seed=0)
    rng = np.random.default_rng(1)
    history = np.concatenate([np.full((HISTORY, 1), 2.0), 1.0 + rng.uniform(0, 0.3, (HISTORY, n))], axis=1)
    history[:, 0] *= np.linspace(1.0, 0.3, HISTORY)
    it = iter(mixer)
    medians = []
    for _ in range(REPEATS):
        spent = 0.0
        for _ in range(CALLS):
            history[:, 1:] *= 1.0 + rng.uniform(-0.01, 0.01, n)  # the losses move, so the mixture does
            start = time.perf_counter()
            mixer.set_shares(ctl.update(summarize(history, k=3), avail))
            spent += time.perf_counter() - start
            next(it)
        medians.append(spent / CALLS)
    return float(np.median(medians))


_BATCH_COST: dict[int, float] = {}


def batch_cost(n: int) -> float:
    """The mixer's own cost per batch (no steering), for ``n`` rehearsal sources."""
    if n not in _BATCH_COST:
        mixer = Mixer([1 << 20] + [512] * n, [0.9] + [0.1 / n] * n, BATCH, seed=0)
        it = iter(mixer)
        _BATCH_COST[n] = median_s(lambda: next(it), 2000)
    return _BATCH_COST[n]


def main() -> None:
    step_cpu = cpu_step_s()
    print(f"load average {os.getloadavg()[0]:.1f}; batch {BATCH}; history {HISTORY} evaluations; "
          f"CPU LoRA step {step_cpu:.2f} s (llm_step.json), GPU stand-in {GPU_STEP_S * 1e3:.0f} ms")
    print("| controller | sources | update (us) | mixer batch (us) | update / batch | of CPU step | of 30 ms step |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    rows = []
    for n in (1, 3, 8):
        for kind in ("fixed", "bandit", "bandit-sampled", "proxy"):
            upd, per_batch = update_cost(kind, n), batch_cost(n)
            row = {"controller": kind, "sources": n, "update_s": upd, "mixer_batch_s": per_batch,
                   "share_cpu_step": upd / step_cpu, "share_gpu_step": upd / GPU_STEP_S}
            rows.append(row)
            print(f"| {kind} | {n} | {upd * 1e6:.0f} | {per_batch * 1e6:.0f} | {upd / per_batch:.1f}x "
                  f"| {100 * upd / step_cpu:.4f}% | {100 * upd / GPU_STEP_S:.3f}% |", flush=True)
    out = RESULTS / "controller_overhead.json"
    out.write_text(json.dumps({"batch": BATCH, "history": HISTORY, "calls": CALLS, "repeats": REPEATS,
                               "cpu_step_s": step_cpu, "gpu_step_s": GPU_STEP_S,
                               "load_average": os.getloadavg()[0], "rows": rows}, indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
