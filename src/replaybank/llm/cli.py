"""``replaybank run``, ``replaybank config``, ``replaybank probe``, ``replaybank loop`` (and
``replaybank adapters``, from :mod:`replaybank.llm.adapters.cli`).

Thin: parse, load the config, call into the package. No torch import at module level, so
``replaybank --help`` stays fast.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from replaybank.llm.adapters.cli import add_subcommands as add_adapter_commands
from replaybank.llm.config import Config, ConfigError
from replaybank.llm.config.check import check_loop_sources, check_sources

LOOP_DESCRIPTION = """\
The consolidation loop: the model's own experience, stored, replayed and consolidated.

Per generation the current model (base + LoRA adapter) attempts N train tasks (k sampled answers
each) with up to `context_examples` successful episodes in context, retrieved from the episodic
store by lexical BM25 similarity; each answer stops at the end of its tool call (>>), its calls
are validated against the tool schema and executed on the simulated qx runtime; a task that
needs several calls (levels 3 and 4) is acted turn by turn, each result fed back as a tool turn
(at most max_turns turns). The whole episode is checked (exact match + argument-level credit) and
every step is recorded in the store (SQLite). Then the adapter is trained on the successes
of the generations the lineage selects (window = last K, all, best = K best on a validation
split, never the evaluation set), mixed with rehearsal rows the base model wrote itself at a
fixed share of the rows of every batch; by default those rows are learnt through a KL-to-base
term only (the base model's distribution on its own answers is kept; [loop] recipe =
"self-distill", or any rehearsal recipe: docs/llm.md#rehearsal-recipes). Then held-out tasks are answered without replayed context (is the skill in the
weights?) and with it, and the general-capability suite measures retention against the base
model. The store starts with at most 16 demonstrations.

A killed loop resumes from its last finished generation: run the same command again.
Writes, in --out: one folder per run (store.db, adapters/genN/ as PEFT folders, state.json,
log.txt), report.md, metrics.json and loop.png.
"""

LOOP_EPILOG = """\
examples:
  replaybank loop                                    # the default: 5 generations, seed 0
  replaybank loop --seeds 0,1,2 --rehearsal on,off   # seeds and the no-rehearsal arm
  replaybank loop --lineage window,all,best --jobs 2 # lineage modes side by side
  replaybank loop --print-config > loop.toml         # the defaults, commented, to edit
  replaybank loop --report runs/loop                 # rewrite the report of finished runs
