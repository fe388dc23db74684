"""Levels of experience in the consolidation loop, side by side on the same tasks and seeds.

Two arms of ``replaybank loop`` from one base config (``benchmarks/loop_levels.toml``, the loop's
defaults: SmolLM2-135M-Instruct, 5 generations, the qx tasks of levels 1-2):

* ``raw``: successful episodes retrieved by BM25 into the context and consolidated (the default);
* ``levels``: the same, plus workflows learned from the successes and replayed without the model
  when their checks pass (``replay_workflows``), a reflection on every failed episode stored as an
  insight (``reflect``), and insights and workflows retrieved beside the episodes.

Two more arms, run only when ``--arms`` names them, tell the levels from the larger consolidation
they bring (more successes, so more optimizer steps):

* ``levels-own``: ``levels`` consolidating only the model's own successes (``consolidate = "own"``:
  the replayed episodes left out of the rows);
* ``levels-budget``: ``levels`` trained ``--steps`` optimizer steps every generation
  (``consolidation_steps``; default 12, raw's steps at generation 5 of the committed seed-0 run).

Each run is a folder of ``--out`` (resumable: run the command again); the report, ``metrics.json``
and every run's ``state.json`` are copied to ``--results`` with a summary
(``loop_levels.json``, which keeps the runs of earlier calls beside this call's, so seeds can be
run one call at a time): per run and generation, held-out exact match without and with context,
the replay arm, suite retention, model calls per solved task, and the retry pass with and without
reflection (the rows and optimizer steps of each consolidation are in the runs' ``state.json``
and the report)::

    python benchmarks/loop_levels.py --seeds 0 --jobs 2
    python benchmarks/loop_levels.py --seeds 0 --jobs 2 --arms raw,levels,levels-own,levels-budget --steps 12
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path
from typing import Any

from replaybank.llm.config.loop import LoopConfig
from replaybank.llm.loop.results import Acted, GenerationRow
from replaybank.llm.loop.state import STATE_FILE, read_state
from replaybank.llm.recipes.loop import run_grid

HERE = Path(__file__).resolve().parent
LEVELS: dict[str, Any] = {"replay_workflows": True, "reflect": True, "retrieve": ["episodes", "insights", "workflows"]}
#: the arms run by default
ARMS: dict[str, dict[str, Any]] = {"raw": {}, "levels": LEVELS}
#: the arms run only when ``--arms`` names them; ``levels-budget``'s steps come from ``--steps``
MORE_ARMS: dict[str, dict[str, Any]] = {"levels-own": {**LEVELS, "consolidate": "own"}, "levels-budget": LEVELS}
#: raw's optimizer steps at generation 5 of the committed seed-0 run (raw-s0.state.json)
RAW_STEPS = 12


def arm_keys(arm: str, steps: int) -> dict[str, Any]:
    """The ``[loop]`` keys arm ``arm`` sets over the base config (``steps``: ``levels-budget``'s).

    Example:
        >>> arm_keys("levels-budget", 12)["consolidation_steps"], arm_keys("levels-own", 12)["consolidate"]
        (12, 'own')
    """
    if arm == "levels-budget":
        return {**MORE_ARMS[arm], "consolidation_steps": steps}
    known = {**ARMS, **MORE_ARMS}
    if arm not in known:
        raise SystemExit(f"--arms: unknown arm {arm!r}; choose from {', '.join(known)}")
    return known[arm]


def summary_row(row: GenerationRow) -> dict[str, Any]:
    """One generation of one run, the figures the comparison reads."""
    m = row.evaluation
    act = row.act if isinstance(row.act, Acted) else None
    done = None if act is None else act.replay
    refl = None if row.act is None or row.act.reflection is None else row.act.reflection.retry
    replay = None if m.replay is None else m.replay.score

    return {
        "generation": row.generation,
        "no_context": m.no_context.success, "context": m.context.success,
        "replay": None if replay is None else replay.success,
        "retention": m.retention,
        "calls_per_solved": {"no_context": m.no_context.calls_per_solved,
                             "context": m.context.calls_per_solved,
                             "replay": None if replay is None else replay.calls_per_solved},
        "act_calls_per_solved": None if act is None else act.score.calls_per_solved,
        "act_replayed": None if done is None else done.replayed,
        "act_refused": None if done is None else done.refused,
        "retry": None if refl is None else {"n": refl.n, "without": refl.without.success,
                                            "with_reflection": refl.with_reflection.success},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default=str(HERE / "loop_levels.toml"))
    ap.add_argument("--seeds", default="0", help="comma-separated seeds")
    ap.add_argument("--arms", default=",".join(ARMS), help=f"comma-separated, of {', '.join([*ARMS, *MORE_ARMS])}")
    ap.add_argument("--steps", type=int, default=RAW_STEPS,
                    help="levels-budget: optimizer steps of every consolidation (default: raw's at generation 5 of seed 0)")
    ap.add_argument("--jobs", type=int, default=2, help="runs in parallel processes (one torch thread each)")
    ap.add_argument("--out", default="runs/loop_levels", help="run folders (stores, adapters): large")
    ap.add_argument("--results", default=str(HERE / "results" / "loop_levels"), help="report and JSON: small")
    args = ap.parse_args()
    if args.steps < 1:
        raise SystemExit(f"--steps {args.steps}: expected a number of optimizer steps >= 1")
    base = LoopConfig.from_toml(args.config)
    runs = [(f"{arm}-s{seed}", base.with_(seed=int(seed), **arm_keys(arm, args.steps)))
            for seed in args.seeds.split(",") for arm in args.arms.split(",")]
    out, results = Path(args.out), Path(args.results)
    t0 = time.perf_counter()
    run_grid(runs, out, jobs=args.jobs)
    results.mkdir(parents=True, exist_ok=True)
    for name in ("report.md", "metrics.json", "loop.png"):
        if (out / name).is_file():
            shutil.copy(out / name, results / name)
    summary_file = results / "loop_levels.json"
    earlier = json.loads(summary_file.read_text(encoding="utf-8")).get("runs", {}) if summary_file.is_file() else {}
    summary: dict[str, Any] = {"config": args.config, "seconds_this_call": round(time.perf_counter() - t0, 1),
                               "runs": dict(earlier)}
    for name, _ in runs:
        state = read_state(out / name)
        if state is None:
            raise SystemExit(f"{out / name}: no {STATE_FILE} after the grid ran")
        (results / f"{name}.state.json").write_text(json.dumps(state.to_json(), indent=1), encoding="utf-8")
        summary["runs"][name] = [summary_row(r) for r in state.generations]
    summary["runs"] = dict(sorted(summary["runs"].items()))
    summary_file.write_text(json.dumps(summary, indent=1), encoding="utf-8")
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
