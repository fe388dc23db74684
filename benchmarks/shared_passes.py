"""Sources sharing forward passes in the LoRA step: passes, padded positions and step time.

    .venv/bin/python benchmarks/shared_passes.py [--rounds 4] [--threads 2] [--count-only]

Before: each source's rows in their own passes (each cut in two by length when that pads at most
80% of one pass); after: the rows of every source of a micro-batch together, sorted and cut the
same way (:func:`replaybank.llm.train.step.by_length`). Both run the same
:func:`~replaybank.llm.train.step.train_step` arithmetic; only the grouping into passes differs.

Counted over the main job's steps: the domain rows' real lengths (builtin:toolapi, 240 rows),
the rehearsal pool's real lengths (python-docs), and self rows of 40-130 tokens (the range the
main job's self rows span; drawn uniformly, seeded, as no self rows are cached here). Batches
are drawn like the main job's mixer quotas: naive 8 domain rows, rehearsal-corpus 7 + 1 corpus
row, self-distill 4 + 4 self rows.

Timed: the self-distill step on the embedded SmolLM2-135M-Instruct (bf16 copies of the frozen
weights, eager attention, KL kept per row as in the main job), before and after interleaved in
one process, medians. Writes ``benchmarks/results/shared_passes.json``.
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

import numpy as np

from replaybank.llm.train.step import by_length as _REAL_BY_LENGTH  # noqa: E402  (the timing swaps the module's)


def per_source(rows: list[Any], keep: float = 0.8, rows_per_pass: int | None = None) -> list[Any]:
    """The passes before: one source at a time, each cut by length as by_length cuts."""
    by_length = _REAL_BY_LENGTH
    out: list[Any] = []
    for source in sorted({s for s, _ in rows}):
        out += by_length([r for r in rows if r[0] == source], keep, rows_per_pass)
    return out


def count(domain: np.ndarray, pool: np.ndarray, rng: np.random.Generator) -> dict[str, Any]:
    from replaybank.llm.train.step import by_length

    def fake(source: int, n: int) -> tuple[int, tuple[np.ndarray, np.ndarray]]:
        return source, (np.zeros(int(n)), np.zeros(int(n)))

    shapes = {"naive": (8, 0, 60, None), "rehearsal-corpus": (7, 1, 68, pool), "self-distill": (4, 4, 120, None)}
    out: dict[str, Any] = {}
    for arm, (n_dom, n_reh, steps, reh_lengths) in shapes.items():
        tally = {"before": [0, 0], "after": [0, 0]}
        tokens = 0
        for _ in range(steps):
            rows = [fake(0, n) for n in rng.choice(domain, n_dom, replace=False)]
            if n_reh:
                lengths = rng.choice(reh_lengths, n_reh) if reh_lengths is not None else rng.integers(40, 131, n_reh)
                rows += [fake(1, n) for n in lengths]
            tokens += sum(len(r[1][0]) for r in rows)
            for name, passes in (("before", per_source(rows, rows_per_pass=8)), ("after", by_length(rows, rows_per_pass=8))):
                tally[name][0] += len(passes)
                tally[name][1] += sum(len(p) * max(len(r[1][0]) for r in p) for p in passes)
        out[arm] = {"steps": steps, "tokens": tokens,
                    **{f"passes_{k}": v[0] for k, v in tally.items()}, **{f"padded_{k}": v[1] for k, v in tally.items()}}  # fmt: skip
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4, help="timed rounds per arm (after one warm-up round)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--count-only", action="store_true", help="count passes and padded positions, time nothing")
    parser.add_argument("--out", default="benchmarks/results/shared_passes.json")
    args = parser.parse_args()
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[var] = str(args.threads)

    import torch
    import transformers
    from replaybank.llm.train.loop import add_lora

    from replaybank.hf import embedded_model
    from replaybank.llm.config import Config, Training
    from replaybank.llm.data.prepare import prepare
    from replaybank.llm.runtime import FrozenBf16, short_row_attention
    from replaybank.llm.train import step as step_mod
    from replaybank.llm.train.kl import BaseCache, KLSpec

    torch.set_num_threads(args.threads)
    tokenizer = transformers.AutoTokenizer.from_pretrained(embedded_model())
    data = prepare(Config.from_dict({}), tokenizer)
    domain_rows = data.domain_generations[0]
    counted = count(domain_rows.lengths(), data.rehearsal_pool.lengths(), np.random.default_rng(0))
    result: dict[str, Any] = {"counted": counted, "threads": args.threads, "machine": platform.platform(),
                              "torch": torch.__version__}  # fmt: skip
    print("arm               steps  tokens  passes before -> after  padded positions before -> after")
    for arm, c in counted.items():
        print(f"{arm:18s}{c['steps']:5d} {c['tokens']:7d}  {c['passes_before']:6d} -> {c['passes_after']:5d}"
              f"            {c['padded_before']:7d} -> {c['padded_after']:7d} ({c['padded_after'] / c['padded_before'] - 1:+.1%})")
    if not args.count_only:
        load_before = os.getloadavg()
        base = transformers.AutoModelForCausalLM.from_pretrained(embedded_model(), dtype=torch.float32)
        cfg = Training()
        model = add_lora(base, cfg)
        params = [p for p in model.parameters() if p.requires_grad]
        opt = torch.optim.AdamW(params, lr=0.0)  # steps change nothing: every round is alike
        rng = np.random.default_rng(1)
        dom = domain_rows.rows(rng.choice(len(domain_rows), 4, replace=False))
        selfs = []
        for n in (45, 80, 105, 130):  # self rows across the 40-130 range, 30-token prompts
            ids = rng.integers(3, model.config.vocab_size, n)
            selfs.append((ids, np.where(np.arange(n) < 30, -100, ids)))
        groups = [(0, dom), (1, selfs)]
        kl = KLSpec(3.0, rehearsal_ce=False)
        casts = FrozenBf16(model, "bf16")
        width = max(len(ids) for _, rs in groups for ids, _ in rs)
        real = step_mod.by_length
        arms = {"before (per source)": per_source, "after (shared)": real}
        caches = {a: BaseCache() for a in arms}
        times: dict[str, list[float]] = {a: [] for a in arms}
        losses: dict[str, float] = {}
        model.train()
        for round_ in range(args.rounds + 1):
            for arm, grouping in arms.items():
                step_mod.by_length = grouping  # type: ignore[assignment]
                t0 = time.perf_counter()
                with casts, short_row_attention(model, width):
                    stats, loss = step_mod.train_step(model, opt, params, groups, ["domain", "self"], 2, torch.device("cpu"),
                                                      kl, cfg.max_grad_norm, caches[arm], rows_per_pass=8)  # fmt: skip
                if round_:
                    times[arm].append(time.perf_counter() - t0)
                losses[arm] = stats["loss"] + kl.weight * stats["kl"]
        step_mod.by_length = real
        med = {a: statistics.median(t) for a, t in times.items()}
        result["self_distill_step_s"] = {"median": med, "all": times, "objective": losses,
                                         "load_average_before": load_before, "load_average_after": os.getloadavg()}  # fmt: skip
        print(f"\nself-distill step, {args.threads} threads, {args.rounds} rounds interleaved, "
              f"load average {load_before[0]:.1f} -> {os.getloadavg()[0]:.1f}")
        for arm, m in med.items():
            print(f"  {arm:22s} median {m:6.3f} s  ({m / med['before (per source)'] - 1:+.0%})  rounds {[round(t, 2) for t in times[arm]]}")
        print(f"  step objective (loss + 3 x KL): {losses}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
