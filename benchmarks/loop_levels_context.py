"""Which level of retrieved experience helps, with the weights held fixed.

A finished run of ``benchmarks/loop_levels.py`` holds its store (episodes, insights, workflows) and
every generation's adapter. This script loads one run's adapter of ``--generation`` and its store,
and answers the run's held-out tasks greedily under each retrieval setting, so the levels are told
apart without training again (the training side, what consolidating replayed successes costs, is
the ``levels-own`` and ``levels-budget`` arms of ``loop_levels.py``):

* ``none``: no context (the skill in the weights);
* each level alone (``episodes``, ``insights``, ``workflows``), the pairs with episodes, and all three;
* ``vote``: all three levels dealt into ``--groups`` groups, one answer per group, majority vote;
* ``replay``: all three in context, with a stored workflow replayed without the model wherever it
  passes its checks (the loop's replay arm).

Each setting reports held-out exact match, mean argument credit, the model calls spent, the model
calls per solved task and the tasks it solved, so the table can count the items each setting wins
and loses against no context. The store holds what the run had after its last generation, so
``all`` at the run's last generation repeats the run's own with-context figure (kept beside it),
and ``matches_run`` says whether the no-context answers are the ones the run kept as examples (the
same tasks, adapter and prompts)::

    python benchmarks/loop_levels_context.py --runs runs/loop_levels/levels-s0,runs/loop_levels/levels-s1
    python benchmarks/loop_levels_context.py --table      # the table of --results, run nothing
    # the raw arm's runs without context only, then item by item against the levels arm's
    python benchmarks/loop_levels_context.py --runs runs/loop_levels/raw-s0 --settings none --results raw.json
    python benchmarks/loop_levels_context.py --table --versus raw.json --setting none
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from replaybank.episodic import EpisodeStore
from replaybank.llm.config.loop import LoopConfig
from replaybank.llm.loop.act import Attempt, attempt, build_prompts, summarise
from replaybank.llm.loop.consolidate import load_adapter
from replaybank.llm.loop.context import LevelRetriever
from replaybank.llm.loop.replay import replay_tasks
from replaybank.llm.loop.state import read_state
from replaybank.llm.loop.tasks import make_environment
from replaybank.llm.loop.vote import vote_attempts
from replaybank.llm.recipes.loop import context_prompts, eval_options, heldout_tasks

HERE = Path(__file__).resolve().parent
#: the retrieval settings, in the order of the table
SETTINGS: dict[str, list[str]] = {
    "none": [],
    "episodes": ["episodes"],
    "insights": ["insights"],
    "workflows": ["workflows"],
    "episodes+insights": ["episodes", "insights"],
    "episodes+workflows": ["episodes", "workflows"],
    "all": ["episodes", "insights", "workflows"],
}
#: every setting measure_run knows: the retrieval settings, the replay arm and the vote
NAMES: tuple[str, ...] = (*SETTINGS, "replay", "vote")


def figures(answers: Sequence[Attempt]) -> dict[str, Any]:
    """The figures of one setting kept in the JSON, with the held-out tasks it solved (by id), so
    settings can be compared item by item."""
    score = summarise(answers)
    return {"exact": score.success, "credit": score.credit, "n": score.n, "model_calls": score.model_calls,
            "model_calls_per_solved": score.model_calls_per_solved,
            "solved": [a.task.id for a in answers if a.verdict.success]}


def measure_run(folder: Path, generation: int, groups: int, threads: int,
                settings: Sequence[str] = NAMES) -> dict[str, Any]:
    """The ``settings`` (of :data:`NAMES`; ``none`` always) on one run's held-out tasks."""
    import torch

    from replaybank.llm.model import load_model
    from replaybank.llm.train import add_lora

    state = read_state(folder)
    if state is None:
        raise SystemExit(f"{folder}: no state.json; run benchmarks/loop_levels.py first")
    if generation > state.finished:
        raise SystemExit(f"{folder}: --generation {generation}, but the run finished {state.finished} generations")
    cfg = LoopConfig.from_dict(dict(state.config), source=str(folder / "state.json"))
    lp = cfg.loop
    torch.set_num_threads(threads)
    env = make_environment(cfg)
    heldout, evaluation, _ = heldout_tasks(env, lp)
    row = state.generations[generation]
    with EpisodeStore(folder / "store.db", readonly=True) as store:
        # the loop's bound: the most calls of any held-out task or demonstration (stored as episodes)
        max_calls = max([len(t.expected) for t in heldout] + [len(e.episode.steps) for e in store.episodes(source="demo")] + [1])
        kw = eval_options(cfg, max_calls)
        base, tok = load_model(cfg.training.base_model, "cpu", log=lambda _: None)
        model = add_lora(base, dataclasses.replace(cfg.training, seed=lp.seed))
        if generation > 0:
            load_adapter(model, folder / "adapters" / f"gen{generation}", expected=row.adapter, generation=generation)
        out: dict[str, Any] = {"generation": generation, "adapter": row.adapter, "settings": {}, "seconds": {}}
        sys_ = lp.system_prompt
        for name, levels in SETTINGS.items():
            if name != "none" and name not in settings and not (name == "all" and "replay" in settings):
                continue
            t0 = time.perf_counter()
            if levels:  # as the loop builds them: episodes alone without a budget take the default path
                prompts = context_prompts(store, evaluation, dataclasses.replace(lp, retrieve=levels))[0]
            else:
                prompts = build_prompts(evaluation, None, 0, system=sys_)
            answers, _ = attempt(model, tok, env, evaluation, prompts, desc=f"{folder.name} {name}", **kw)
            out["settings"][name] = figures(answers)
            if not levels:  # the run kept its first no-context answers: the same tasks, adapter and prompts give them again
                kept = row.evaluation.examples or []
                out["matches_run"] = [(a.task.text, a.output) for a in answers[:len(kept)]] == [(e.task, e.output) for e in kept]
            out["seconds"][name] = round(time.perf_counter() - t0, 1)
            if name == "all" and "replay" in settings:
                replays = replay_tasks(env, store, evaluation)
                arm = [replays.attempts.get(a.task.id, a) for a in answers]
                out["settings"]["replay"] = figures(arm)
        if "vote" in settings:
            t0 = time.perf_counter()
            chosen, _, counts = vote_attempts(model, tok, env, evaluation, LevelRetriever.from_store(store, SETTINGS["all"]),
                                              lp.context_examples, groups, system=sys_, budget=lp.context_chars,
                                              desc=f"{folder.name} vote", **kw)
            out["settings"]["vote"] = {**figures(chosen), "model_calls": counts.model_calls,
                                       "groups": groups, "unanimous": counts.unanimous}
            out["seconds"]["vote"] = round(time.perf_counter() - t0, 1)
    out["run_recorded"] = {"no_context": row.evaluation.no_context.success, "context": row.evaluation.context.success,
                           "retrieve": list(lp.retrieve)}
    return out


