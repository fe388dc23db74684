"""The torch priority tree (``Prioritized(device=...)``) against the default tree (numba, or numpy
without it) in the same run: one prioritized step, ``sample(B)`` + ``update_priorities(B)`` through
``ReplayBuffer``'s public calls, at 10^5 and 10^6 items, one thread.

    OMP_NUM_THREADS=1 PYTHONPATH=src .venv/bin/python benchmarks/per_torch.py --torch-device cpu
    python benchmarks/per_torch.py --torch-device cuda --batch 256,8192 --branching 32,128

The buffer holds one int32 column, so the step is the tree's work and the Python around it (the
row gather of a real buffer is the same for every tree). Rounds interleave the trees; each round
runs steps for ``--seconds`` of wall time per tree (a CUDA tree is synchronised before the clock is
read) and records wall and this thread's CPU microseconds per step; the table shows the median
over rounds, wall for a CUDA tree (the GPU's time counts), thread CPU otherwise (robust to other
load on the machine). Prints the table and the load average; writes ``--out`` (JSON).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any

for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(var, "1")

import numpy as np  # noqa: E402


def _window(buf: Any, td: np.ndarray, batch: int, seconds: float, sync: Any) -> tuple[float, float, int]:
    """Steps for ``seconds``: (wall us, thread CPU us) per step, and the step count."""
    n, wall0, cpu0 = 0, time.perf_counter(), time.thread_time()
    while True:
        for _ in range(8):
            b = buf.sample(batch)
            buf.update_priorities(b.ids, td)
        n += 8
        sync()
        wall = time.perf_counter() - wall0
        if wall >= seconds:
            return wall / n * 1e6, (time.thread_time() - cpu0) / n * 1e6, n


def measure(
    torch_device: str,
    items: list[int],
    batches: list[int],
    branchings: list[int],
    rounds: int = 5,
    seconds: float = 0.2,
    log: Any = print,
) -> dict[str, Any]:
    """Per (items, batch): median wall and CPU microseconds per step of the default tree and of
    the torch tree on ``torch_device`` at each branching."""
    import torch

    from replaybank import ReplayBuffer
    from replaybank.samplers import Prioritized
    from replaybank.samplers.sumtree import _compiled_tree

    torch.set_num_threads(1)
    cuda = torch_device.startswith("cuda")

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    default = "numba" if _compiled_tree() is not None else "numpy"
    out: dict[str, Any] = {"torch_device": torch_device, "default_tree": default, "rounds": rounds,
                           "seconds": seconds, "torch": torch.__version__, "numpy": np.__version__,
                           "machine": platform.processor() or platform.machine(), "runs": []}  # fmt: skip
    if cuda:
        out["gpu"] = torch.cuda.get_device_name()
    rng = np.random.default_rng(0)
    for n in items:
        priorities = rng.random(n) + 0.01
        trees = {f"{default} (default)": Prioritized()}
        trees.update({f"torch {torch_device} k={k}": Prioritized(branching=k, device=torch_device) for k in branchings})
        bufs = {}
        for name, sampler in trees.items():
            bufs[name] = ReplayBuffer(n, sampler=sampler, seed=0)
            bufs[name].extend({"i": np.arange(n, dtype=np.int32)}, priorities=priorities)
        for batch in batches:
            td = rng.random(batch)
            for buf in bufs.values():  # warm-up: compilation, caches, CUDA context and kernels
                _window(buf, td, batch, 0.02, sync)
            samples: dict[str, list[tuple[float, float]]] = {name: [] for name in bufs}
            for _ in range(rounds):
                for name, buf in bufs.items():
                    wall, cpu, _ = _window(buf, td, batch, seconds, sync)
                    samples[name].append((wall, cpu))
            row: dict[str, Any] = {"items": n, "batch": batch, "trees": {}}
            for name, pairs in samples.items():
                wall = statistics.median(p[0] for p in pairs)
                cpu = statistics.median(p[1] for p in pairs)
                shown = wall if (cuda and name.startswith("torch")) else cpu
                row["trees"][name] = {"wall_us": round(wall, 1), "cpu_us": round(cpu, 1), "us": round(shown, 1)}
            base = row["trees"][f"{default} (default)"]["us"]
            for entry in row["trees"].values():
                entry["vs_default"] = round(entry["us"] / base, 2)
            out["runs"].append(row)
            log(table_row(row))
    out["load_average"] = [round(x, 2) for x in os.getloadavg()]
    return out


def table_row(row: dict[str, Any]) -> str:
    cells = " | ".join(f"{name}: {t['us']:.1f} us ({t['vs_default']:.2f}x)" for name, t in row["trees"].items())
    return f"| {row['items']:,} | {row['batch']} | {cells} |"


def table(result: dict[str, Any]) -> str:
    """Markdown: one row per (items, batch), one column per tree; microseconds per step and the
    ratio to the default tree (above 1: slower)."""
    runs = result["runs"]
    if not runs:
        return "no runs"
    names = list(runs[0]["trees"])
    lines = ["| items | batch | " + " | ".join(f"{n} us/step (x default)" for n in names) + " |",
             "|---:|---:|" + "---:|" * len(names)]  # fmt: skip
    for row in runs:
        cells = [f"{row['trees'][n]['us']:.1f} ({row['trees'][n]['vs_default']:.2f}x)" for n in names]
        lines.append(f"| {row['items']:,} | {row['batch']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _ints(text: str) -> list[int]:
    return [int(float(x)) for x in text.split(",") if x]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--torch-device", default="cpu", help="cpu, cuda or cuda:N: where the torch tree runs")
    p.add_argument("--items", default="1e5,1e6", help="comma-separated buffer sizes (all filled)")
    p.add_argument("--batch", default="256", help="comma-separated batch sizes")
    p.add_argument("--branching", default="32", help="comma-separated torch-tree branchings (a column each)")
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds (median)")
    p.add_argument("--seconds", type=float, default=0.2, help="wall seconds per tree per round")
    p.add_argument("--out", default="benchmarks/results/per_torch.json")
    args = p.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.2f}", flush=True)
    result = measure(args.torch_device, _ints(args.items), _ints(args.batch), _ints(args.branching),
                     args.rounds, args.seconds)  # fmt: skip
    print("\n" + table(result))
    print(f"\nload average (1, 5, 15 min) after: {result['load_average']}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
