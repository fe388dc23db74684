"""Summaries of a comparison: metrics.json, report.md and two plots.

``summarize`` is pure numpy over accuracy matrices; ``write_report`` writes, in ``out``:

* ``metrics.json``: ``schema_version``, ``stream``, ``scenario``, ``n_tasks``, ``config``,
  ``seeds``, ``seconds``, and ``strategies[name]`` with ``average_accuracy`` / ``forgetting`` /
  ``backward_transfer`` / ``learning_accuracy`` / ``forward_transfer`` as
  ``{"mean", "std", "values"}`` over seeds, ``accuracy_matrices`` (one ``T x T`` list per seed),
  ``baselines`` (random-init accuracy per task, per seed) and ``seconds`` per run; plus
  ``gap_closed`` (needs naive and joint) and ``vs_er`` (needs er), each ``{name: stats}``.
* ``report.md``: the same as tables.
* ``accuracy_matrices.png``: per strategy, the seed-mean accuracy matrix as a heatmap.
* ``accuracy_over_time.png``: per strategy, accuracy on each task after each training task.

Spreads are sample standard deviations over seeds (``ddof=1``; 0 with one seed).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from replaybank import metrics
from replaybank.cl.config import TrainConfig

__all__ = ["SCHEMA_VERSION", "summarize", "write_report"]

SCHEMA_VERSION = 1
METRICS = ("average_accuracy", "forgetting", "backward_transfer", "learning_accuracy", "forward_transfer")


def _stats(values: Sequence[float]) -> dict[str, Any]:
    v = np.asarray(values, dtype=np.float64)
    std = float(v.std(ddof=1)) if len(v) > 1 else 0.0
    return {"mean": float(v.mean()), "std": std, "values": [float(x) for x in v]}


def _per_run(accuracy: np.ndarray, baseline: np.ndarray) -> dict[str, float]:
    out = {
        "average_accuracy": metrics.average_accuracy(accuracy),
        "learning_accuracy": metrics.learning_accuracy(accuracy),
    }
    if len(accuracy) > 1:
        out["forgetting"] = metrics.forgetting(accuracy)
        out["backward_transfer"] = metrics.backward_transfer(accuracy)
        out["forward_transfer"] = metrics.forward_transfer(accuracy, baseline)
    return out


def summarize(
    matrices: Mapping[str, Sequence[np.ndarray]],
    baselines: Mapping[str, Sequence[np.ndarray]],
) -> dict[str, Any]:
    """Per-strategy metric statistics over seeds, and the paired comparisons.

    Args:
        matrices: ``{strategy: [accuracy matrix per seed]}``, seeds in the same order everywhere.
        baselines: ``{strategy: [random-init accuracies per seed]}``.

    Returns:
        ``{"strategies": {name: {metric: {"mean", "std", "values"}}}, "gap_closed": {...},
        "vs_er": {...}}``. ``gap_closed[s]`` is, per seed, ``(AA_s - AA_naive) / (AA_joint -
        AA_naive)`` (present when naive and joint ran and joint beats naive on every seed);
        ``vs_er[s]`` is the per-seed difference ``AA_s - AA_er``.

    Example:
        >>> eye, tri = np.eye(2), np.tril(np.ones((2, 2)))
        >>> half = np.array([[1.0, 0.0], [0.5, 1.0]])
        >>> m = {"naive": [eye], "joint": [tri], "er": [half]}
        >>> summarize(m, {k: [np.zeros(2)] for k in m})["gap_closed"]["er"]["mean"]
        0.5
    """
    strategies: dict[str, Any] = {}
    aa: dict[str, np.ndarray] = {}
    for name, runs in matrices.items():
        per_seed = [_per_run(np.asarray(r), np.asarray(b)) for r, b in zip(runs, baselines[name], strict=True)]
        strategies[name] = {key: _stats([p[key] for p in per_seed]) for key in per_seed[0]}
        aa[name] = np.array([p["average_accuracy"] for p in per_seed])
    summary: dict[str, Any] = {"strategies": strategies}
    if "naive" in aa and "joint" in aa and len(aa["naive"]) == len(aa["joint"]):
        gap = aa["joint"] - aa["naive"]
        if np.all(gap > 0):
            summary["gap_closed"] = {
                name: _stats((values - aa["naive"]) / gap)
                for name, values in aa.items()
                if len(values) == len(gap)
            }
    if "er" in aa:
        summary["vs_er"] = {
            name: _stats(values - aa["er"])
            for name, values in aa.items()
            if name != "er" and len(values) == len(aa["er"])
        }
    return summary


def _fmt(stat: Mapping[str, Any] | None, scale: float = 100.0) -> str:
    if stat is None:
        return "-"
    return f"{stat['mean'] * scale:.1f} ± {stat['std'] * scale:.1f}"


def _markdown(payload: Mapping[str, Any]) -> str:
    config = payload["config"]
    lines = [
        f"# Continual-learning comparison: {payload['stream']} ({payload['scenario']}-incremental)",
        "",
        f"{payload['n_tasks']} tasks; protocol `{config['protocol']}` (epochs {config['epochs']}, "
        f"batch {config['batch_size']}, replay minibatch {config['replay_batch_size']}, "
        f"buffer {config['buffer_size']}, SGD lr {config['lr']}, MLP hidden {list(config['hidden'])}); "
        f"seeds {payload['seeds']}; {payload['seconds']:.0f} s in all.",
        "",
        "Accuracies in %, mean ± sample std over seeds. Forgetting is the best earlier accuracy "
        "minus the final one (Chaudhry et al. 2018), negative when a task ends above its earlier best; "
        "BWT is final minus just-learned (Lopez-Paz & Ranzato 2017).",
        "",
        "| strategy | average accuracy | forgetting | backward transfer | learning accuracy | "
        "gap closed (naive→joint) | Δ vs ER | s/run |",
        "|---|---|---|---|---|---|---|---|",
    ]
    gap = payload["gap_closed"]
    vs_er = payload["vs_er"]
    for name, stats in payload["strategies"].items():
        seconds = np.mean(stats["seconds"])
        lines.append(
            f"| {name} | {_fmt(stats['average_accuracy'])} | {_fmt(stats.get('forgetting'))} | "
            f"{_fmt(stats.get('backward_transfer'))} | {_fmt(stats['learning_accuracy'])} | "
            f"{_fmt(gap.get(name))} | {_fmt(vs_er.get(name))} | {seconds:.1f} |"
        )
    lines += [
        "",
        "Gap closed: per seed, (AA − AA_naive) / (AA_joint − AA_naive), in %. "
        "Δ vs ER: per-seed difference of average accuracy, in points.",
        "",
        "![accuracy matrices](accuracy_matrices.png)",
        "",
        "![accuracy over time](accuracy_over_time.png)",
        "",
    ]
    return "\n".join(lines)


def _plots(payload: Mapping[str, Any], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = payload["strategies"]
    names = list(runs)
    n_tasks = payload["n_tasks"]
    cols = min(len(names), 3)
    rows = -(-len(names) // cols)

    fig, axes = plt.subplots(rows, cols, figsize=(3.6 * cols, 3.3 * rows), squeeze=False)
    for ax, name in zip(axes.flat, names, strict=False):
        mean = np.mean(runs[name]["accuracy_matrices"], axis=0)
        ax.imshow(mean, vmin=0, vmax=1, cmap="viridis")
        for i in range(n_tasks):
            for j in range(n_tasks):
                ax.text(j, i, f"{mean[i, j] * 100:.0f}", ha="center", va="center", fontsize=7,
                        color="white" if mean[i, j] < 0.6 else "black")
        ax.set_title(name)
        ax.set_xlabel("evaluated on task")
        ax.set_ylabel("trained through task")
        ax.set_xticks(range(n_tasks))
        ax.set_yticks(range(n_tasks))
    for ax in axes.flat[len(names):]:
        ax.axis("off")
    fig.suptitle(f"{payload['stream']}: accuracy matrix (mean over {len(payload['seeds'])} seeds)")
    fig.tight_layout()
    fig.savefig(out / "accuracy_matrices.png", dpi=110)
    plt.close(fig)

    fig, axes = plt.subplots(rows, cols, figsize=(3.6 * cols, 3.0 * rows), squeeze=False, sharey=True)
    steps = np.arange(n_tasks)
    for ax, name in zip(axes.flat, names, strict=False):
        stack = np.asarray(runs[name]["accuracy_matrices"])
        mean, std = stack.mean(axis=0), stack.std(axis=0)
        for j in range(n_tasks):
            ax.plot(steps[j:], mean[j:, j], marker="o", ms=3, label=f"task {j}")
            ax.fill_between(steps[j:], (mean - std)[j:, j], (mean + std)[j:, j], alpha=0.2)
        ax.set_title(name)
        ax.set_xlabel("trained through task")
        ax.set_ylim(0, 1.02)
        ax.set_xticks(steps)
    axes[0, 0].set_ylabel("test accuracy")
    axes.flat[0].legend(fontsize=7)
    for ax in axes.flat[len(names):]:
        ax.axis("off")
    fig.suptitle(f"{payload['stream']}: per-task accuracy over time (mean ± std)")
    fig.tight_layout()
    fig.savefig(out / "accuracy_over_time.png", dpi=110)
    plt.close(fig)


def write_report(
    out: str | Path,
    *,
    stream: str,
    scenario: str,
    n_tasks: int,
    config: TrainConfig,
    seeds: Sequence[int],
    runs: Mapping[str, Sequence[Any]],
) -> dict[str, Any]:
    """Write metrics.json, report.md and the two PNGs into ``out`` (created if missing).

    Args:
        runs: ``{strategy: [RunResult per seed]}`` as :func:`replaybank.cl.runner.run_many` returns.

    Returns:
        The payload written to metrics.json.
    """
    path = Path(out)
    path.mkdir(parents=True, exist_ok=True)
    matrices = {name: [r.accuracy for r in rs] for name, rs in runs.items()}
    baselines = {name: [r.baseline for r in rs] for name, rs in runs.items()}
    summary = summarize(matrices, baselines)
    payload: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "stream": stream,
        "scenario": scenario,
        "n_tasks": n_tasks,
        "config": asdict(config),
        "seeds": list(seeds),
        "seconds": float(sum(r.seconds for rs in runs.values() for r in rs)),
        "strategies": {
            name: {
                **summary["strategies"][name],
                "accuracy_matrices": [r.accuracy.tolist() for r in rs],
                "baselines": [r.baseline.tolist() for r in rs],
                "seconds": [r.seconds for r in rs],
            }
            for name, rs in runs.items()
        },
        "gap_closed": summary.get("gap_closed", {}),
        "vs_er": summary.get("vs_er", {}),
    }
    (path / "metrics.json").write_text(json.dumps(payload, indent=1))
    (path / "report.md").write_text(_markdown(payload))
    _plots(payload, path)
    return payload
