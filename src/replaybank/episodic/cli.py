"""``replaybank store inspect DB`` (summarise an episodic store) and ``replaybank store import DB
FILE`` (store a person's demonstrations, private fields redacted); numpy/stdlib only."""

from __future__ import annotations

import argparse
import json
from typing import Any


def add_subcommands(subparsers: Any) -> None:
    """Add ``store`` (with ``inspect``) to the top-level ``replaybank`` parser."""
    store = subparsers.add_parser("store", help="episodic experience stores (SQLite): inspect, import")
    sub = store.add_subparsers(dest="store_command", metavar="ACTION", required=True)
    inspect = sub.add_parser(
        "inspect",
        help="summary of a store: episodes per generation, success rate, families, size, schema",
    )
    inspect.add_argument("db", help="the SQLite file written by EpisodeStore")
    inspect.add_argument("--json", action="store_true", help="print the summary as JSON")
    inspect.add_argument("--verify", action="store_true", help="also run SQLite's integrity check")
    inspect.set_defaults(func=cmd_inspect)
    imp = sub.add_parser(
        "import",
        help="store a person's demonstrations (JSONL), every call checked, private fields redacted",
        description=(
            "Store the demonstrations of FILE (one JSON object a line: task, turns, calls, optional "
            "id, family, difficulty, fields; docs/episodic.md#importing-demonstrations) as episodes of "
            "source demo. Every call is checked against the qx tool schema and executed; each tool turn "
            "must be the runtime's result. Every line is checked before anything is written, then all "
            "are written in one transaction: a bad file stores nothing and changes nothing already "
            "stored. The values of the --private fields are replaced by <private:FIELD> everywhere "
            "(task, turns, calls, results) before they are stored."
        ),
    )
    imp.add_argument("db", metavar="STORE", help="the SQLite store (created if missing)")
    imp.add_argument("file", metavar="FILE", help="the JSONL file of demonstrations (a regular file, not a link)")
    imp.add_argument(
        "--private", metavar="FIELD", nargs="+", action="extend", default=[],
        help="fields (keys of the lines' 'fields') whose values are redacted, ignoring case, to <private:FIELD> "
             "before anything is stored; repeatable",
    )
    imp.add_argument(
        "--on-redacted-call", choices=("keep", "refuse"), default="keep",
        help="a call that redaction makes invalid (e.g. to=@<private:payee>): keep the demonstration as a "
             "record with a failed verdict, never replayed nor trained on (default), or refuse the file",
    )
    imp.set_defaults(func=cmd_import)


def cmd_inspect(args: argparse.Namespace) -> int:
    from .stats import format_summary, summary
    from .store import EpisodeStore

    with EpisodeStore(args.db, readonly=True) as store:
        if args.verify:
            store.verify()
        s = summary(store)
    print(json.dumps(s, indent=2) if args.json else format_summary(s))
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    from .demos import read_demonstrations, to_episodes
    from .store import EpisodeStore

    demo_file = read_demonstrations(args.file)  # the whole file is checked before the store is opened
    episodes, unusable = to_episodes(demo_file, args.private, on_redacted_call=args.on_redacted_call)
    with EpisodeStore(args.db) as store:
        ids = store.add_many(episodes)
        total = len(store)
    private = f"; private fields redacted: {', '.join(sorted(set(args.private)))}" if args.private else ""
    kept = (f"; {len(unusable)} kept as records, not replayable (a redacted call; lines "
            f"{', '.join(map(str, unusable))})") if unusable else ""
    print(f"{args.file}: stored {len(ids)} demonstrations in {args.db} ({total} episodes in all){private}{kept}")
    return 0
