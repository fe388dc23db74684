"""The base model's per-family pass rates on the suite's two splits: test (``suite.jsonl``) and
validation (``validation.jsonl``).

    OMP_NUM_THREADS=1 PYTHONPATH=src .venv/bin/python benchmarks/validation_suite.py

Loads SmolLM2-135M-Instruct on the CPU with one torch thread and prepares each split with the
suite's own function (:func:`replaybank.llm.eval.suite.prepare_suite`: greedy answers at fp32 into
a fresh temporary cache, scored by the checkers; the items the base fails are the ones it drops).
A family's pass rate is the share of its items the base model passes; ``open`` passes by
construction (agreement with the base's own answer). Prints a table and writes
``benchmarks/results/validation_suite.json``: per split and family the items, passes and rate, the
failed items with the base's answer and the checker's detail, and the seconds each split took.

``--split test`` or ``--split validation`` measures one split and keeps the other split's entry of
the existing ``--out`` file (the test split takes about six minutes, the validation split two).
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/results/validation_suite.json")
    parser.add_argument("--split", choices=("both", "test", "validation"), default="both",
                        help="measure one split; the other's entry is kept from --out")
    args = parser.parse_args()

    import torch

    from replaybank.llm.eval.checkers import check
    from replaybank.llm.eval.suite import (
        BUILTIN,
        BUILTIN_VALIDATION,
        FAMILIES,
        load_suite,
        prepare_suite,
    )
    from replaybank.llm.model import load_model

    torch.set_num_threads(1)
    model, tok = load_model("SmolLM2-135M-Instruct", "cpu", log=lambda *a: None)
    out: dict = {"model": "SmolLM2-135M-Instruct", "device": "cpu", "torch_threads": 1, "precision": "fp32",
                 "decoding": "greedy", "machine": platform.processor() or platform.machine(), "splits": {}}
    splits = (("test", BUILTIN), ("validation", BUILTIN_VALIDATION))
    if args.split != "both":
        previous = json.loads(Path(args.out).read_text("utf-8")) if Path(args.out).is_file() else {"splits": {}}
        other = "validation" if args.split == "test" else "test"
        if other not in previous["splits"]:
            raise SystemExit(f"--split {args.split}: {args.out} has no {other!r} entry to keep; run both splits")
        out["splits"][other] = previous["splits"][other]
        splits = tuple(s for s in splits if s[0] == args.split)
    for split, source in splits:
        items = load_suite(source)
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            suite = prepare_suite(model, tok, items, cache_dir=Path(tmp), desc=f"{split}: base answers")
            seconds = round(time.perf_counter() - t0, 1)
            answers = json.loads(Path(suite.manifest["cache"]).read_text("utf-8"))["answers"]
        dropped = set(suite.dropped)
        families = {}
        for fam in FAMILIES:
            ids = [i.id for i in items if i.family == fam]
            passed = sum(1 for k in ids if k not in dropped)
            families[fam] = {"items": len(ids), "passed": passed, "rate": round(passed / len(ids), 3) if ids else None}
        checked = [i for i in items if i.family != "open"]
        failed = [{"id": i.id, "family": i.family, "prompt": i.prompt, "check": i.check,
                   "detail": check(i.check, answers[i.id], prompt=i.prompt)[1], "answer": answers[i.id]}
                  for i in items if i.id in dropped]
        out["splits"][split] = {
            "source": source, "items": len(items), "passed": len(items) - len(dropped),
            "checked_rate": round(sum(1 for i in checked if i.id not in dropped) / len(checked), 3),
            "families": families, "seconds": seconds, "failed": failed,
        }
    out["splits"] = {k: out["splits"][k] for k in ("test", "validation")}  # file order, whichever ran
    out["measured"] = [split for split, _ in splits]  # the others were kept from the previous --out
    print(f"{'family':<14}{'test n':>8}{'test pass':>11}{'val n':>8}{'val pass':>10}")
    test, val = out["splits"]["test"], out["splits"]["validation"]
    for fam in FAMILIES:
        a, b = test["families"][fam], val["families"][fam]
        print(f"{fam:<14}{a['items']:>8}{a['rate']:>11.3f}{b['items']:>8}{b['rate']:>10.3f}")
    print(f"{'checked':<14}{'':>8}{test['checked_rate']:>11.3f}{'':>8}{val['checked_rate']:>10.3f}")
    print(f"seconds: test {test['seconds']}, validation {val['seconds']}")
    for f in val["failed"]:
        print(f"validation fails {f['id']}: {f['detail']}: {f['answer'][:80]!r}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n", "utf-8")


if __name__ == "__main__":
    main()
