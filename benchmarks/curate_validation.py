"""Curate the suite's validation split: keep the candidates the base model passes, as the test split was.

    OMP_NUM_THREADS=1 PYTHONPATH=src .venv/bin/python benchmarks/curate_validation.py [--write] [--families F ...]

Reads ``benchmarks/validation_candidates.jsonl`` (suite items of every family, ids
``val-<family>-NNN``, the same kinds of requests and check types as the test split ``suite.jsonl``,
other prompts), generates SmolLM2-135M-Instruct's greedy fp32 answers on the CPU with one torch
thread and the suite's own generation (:func:`replaybank.llm.eval.suite.generate_items`: chat
template, per-item token budgets, batches of 16) and scores them with the suite's checkers. A
candidate is kept when the base model passes it, it shares no id, prompt or near-duplicate prompt
with the test split (:func:`~replaybank.llm.eval.suite.check_disjoint`) and it overlaps no
rehearsal pool (the self-synthesis prompts, the held-out prose, ``python-docs``;
:func:`~replaybank.llm.eval.suite.check_no_overlap`).

The kept items are then prepared together, in the order they are written, with
:func:`~replaybank.llm.eval.suite.prepare_suite` into a fresh cache, exactly as a run prepares the
split: batches hold other neighbours than in the candidate pass, and an item whose answer changes
with them is dropped too (repeated until no item is dropped), so the shipped split is one the base
passes whole.

So the validation items are selected by the base model passing them, like the test split's: the
base passes every one, retention on them is measured against answers the base gets right, and they
are the requests the base finds easy. Kept of the 279 candidates (the 60 items the split first held
among them): conversation 21/42, instruction 42/66, arithmetic 38/125, code 20/28, open 18/18, 139
in all; 196 s to generate and check and 119 s to prepare the kept items, one thread of an x86_64
CPU (docs/llm.md, "The validation split").

Prints a table and writes ``benchmarks/results/validation_curation.json`` (every candidate: check,
base answer, score, detail, truncated, kept or why dropped; per family the candidates tried and
kept; the seconds taken). ``--write`` replaces ``src/replaybank/llm/eval/validation.jsonl`` with
the kept items (their ids kept, so the dropped ones leave gaps). ``--families`` curates only those
families (to time a small batch; it cannot be combined with ``--write``).
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

CANDIDATES = Path(__file__).with_name("validation_candidates.jsonl")
CONFIRM_ROUNDS = 3


def rehearsal_pools() -> list[tuple[str, list[str]]]:
    """The texts a validation item must not overlap, by name: the pools a run may train on."""
    from replaybank.llm.data.corpus import PYTHON_DOCS, load_corpus
    from replaybank.llm.data.selfsynth import load_prompt_pool
    from replaybank.llm.eval.suite import general_text_paragraphs

    pool, path = load_prompt_pool()
    return [(f"self-synthesis prompt pool ({path.name})", pool), ("held-out prose (general_text.txt)",
            general_text_paragraphs()), (PYTHON_DOCS, load_corpus(PYTHON_DOCS).texts)]


def overlap_reason(item: object, test: list, pools: list[tuple[str, list[str]]]) -> str | None:
    """Why ``item`` cannot be a validation item (it repeats the test split or a pool), or None."""
    from replaybank.llm.eval.suite import SuiteOverlapError, check_disjoint, check_no_overlap

    try:
        check_disjoint(test, [item], "candidate")
    except SuiteOverlapError as exc:
        return f"overlaps the test split: {exc}"
    for name, texts in pools:
        try:
            check_no_overlap([item], texts, name)
        except SuiteOverlapError:
            return f"overlaps the {name}"
    return None


def curate(model: object, tok: object, candidates: list, test: list, batch_size: int) -> list[dict]:
    """Every candidate with the base model's answer, its score and whether it is kept."""
    from replaybank.llm.eval.checkers import check
    from replaybank.llm.eval.suite import generate_items

    pools = rehearsal_pools()
    gens = generate_items(model, tok, candidates, batch_size=batch_size, desc="validation candidates")
    rows = []
    for item in candidates:
        gen = gens[item.id]
        # an open item is scored against the base's own answer, as prepare_suite scores it
        score, detail = check(item.check, gen.text, prompt=item.prompt, base_answer=gen.text)
        reason = overlap_reason(item, test, pools)
        if reason is None and score < 1.0:
            reason = f"base fails: {detail}"
        rows.append({
            "id": item.id, "family": item.family, "prompt": item.prompt, "check": item.check, "budget": item.budget,
            "base_answer": gen.text, "score": score, "detail": detail, "truncated": gen.truncated,
            "kept": reason is None, "dropped_because": reason,
        })
    return rows


