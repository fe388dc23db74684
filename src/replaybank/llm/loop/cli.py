"""``replaybank loop``: the consolidation loop from the command line (torch imported lazily)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

DESCRIPTION = """\
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
term only (the base model's distribution on its own answers is kept; [loop] kl_weight,
rehearsal_ce). Then held-out tasks are answered without replayed context (is the skill in the
weights?) and with it, and the general-capability suite measures retention against the base
model. The store starts with at most 16 demonstrations.

A killed loop resumes from its last finished generation: run the same command again.
Writes, in --out: one folder per run (store.db, adapters/genN/adapter.safetensors, state.json,
log.txt), report.md, metrics.json and loop.png.
"""

EPILOG = """\
examples:
  replaybank loop                                    # the default: 5 generations, seed 0
  replaybank loop --seeds 0,1,2 --rehearsal on,off   # seeds and the no-rehearsal arm
  replaybank loop --lineage window,all,best --jobs 2 # lineage modes side by side
  replaybank loop --print-config > loop.toml         # the defaults, commented, to edit
  replaybank loop --report runs/loop                 # rewrite the report of finished runs
"""


def add_subcommands(subparsers: Any) -> None:
    """Add ``loop`` to the top-level ``replaybank`` parser."""
    p = subparsers.add_parser(
        "loop", help="the consolidation loop: act with replayed experience, record, consolidate into LoRA, evaluate",
        description=DESCRIPTION, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
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
    p.add_argument("--print-config", action="store_true", help="print the effective config as TOML and exit")
    p.set_defaults(func=cmd_loop)


def _split(text: str, what: str, allowed: tuple[str, ...] | None = None) -> list[str]:
    items = [x.strip() for x in text.split(",") if x.strip()]
    bad = [x for x in items if allowed is not None and x not in allowed]
    if not items or bad:
        raise SystemExit(f"replaybank loop: --{what} {text!r}: expected a comma-separated list of {', '.join(allowed or ('values',))}")
    return items


def cmd_loop(args: argparse.Namespace) -> int:
    from replaybank.llm.loop.config import LoopConfig
    from replaybank.llm.loop.grid import cells, run_grid

    if args.report:
        from replaybank.llm.loop.report import write_report

        print(write_report(Path(args.report)))
        return 0
    cfg = LoopConfig.from_toml(args.config) if args.config else LoopConfig()
    if args.generations is not None:
        cfg = cfg.with_(generations=args.generations)
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
