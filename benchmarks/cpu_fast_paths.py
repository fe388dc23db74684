"""What the CPU fast paths save on the main job's LoRA step and its greedy generation.

    .venv/bin/python benchmarks/cpu_fast_paths.py [--steps 6] [--threads 2] [--tiny]

Paths, interleaved step by step in one process on the embedded SmolLM2-135M-Instruct (fp32
weights, LoRA r=16 on all seven projections, bf16 autocast as the main job runs on a CPU with
bfloat16 units):

* ``autocast`` (before): ``torch.autocast`` alone; it casts every frozen weight again at every call;
* ``+ bf16 copies``: :class:`replaybank.llm.runtime.FrozenBf16`, the frozen weights cast once;
* ``+ eager attention``: and :func:`replaybank.llm.runtime.short_row_attention` (training only).

Step shapes: ``naive`` (8 domain rows, 40 prompt + 24 completion tokens) and ``self-distill``
(4 such domain rows and 4 rows of 30 + 63 tokens learnt through the KL term, base pass kept).
Generation: 64 chat prompts, 48 new tokens at most, one batch. Prints median seconds and the
saving against ``autocast``; writes ``benchmarks/results/cpu_fast_paths.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6, help="timed rounds per path (after one warm-up round)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (the main job picks 2 on an idle 2-CPU machine)")
    parser.add_argument("--tiny", action="store_true", help="a random 2-layer Llama instead of SmolLM2 (a smoke run)")
    parser.add_argument("--out", default="benchmarks/results/cpu_fast_paths.json")
    args = parser.parse_args()
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[var] = str(args.threads)

    import numpy as np
    import torch
    import transformers

    from replaybank.llm.config import Training
    from replaybank.llm.eval import decode as gen
    from replaybank.llm.runtime import FrozenBf16, short_row_attention
    from replaybank.llm.train.kl import BaseCache, KLSpec
    from replaybank.llm.train.lora import add_lora
    from replaybank.llm.train.step import train_step

    torch.set_num_threads(args.threads)
    if args.tiny:
        config = transformers.LlamaConfig(vocab_size=49152, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                          num_attention_heads=4, num_key_value_heads=2)  # fmt: skip
        base, name = transformers.LlamaForCausalLM(config), "tiny random Llama"
    else:
        from replaybank.hf import embedded_model

        base = transformers.AutoModelForCausalLM.from_pretrained(embedded_model(), dtype=torch.float32)
        name = "SmolLM2-135M-Instruct (fp32 weights)"
    tokenizer = transformers.AutoTokenizer.from_pretrained(embedded_model()) if not args.tiny else None
    cfg = Training()
    model = add_lora(base, cfg)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=0.0)  # steps change nothing: every round is alike
    rng = np.random.default_rng(0)

    def rows(n: int, prompt: int, completion: int) -> list[tuple[np.ndarray, np.ndarray]]:
        out = []
        for _ in range(n):
            ids = rng.integers(3, model.config.vocab_size, prompt + completion)
            labels = ids.copy()
            labels[:prompt] = -100
            out.append((ids, labels))
        return out

    domain = rows(8, 40, 24)
    shapes: dict[str, tuple[list[Any], list[str], KLSpec | None]] = {
        "naive step": ([(0, domain)], ["domain"], None),
        "self-distill step": ([(0, domain[:4]), (1, rows(4, 30, 63))], ["domain", "self"], KLSpec(3.0, rehearsal_ce=False)),
    }
    casts = FrozenBf16(model, "bf16")
    paths: dict[str, Any] = {
        "autocast": lambda width: torch.autocast("cpu", dtype=torch.bfloat16),
        "+ bf16 copies": lambda width: casts,
        "+ eager attention": lambda width: _both(casts, short_row_attention(model, width)),
    }
    results: dict[str, dict[str, float]] = {}
    model.train()
    for shape, (groups, names, kl) in shapes.items():
        width = max(len(ids) for _, rs in groups for ids, _ in rs)
        caches = {p: BaseCache() for p in paths}
        times: dict[str, list[float]] = {p: [] for p in paths}
        for round_ in range(args.steps + 1):
            for path, ctx in paths.items():
                t0 = time.perf_counter()
                with ctx(width):
                    train_step(model, opt, params, groups, names, 2, torch.device("cpu"), kl, cfg.max_grad_norm, caches[path])
                if round_:
                    times[path].append(time.perf_counter() - t0)
        results[shape] = {p: statistics.median(t) for p, t in times.items()}
    if tokenizer is not None:
        prompts = [f"In two sentences, what does Python's {w} do?" for w in
                   ("zip", "map", "sorted", "enumerate", "range", "len", "print", "open")] * 8  # fmt: skip
        times = {"autocast": [], "+ bf16 copies": []}
        answers: dict[str, list[str]] = {}
        for round_ in range(max(2, args.steps // 2) + 1):
            for path in times:
                with _plain_autocast(gen) if path == "autocast" else contextlib.nullcontext():
                    t0 = time.perf_counter()
                    out = gen.generate(model, tokenizer, prompts, max_new_tokens=48, batch_size=64, precision="bf16")
                if round_:
                    times[path].append(time.perf_counter() - t0)
                answers[path] = out
        results["generation, 64 prompts"] = {p: statistics.median(t) for p, t in times.items()}
        same = answers["autocast"] == answers["+ bf16 copies"]
    load = os.getloadavg()
    print(f"{name}, LoRA r=16 (all projections), bf16 autocast, {args.threads} threads; load average {load[0]:.2f}\n")
    header = "".join(f"{p:>20s}" for p in paths)
    print(f"{'median seconds':24s}{header}")
    for shape, by_path in results.items():
        cells = "".join(f"{by_path[p]:11.3f} ({by_path[p] / by_path['autocast'] - 1:+5.0%})" if p in by_path else f"{'-':>20s}"
                        for p in paths)  # fmt: skip
        print(f"{shape:24s}{cells}")
    if tokenizer is not None:
        print(f"\ngenerated answers identical with and without the bf16 copies: {same}")
    result = {"model": name, "threads": args.threads, "steps": args.steps, "machine": platform.platform(),
              "load_average": load, "median_seconds": results, "torch": torch.__version__}  # fmt: skip
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")


@contextlib.contextmanager
def _both(first: Any, second: Any) -> Any:
    with first, second:
        yield


@contextlib.contextmanager
def _plain_autocast(gen: Any) -> Any:
    """generate_detailed as it ran before FrozenBf16: autocast over the fp32 weights."""
    import torch

    kept = gen.FrozenBf16
    gen.FrozenBf16 = lambda model, precision: torch.autocast("cpu", dtype=torch.bfloat16)
    try:
        yield
    finally:
        gen.FrozenBf16 = kept


if __name__ == "__main__":
    main()
