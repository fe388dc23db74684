"""The run's plots: behaviour per arm (``behaviour.png``), losses (``losses.png``), for arms
steered by a replay controller their mixture over time (``mixture.png``), and for arms that chose
an operating point their frontier (``frontier.png``).

matplotlib with the Agg backend, imported inside the functions; only draws what
:func:`replaybank.llm.report.metrics.build_metrics` assembled.
"""

from __future__ import annotations

from pathlib import Path

from replaybank.llm.results import RunResult

PLOT_NAME = "losses.png"
BEHAVIOUR_PLOT = "behaviour.png"
MIXTURE_PLOT = "mixture.png"
FRONTIER_PLOT = "frontier.png"

BARS = [
    ("retention_conversation", "conversation\nretention"),
    ("retention_instruction", "instruction\nretention"),
    ("retention_arithmetic", "arithmetic\nretention"),
    ("retention_code", "code\nretention"),
    ("retention_open", "open: agreement\nwith base"),
    ("leakage", "tool-call\nleakage"),
    ("domain_exact_match", "domain exact\nmatch"),
]
COLORS = ["tab:gray", "tab:red", "tab:blue", "tab:green", "tab:purple", "tab:orange", "tab:brown", "tab:olive"]


def arm_names(metrics: RunResult) -> list[str]:
    """The arms to show: every arm of the run."""
    return list(metrics.arms)


