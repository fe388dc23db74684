"""The ``replaybank`` command. Thin: it parses arguments and calls into the packages.

Feature packages (``llm``, ``cl``, ``rl``) each add their subcommands through
``add_subcommands(subparsers)``; they import torch only inside their handlers, so ``--help`` is fast.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
from collections.abc import Sequence

import numpy as np

FEATURES = ("llm", "hf", "cl", "rl", "episodic", "traces")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="replaybank",
        description=(
            "Experience replay that keeps what a model knew while it learns something new: fast replay "
            "buffers, rehearsal for continual LoRA fine-tuning of LLMs, and the measurements to show it."
        ),
        epilog="Run 'replaybank COMMAND --help' for a command's options.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    demo = sub.add_parser(
        "demo", help="fill a buffer and sample it with each sampler; prints timings"
    )
    demo.add_argument(
        "--capacity", type=int, default=100_000, help="buffer capacity (default 100000)"
    )
    demo.add_argument("--batch", type=int, default=256, help="batch size (default 256)")
    demo.add_argument("--seed", type=int, default=0)
    demo.set_defaults(func=run_demo)
    inspect = sub.add_parser("inspect", help="describe a buffer saved with ReplayBuffer.save")
    inspect.add_argument("path", help="directory written by ReplayBuffer.save")
    inspect.add_argument(
        "--verify", action="store_true", help="also check every file's sha256 and the whole state"
    )
    inspect.set_defaults(func=run_inspect)
    for name in FEATURES:
        try:
            module = importlib.import_module(f"replaybank.{name}.cli")
        except ModuleNotFoundError as err:
            if err.name not in (f"replaybank.{name}", f"replaybank.{name}.cli"):
                raise
            continue
        module.add_subcommands(sub)
    return parser


def run_demo(args: argparse.Namespace) -> int:
    import replaybank as rb

    rng = np.random.default_rng(args.seed)
    n = args.capacity
    data = {
        "obs": rng.random((n, 64), dtype=np.float32),
        "action": rng.integers(0, 18, n),
        "reward": rng.random(n, dtype=np.float32),
        "done": rng.random(n) < 0.005,
    }
    samplers: dict[str, rb.samplers.Sampler] = {
        "Uniform": rb.Uniform(),
        "Reshuffled": rb.Reshuffled(),
        "Prioritized": rb.Prioritized(alpha=0.6, beta=0.4),
        "PrioritizedReshuffled": rb.PrioritizedReshuffled(alpha=0.6, beta=0.4),
        "Trajectories(16)": rb.Trajectories(16),
    }
    print(f"{n:,} transitions (obs float32[64], action, reward, done), batch {args.batch}\n")
    print(f"{'sampler':<24}{'extend (items/s)':>18}{'sample (batches/s)':>20}")
    for name, sampler in samplers.items():
        buf = rb.ReplayBuffer(n, sampler=sampler, seed=args.seed)
        start = time.perf_counter()
        buf.extend(data)
        extend_rate = n / (time.perf_counter() - start)
        batch = args.batch // 16 if name.startswith("Trajectories") else args.batch
        calls, start = 0, time.perf_counter()
        while time.perf_counter() - start < 0.5:
            b = buf.sample(batch)
            if sampler.uses_priorities:
                ids = np.asarray(b.ids).ravel()
                buf.update_priorities(ids, rng.random(ids.size))
            calls += 1
        print(f"{name:<24}{extend_rate:>18,.0f}{calls / (time.perf_counter() - start):>20,.0f}")
    return 0


def run_inspect(args: argparse.Namespace) -> int:
    from pathlib import Path

    from .buffer import ReplayBuffer
    from .persist import read_manifest

    m = read_manifest(Path(args.path))
    raw = m.raw
    print(f"{args.path}: {m.count():,} / {m.capacity:,} items, version {m.version}")
    for kind in ("sampler", "admission", "storage"):
        print(f"  {kind:<9} {raw[kind]['class']} {json.dumps(raw[kind]['params'])}")
    for name, col in m.spec.items():
        kind = "ragged " if col.ragged else ""
        print(f"  column    {name}: {kind}{col.dtype.str} {col.shape}")
    total = sum(nbytes for _, nbytes in m.files.values())
    if args.verify:
        ReplayBuffer.load(args.path, mmap=True)
        check = "every file and field verified (sha256, schema, consistency)"
    else:
        check = "manifest verified; --verify to check every file"
    print(f"  files     {len(m.files)} ({total / 2**20:.1f} MiB), {check}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    from .errors import ReplayBankError

    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    try:
        return int(args.func(args) or 0)
    except ReplayBankError as err:
        print(f"replaybank: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
