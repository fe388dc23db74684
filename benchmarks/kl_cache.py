"""What :class:`replaybank.llm.train.kl.BaseCache` saves on the self-distill arm's step.

    .venv/bin/python benchmarks/kl_cache.py [--tiny] [--steps 6] [--threads 2]

One step = :func:`replaybank.llm.train.step.train_step` (forward, KL-to-base, backward, AdamW) on
the self-distill arm's batch shape: 4 domain rows (cross-entropy; ``--domain`` = prompt +
completion tokens) and 4 rehearsal rows learnt through the KL term only (``--rehearsal``; the 96
self rows of the main job average 10 prompt + 63 answer tokens, plus the chat template), on the
embedded SmolLM2-135M-Instruct (``--tiny``: a random 2-layer Llama) with the main job's LoRA
(r=16 on all seven projections) under the main job's autocast. Modes, interleaved step by step
in one process:

* ``no KL``: cross-entropy on the domain rows only (the rehearsal rows still run forward);
* ``KL, base pass every step``: the base pass through every layer on the rehearsal rows;
* ``KL, base pass kept``: ``BaseCache`` warmed on the same rows (the state after each self row's
  first visit; each row comes back about 5 times in the main job).

Prints median wall and CPU seconds per step and the saving; writes
``benchmarks/results/kl_cache.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true", help="a random 2-layer Llama instead of SmolLM2")
    parser.add_argument("--steps", type=int, default=6, help="timed steps per mode (after one warm-up round)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (the main job picks 2 on an idle 2-CPU machine)")
    parser.add_argument("--domain", type=int, nargs=2, default=[40, 24], metavar=("PROMPT", "COMPLETION"))
    parser.add_argument("--rehearsal", type=int, nargs=2, default=[30, 63], metavar=("PROMPT", "COMPLETION"))
    parser.add_argument("--out", default="benchmarks/results/kl_cache.json")
    args = parser.parse_args()
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[var] = str(args.threads)

    import numpy as np
    import torch
    import transformers

    from replaybank.llm.config import Training
    from replaybank.llm.runtime import autocast
    from replaybank.llm.train.kl import BaseCache, KLSpec
    from replaybank.llm.train.lora import add_lora
    from replaybank.llm.train.step import train_step

    torch.set_num_threads(args.threads)
    if args.tiny:
        config = transformers.LlamaConfig(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                          num_attention_heads=4, num_key_value_heads=2)  # fmt: skip
        base, name = transformers.LlamaForCausalLM(config), "tiny random Llama"
    else:
        from replaybank.hf import embedded_model

        base = transformers.AutoModelForCausalLM.from_pretrained(embedded_model(), dtype=torch.float32)
        name = "SmolLM2-135M-Instruct (fp32 weights)"
    cfg = Training()
    model = add_lora(base, cfg)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-6)  # a tiny rate: the adapter stays put, every step is alike
    rng = np.random.default_rng(0)
    vocab = model.config.vocab_size

    def rows(n: int, prompt: int, completion: int) -> list[tuple[np.ndarray, np.ndarray]]:
        out = []
        for _ in range(n):
            ids = rng.integers(3, vocab, prompt + completion)
            labels = ids.copy()
            labels[:prompt] = -100
            out.append((ids, labels))
        return out

    groups = [(0, rows(4, *args.domain)), (1, rows(4, *args.rehearsal))]
    names = ["domain", "self"]
    kl = KLSpec(3.0, rehearsal_ce=False)
    device = torch.device("cpu")
    warm = BaseCache()
    modes = {"no KL": (None, None), "KL, base pass every step": (kl, None), "KL, base pass kept": (kl, warm)}
    times: dict[str, list[tuple[float, float]]] = {m: [] for m in modes}
    faults: dict[str, list[int]] = {m: [] for m in modes}
    model.train()
    for step in range(args.steps + 1):  # round 0 warms up (and fills the cache)
        for mode, (spec, cache) in modes.items():
            faults0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            cpu0, wall0 = time.process_time(), time.perf_counter()
            with autocast(cfg.precision, "cpu"):
                train_step(model, opt, params, groups, names, 2, device, spec, cfg.max_grad_norm, cache)
            cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
            if step:
                times[mode].append((cpu, wall))
                faults[mode].append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults0)
    load = os.getloadavg()
    med = {m: (statistics.median(c for c, _ in t), statistics.median(w for _, w in t)) for m, t in times.items()}
    every = med["KL, base pass every step"][1]
    print(f"{name}, LoRA r=16 (all projections), 4 domain rows {args.domain} + 4 KL rows {args.rehearsal} "
          f"(prompt, completion tokens); {args.threads} threads; load average {load[0]:.2f}\n")
    thp = os.environ.get("THP_MEM_ALLOC_ENABLE", "0")
    print(f"{'mode':28s} {'wall s/step':>12s} {'CPU s/step':>11s} {'vs base pass every step':>24s} {'page faults/step':>17s}")
    for mode, (cpu, wall) in med.items():
        print(f"{mode:28s} {wall:12.3f} {cpu:11.3f} {wall / every - 1:+24.1%} {statistics.median(faults[mode]):17,.0f}")
    print(f"THP_MEM_ALLOC_ENABLE={thp}")
    print(f"\ncache: {len(warm)} rows kept, {warm.hits} hits, {warm.misses} misses")
    result = {
        "model": name, "threads": args.threads, "domain": args.domain, "rehearsal": args.rehearsal, "steps": args.steps,
        "machine": platform.platform(), "load_average": load, "median_wall_s": {m: v[1] for m, v in med.items()},
        "median_cpu_s": {m: v[0] for m, v in med.items()}, "torch": torch.__version__, "thp_mem_alloc": thp,
        "median_page_faults": {m: statistics.median(f) for m, f in faults.items()},
    }  # fmt: skip
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