def plot_behaviour(path: Path, metrics: RunResult) -> None:
    """Bars per family per arm (seed mean), error bars = std over seeds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    arms = arm_names(metrics)
    fig, ax = plt.subplots(figsize=(max(8.0, 1.6 * len(BARS) * max(1, len(arms)) / 3), 4.4))
    width = 0.8 / max(1, len(arms))
    for i, arm in enumerate(arms):
        summary = metrics.arms[arm].summary
        xs, ys, es = [], [], []
        for j, (key, _) in enumerate(BARS):
            if key in summary:
                xs.append(j + (i - (len(arms) - 1) / 2) * width)
                ys.append(summary[key].mean)
                es.append(summary[key].std or 0.0)
        ax.bar(xs, ys, width, yerr=es, capsize=3, color=COLORS[i % len(COLORS)], label=arm)
    ax.set_xticks(range(len(BARS)), [label for _, label in BARS])
    ax.axhline(1.0, color="black", lw=0.6, ls=":")
    ax.axhline(0.9, color="gray", lw=0.6, ls="--")
    n = len(metrics.seeds or [0])
    ax.set_title(f"behaviour kept, per arm (mean of {n} seed{'s' if n > 1 else ''}; bars: std)")
    ax.set_ylim(0, 1.15)
    ax.legend(fontsize=8, ncol=min(len(arms), 5), loc="upper center", bbox_to_anchor=(0.5, -0.2))
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_losses(path: Path, metrics: RunResult) -> None:
    """Training loss per step (first seed), held-out general and domain loss at the evaluation points."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    arms = metrics.arms
    base = arms["base"].summary if "base" in arms else {}
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    for i, arm in enumerate(arm_names(metrics)):
        if arm == "base":
            continue
        color = COLORS[i % len(COLORS)]
        steps = [s for gen in arms[arm].generations or [] for s in gen.train.steps]
        x = list(range(1, len(steps) + 1))
        axes[0].plot(x, [s.domain_loss for s in steps], color=color, label=f"{arm}: domain rows")
        pts = [(k, s.rehearsal_loss) for k, s in zip(x, steps, strict=True) if s.rehearsal_loss is not None]
        if pts:
            axes[0].plot(*zip(*pts, strict=True), color=color, ls="--", marker=".", label=f"{arm}: rehearsal rows")
        curve = arms[arm].curve or []
        for ax, key in ((axes[1], "general_loss"), (axes[2], "domain_loss")):
            xs = [0] + [c.step for c in curve]
            ys = [base[key].mean if key in base else float("nan")] + [getattr(c.losses, key) for c in curve]
            ax.plot(xs, ys, marker="o", color=color, label=arm)
    for ax, key in ((axes[1], "general_loss"), (axes[2], "domain_loss")):
        if key in base:
            ax.axhline(base[key].mean, color="gray", ls=":", label="base")
    axes[0].set_title("training loss per step (first seed)")
    axes[1].set_title("held-out general text loss")
    axes[2].set_title("held-out domain loss")
    for ax in axes:
        ax.set_xlabel("optimizer step")
        ax.set_ylabel("nats / token")
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_mixture(path: Path, metrics: RunResult) -> bool:
    """The share of every source after each evaluation, one panel per steered arm (first seed);
    generation boundaries dotted. Nothing is written (False) when no arm has a controller."""
    steered = [a for a, v in metrics.arms.items() if v.mixture]
    if not steered:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(steered), figsize=(5.2 * len(steered), 3.8), squeeze=False)
    for ax, arm in zip(axes[0], steered, strict=True):
        traj = metrics.arms[arm].mixture or []
        names = list(dict.fromkeys(n for e in traj for n in e.shares if n != "domain"))
        xs = [e.step for e in traj]
        for k, n in enumerate(names):
            ax.step(xs, [e.shares.get(n, 0.0) for e in traj], where="post", marker=".", color=COLORS[(k + 1) % len(COLORS)], label=n)
        rehearsal = [1.0 - e.shares["domain"] for e in traj]
        ax.step(xs, rehearsal, where="post", color="black", lw=1.2, label="all rehearsal")
        for prev, e in zip(traj, traj[1:], strict=False):
            if e.generation != prev.generation:
                ax.axvline(e.step, color="gray", ls=":", lw=0.8)
        ax.set_title(f"{arm} ({metrics.arms[arm].controller or ''})")
        ax.set_xlabel("optimizer step")
        ax.set_ylabel("share of every batch")
        ax.set_ylim(0, max(0.55, max(rehearsal) + 0.05))
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    fig.suptitle("rehearsal mixture over time, per steered arm (first seed)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def plot_frontier(path: Path, metrics: RunResult) -> bool:
    """Validation domain exact match against min validation retention, one panel per arm that chose
    an operating point (every seed's points; the chosen ones ringed, the floor dashed). Nothing is
    written (False) when no arm chose one."""
    arms = [a for a, v in metrics.arms.items() if v.frontier]
    if not arms:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(arms), figsize=(5.2 * len(arms), 4.0), squeeze=False)
    for ax, arm in zip(axes[0], arms, strict=True):
        for k, fr in enumerate(metrics.arms[arm].frontier or []):
            color = COLORS[k % len(COLORS)]
            for profile, marker in (("uniform", "o"), ("depth", "s"), ("checkpoint", "^")):
                pts = [p for p in fr.points if (p.made_by if p.made_by == "checkpoint" else p.profile) == profile
                       and p.min_retention is not None]
                ax.plot([p.min_retention for p in pts], [p.domain_exact_match for p in pts], marker=marker, ls="-",
                        lw=0.8, color=color, label=f"seed {metrics.seeds[k] if k < len(metrics.seeds) else k} {profile}" if pts else None)
                for p in pts:
                    ax.annotate(p.label(), (p.min_retention, p.domain_exact_match),
                                fontsize=6, xytext=(3, 3), textcoords="offset points")
            if fr.chosen is not None and fr.points[fr.chosen].min_retention is not None:
                c = fr.points[fr.chosen]
                ax.scatter([c.min_retention], [c.domain_exact_match], s=160, facecolors="none", edgecolors="red", lw=1.5,
                           label="chosen" if k == 0 else None, zorder=3)
            floor = min(fr.floor.values()) if fr.floor else None
            if floor is not None and k == 0:
                ax.axvline(floor, color="gray", ls="--", lw=1, label=f"floor {floor:g}")
        ax.set_title(arm)
        ax.set_xlabel("min validation retention over families")
        ax.set_ylabel("validation domain exact match")
        ax.legend(fontsize=6)
        ax.grid(alpha=0.3)
    fig.suptitle("operating points per arm (validation data); ringed: the chosen point", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
