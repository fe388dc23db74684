"""Choosing the learning rate on a validation split carved from the training data.

``tune_lr`` runs every strategy under every seed at every learning rate of a grid on
:func:`~replaybank.cl.streams.validation_stream` (each task's test split replaced by a held-out
part of its training split; the test split is never read) and picks the rate with the best mean
validation average accuracy of one strategy (``select_by``, by default ``joint``: a criterion
that does not favour any replay strategy). The same rate is then used for every strategy.
``write_tune`` saves the result as ``tune.json`` and ``tune.md``; ``format_table`` is the printed
table.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np

from replaybank.cl.config import TrainConfig, check_strategies
from replaybank.cl.streams import Stream, validation_stream
from replaybank.errors import ReplayBankError

__all__ = ["DEFAULT_LRS", "format_table", "select", "tune_lr", "write_tune"]

DEFAULT_LRS: tuple[float, ...] = (0.01, 0.03, 0.1, 0.3, 1.0)
TUNE_SCHEMA_VERSION = 1


def select(scores: dict[float, list[float]]) -> float:
    """The grid value with the highest mean score; ties go to the smaller value.

    Example:
        >>> select({0.1: [0.8, 0.9], 0.3: [0.9, 0.8], 1.0: [0.5, 0.6]})
        0.1
    """
    if not scores:
        raise ReplayBankError("no grid values to select from")
    return max(sorted(scores), key=lambda v: (float(np.mean(scores[v])), -v))


def tune_lr(
    stream: Stream,
    strategies: Sequence[str],
    config: TrainConfig,
    lrs: Sequence[float],
    seeds: Sequence[int],
    *,
    select_by: str = "joint",
    fraction: float = 0.2,
    split_seed: int = 1,
    log: bool = False,
) -> dict[str, Any]:
    """Run the grid on the validation split and pick the learning rate.

    Args:
        stream: the stream whose *training* data is split (see ``validation_stream``).
        strategies: strategies to run at every rate; must include ``select_by``.
        config: the protocol; its ``lr`` is replaced by each grid value.
        lrs: the grid, positive and distinct.
        seeds: seeds of every run.
        select_by: the strategy whose mean validation average accuracy decides.
        fraction, split_seed: the validation split (share of each class's training rows; seed).

    Returns:
        The payload ``write_tune`` saves: ``selected_lr``, ``select_by``, the split, the config,
        ``seeds``, and ``grid[lr][strategy] = {"mean", "std", "values"}`` of validation average
        accuracy (fractions; std is the sample std over seeds).

    Raises:
        ReplayBankError (a ValueError): an empty or non-positive grid, a repeated rate,
            ``select_by`` not among ``strategies``, or a bad split.
    """
    from replaybank import metrics
    from replaybank.cl.runner import check_batch_fits, run

    names = check_strategies(list(strategies))
    if select_by not in names:
        raise ReplayBankError(f"select_by {select_by!r} is not among the strategies {names}; add it to the strategies")
    grid = [float(v) for v in lrs]
    if not grid or any(not (v > 0 and np.isfinite(v)) for v in grid):
        raise ReplayBankError(f"learning rates must be finite and > 0, got {list(lrs)}")
    if len(set(grid)) != len(grid):
        raise ReplayBankError(f"learning rate listed twice in {list(lrs)}")
    val = validation_stream(stream, fraction=fraction, seed=split_seed)
    check_batch_fits(val, config)  # the training part of the split, before any run
    start = time.perf_counter()
    table: dict[float, dict[str, list[float]]] = {}
    for lr in sorted(grid):
        cfg = replace(config, lr=lr)
        for name in names:
            for seed in seeds:
                aa = metrics.average_accuracy(run(val, name, cfg, seed).accuracy)
                table.setdefault(lr, {}).setdefault(name, []).append(aa)
            if log:
                print(f"lr {lr:g} {name:<12} validation average accuracy {np.mean(table[lr][name]) * 100:.1f}", flush=True)
    best = select({lr: row[select_by] for lr, row in table.items()})
    return {
        "schema_version": TUNE_SCHEMA_VERSION,
        "param": "lr",
        "stream": stream.name,
        "scenario": stream.scenario,
        "n_tasks": len(stream),
        "split": {"fraction": fraction, "seed": split_seed, "train_rows": [len(t.y_train) for t in val.tasks],
                  "validation_rows": [len(t.y_test) for t in val.tasks]},
        "config": {k: v for k, v in asdict(config).items() if k != "lr"},
        "seeds": list(seeds),
        "select_by": select_by,
        "selected_lr": best,
        "grid": {str(lr): {name: _stats(v) for name, v in row.items()} for lr, row in table.items()},
        "seconds": time.perf_counter() - start,
    }


def _stats(values: Sequence[float]) -> dict[str, Any]:
    v = np.asarray(values, dtype=np.float64)
    return {"mean": float(v.mean()), "std": float(v.std(ddof=1)) if len(v) > 1 else 0.0, "values": v.tolist()}


def format_table(payload: dict[str, Any]) -> str:
    """The grid as a Markdown table (validation average accuracy in %, mean ± std over seeds)."""
    names = list(next(iter(payload["grid"].values())))
    lines = [
        "| lr | " + " | ".join(names) + " |",
        "|---|" + "---|" * len(names),
    ]
    for lr, row in payload["grid"].items():
        mark = " (selected)" if float(lr) == payload["selected_lr"] else ""
        cells = [f"{row[n]['mean'] * 100:.1f} ± {row[n]['std'] * 100:.1f}" for n in names]
        lines.append(f"| {float(lr):g}{mark} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _shape(config: dict[str, Any]) -> str:
    keys = ("epochs", "batch_size", "replay_batch_size", "buffer_size")
    if not all(k in config for k in keys):
        return ""
    return " (epochs {}, batch {}, replay {}, buffer {})".format(*(config[k] for k in keys))


def write_tune(out: str | Path, payload: dict[str, Any]) -> None:
    """Write ``tune.json`` (the payload) and ``tune.md`` (the table and how it was chosen) into ``out``."""
    path = Path(out)
    path.mkdir(parents=True, exist_ok=True)
    (path / "tune.json").write_text(json.dumps(payload, indent=1))
    split = payload["split"]
    text = (
        f"# Learning rate on a validation split: {payload['stream']} ({payload['scenario']}-incremental)\n\n"
        f"Validation split: {split['fraction']:.0%} of each class's training rows in every task "
        f"(numpy.random.default_rng({split['seed']})); the test split is not read. Protocol "
        f"`{payload['config']['protocol']}`{_shape(payload['config'])}, seeds {payload['seeds']}. "
        "Cells: validation average accuracy "
        f"in %, mean ± sample std over seeds. Selected by `{payload['select_by']}`: "
        f"**lr {payload['selected_lr']:g}**.\n\n" + format_table(payload) + "\n"
    )
    (path / "tune.md").write_text(text)
