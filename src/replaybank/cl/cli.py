"""The ``replaybank cl`` subcommand. No torch at import time: the handler imports it."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from replaybank.argtypes import integer_at_least, positive_real
from replaybank.cl.config import PROTOCOLS, STRATEGY_NAMES, check_strategies, protocol_config
from replaybank.cl.streams import SCENARIOS, STREAMS
from replaybank.cl.tune import DEFAULT_LRS
from replaybank.errors import ReplayBankError

__all__ = ["add_subcommands", "run_cl"]


def add_subcommands(subparsers: Any) -> None:  # what ArgumentParser.add_subparsers returned
    """Add ``cl``: run strategies over a stream and write report.md, metrics.json and plots."""
    p = subparsers.add_parser(
        "cl",
        help="continual-learning comparison of replay strategies on a stream",
        description="Train each strategy through the stream under each seed; write DIR/report.md, "
        "DIR/metrics.json, DIR/accuracy_matrices.png and DIR/accuracy_over_time.png.",
    )
    p.add_argument("--stream", default="split-digits", help=f"one of: {', '.join(sorted(STREAMS))}")
    p.add_argument("--scenario", default=None, help=f"one of: {', '.join(SCENARIOS)} (default: the stream's)")
    p.add_argument("--tasks", type=integer_at_least(1), default=5, help="number of tasks (default 5)")
    p.add_argument(
        "--strategies", default=None,
        help=f"comma-separated, from: {','.join(STRATEGY_NAMES)} (default naive,joint,er,derpp; with --tune naive,joint,er)",
    )
    p.add_argument("--buffer", type=int, default=200, help="replay buffer capacity (default 200)")
    p.add_argument("--seeds", type=int, default=3, help="number of seeds, run as 0..N-1 (default 3)")
    p.add_argument("--protocol", default="der", help=f"one of: {', '.join(PROTOCOLS)} (default der)")
    p.add_argument("--epochs", type=integer_at_least(1), default=None, help="epochs per task (multi-epoch protocol)")
    p.add_argument("--batch-size", type=integer_at_least(1), default=None,
                   help="stream minibatch (online/multi-epoch); at most the training rows of the stream's smallest task")
    p.add_argument("--replay-batch-size", type=integer_at_least(1), default=None, help="buffer minibatch (online/multi-epoch)")
    p.add_argument("--lr", type=positive_real, default=None, help="SGD learning rate, finite and > 0 (default 0.3; --tune lr chooses it per stream and protocol, see docs/cl.md)")
    p.add_argument(
        "--tune", choices=["lr"], default=None,
        help="instead of a comparison, choose the learning rate on a validation split of the training data: "
        "run the --lrs grid, print a table, write DIR/tune.json and DIR/tune.md",
    )
    p.add_argument("--lrs", default=",".join(f"{v:g}" for v in DEFAULT_LRS), help="--tune lr: comma-separated grid")
    p.add_argument("--select-by", default="joint", help="--tune lr: the strategy whose validation accuracy decides (default joint)")
    p.add_argument("--val-fraction", type=float, default=0.2, help="--tune: share of each class's training rows held out (default 0.2)")
    p.add_argument("--val-seed", type=int, default=1, help="--tune: seed of the validation split (default 1)")
    p.add_argument("--out", required=True, help="output directory")
    p.set_defaults(func=run_cl)


def _lrs(text: str) -> list[float]:
    try:
        return [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ReplayBankError(f"--lrs must be comma-separated numbers, got {text!r}") from None


def _check_out(out: str) -> None:
    """``--out`` must be a folder (or not exist yet), checked before any training."""
    path = Path(out).expanduser()
    if path.exists() and not path.is_dir():
        raise ReplayBankError(f"--out {out}: exists and is not a folder; name a folder (it is created if missing)")
    if path.is_symlink():
        raise ReplayBankError(f"--out {out}: is a symbolic link; name a real folder")


def run_cl(args: argparse.Namespace) -> int:
    """Handler of ``replaybank cl``; validates everything before importing torch."""
    default = "naive,joint,er" if args.tune else "naive,joint,er,derpp"
    names = check_strategies([s.strip() for s in (args.strategies or default).split(",") if s.strip()])
    if args.tune and args.lr is not None:
        raise ReplayBankError("--lr and --tune lr exclude each other; give the grid with --lrs")
    lrs = _lrs(args.lrs) if args.tune else []
    if args.stream not in STREAMS:
        raise ReplayBankError(f"unknown stream {args.stream!r}; valid streams: {', '.join(sorted(STREAMS))}")
    if args.seeds < 1:
        raise ReplayBankError(f"--seeds must be >= 1, got {args.seeds}")
    if args.buffer <= 0:
        raise ReplayBankError(f"--buffer must be a positive number of items, got {args.buffer}")
    _check_out(args.out)
    config = protocol_config(
        args.protocol,
        epochs=args.epochs,
        batch_size=args.batch_size,
        replay_batch_size=args.replay_batch_size,
        buffer_size=args.buffer,
        lr=args.lr if args.lr is not None else 0.3,
    )

    import torch

    from replaybank.cl.report import write_report
    from replaybank.cl.runner import check_batch_fits, run_many
    from replaybank.cl.streams import make_stream

    torch.set_num_threads(1)  # tiny MLPs: more threads cost more than they give
    stream = make_stream(args.stream, scenario=args.scenario, n_tasks=args.tasks)
    check_batch_fits(stream, config, option="--batch-size")  # before any training
    seeds = list(range(args.seeds))
    start = time.perf_counter()
    if args.tune:
        from replaybank.cl.tune import format_table, tune_lr, write_tune

        tuned = tune_lr(stream, names, config, lrs, seeds, select_by=args.select_by,
                        fraction=args.val_fraction, split_seed=args.val_seed, log=True)
        write_tune(args.out, tuned)
        print(format_table(tuned))
        print(f"selected lr {tuned['selected_lr']:g} (best mean validation average accuracy of {args.select_by}); "
              f"wrote {args.out}/tune.json, tune.md ({time.perf_counter() - start:.0f} s)")
        return 0
    runs = run_many(stream, names, config, seeds, log=True)
    payload = write_report(
        args.out, stream=stream.name, scenario=stream.scenario, n_tasks=len(stream), config=config,
        seeds=seeds, runs=runs,
    )
    print(f"wrote {args.out}/report.md, metrics.json, accuracy_matrices.png, accuracy_over_time.png "
          f"({time.perf_counter() - start:.0f} s)")
    for name, stats in payload["strategies"].items():
        aa = stats["average_accuracy"]
        print(f"  {name:<12} average accuracy {aa['mean'] * 100:5.1f} ± {aa['std'] * 100:.1f}")
    return 0
