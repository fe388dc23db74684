"""Routing traces of a tiny MoE language model trained here: held-out prose and stdlib code.

Run ``PYTHONPATH=src .venv/bin/python benchmarks/moe_traces.py``. Loads the cached model of
``MoeSpec()`` (``~/.cache/replaybank/moe/mixtral-<digest>``), training it first when absent
(byte-level Mixtral: 4 layers, 16 experts, top-2, hidden 128, ~7 minutes on one CPU thread over
the documentation corpus's training part), then records with ``traces.record`` one trace per
workload: ``--requests`` windows of held-out text (``prose``: documents never trained on) and of
stdlib source (``code``: never trained on), each a prompt of ``--prompt-tokens`` bytes prefilled
in chunks of ``--prefill-chunk`` and ``--decode-tokens`` decode steps that feed the window's next
bytes (teacher forcing: the routing of the text itself). Requests are recorded one after another;
``traces.schedule`` interleaves them later. Writes ``benchmarks/results/moe_traces/{prose,code}/``
(trace folders) and ``training.json`` (the model's training record). ``--model-seed 1 --out
benchmarks/results/moe_traces_seed1`` repeats it with a second model trained from another seed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from pathlib import Path

for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[var] = "1"
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from replaybank.traces import save_trace, union_stats  # noqa: E402
from replaybank.traces.moe import MoeSpec, load_or_train  # noqa: E402
from replaybank.traces.workloads import WORKLOADS, record_workload  # noqa: E402

OUT = Path(__file__).resolve().parent / "results" / "moe_traces"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=64, help="requests per workload")
    parser.add_argument("--prompt-tokens", type=int, default=32)
    parser.add_argument("--prefill-chunk", type=int, default=4)
    parser.add_argument("--decode-tokens", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0, help="which windows are drawn")
    parser.add_argument("--model-seed", type=int, default=0, help="the model's training seed")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()

    import torch

    torch.set_num_threads(1)
    start = time.perf_counter()
    spec = MoeSpec(seed=args.model_seed)
    model, training = load_or_train(spec)
    print(f"model: {training['steps']} steps in {training['seconds']} s, held-out loss "
          f"{training['heldout_loss_bytes']:.3f} nats/byte ({time.perf_counter() - start:.1f} s to load or train)")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "training.json").write_text(json.dumps(training, indent=1))
    for name in WORKLOADS:
        t0 = time.perf_counter()
        trace = record_workload(
            model, name, requests=args.requests, prompt_tokens=args.prompt_tokens,
            decode_tokens=args.decode_tokens, prefill_chunk=args.prefill_chunk, seed=args.seed,
            meta={"model": f"mixtral-{spec.digest()}"},
        )
        folder = args.out / name
        if folder.exists():
            shutil.rmtree(folder)
        save_trace(trace, folder)
        size = sum(f.stat().st_size for f in folder.iterdir())
        mean_union = [round(s["mean"], 2) for s in union_stats(trace)]
        print(f"{name}: {trace.num_steps:,} steps, {trace.routing_events:,} routing events, "
              f"{size / 1e6:.2f} MB, mean step union per layer {mean_union}, "
              f"{time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
