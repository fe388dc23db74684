"""Curate the suite's instruction-following family: keep the candidates the base model passes.

    OMP_NUM_THREADS=1 PYTHONPATH=src .venv/bin/python benchmarks/curate_instruction.py [--write-suite] [--time-suite]

Reads ``benchmarks/instruction_candidates.jsonl`` (prompts and checks, family ``instruction``),
generates SmolLM2-135M-Instruct's greedy answers on the CPU with the suite's own generation
(:func:`replaybank.llm.eval.suite.generate_items`: chat template, per-item token budgets, batches
of 16; seeded, though greedy decoding draws nothing) and scores them with the suite's checkers.
A candidate is kept when the base model passes it and it does not overlap the self-synthesis
prompt pool. Prints a table and writes ``benchmarks/results/instruction_curation.json`` (every
candidate: check, base answer, score, detail, truncated, kept or why dropped).

``--write-suite`` replaces the ``instruction`` lines of the shipped ``suite.jsonl`` with the kept
candidates (their ids kept, so the dropped ones leave gaps). ``--time-suite`` then prepares the
whole shipped suite with the base model into a fresh cache, timed (the cost of the base answers a
run generates once), and records the items the base fails per family (prepare_suite drops them).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path

for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[var] = "1"
os.environ.setdefault("HF_HUB_OFFLINE", "1")

CANDIDATES = Path(__file__).with_name("instruction_candidates.jsonl")
FAMILY = "instruction"


def curate(model: object, tok: object, candidates: list, pool: list[str], batch_size: int) -> list[dict]:
    """Every candidate with the base model's answer, its score and whether it is kept."""
    from replaybank.llm.eval.checkers import check
    from replaybank.llm.eval.suite import SuiteOverlapError, check_no_overlap, generate_items

    gens = generate_items(model, tok, candidates, batch_size=batch_size, desc="instruction candidates")
    rows = []
    for item in candidates:
        gen = gens[item.id]
        score, detail = check(item.check, gen.text, prompt=item.prompt)
        reason = None if score == 1.0 else f"base fails: {detail}"
        try:
            check_no_overlap([item], pool, "self-synthesis prompt pool")
        except SuiteOverlapError:
            reason = "overlaps the self-synthesis prompt pool"
        rows.append({
            "id": item.id, "prompt": item.prompt, "check": item.check, "budget": item.budget,
            "base_answer": gen.text, "score": score, "detail": detail, "truncated": gen.truncated,
            "kept": reason is None, "dropped_because": reason,
        })
    return rows


def write_suite(suite_path: Path, kept: list) -> None:
    """Replace the instruction lines of ``suite_path`` with ``kept`` (after the conversation lines)."""
    from dataclasses import asdict

    lines = [ln for ln in suite_path.read_text("utf-8").splitlines() if ln.strip()]
    others = [ln for ln in lines if json.loads(ln)["family"] != FAMILY]
    new = []
    for item in kept:
        obj = {k: v for k, v in asdict(item).items() if v is not None}
        new.append(json.dumps(obj, ensure_ascii=False))
    last_conv = max((k for k, ln in enumerate(others) if json.loads(ln)["family"] == "conversation"), default=-1)
    out = others[: last_conv + 1] + new + others[last_conv + 1 :]
    suite_path.write_text("\n".join(out) + "\n", "utf-8")


def time_suite(model: object, tok: object, batch_size: int) -> dict:
    """The whole shipped suite prepared once with the base model (fresh cache), timed."""
    from replaybank.llm.eval.suite import load_suite, prepare_suite

    items = load_suite()
    load_start = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        t0, c0 = time.perf_counter(), time.process_time()
        suite = prepare_suite(model, tok, items, cache_dir=Path(tmp), batch_size=batch_size, desc="whole suite")
        seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    by_family: dict[str, dict] = {}
    for item in items:
        fam = by_family.setdefault(item.family, {"items": 0, "base_fails": []})
        fam["items"] += 1
        if item.id in suite.dropped:
            fam["base_fails"].append(item.id)
    return {"items": len(items), "kept": len(suite.items), "seconds": round(seconds, 1),
            "cpu_seconds_this_process": round(cpu, 1), "loadavg_1min": [load_start, os.getloadavg()[0]],
            "families": by_family, "leakage": suite.base["leakage"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--candidates", default=str(CANDIDATES))
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--write-suite", action="store_true", help="write the kept items into suite.jsonl")
    parser.add_argument("--time-suite", action="store_true", help="time the whole shipped suite's base answers")
    parser.add_argument("--out", default="benchmarks/results/instruction_curation.json")
    args = parser.parse_args()

    import torch

    from replaybank.llm.data.selfsynth import load_prompt_pool
    from replaybank.llm.eval.suite import builtin_suite_path, load_suite
    from replaybank.llm.model import load_model

    torch.manual_seed(0)
    torch.set_num_threads(1)
    candidates = load_suite(args.candidates)
    if {i.family for i in candidates} != {FAMILY}:
        raise SystemExit(f"{args.candidates}: every candidate must be in family {FAMILY!r}")
    model, tok = load_model("SmolLM2-135M-Instruct", "cpu", log=lambda *a: None)
    pool, _ = load_prompt_pool()
    t0 = time.perf_counter()
    rows = curate(model, tok, candidates, pool, args.batch_size)
    seconds = time.perf_counter() - t0
    kept = [i for i, r in zip(candidates, rows, strict=True) if r["kept"]]

    print(f"{'id':<10}{'check':<34}{'kept':<6}base answer")
    for r in rows:
        kinds = "+".join(c["type"] for c in r["check"].get("checks", [r["check"]]))
        answer = r["base_answer"].replace("\n", " / ")
        print(f"{r['id']:<10}{kinds:<34}{'yes' if r['kept'] else 'NO':<6}{answer[:90]}")
        if not r["kept"]:
            print(f"{'':<50}dropped: {r['dropped_because']}")
    per_type: dict[str, list[int]] = {}
    for r in rows:
        kinds = "+".join(c["type"] for c in r["check"].get("checks", [r["check"]]))
        per_type.setdefault(kinds, [0, 0])
        per_type[kinds][0] += int(r["kept"])
        per_type[kinds][1] += 1
    print(f"\nkept {len(kept)} of {len(rows)} candidates ({seconds:.1f} s to generate and check)")
    for kinds, (k, n) in per_type.items():
        print(f"  {kinds:<34}{k}/{n}")
    out: dict = {
        "model": "SmolLM2-135M-Instruct", "device": "cpu", "torch_threads": 1,
        "machine": platform.processor() or platform.machine(), "decoding": "greedy", "seed": 0,
        "candidates": len(rows), "kept": len(kept), "seconds": round(seconds, 1),
        "kept_per_check": {k: {"kept": v[0], "tried": v[1]} for k, v in per_type.items()}, "items": rows,
    }
    if args.write_suite:
        write_suite(builtin_suite_path(), kept)
        print(f"wrote {len(kept)} instruction items into {builtin_suite_path()}")
    if args.time_suite:
        out["whole_suite"] = whole = time_suite(model, tok, args.batch_size)
        print(f"\nwhole suite: {whole['items']} items, base answers in {whole['seconds']} s wall "
              f"({whole['cpu_seconds_this_process']} CPU s, 1-minute load {whole['loadavg_1min']}); kept {whole['kept']}")
        for fam, f in whole["families"].items():
            print(f"  {fam:<14}{f['items']:>4} items, base fails {len(f['base_fails'])} {f['base_fails']}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n", "utf-8")


if __name__ == "__main__":
    main()