def seed_of(run: str) -> str:
    """The seed of a run's name: ``levels-s2`` -> ``2``."""
    return run.rsplit("-s", 1)[-1]


def print_versus(summary: dict[str, Any], other: dict[str, Any], setting: str) -> None:
    """Item by item, seed by seed: the held-out tasks the runs of ``summary`` solve under
    ``setting`` that the runs of ``other`` with the same seed do not, and the reverse."""
    theirs = {seed_of(name): run for name, run in other["runs"].items()}
    print(f"| seed | {setting}: won / lost against the other run | exact % of each |")
    print("|---|---:|---:|")
    for name, run in summary["runs"].items():
        mate = theirs.get(seed_of(name))
        if mate is None or setting not in run["settings"] or setting not in mate["settings"]:
            continue
        mine, yours = set(run["settings"][setting]["solved"]), set(mate["settings"][setting]["solved"])
        print(f"| {seed_of(name)} | {len(mine - yours)} / {len(yours - mine)} | "
              f"{100 * run['settings'][setting]['exact']:g}, {100 * mate['settings'][setting]['exact']:g} |")


def print_table(summary: dict[str, Any]) -> None:
    """Per setting, mean ± std over the runs of exact match and model calls per solved task, and the
    held-out items it wins and loses against no context, summed over the runs."""
    runs = summary["runs"]
    names = [n for n in NAMES if all(n in r["settings"] for r in runs.values())]
    print(f"generation {summary['generation']}, {len(runs)} runs: {', '.join(runs)}")
    print("| retrieved into the context | held-out exact % | per run | won / lost against none | model calls per solved task |")
    print("|---|---:|---:|---:|---:|")
    for name in names:
        exact = np.array([100 * r["settings"][name]["exact"] for r in runs.values()])
        calls = [r["settings"][name]["model_calls_per_solved"] for r in runs.values()]
        calls_txt = (f"{np.mean(calls):.2f} ± {np.std(calls, ddof=1):.2f}" if len(calls) > 1 else f"{calls[0]:.2f}") \
            if all(c is not None for c in calls) else "-"
        spread = f" ± {np.std(exact, ddof=1):.0f}" if len(exact) > 1 else ""
        won = sum(len(set(r["settings"][name]["solved"]) - set(r["settings"]["none"]["solved"])) for r in runs.values())
        lost = sum(len(set(r["settings"]["none"]["solved"]) - set(r["settings"][name]["solved"])) for r in runs.values())
        print(f"| {name} | {np.mean(exact):.0f}{spread} | {', '.join(f'{e:g}' for e in exact)} | {won} / {lost} | {calls_txt} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", help="comma-separated run folders of loop_levels.py (each with state.json, store.db, adapters/)")
    ap.add_argument("--generation", type=int, default=5, help="the adapter measured (0: the base model)")
    ap.add_argument("--groups", type=int, default=3, help="groups of the vote (at least 2)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads")
    ap.add_argument("--results", default=str(HERE / "results" / "loop_levels" / "context_levels.json"))
    ap.add_argument("--settings", default=",".join(NAMES), help=f"comma-separated, of {', '.join(NAMES)} (none is always measured)")
    ap.add_argument("--table", action="store_true", help="print the table of --results, run nothing")
    ap.add_argument("--versus", metavar="JSON", help="with --table: item by item against the runs of another results file, seed by seed")
    ap.add_argument("--setting", default="none", help="with --versus: the setting compared")
    args = ap.parse_args()
    results = Path(args.results)
    if args.table:
        shown = json.loads(results.read_text(encoding="utf-8"))
        print_table(shown)
        if args.versus:
            print_versus(shown, json.loads(Path(args.versus).read_text(encoding="utf-8")), args.setting)
        return
    settings = args.settings.split(",")
    unknown = [s for s in settings if s not in NAMES]
    if unknown:
        raise SystemExit(f"--settings: unknown {', '.join(unknown)}; expected some of {', '.join(NAMES)}")
    if not args.runs:
        raise SystemExit("--runs: name at least one run folder (or --table)")
    if args.groups < 2:
        raise SystemExit(f"--groups {args.groups}: a vote needs at least 2 groups")
    earlier = json.loads(results.read_text(encoding="utf-8")) if results.is_file() else {}
    if earlier and earlier.get("generation") != args.generation:
        raise SystemExit(f"{results}: holds generation {earlier.get('generation')}, not {args.generation}; "
                         "name another --results")
    summary: dict[str, Any] = {"generation": args.generation, "groups": args.groups, "runs": dict(earlier.get("runs", {}))}
    for run in args.runs.split(","):
        folder = Path(run)
        summary["runs"][folder.name] = measure_run(folder, args.generation, args.groups, args.threads, settings)
        results.parent.mkdir(parents=True, exist_ok=True)
        results.write_text(json.dumps(summary, indent=1), encoding="utf-8")  # after each run: a kill keeps the others
    print_table(summary)


if __name__ == "__main__":
    main()
