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
    python benchmarks/loop_levels.py --table 5      # per arm, mean ± std over the seeds run, generation 5
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np

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


def arm_of(run: str) -> str:
    """The arm of a run's name: ``levels-budget-s1`` -> ``levels-budget``.

    Example:
        >>> arm_of("levels-budget-s1"), arm_of("raw-s0")
        ('levels-budget', 'raw')
    """
    return run.rsplit("-s", 1)[0]


#: the figures of the seed table: (title, how a generation's summary row gives it)
TABLE_FIGURES: list[tuple[str, Any]] = [
    ("held-out exact without context %", lambda r: r["no_context"]),
    ("with context %", lambda r: r["context"]),
    ("replay arm %", lambda r: r["replay"]),
    ("model calls per solved task, context / replay", lambda r: (r["calls_per_solved"]["context"],
                                                                 r["calls_per_solved"]["replay"])),
    ("retention %", lambda r: r["retention"]),
]


def seed_table(runs: dict[str, list[dict[str, Any]]], generation: int) -> list[dict[str, Any]]:
    """Per arm, each figure of :data:`TABLE_FIGURES` at ``generation`` over the arm's seeds.

    Returns:
        One row per arm, in the order of first appearance: ``arm``, ``seeds`` (run names), and per figure
        its ``values`` (per seed; ``None`` where the run has no such arm, as raw's replay), ``mean`` and
        ``std`` (sample; ``None`` for one seed or no value).

    Example:
        >>> row = {"generation": 5, "no_context": 0.5, "context": 0.4, "replay": None, "retention": 0.9,
        ...        "calls_per_solved": {"context": 2.0, "replay": None}}
        >>> t = seed_table({"raw-s0": [row], "raw-s1": [{**row, "no_context": 0.7}]}, 5)
        >>> t[0]["arm"], t[0]["held-out exact without context %"]["mean"], t[0]["replay arm %"]["mean"]
        ('raw', 0.6, None)
    """
    arms: dict[str, list[str]] = {}
    for run in runs:
        arms.setdefault(arm_of(run), []).append(run)
    table = []
    for arm, names in arms.items():
        rows = [next((r for r in runs[n] if r["generation"] == generation), None) for n in names]
        entry: dict[str, Any] = {"arm": arm, "seeds": names}
        for title, get in TABLE_FIGURES:
            values = [None if r is None else get(r) for r in rows]
            pair = next((v for v in values if isinstance(v, tuple)), None)  # a run short of the generation has None
            parts = [[None if v is None else v[i] for v in values] for i in range(len(pair))] if pair else [values]
            stats = []
            for part in parts:
                known = [float(v) for v in part if v is not None]
                stats.append({"values": list(part), "mean": float(np.mean(known)) if known else None,
                              "std": float(np.std(known, ddof=1)) if len(known) > 1 else None})
            entry[title] = stats[0] if len(stats) == 1 else stats
        table.append(entry)
    return table


def _cell(stat: dict[str, Any], scale: float) -> str:
    if stat["mean"] is None:
        return "-"
    std = "" if stat["std"] is None else f" ± {scale * stat['std']:.{0 if scale > 1 else 2}f}"
    return f"{scale * stat['mean']:.{0 if scale > 1 else 2}f}{std}"


def print_table(summary_file: Path, generation: int) -> None:
    """Print :func:`seed_table` of a written ``loop_levels.json`` as Markdown."""
    runs = json.loads(summary_file.read_text(encoding="utf-8"))["runs"]
    table = seed_table(runs, generation)
    print(f"generation {generation}, mean ± std over seeds\n")
    print("| arm | seeds | " + " | ".join(t for t, _ in TABLE_FIGURES) + " |")
    print("|---|---:|" + "---:|" * len(TABLE_FIGURES))
    for row in table:
        cells = []
        for title, _ in TABLE_FIGURES:
            stat = row[title]
            cells.append(" / ".join(_cell(s, 1) for s in stat) if isinstance(stat, list) else _cell(stat, 100))
        print(f"| {row['arm']} | {len(row['seeds'])} | " + " | ".join(cells) + " |")


def repo_path(path: str) -> str:
    """``path`` relative to the repository when it is inside it (the summary names no machine's folders)."""
    full = Path(path).resolve()
    return str(full.relative_to(HERE.parent)) if full.is_relative_to(HERE.parent) else path


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
    ap.add_argument("--table", type=int, metavar="GENERATION",
                    help="print the seed table of --results' loop_levels.json at this generation, run nothing")
    args = ap.parse_args()
    if args.table is not None:
        print_table(Path(args.results) / "loop_levels.json", args.table)
        return
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
    summary: dict[str, Any] = {"config": repo_path(args.config), "seconds_this_call": round(time.perf_counter() - t0, 1),
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
