"""How much suite retention does *any* change of the weights cost? Trained adapters against random ones.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/loop_retention_floor.py \\
        --runs runs/ep2/out/window-rehearsal-s0 ... --generations 1,5 \\
        --random-scales 0.002,0.004,0.008 --random-seeds 0,1 [--out benchmarks/results/loop_retention_floor.json [--answers]]

The loop's retention counts a conversation item kept when the adapted model's greedy answer
agrees with the base model's (token F1 >= 0.5), beside items with deterministic checks (lists,
JSON keys, a fact, arithmetic, code). Greedy decoding of a 135M model can change its wording
after a small change of the weights. This script asks how small: it scores the whole suite (118
items) for

* the saved adapters of finished loop runs (``--runs``, ``--generations``), and
* **random** LoRA adapters of the loop's shape (A as PEFT initialises it, B normal with standard
  deviation ``scale``; ``--random-seeds`` draws per scale), which carry no skill at all,

and for each the drift from the base model: the mean per-token ``KL(p_base || p_model)`` over
the base model's own suite answers (teacher-forced; :func:`replaybank.llm.train.kl.kl_to_base`).
Retention is reported on all items, on the checkable items only and on the agreement items only.
If random adapters at the drift of a trained one lose as much agreement, the loss is the metric's
sensitivity to any change, not forgetting of a capability. Nothing is trained; runs are read only.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[var] = "1"
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def split_retention(items: list[dict[str, Any]], base: dict[str, float]) -> dict[str, float | None]:
    """The loop's retention (:func:`replaybank.llm.eval.measure.suite_retention`) on all items, on the
    checkable items only and on the agreement items only."""
    from replaybank.llm.eval.measure import suite_retention

    def ret(keep: Any) -> float | None:
        sums: dict[str, list[float]] = {}
        for it in items:
            if keep(it):
                pair = sums.setdefault(it["family"], [0.0, 0.0])
                pair[0] += it["score"]
                pair[1] += base[it["id"]]
        value = suite_retention({fam: (a / b if b > 0 else None) for fam, (a, b) in sums.items()})
        return None if value is None else round(100 * value, 1)

    return {"all": ret(lambda it: True), "checkable": ret(lambda it: it["check"] != "agreement"),
            "agreement": ret(lambda it: it["check"] == "agreement")}


def drift(model: Any, tok: Any, suite: Any) -> float:
    """Mean per-token KL(base || model) over the base model's own answers to the suite."""
    import torch

    from replaybank.llm.data.rows import IGNORE_INDEX, encode_pair
    from replaybank.llm.train.kl import kl_to_base

    total, count = 0.0, 0
    with torch.no_grad():
        for item in suite.items:
            ids, labels = encode_pair(tok, item.prompt, suite.base_answers[item.id], 256, open_end=True)
            x = torch.as_tensor(ids)[None]
            pos = torch.as_tensor(labels[1:] != IGNORE_INDEX)
            if not pos.any():
                continue
            logits = model(input_ids=x).logits[0, :-1][pos]
            with model.disable_adapter():
                base_logits = model(input_ids=x).logits[0, :-1][pos]
            total += float(kl_to_base(logits, base_logits))
            count += int(pos.sum())
    return total / max(count, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", nargs="*", type=Path, default=[], help="finished loop run folders")
    parser.add_argument("--generations", default="1,5", help="generations of --runs to score (default 1,5)")
    parser.add_argument("--random-scales", default="", help="comma-separated std of the random B matrices")
    parser.add_argument("--random-seeds", default="0", help="comma-separated seeds, one random adapter each per scale")
    parser.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    parser.add_argument("--answers", action="store_true",
                        help="with --out: also write, per scored adapter, the items it scored below the base model "
                             "(prompt, base answer, its answer)")
    args = parser.parse_args()
    try:
        gens = [int(g) for g in args.generations.split(",") if g]
        scales = [float(s) for s in args.random_scales.split(",") if s]
        seeds = [int(s) for s in args.random_seeds.split(",") if s]
    except ValueError as exc:
        parser.error(f"--generations, --random-scales and --random-seeds take comma-separated numbers ({exc})")
    if not args.runs and not scales:
        parser.error("nothing to score: give --runs and/or --random-scales")

    import torch

    from replaybank.llm.config.loop import LoopConfig
    from replaybank.llm.eval.suite import evaluate_suite, load_suite, prepare_suite
    from replaybank.llm.loop.consolidate import load_adapter
    from replaybank.llm.loop.state import read_state
    from replaybank.llm.model import cache_dir, load_model
    from replaybank.llm.train import add_lora

    torch.set_num_threads(1)
    cfg = LoopConfig()
    for run in args.runs:
        state = read_state(run)
        if state is None or state.finished < max(gens, default=0):
            parser.error(f"{run}: not a loop run folder with generations {gens} finished")
        cfg = state.loop_config
    base, tok = load_model(cfg.training.base_model)
    model = add_lora(base, cfg.training)
    initial = {k: v.detach().clone() for k, v in model.state_dict().items() if "lora_" in k}
    suite = prepare_suite(model, tok, load_suite(), cache_dir=cache_dir() / "suite", batch_size=32)
    base_items = {o["id"]: o for o in evaluate_suite(model, tok, suite, batch_size=32, desc=None)["items"]}
    base_scores = {i: o["score"] for i, o in base_items.items()}
    prompts = {item.id: item.prompt for item in suite.items}

    rows: list[dict[str, Any]] = []

    def score(kind: str, name: str) -> None:
        t0 = time.perf_counter()
        res = evaluate_suite(model, tok, suite, batch_size=32, desc=None)
        row = {"kind": kind, "name": name, "kl_per_token": round(drift(model, tok, suite), 5),
               **split_retention(res["items"], base_scores), "seconds": round(time.perf_counter() - t0, 1)}
        if args.answers:
            row["lost"] = [{"id": o["id"], "family": o["family"], "check": o["check"], "prompt": prompts[o["id"]],
                            "base": base_items[o["id"]]["answer"], "answer": o["answer"],
                            "score": o["score"], "base_score": base_scores[o["id"]]}
                           for o in res["items"] if o["score"] < base_scores[o["id"]]]
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "lost"}), flush=True)

    for run in args.runs:
        for g in gens:
            model.load_state_dict(initial, strict=False)
            load_adapter(model, run / "adapters" / f"gen{g}")
            score("trained", f"{run.name}/gen{g}")
    for scale in scales:
        for seed in seeds:
            model.load_state_dict(initial, strict=False)
            gen = torch.Generator().manual_seed(seed)
            with torch.no_grad():
                for name, p in model.named_parameters():
                    if "lora_B" in name:
                        p.copy_(torch.randn(p.shape, generator=gen) * scale)
            score("random", f"scale {scale:g} seed {seed}")
    if args.out:
        args.out.write_text(json.dumps({"suite_items": len(suite.items), "rows": rows}, indent=1))
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
