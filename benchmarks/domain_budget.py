"""How much naive LoRA training the embedded tool-API skill needs: chosen on a validation split.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/domain_budget.py [--rows 120,240] [--lrs 2e-3,4e-3] [--epochs 3]

For each (domain rows per generation, learning rate), trains a fresh LoRA on the embedded
``builtin:toolapi`` rows (naive: no rehearsal) for up to ``--epochs`` passes and measures the
exact match of *generated* calls after every pass on a **validation** split: tool requests drawn
with their own seed (``seed + 20_000``), disjoint from the training rows and from the main job's
held-out evaluation requests (``seed + 10_000``, never looked at here). Prints a table (exact
match, call score, training seconds and tokens per cell) and writes
``benchmarks/results/domain_budget.json``; the main job's defaults (``[data] domain_train_rows``,
``[training] learning_rate`` / ``num_train_epochs``) are read off it.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import time
from pathlib import Path

for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(var, "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

OUT = Path(__file__).parent / "results" / "domain_budget.json"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="120,240", help="domain training rows per generation, comma-separated")
    parser.add_argument("--lrs", default="2e-3,4e-3", help="learning rates, comma-separated")
    parser.add_argument("--epochs", type=int, default=3, help="passes; validation after each")
    parser.add_argument("--validation", type=int, default=48, help="validation requests")
    parser.add_argument("--seeds", default="0", help="seeds (data order, LoRA init, training rows), comma-separated")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()

    import torch

    from replaybank.llm.config import Config
    from replaybank.llm.data import toolapi
    from replaybank.llm.data.prepare import encode_domain
    from replaybank.llm.eval.domain import generated_accuracy
    from replaybank.llm.model import load_model
    from replaybank.llm.runtime import loadavg
    from replaybank.llm.train import train_lora
    from replaybank.llm.train.adapter import fresh_adapter

    torch.set_num_threads(1)
    model, tok = load_model("SmolLM2-135M-Instruct", "cpu", print)
    base_cfg = Config()
    results = []
    load_start = loadavg()
    for seed in [int(s) for s in args.seeds.split(",")]:
        held = toolapi.generate_examples(base_cfg.data.domain_eval_rows, seed + 10_000)
        validation = toolapi.generate_examples(args.validation, seed + 20_000, exclude={r["prompt"] for r in held})
        excluded = {r["prompt"] for r in held + validation}
        for n_rows in [int(r) for r in args.rows.split(",")]:
            recs = toolapi.generate_examples(n_rows, seed + 1, exclude=excluded)
            rows = encode_domain(tok, recs, base_cfg.training.max_seq_length)
            for lr in [float(x) for x in args.lrs.split(",")]:
                cfg = dataclasses.replace(base_cfg.training, learning_rate=lr, num_train_epochs=args.epochs, seed=seed)
                cells: list[dict[str, float]] = []
                with fresh_adapter(model, cfg) as peft_model:
                    t0 = time.perf_counter()

                    def on_eval(step: int, _m=peft_model, _t0=t0, _cells=cells, _val=validation,
                                _label=f"seed {seed} rows {n_rows} lr {lr:g}") -> dict[str, float]:
                        train_s = time.perf_counter() - _t0 - sum(c["eval_s"] for c in _cells)
                        e0 = time.perf_counter()
                        res = generated_accuracy(_m, tok, _val, max_new_tokens=48, batch_size=64)
                        _cells.append({"epoch": len(_cells) + 1, "step": step, "exact_match": res["exact_match"],
                                       "call_score": res["call_score"], "train_s": round(train_s, 1),
                                       "eval_s": time.perf_counter() - e0})
                        print(f"{_label} epoch {len(_cells)} step {step}: "
                              f"exact {res['exact_match']:.3f} call {res['call_score']:.3f} ({train_s:.0f} s)", flush=True)
                        return {}

                    log = train_lora(peft_model, int(tok.pad_token_id), rows, cfg,
                                     on_eval=on_eval, eval_points=args.epochs, desc=f"rows {n_rows} lr {lr:g}")
                results.append({"seed": seed, "rows": n_rows, "lr": lr, "tokens": log.tokens, "cells": cells})
                _write(args.out, args.validation, [load_start, loadavg()], results)  # a cut-short sweep keeps its cells
    print(f"\nnaive LoRA on builtin:toolapi, {args.validation} validation requests (load {load_start} -> {loadavg()})")
    print("| seed | rows | lr | " + " | ".join(f"epoch {e + 1}" for e in range(args.epochs)) + " | train s (all) |")
    print("|---|---:|---:|" + "---:|" * args.epochs + "---:|")
    for r in results:
        cells = " | ".join(f"{c['exact_match']:.3f}" for c in r["cells"])
        print(f"| {r['seed']} | {r['rows']} | {r['lr']:g} | {cells} | {r['cells'][-1]['train_s']} |")
    _write(args.out, args.validation, [load_start, loadavg()], results)
    print(f"wrote {args.out}")


def _write(out: Path, validation: int, load: list[float | None], results: list[dict[str, object]]) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"validation_requests": validation, "loadavg": load, "results": results}, indent=2))


if __name__ == "__main__":
    main()
