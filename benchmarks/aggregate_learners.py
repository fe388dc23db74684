"""One skill's adapters from different seeds merged into one, against each seed's own.

    python benchmarks/aggregate_learners.py RUN [--types linear,ties] [--out benchmarks/results/adapter_comparison/aggregate.json]

RUN is a finished ``replaybank run`` folder with a ``fresh_adapter = true`` arm (one adapter per
skill, ``adapters/ARM/seedN/genG/``) over several seeds. For each skill: the seeds' adapters of
that skill are registered in a scratch library under that skill and aggregated
(:func:`replaybank.llm.adapters.merge.aggregate`, equal weights) once per type; every single-seed
adapter and every aggregate is scored by generated exact match (the main job's
``generated_accuracy``) on the same requests: the union of all the seeds' held-out requests of that
skill, each seed's data prepared again from the config its adapters recorded and checked against
their data manifest (:func:`replaybank.llm.adapters.compare.prepare_seed`). A seed's held-out
requests never are its own training rows, but may be another seed's (the domains are generated from
templates): such requests are listed and the script stops, or, with ``--drop-overlap``, leaves them
out of the union, so no adapter is scored on a row it trained on. ``--retention`` adds general-suite retention (the library's ``suite_measure``) per adapter.
Prints a Markdown table (single seeds: mean ± std over seeds) and writes JSON.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import tempfile
import time
from collections.abc import Collection
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def overlaps(held: dict[int, list[str]], train: dict[int, set[str]]) -> dict[str, list[tuple[int, int]]]:
    """Held-out prompts of any seed that are training prompts of any seed: ``{prompt: [(held seed, train seed)]}``.

    Example:
        >>> overlaps({0: ["a", "b"], 1: ["c"]}, {0: {"x"}, 1: {"b", "y"}})
        {'b': [(0, 1)]}
    """
    out: dict[str, list[tuple[int, int]]] = {}
    for s_held, prompts in held.items():
        for s_train, rows in train.items():
            for p in prompts:
                if p in rows:
                    out.setdefault(p, []).append((s_held, s_train))
    return out


def union(held: dict[int, list[dict[str, Any]]], rows: int | None,
          drop: Collection[str] = ()) -> tuple[list[dict[str, Any]], list[int], int]:
    """The seeds' held-out records (the first ``rows`` of each) but ``drop``, a prompt once; each
    record's seed; how many were left out (repeats and ``drop``).

    Example:
        >>> recs, seeds, left = union({0: [{"prompt": "a"}, {"prompt": "b"}], 1: [{"prompt": "b"}, {"prompt": "c"}]}, None, {"c"})
        >>> [r["prompt"] for r in recs], seeds, left
        (['a', 'b'], [0, 0], 2)
    """
    records, of_seed, seen = [], [], set(drop)
    for seed, recs in held.items():
        for r in recs[:rows]:
            if r["prompt"] not in seen:
                seen.add(r["prompt"])
                records.append(r)
                of_seed.append(seed)
    return records, of_seed, sum(len(r[:rows]) for r in held.values()) - len(records)


def spread(values: list[float]) -> dict[str, Any]:
    """Mean and sample standard deviation (None for one value)."""
    return {"mean": statistics.fmean(values), "std": statistics.stdev(values) if len(values) > 1 else None,
            "min": min(values), "max": max(values), "n": len(values), "values": values}


def _pct(s: dict[str, Any] | float | None) -> str:
    if s is None:
        return "-"
    if isinstance(s, dict):
        return f"{100 * s['mean']:.1f} ± {100 * s['std']:.1f}" if s["std"] is not None else f"{100 * s['mean']:.1f}"
    return f"{100 * s:.1f}"


def parse_types(text: str, known: Collection[str]) -> list[tuple[str, str, float]]:
    """``--types`` as ``(label, combination type, scale)``: ``TYPE`` or ``TYPE*SCALE`` (equal weights times SCALE).

    A scale tells a type's combination from its step size: ``linear`` adds cross terms to the mean
    of the deltas, so it is also a larger step than ``cat``'s exact mean; ``cat*1.3`` is that mean
    made 1.3x larger.

    Example:
        >>> parse_types("linear,cat*1.3", ["linear", "cat"])
        [('linear', 'linear', 1.0), ('cat*1.3', 'cat', 1.3)]
        >>> parse_types("cat*x", ["cat"])
        Traceback (most recent call last):
        ...
        ValueError: --types 'cat*x': the scale after '*' must be a positive number
    """
    out = []
    for item in (t.strip() for t in text.split(",")):
        if not item:
            continue
        name, star, scale_text = item.partition("*")
        try:
            scale = float(scale_text) if star else 1.0
        except ValueError:
            scale = -1.0
        if not 0 < scale < math.inf:  # also refuses NaN
            raise ValueError(f"--types {item!r}: the scale after '*' must be a positive number")
        if name not in known:
            raise ValueError(f"--types {item!r}: {name!r} is not one of {', '.join(known)}")
        if any(item == label for label, _, _ in out):
            raise ValueError(f"--types {text!r}: {item!r} is given twice")
        out.append((item, name, scale))
    if not out:
        raise ValueError(f"--types {text!r}: give one or more of {', '.join(known)}")
    return out


def table(results: dict[str, Any], types: list[str], key: str = "accuracy") -> str:
    """Per skill: requests, the single-seed adapters (mean ± std, min-max) and each aggregate, in %."""
    head = ["skill", "requests", "single seeds", "single min-max", *[f"aggregate {t}" for t in types]]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for skill, r in results.items():
        single = spread([v[key] for v in r["single"].values()]) if all(v[key] is not None for v in r["single"].values()) else None
        span = f"{100 * single['min']:.1f}-{100 * single['max']:.1f}" if single else "-"
        lines.append(f"| {skill} | {r['requests']} | {_pct(single)} | {span} | "
                     + " | ".join(_pct(r["aggregate"][t][key]) for t in types) + " |")
    return "\n".join(lines)


def main() -> None:
    from replaybank.llm.adapters.compare import (
        ComparisonError,
        adapter_folder,
        prepare_seed,
        read_run,
    )

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, help="a finished `replaybank run` folder")
    parser.add_argument("--per-skill", help="the arm with fresh_adapter = true (default: the run's one)")
    parser.add_argument("--types", default="linear,ties", help="aggregate combination types, comma-separated "
                                                               "(linear, cat, svd, ties, dare_ties, ...); TYPE*SCALE scales "
                                                               "the equal weights, e.g. cat*1.3")
    parser.add_argument("--density", type=float, default=0.5, help="kept share of ties / dare_* (default 0.5)")
    parser.add_argument("--skills", help="skills to measure: indices or names, comma-separated (default: all)")
    parser.add_argument("--seeds", help="seeds of the run, comma-separated (default: all; at least 2)")
    parser.add_argument("--eval-rows", type=int, help="held-out requests a seed a skill (default: all the run held out)")
    parser.add_argument("--drop-overlap", action="store_true", help="leave out of the union the held-out requests that "
                        "are training rows of another seed (default: refuse to measure)")
    parser.add_argument("--retention", action="store_true", help="also general-suite retention per adapter")
    parser.add_argument("--suite-per-family", type=int, help="suite items a family for --retention (default: the run's)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "adapter_comparison" / "aggregate.json")
    args = parser.parse_args()

    import torch
    from tqdm.auto import tqdm

    from replaybank.llm.adapters import (
        AdapterLibrary,
        Registration,
        aggregate,
        load_all,
        suite_measure,
    )
    from replaybank.llm.adapters.attach import detach
    from replaybank.llm.adapters.merge import COMBINATIONS, DENSITY, aggregate_weights, merge
    from replaybank.llm.eval.domain import generated_accuracy
    from replaybank.llm.model import load_model
    from replaybank.llm.runtime import environment, loadavg, pick_device, use_device

    t0, load0 = time.perf_counter(), loadavg()
    torch.set_num_threads(args.threads)
    run = read_run(args.run, args.per_skill, carried=[])
    seeds = [int(s) for s in args.seeds.split(",")] if args.seeds else run.seeds
    try:
        specs = parse_types(args.types, COMBINATIONS)
    except ValueError as exc:
        raise ComparisonError(str(exc)) from None
    types = [label for label, _, _ in specs]
    if len(seeds) < 2 or not set(seeds) <= set(run.seeds):
        raise ComparisonError(f"--seeds {seeds}: give at least 2 of the run's seeds {run.seeds}")
    device = pick_device(run.device)
    use_device(device)
    base, tok = load_model(run.base_model, device, lambda m: None)

    prepared = {s: prepare_seed(run, s, tok) for s in seeds}
    first = prepared[seeds[0]]
    for s, p in prepared.items():
        if p.sources != first.sources:
            raise ComparisonError(f"seed {s} trained on {p.sources}, seed {seeds[0]} on {first.sources}: not the same skills")
    ev = first.cfg.evaluation
    G, skills = run.generations, first.skills
    chosen = list(range(G)) if not args.skills else [
        int(k) if k.isdigit() else skills.index(k) if k in skills else -1 for k in args.skills.split(",")]
    if not chosen or not all(0 <= g < G for g in chosen):
        raise ComparisonError(f"--skills {args.skills!r}: indices 0-{G - 1} or names of {skills}")
    shared = {skills[g]: overlaps({s: [r["prompt"] for r in p.data.domain_eval_records[g]] for s, p in prepared.items()},
                                  {s: {r["prompt"] for r in p.data.domain_train_records[g]} for s, p in prepared.items()})
              for g in range(G)}  # every skill, measured or not: the union must never score a training row
    for skill, found in shared.items():
        for prompt, pairs in found.items():
            print(f"{skill}: held-out request {prompt[:70]!r} of seed {pairs[0][0]} is a training row of seed {pairs[0][1]}"
                  f"{'; left out' if args.drop_overlap else ''}")
    if any(shared.values()) and not args.drop_overlap:
        raise ComparisonError(f"{sum(map(len, shared.values()))} held-out request(s) of a seed are training rows of "
                              "another seed (listed above): the union would score memorised rows; --drop-overlap "
                              "leaves them out of every skill's union")
    measure = suite_measure(tok, per_family=ev.suite_per_family if args.suite_per_family is None else args.suite_per_family,
                            seed=seeds[0], batch_size=ev.generation_batch_size) if args.retention else None
    gen = {"max_new_tokens": ev.max_new_tokens, "batch_size": ev.generation_batch_size, "precision": ev.generation_precision}

    results: dict[str, Any] = {}
    with tqdm(total=len(chosen) * (len(seeds) + len(types)), desc="aggregate learners", unit="eval", dynamic_ncols=True) as bar:
        for g in chosen:
            skill = skills[g]
            records, of_seed, left = union({s: list(p.data.domain_eval_records[g]) for s, p in prepared.items()},
                                              args.eval_rows, set(shared[skill]))
            with tempfile.TemporaryDirectory(prefix="aggregate-learners-") as scratch:
                lib = AdapterLibrary(Path(scratch) / "library", create=True)
                singles = [f"seed{s}" for s in seeds]
                for s in seeds:
                    examples = [r["prompt"] for r in prepared[s].data.domain_train_records[g]]
                    registration = Registration(f"seed{s}", skill=skill, domain=first.sources[g], examples=examples)
                    lib.add(adapter_folder(run, run.per_skill, s, g), registration, base_model=base)
                merged = {}
                names = {label: "aggregate-" + label.replace("*", "-x").replace(".", "_") for label in types}
                for label, t, scale in specs:
                    density = args.density if t in DENSITY else None
                    if label == t:  # the library's aggregate, equal weights
                        merged[label] = aggregate(lib, skill, into=names[label], base_model=base, combination_type=t,
                                                  density=density, seed=0)
                    else:  # the same weights times the scale
                        merged[label] = merge(lib, singles, into=names[label], base_model=base, combination_type=t,
                                              weights=[scale * w for w in aggregate_weights(len(singles), t)],
                                              density=density, seed=0, skill=skill)
                scores: dict[str, dict[str, Any]] = {}
                model = load_all(lib, base)
                try:
                    for name in [*singles, *names.values()]:
                        bar.set_postfix_str(f"{skill}: {name}")
                        model.set_adapter(name)
                        res = generated_accuracy(model, tok, records, **gen)
                        exact = [bool(i["exact"]) for i in res["items"]]
                        if len(exact) != len(records):
                            raise ComparisonError(f"skill {skill!r}: {len(records) - len(exact)} requests were not scored")
                        by_seed = {s: statistics.fmean([e for e, o in zip(exact, of_seed, strict=True) if o == s])
                                   for s in seeds if s in of_seed}
                        scores[name] = {"accuracy": res["exact_match"], "by_heldout_seed": by_seed,
                                        "retention": measure(model)["retention"] if measure else None,
                                        "seconds": res["seconds"]}
                        bar.update()
                finally:
                    detach(model, lib.names()[0], wrapped=True)
                run_own = _run_diagonal(run, seeds, g)
                results[skill] = {
                    "source": first.sources[g], "requests": len(records), "left_out": left,
                    "training_overlap": {p: [list(x) for x in pairs] for p, pairs in shared[skill].items()},
                    "requests_by_seed": {s: of_seed.count(s) for s in seeds},
                    "single": {s: scores[f"seed{s}"] for s in seeds},
                    "single_accuracy": spread([scores[f"seed{s}"]["accuracy"] for s in seeds]),
                    "own_heldout": {s: scores[f"seed{s}"]["by_heldout_seed"].get(s) for s in seeds},
                    "run_own_heldout": run_own,
                    "aggregate": {t: {**scores[names[t]], "manifest": {
                        "parents": list(merged[t].parents), "merge": merged[t].merge, "examples": len(merged[t].examples)}}
                        for t in types},
                }
    text = table(results, types)
    if args.retention:
        text += "\n\nretention % (general suite, vs the base model)\n\n" + table(results, types, key="retention")
    env = {**environment(device), "loadavg_1min_start": load0, "loadavg_1min_end": loadavg(), "cpus": os.cpu_count(),
           "torch_threads": args.threads}
    print(f"\nseeds {seeds} of {args.run} (arm {run.per_skill!r}); exact match % on the union of the seeds' held-out "
          f"requests of each skill; load {load0} -> {env['loadavg_1min_end']}\n")
    print(text)
    print("\neach single adapter on its own seed's held-out requests here vs in the run (same rows: equal when "
          "no row was left out and "
          "--eval-rows is not given):")
    for skill, r in results.items():
        print(f"  {skill}: " + "; ".join(f"seed {s}: {_pct(r['own_heldout'][s])} vs {_pct(r['run_own_heldout'].get(s))}"
                                       for s in seeds))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "run": str(args.run), "per_skill_arm": run.per_skill, "seeds": seeds, "skills": skills, "types": types,
        "settings": {"density": args.density, "eval_rows": args.eval_rows, "retention": args.retention,
                     "suite_per_family": args.suite_per_family, **gen},
        "drop_overlap": args.drop_overlap, "results": results, "table": text, "environment": env,
        "wall_seconds": round(time.perf_counter() - t0, 1),
    }, indent=1, default=str) + "\n")
    print(f"wrote {args.out}")


def _run_diagonal(run: Any, seeds: list[int], g: int) -> dict[int, float | None]:
    """The run's own accuracy of each seed's skill-``g`` adapter on that seed's held-out requests."""
    from replaybank.llm.adapters.compare import ComparisonError
    from replaybank.llm.train.peft_files import read_json_object

    out: dict[int, float | None] = {}
    for s in seeds:
        path = run.root / "seeds" / f"seed{s}.json"
        seed = read_json_object(path, "the run's seed results", error=ComparisonError) if path.is_file() else {}
        R = seed.get("arms", {}).get(run.per_skill, {}).get("matrix", {}).get("R")
        out[s] = float(R[g][g]) if R else None
    return out


if __name__ == "__main__":
    main()
