"""``replaybank run``, ``replaybank config`` and ``replaybank probe``.

Thin: parse, load the config, call into the package. No torch import at module level, so
``replaybank --help`` stays fast.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from replaybank.llm.config import Config, ConfigError
from replaybank.llm.config.check import check_sources


def add_subcommands(subparsers: Any) -> None:
    """Add ``run``, ``config``, ``probe`` and ``loop`` to the top-level ``replaybank`` parser."""
    run = subparsers.add_parser(
        "run",
        help="continual LoRA fine-tuning with rehearsal: base / naive / corpus / self / self+KL arms, over seeds",
        description="Run the experiment of CONFIG (default: the embedded SmolLM2 tool-API experiment) "
        "and write report.md, metrics.json, behaviour.png and losses.png.",
    )
    run.add_argument("config", nargs="?", help="TOML config (default: the embedded default experiment)")
    run.add_argument("--out", help="output folder (default: [output] out_dir)")
    run.add_argument("--max-steps", type=int, default=None, help="cap optimizer steps per arm (smoke tests)")
    run.add_argument("--seeds", type=int, default=None, help="run every arm over N seeds and report mean and std (default: [evaluation] seeds)")
    run.add_argument("--force", action="store_true", help="replace the output folder of an earlier run (never done without it)")
    run.add_argument("--jobs", type=int, default=1, help="run the seeds in this many processes (each loads the model)")
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

    from replaybank.llm.loop.cli import add_subcommands as add_loop

    add_loop(subparsers)


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
    keys = ("general_loss", "domain_loss", "probe_score", "leakage", "retention_conversation", "domain_exact_match")
    summary = {arm: {k: round(v[k], 4) for k in keys if isinstance(v.get(k), float)} for arm, v in metrics["arms"].items()}
    print(json.dumps({"arms": summary, "targets": metrics["targets"], "wall_seconds": metrics["wall_seconds"]}, indent=2))
    return 0


def cmd_probe(args: argparse.Namespace) -> int:
    from replaybank.errors import ReplayBankError
    from replaybank.llm.recipes.probe import run_probe

    try:
        cfg = load_config(args.config)
        check_sources(cfg)
        report = run_probe(cfg, pairs=args.pairs, adapter=args.adapter, source=args.source,
                           log=lambda m: print(m, file=sys.stderr, flush=True))
    except ReplayBankError as exc:
        return _fail(exc)
    print(json.dumps(report.to_dict(), indent=2) if args.json else report.summary())
    return 0


def main(argv: list[str] | None = None) -> int:
    """Stand-alone entry (``python -m replaybank.llm.cli``) until the core CLI wires this in."""
    parser = argparse.ArgumentParser(prog="replaybank")
    add_subcommands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