def confirm(model: object, tok: object, kept: list, batch_size: int) -> tuple[list, list[dict]]:
    """Prepare ``kept`` as a run would (fresh cache) until the base passes every item left.

    Returns:
        ``(items left, rounds)``; a round is ``{"items", "dropped": {id: checker detail}, "seconds"}``.
    """
    from replaybank.llm.eval.checkers import check
    from replaybank.llm.eval.suite import prepare_suite

    rounds: list[dict] = []
    for _ in range(CONFIRM_ROUNDS):
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            suite = prepare_suite(model, tok, kept, cache_dir=Path(tmp), batch_size=batch_size, desc="kept items")
            seconds = round(time.perf_counter() - t0, 1)
            answers = json.loads(Path(suite.manifest["cache"]).read_text("utf-8"))["answers"]
        dropped = {i.id: check(i.check, answers[i.id], prompt=i.prompt, base_answer=answers[i.id])[1]
                   for i in kept if i.id in set(suite.dropped)}
        rounds.append({"items": len(kept), "dropped": dropped, "seconds": seconds})
        kept = [i for i in kept if i.id not in dropped]
        if not dropped:
            return kept, rounds
    raise SystemExit(f"the kept items still lose items after {CONFIRM_ROUNDS} rounds of preparing: {rounds}")


def write_validation(path: Path, kept: list) -> None:
    """Write ``kept`` to ``path`` as suite JSONL (one item a line, fields the suite reads)."""
    from dataclasses import asdict

    lines = [json.dumps({k: v for k, v in asdict(i).items() if v is not None}, ensure_ascii=False) for i in kept]
    path.write_text("\n".join(lines) + "\n", "utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--candidates", default=str(CANDIDATES))
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--families", nargs="+", default=None, help="curate only these families (timing)")
    parser.add_argument("--write", action="store_true", help="replace validation.jsonl with the kept items")
    parser.add_argument("--out", default="benchmarks/results/validation_curation.json")
    args = parser.parse_args()

    import torch

    from replaybank.llm.eval.suite import (
        BUILTIN,
        BUILTIN_VALIDATION,
        FAMILIES,
        builtin_suite_path,
        load_suite,
    )
    from replaybank.llm.model import load_model

    if args.write and args.families:
        raise SystemExit("--write needs every family curated; drop --families")
    candidates = load_suite(args.candidates)
    for item in candidates:
        prefix = {"conversation": "conv", "instruction": "inst", "arithmetic": "arith"}.get(item.family, item.family)
        if not item.id.startswith(f"val-{prefix}-"):
            raise SystemExit(f"{args.candidates}: id {item.id!r} of family {item.family!r} must start with 'val-{prefix}-'")
    if args.families:
        unknown = set(args.families) - set(FAMILIES)
        if unknown:
            raise SystemExit(f"--families: unknown {sorted(unknown)}; expected some of {', '.join(FAMILIES)}")
        candidates = [i for i in candidates if i.family in args.families]
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model, tok = load_model("SmolLM2-135M-Instruct", "cpu", log=lambda *a: None)
    test = load_suite(BUILTIN)
    t0 = time.perf_counter()
    rows = curate(model, tok, candidates, test, args.batch_size)
    seconds = time.perf_counter() - t0
    kept = [i for i, r in zip(candidates, rows, strict=True) if r["kept"]]
    t1 = time.perf_counter()
    kept, rounds = confirm(model, tok, kept, args.batch_size)
    confirm_seconds = time.perf_counter() - t1
    for r in rows:
        for rnd in rounds:
            if r["id"] in rnd["dropped"]:
                r["kept"] = False
                r["dropped_because"] = f"base fails when the kept items are prepared together: {rnd['dropped'][r['id']]}"

    print(f"{'id':<16}{'check':<30}{'kept':<6}base answer")
    for r in rows:
        kinds = "+".join(c["type"] for c in r["check"].get("checks", [r["check"]]))
        answer = r["base_answer"].replace("\n", " / ")
        print(f"{r['id']:<16}{kinds:<30}{'yes' if r['kept'] else 'NO':<6}{answer[:80]}")
        if not r["kept"]:
            print(f"{'':<52}dropped: {r['dropped_because'][:120]}")
    shipped = load_suite(BUILTIN_VALIDATION)
    per_family = {}
    for fam in FAMILIES:
        fam_rows = [r for r in rows if r["family"] == fam]
        if fam_rows:
            per_family[fam] = {"candidates": len(fam_rows), "kept": sum(r["kept"] for r in fam_rows),
                               "test_split": sum(1 for i in test if i.family == fam),
                               "shipped_before": sum(1 for i in shipped if i.family == fam)}
    print(f"\nkept {len(kept)} of {len(rows)} candidates ({seconds:.1f} s to generate and check, "
          f"{confirm_seconds:.1f} s to prepare the kept items, {len(rounds)} round(s))")
    print(f"{'family':<14}{'candidates':>11}{'kept':>6}{'test split':>12}")
    for fam, f in per_family.items():
        print(f"{fam:<14}{f['candidates']:>11}{f['kept']:>6}{f['test_split']:>12}")
    out: dict = {
        "model": "SmolLM2-135M-Instruct", "device": "cpu", "torch_threads": 1, "precision": "fp32",
        "machine": platform.processor() or platform.machine(), "decoding": "greedy", "seed": 0,
        "candidates_file": Path(args.candidates).name, "candidates": len(rows), "kept": len(kept),
        "seconds": round(seconds, 1), "confirm_seconds": round(confirm_seconds, 1), "confirm_rounds": rounds,
        "per_family": per_family, "written": bool(args.write), "items": rows,
    }
    if args.write:
        path = builtin_suite_path(BUILTIN_VALIDATION)
        write_validation(path, kept)
        print(f"wrote {len(kept)} items into {path}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n", "utf-8")


if __name__ == "__main__":
    main()