"""


def add_subcommands(subparsers: Any) -> None:
    """Add ``run``, ``config``, ``probe``, ``loop`` and ``adapters`` to the top-level ``replaybank`` parser."""
    run = subparsers.add_parser(
        "run",
        help="continual LoRA fine-tuning with rehearsal: base, naive, self-distill and routed arms by default, over seeds",
        description="Run the experiment of CONFIG (default: the embedded SmolLM2 tool-API experiment) "
        "and write report.md, metrics.json, behaviour.png and losses.png.",
    )
    run.add_argument("config", nargs="?", help="TOML config (default: the embedded default experiment)")
    run.add_argument("--out", help="output folder (default: [output] out_dir)")
    run.add_argument("--max-steps", type=int, default=None, help="cap optimizer steps per arm (smoke tests)")
    run.add_argument("--seeds", type=int, default=None, help="run every arm over N seeds and report mean and std (default: [evaluation] seeds)")
    run.add_argument("--force", action="store_true", help="replace the output folder of an earlier run (never done without it)")
    run.add_argument("--jobs", type=int, default=1, help="run the seeds in this many processes (each loads the model)")
    run.add_argument(
        "--require-floor", action="store_true",
        help="exit with status 3 (report written) when the gated arm's mean retention of some family is below "
        "[evaluation] retention_floor (gated arm: [evaluation] gate_arm, else the best rehearsal arm)",
    )
    run.set_defaults(func=cmd_run)

    cfg = subparsers.add_parser(
        "config",
        help="validate a config (keys, values, and the files and models it names) and print it, defaults included",
    )
    cfg.add_argument("config", nargs="?", help="TOML config to validate and print")
    cfg.add_argument("--json", action="store_true", help="print JSON instead of commented TOML")
    cfg.add_argument(
        "--schema-only", action="store_true",
        help="check keys and values only, not that the files, models and datasets exist here "
        "(for a config meant for another machine)",
    )
    cfg.set_defaults(func=cmd_config)

    probe = subparsers.add_parser(
        "probe",
        help="gradient-interference probe: does the domain data pull against general text?",
    )
    probe.add_argument("config", nargs="?", help="TOML config (default: the embedded default)")
    probe.add_argument("--pairs", type=int, default=None, help="batch pairs (default: [evaluation] probe_pairs)")
    probe.add_argument("--adapter", help="a saved adapter folder to probe instead of a fresh LoRA")
    probe.add_argument("--source", choices=["corpus", "self"], default="corpus",
                       help="rehearsal rows to compare with: the corpus, or the base model's own answers (self)")
    probe.add_argument("--json", action="store_true", help="print the result as JSON")
    probe.set_defaults(func=cmd_probe)

    _add_loop(subparsers)
    add_adapter_commands(subparsers)


def _add_loop(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "loop", help="the consolidation loop: act with replayed experience, record, consolidate into LoRA, evaluate",
        description=LOOP_DESCRIPTION, epilog=LOOP_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("config", nargs="?", help="TOML with [loop] and [training] (default: the embedded default)")
    p.add_argument("--out", default="runs/loop", help="output folder (default runs/loop)")
    p.add_argument("--seed", type=int, default=None, help="one seed (default [loop] seed)")
    p.add_argument("--seeds", default=None, help="comma-separated seeds, e.g. 0,1,2 (overrides --seed)")
    p.add_argument("--lineage", default=None, help="comma-separated lineage modes: window, all, best (default [loop] lineage)")
    p.add_argument("--rehearsal", default="on", help="on, off or on,off (off = no rehearsal rows: the arm that shows forgetting)")
    p.add_argument("--generations", type=int, default=None, help="generations (default [loop] generations)")
    p.add_argument("--jobs", type=int, default=1, help="runs in parallel worker processes (each one torch thread)")
    p.add_argument("--report", metavar="DIR", help="only rewrite report.md / metrics.json / loop.png of DIR")
    p.add_argument("--print-config", action="store_true",
                   help="print the effective config as TOML and exit (after the checks a run makes: task and "
                        "rehearsal files, base model, --out)")
    p.add_argument("--schema-only", action="store_true",
                   help="check keys and values only, not the files and model the config names (with --print-config)")
    p.set_defaults(func=cmd_loop)


def load_config(path: str | None) -> Config:
    return Config.from_toml(path) if path else Config()


def _fail(exc: Exception) -> int:
    print(f"replaybank: error: {exc}", file=sys.stderr)
    return 2


def cmd_config(args: argparse.Namespace) -> int:
    try:
        cfg = load_config(args.config)
        if not args.schema_only:
            check_sources(cfg)
    except ConfigError as exc:
        return _fail(exc)
    print(json.dumps(cfg.to_dict(), indent=2) if args.json else cfg.to_toml(), end="" if not args.json else "\n")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from replaybank.errors import ReplayBankError
    from replaybank.llm.recipes.rehearsal import run_experiment
    from replaybank.llm.report.gate import GATE_EXIT, gate_failure

    if args.seeds is not None and args.seeds < 1:
        return _fail(ValueError(f"--seeds {args.seeds}: need at least 1"))
    try:
        cfg = load_config(args.config)
        check_sources(cfg)  # missing files and models fail here, before the model loads
        metrics = run_experiment(
            cfg, Path(args.out) if args.out else None,
            log=lambda m: print(m, file=sys.stderr, flush=True), max_steps=args.max_steps,
            seeds=args.seeds, force=args.force, jobs=args.jobs,
        )
    except ReplayBankError as exc:  # every bad-input error of the package (config, data, model, suite, output)
        return _fail(exc)
    keys = ("general_loss", "domain_loss", "probe_score", "leakage", "retention_conversation",
            "retention_instruction", "domain_exact_match")
    saved = metrics.to_json()
    summary = {arm: {k: round(v[k], 4) for k in keys if isinstance(v.get(k), float)} for arm, v in saved["arms"].items()}  # type: ignore[attr-defined]
    gate = {"chosen_arm": metrics.gate.chosen_arm, "passed": metrics.gate.passed}
    print(json.dumps({"arms": summary, "targets": saved["targets"], "gate": gate, "wall_seconds": metrics.wall_seconds},
                     indent=2))
    failure = gate_failure(metrics.gate) if args.require_floor else None
    if failure is not None:
        print(f"replaybank: {failure}", file=sys.stderr)
        return GATE_EXIT
    return 0


def cmd_probe(args: argparse.Namespace) -> int:
    from replaybank.errors import ReplayBankError
    from replaybank.llm.recipes.interference import run_probe

    try:
        cfg = load_config(args.config)
        check_sources(cfg)
        report = run_probe(cfg, pairs=args.pairs, adapter=args.adapter, source=args.source,
                           log=lambda m: print(m, file=sys.stderr, flush=True))
    except ReplayBankError as exc:
        return _fail(exc)
    print(json.dumps(report.to_json(), indent=2) if args.json else report.summary())
    return 0


def _split(text: str, what: str, allowed: tuple[str, ...] | None = None) -> list[str]:
    items = [x.strip() for x in text.split(",") if x.strip()]
    bad = [x for x in items if allowed is not None and x not in allowed]
    if not items or bad:
        raise SystemExit(f"replaybank loop: --{what} {text!r}: expected a comma-separated list of {', '.join(allowed or ('values',))}")
    return items


def cmd_loop(args: argparse.Namespace) -> int:
    from replaybank.llm.config.loop import LoopConfig
    from replaybank.llm.loop.grid import cells
    from replaybank.llm.loop.report import write_report
    from replaybank.llm.recipes.loop import run_grid

    if args.report:
        print(write_report(Path(args.report)))
        return 0
    cfg = LoopConfig.from_toml(args.config) if args.config else LoopConfig()
    if args.generations is not None:
        cfg = cfg.with_(generations=args.generations)
    if not (args.print_config and args.schema_only):
        check_loop_sources(cfg, Path(args.out))  # a printed config is checked like a run's
    if args.print_config:
        sys.stdout.write(cfg.to_toml())
        return 0
    if args.seeds:
        try:
            seeds = [int(s) for s in _split(args.seeds, "seeds")]
        except ValueError:
            raise SystemExit(f"replaybank loop: --seeds {args.seeds!r}: expected integers like 0,1,2") from None
    else:
        seeds = [cfg.loop.seed if args.seed is None else args.seed]
    lineages = _split(args.lineage, "lineage", ("window", "all", "best")) if args.lineage else [cfg.loop.lineage]
    rehearsal = [x == "on" for x in _split(args.rehearsal, "rehearsal", ("on", "off"))]
    run_grid(cells(cfg, lineages, rehearsal, seeds), Path(args.out), jobs=max(1, args.jobs))
    return 0


def main(argv: list[str] | None = None) -> int:
    """Stand-alone entry (``python -m replaybank.llm.cli``) until the core CLI wires this in."""
    parser = argparse.ArgumentParser(prog="replaybank")
    add_subcommands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
