"""Writing the run's results: ``metrics.json``, ``report.md`` and ``losses.png``.

:func:`effect` is the pure summary of the three arms (rise of the held-out general loss, its ratio
between arms, the domain-loss gap); the writers only format what they are given.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

METRICS_SCHEMA_VERSION = 1
PLOT_NAME = "losses.png"


def effect(arms: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Compare the arms against the issue's three criteria.

    Returns:
        ``naive_general_rise`` and ``rehearsal_general_rise`` (loss minus base), ``rise_ratio``
        (rehearsal rise / naive rise; ``None`` when naive did not rise), ``domain_loss_ratio``
        (rehearsal / naive domain loss) and a ``criteria`` dict of booleans.

    Example:
        >>> e = effect({"base": {"general_loss": 2.0, "domain_loss": 5.0},
        ...             "naive": {"general_loss": 2.6, "domain_loss": 0.20},
        ...             "rehearsal": {"general_loss": 2.1, "domain_loss": 0.205}})
        >>> round(e["rise_ratio"], 3), e["criteria"]["rise_at_most_a_third"]
        (0.167, True)
    """
    out: dict[str, Any] = {}
    base = arms.get("base")
    naive = arms.get("naive")
    reh = arms.get("rehearsal")
    if base and naive:
        out["naive_general_rise"] = naive["general_loss"] - base["general_loss"]
    if base and reh:
        out["rehearsal_general_rise"] = reh["general_loss"] - base["general_loss"]
    if "naive_general_rise" in out and "rehearsal_general_rise" in out:
        rise = out["naive_general_rise"]
        out["rise_ratio"] = out["rehearsal_general_rise"] / rise if rise > 0 else None
    if naive and reh:
        out["domain_loss_ratio"] = reh["domain_loss"] / naive["domain_loss"]
    criteria = {}
    if "naive_general_rise" in out:
        # "Measurably": more than 2% of the base loss, far above the run-to-run noise we saw.
        criteria["naive_raises_general"] = out["naive_general_rise"] > 0.02 * base["general_loss"]  # type: ignore[index]
    if out.get("rise_ratio") is not None:
        criteria["rise_at_most_a_third"] = out["rise_ratio"] <= 1 / 3
    if "domain_loss_ratio" in out:
        # Rehearsal must not cost domain skill: at most 5% above naive's loss (lower is fine).
        criteria["domain_loss_at_most_5pct_above_naive"] = out["domain_loss_ratio"] <= 1.05
    out["criteria"] = criteria
    return out


def write_metrics(path: Path, metrics: dict[str, Any]) -> None:
    """Write ``metrics.json`` (sorted keys, 2-space indent)."""
    path.write_text(json.dumps(metrics, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def plot_losses(path: Path, metrics: dict[str, Any]) -> None:
    """Three panels: training loss per step, held-out general loss, held-out domain loss."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    arms = metrics["arms"]
    base = arms.get("base", {})
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    colors = {"naive": "tab:red", "rehearsal": "tab:blue"}
    for arm, color in colors.items():
        if arm not in arms:
            continue
        steps = [s for gen in arms[arm]["generations"] for s in gen["train"]["steps"]]
        x = list(range(1, len(steps) + 1))
        axes[0].plot(x, [s["domain_loss"] for s in steps], color=color, label=f"{arm}: domain rows")
        if any(s["rehearsal_loss"] is not None for s in steps):
            pts = [(i, s["rehearsal_loss"]) for i, s in zip(x, steps, strict=True) if s["rehearsal_loss"] is not None]
            axes[0].plot(*zip(*pts, strict=True), color=color, ls="--", marker=".", label=f"{arm}: rehearsal rows")
        curve = arms[arm]["curve"]
        for ax, key in ((axes[1], "general_loss"), (axes[2], "domain_loss")):
            xs = [0] + [c["step"] for c in curve]
            ys = [base.get(key, float("nan"))] + [c[key] for c in curve]
            ax.plot(xs, ys, marker="o", color=color, label=arm)
    for ax, key in ((axes[1], "general_loss"), (axes[2], "domain_loss")):
        if key in base:
            ax.axhline(base[key], color="gray", ls=":", label="base")
    axes[0].set_title("training loss per step")
    axes[1].set_title("held-out general loss (Python docs)")
    axes[2].set_title("held-out domain loss")
    for ax in axes:
        ax.set_xlabel("optimizer step")
        ax.set_ylabel("nats / token")
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _fmt(x: Any, digits: int = 4) -> str:
    if x is None:
        return "n/a"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, float):
        return f"{x:.{digits}f}"
    return str(x)


def write_report(path: Path, metrics: dict[str, Any]) -> None:
    """Write ``report.md``: the arms table, the effect, mixing, data and timings."""
    arms = metrics["arms"]
    eff = metrics["effect"]
    lines = [
        "# replaybank run report",
        "",
        f"Base model: `{metrics['config']['training']['base_model']}`, device {metrics['environment']['device']}, "
        f"wall time {metrics['wall_seconds']:.1f} s (1-minute load average {metrics['environment'].get('loadavg_1min_start')} "
        f"at start, {metrics['environment'].get('loadavg_1min_end')} at end, on {os.cpu_count()} CPUs).",
        "",
        "| arm | held-out general loss | held-out domain loss | probe exact match | probe answer log-prob | train tokens | train s |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, arm in arms.items():
        train = arm.get("train_total", {})
        lines.append(
            f"| {name} | {_fmt(arm['general_loss'])} | {_fmt(arm['domain_loss'])} | "
            f"{_fmt(arm['probe_score'], 3)} | {_fmt(arm.get('probe_logprob'))} | "
            f"{_fmt(train.get('tokens'))} | {_fmt(train.get('seconds'), 1)} |"
        )
    lines += ["", "## Effect", ""]
    lines.append(f"- naive rise of the general loss: {_fmt(eff.get('naive_general_rise'))}")
    lines.append(f"- rehearsal rise of the general loss: {_fmt(eff.get('rehearsal_general_rise'))}")
    lines.append(f"- rise ratio (rehearsal / naive): {_fmt(eff.get('rise_ratio'), 3)} (target <= 0.333)")
    lines.append(f"- domain loss ratio (rehearsal / naive): {_fmt(eff.get('domain_loss_ratio'), 3)} (target <= 1.05)")
    for key, ok in eff.get("criteria", {}).items():
        lines.append(f"- {key.replace('_', ' ')}: {_fmt(ok)}")
    mix = metrics.get("mixing", {})
    lines += [
        "",
        "## Mixing",
        "",
        f"- rehearsal share of every batch: {_fmt(mix.get('share'), 4)} ({mix.get('how', '')})",
        f"- rehearsal rows per batch: {mix.get('rows_per_batch')}",
        f"- measured share of rows: {_fmt(mix.get('measured_row_share'), 4)}, of tokens: {_fmt(mix.get('measured_token_share'), 4)}",
        "",
        "## Data",
        "",
    ]
    data = metrics.get("data", {})
    for key in ("general_pool_rows", "general_eval_rows", "domain_train_rows", "domain_eval_rows", "probe_items", "dropped", "overlap_removed"):
        if key in data:
            lines.append(f"- {key.replace('_', ' ')}: {data[key]}")
    lines += ["", "## Timings (seconds)", ""]
    for key, value in metrics.get("timings", {}).items():
        lines.append(f"- {key}: {_fmt(value, 1)}")
    lines += ["", f"![losses]({PLOT_NAME})", ""]
    path.write_text("\n".join(lines), encoding="utf-8")
