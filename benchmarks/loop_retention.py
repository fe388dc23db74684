"""Retention after one consolidation of the loop, per family, for several consolidation settings.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/loop_retention.py --seed 1 \\
        --variant base: --variant kl1:kl_weight=1 --variant lr5e-4:learning_rate=5e-4 \\
        --variant none:rehearsal=none [--suite-per-family 0] [--out benchmarks/results/loop_retention_s1.json]

Reproduces generation 1 of ``replaybank loop`` (default config, ``--seed``): the store seeded
with the demonstrations, the base model's sampled attempts at generation 1's tasks (acted once),
the domain rows of generation 1 and the self-synthesized rehearsal rows (cached per seed). Then,
per ``--variant NAME:key=value,...`` (``[loop]`` keys ``recipe`` (a built-in recipe name, e.g.
``rehearsal-self``), or the old rehearsal keys ``rehearsal``, ``rehearsal_ratio``, ``kl_weight``,
``rehearsal_ce`` (mapped onto a recipe, as ``replaybank loop`` reads them), ``self_open_rows``;
``[training]`` keys ``learning_rate``, ``num_train_epochs``), the adapter is reset
to its initial weights, consolidated once with those settings, and evaluated: held-out exact and
credit without context (``eval_tasks`` tasks, greedy) and the general-capability suite on
``--suite-per-family`` items per family (0 = every item of the suite). Retention is reported on
the whole evaluated suite and on the loop's own per-seed sample (``[evaluation] suite_per_family``
items per family, the sample ``replaybank loop`` scores), so the sampling noise of the loop's
figure is visible. The variant with no change (``base:``) is generation 1 of the default loop.

Writes JSON with every variant's per-family scores and, per item, the base answer and the
variant's answer (to read what changed).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[var] = "1"
os.environ.setdefault("HF_HUB_OFFLINE", "1")

LOOP_KEYS = {"recipe", "rehearsal", "rehearsal_ratio", "kl_weight", "rehearsal_ce", "self_open_rows"}
TRAINING_KEYS = {"learning_rate", "num_train_epochs"}


def parse_variant(text: str) -> tuple[str, dict[str, Any]]:
    name, _, rest = text.partition(":")
    changes: dict[str, Any] = {}
    for part in filter(None, rest.split(",")):
        key, _, value = part.partition("=")
        if key not in LOOP_KEYS | TRAINING_KEYS:
            raise SystemExit(f"--variant {text!r}: unknown key {key!r} (known: {sorted(LOOP_KEYS | TRAINING_KEYS)})")
        if key in ("recipe", "rehearsal"):
            changes[key] = value
        elif key in ("self_open_rows", "rehearsal_ce"):
            changes[key] = value.lower() in ("1", "true", "yes")
        else:
            changes[key] = int(value) if key == "num_train_epochs" else float(value)
    return name, changes


def retention(items: list[dict[str, Any]], base_items: dict[str, float], ids: set[str] | None) -> dict[str, Any]:
    fams: dict[str, list[float]] = {}
    refs: dict[str, list[float]] = {}
    for it in items:
        if ids is not None and it["id"] not in ids:
            continue
        fams.setdefault(it["family"], []).append(it["score"])
        refs.setdefault(it["family"], []).append(base_items[it["id"]])
    per = {f: (sum(v) / len(v)) / (sum(refs[f]) / len(refs[f])) for f, v in fams.items() if sum(refs[f]) > 0}
    return {"families": per, "n": {f: len(v) for f, v in fams.items()},
            "retention": sum(per.values()) / len(per) if per else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--variant", action="append", default=[], help="NAME:key=value,... (repeatable)")
    parser.add_argument("--suite-per-family", type=int, default=0, help="suite items per family evaluated (0 = all)")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    variants = [parse_variant(v) for v in args.variant or ["base:"]]

    import torch

    from replaybank.episodic import EpisodeStore, demonstration
    from replaybank.llm.config.loop import LoopConfig
    from replaybank.llm.eval.suite import evaluate_suite, load_suite, prepare_suite, sample_suite
    from replaybank.llm.loop.act import attempt as act_attempt
    from replaybank.llm.loop.act import build_prompts, summarise
    from replaybank.llm.loop.consolidate import consolidate, domain_rows, rehearsal_rows
    from replaybank.llm.loop.lineage import split_heldout
    from replaybank.llm.loop.tasks import make_environment
    from replaybank.llm.model import cache_dir, load_model
    from replaybank.llm.recipes.loop import SPLIT_SEED, act_generation
    from replaybank.llm.train import add_lora

    torch.set_num_threads(1)
    cfg = LoopConfig().with_(seed=args.seed)
    lp, ev = cfg.loop, cfg.evaluation
    env = make_environment(cfg)
    heldout = list(env.tasks(lp.eval_tasks + lp.validation_tasks, split="heldout", seed=lp.seed))
    evaluation, _ = split_heldout(heldout, lp.eval_tasks)
    demos = list(env.tasks(lp.demos, split="train", seed=lp.seed * SPLIT_SEED))
    max_calls = max([len(t.expected) for t in heldout + demos] + [1])
    base, tok = load_model(cfg.training.base_model)
    training = dataclasses.replace(cfg.training, seed=lp.seed)
    model = add_lora(base, training)
    initial = {k: v.detach().clone() for k, v in model.state_dict().items() if "lora_" in k}
    all_items = load_suite()
    evaluated = sample_suite(all_items, args.suite_per_family, lp.seed)
    loop_sample = {i.id for i in sample_suite(all_items, ev.suite_per_family, lp.seed)}
    suite = prepare_suite(model, tok, evaluated, cache_dir=cache_dir() / "suite", batch_size=ev.generation_batch_size)
    base_scores = {o["id"]: o["score"] for o in evaluate_suite(model, tok, suite, batch_size=ev.generation_batch_size,
                                                               desc="base suite")["items"]}
    results: dict[str, Any] = {"seed": args.seed, "suite_items": len(suite.items), "loop_sample": sorted(loop_sample),
                               "variants": {}}
    with tempfile.TemporaryDirectory() as tmp, EpisodeStore(Path(tmp) / "store.db") as store:
        store.add_many([demonstration(t, [" ".join(t.expected)]) for t in demos])
        acted = act_generation(model, tok, env, store, cfg, 1, "base", max_calls, print)
        domain, n_rows = domain_rows(store, tok, [1], training.max_seq_length, lp.system_prompt)
        print(f"acted: {acted['success']:.0%} exact; {n_rows} domain rows")
        rehearsal_cache: dict[str, Any] = {}
        for name, changes in variants:
            vcfg = LoopConfig.from_dict({"loop": {"seed": args.seed, **{k: v for k, v in changes.items() if k in LOOP_KEYS}}})
            vtrain = dataclasses.replace(training, **{k: v for k, v in changes.items() if k in TRAINING_KEYS})
            recipe = vcfg.recipe
            source = recipe.source[0] if recipe is not None and recipe.source else "none"
            key = f"{source}/open={vcfg.data.self_open_rows}"
            if key not in rehearsal_cache:
                rehearsal_cache[key] = rehearsal_rows(
                    source, model, tok, seed=lp.seed, n_rows=cfg.data.self_rows, max_seq_length=training.max_seq_length,
                    suite_prompts=[i.prompt for i in all_items if i.id in loop_sample], batch_size=ev.generation_batch_size,
                    keep_truncated=vcfg.data.self_open_rows)[0]
            model.load_state_dict(initial, strict=False)
            t0 = time.perf_counter()
            train = consolidate(model, tok.pad_token_id, domain, rehearsal_cache[key], recipe, vtrain,
                                desc=f"{name} consolidate")
            t_train = time.perf_counter() - t0
            bare, _ = act_attempt(model, tok, env, evaluation, build_prompts(evaluation, None, 0, system=lp.system_prompt),
                                  max_new_tokens=ev.max_new_tokens, batch_size=ev.generation_batch_size,
                                  max_calls=max_calls, desc=f"{name} held-out")
            res = evaluate_suite(model, tok, suite, batch_size=ev.generation_batch_size, desc=f"{name} suite")
            full = retention(res["items"], base_scores, None)
            sample = retention(res["items"], base_scores, loop_sample)
            held = summarise(bare)
            results["variants"][name] = {
                "changes": changes, "train": train.to_json(), "train_seconds": round(t_train, 1), "suite_seconds": res["seconds"],
                "heldout_exact": held["success"], "heldout_credit": held["credit"],
                "retention_all": full, "retention_loop_sample": sample, "leakage": res["leakage"],
                "items": [{k: o[k] for k in ("id", "family", "check", "score", "truncated", "answer")}
                          | {"base_answer": suite.base_answers[o["id"]], "base_score": base_scores[o["id"]]}
                          for o in res["items"]],
            }
            print(f"[s{args.seed} {name}] {changes} | train {train.steps} steps {t_train:.0f} s "
                  f"(loss {train.loss_last}, kl {train.kl_mean}) | held-out exact {held['success']:.0%} "
                  f"credit {held['credit']:.2f} | retention all {len(suite.items)}: {full['retention']:.1%} "
                  f"{ {f: round(v, 2) for f, v in full['families'].items()} } | loop sample: "
                  f"{sample['retention']:.1%} | suite {res['seconds']:.0f} s", flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1))
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
