"""``replaybank store inspect DB``: summarise an episodic store (numpy/stdlib only)."""

from __future__ import annotations

import argparse
import json
from typing import Any


def add_subcommands(subparsers: Any) -> None:
    """Add ``store`` (with ``inspect``) to the top-level ``replaybank`` parser."""
    store = subparsers.add_parser("store", help="episodic experience stores (SQLite): inspect")
    sub = store.add_subparsers(dest="store_command", metavar="ACTION", required=True)
    inspect = sub.add_parser(
        "inspect",
        help="summary of a store: episodes per generation, success rate, families, size, schema",
    )
    inspect.add_argument("db", help="the SQLite file written by EpisodeStore")
    inspect.add_argument("--json", action="store_true", help="print the summary as JSON")
    inspect.add_argument("--verify", action="store_true", help="also run SQLite's integrity check")
    inspect.set_defaults(func=cmd_inspect)


def cmd_inspect(args: argparse.Namespace) -> int:
    from .stats import format_summary, summary
    from .store import EpisodeStore

    with EpisodeStore(args.db, readonly=True) as store:
        if args.verify:
            store.verify()
        s = summary(store)
    print(json.dumps(s, indent=2) if args.json else format_summary(s))
    return 0
