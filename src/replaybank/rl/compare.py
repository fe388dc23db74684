"""``replaybank rl compare``: DQN with each replay scheme over several seeds, curves with 95% CIs.

Every (env, scheme, seed) run is an ordinary ``dqn.train`` run in ``DIR/<env>/<scheme>/seed<k>``
(so each has its own ``metrics.json``, ``curve.csv`` and ``curve.png``); runs whose
``metrics.json`` already exists are reused, so an interrupted comparison resumes. The summary is
``DIR/compare.json``, ``DIR/compare.md`` and ``DIR/curves_<env>.png``: mean greedy evaluation
return against environment steps, with a 95% Student-t confidence band over seeds. A run that
stopped early because it solved the env keeps its last evaluation for the later steps of the plot
(marked in the table), so the band shows "solved" rather than a gap.

    replaybank rl compare --envs CartPole-v1,MinAtar/Breakout-v1 --seeds 3 --jobs 2 --out runs/rl/compare
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, cast

import numpy as np

from replaybank.errors import ReplayBankError
from replaybank.rl.dqn import REPLAY_NAMES, Args, ReplayName, check_args
from replaybank.workers import worker_pool

# DQN settings per environment family, on top of ``dqn.Args`` defaults (which suit CartPole).
# MinAtar: the MinAtar paper's DQN settings (batch 32, lr 2.5e-4, target copy every 1,000, start at
# 5,000), with epsilon decayed over 25k steps instead of 100k to fit a short budget.
ENV_OVERRIDES: dict[str, dict[str, Any]] = {
    "MinAtar/": {"learning_rate": 2.5e-4, "eps_steps": 25_000, "eps_end": 0.05, "learning_starts": 5_000,
                 "target_update": 1_000, "buffer_size": 100_000, "train_frequency": 1, "hidden": 128,
                 "batch_size": 32},
}

# two-sided 97.5% Student-t quantiles by degrees of freedom (1..30); beyond, the normal 1.96
_T975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
         2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
         2.052, 2.048, 2.045, 2.042]


@dataclass
class CompareArgs:
    """Which envs, schemes and seeds to run, and with what budget."""

    envs: str = field(default="CartPole-v1,MinAtar/Breakout-v1", metadata={"help": "comma-separated gymnasium ids"})
    schemes: str = field(default=",".join(REPLAY_NAMES), metadata={"help": "comma-separated replay schemes"})
    seeds: int = field(default=3, metadata={"help": "seeds 0..N-1"})
    total_steps: int = field(default=100_000, metadata={"help": "env steps per CartPole run"})
    minatar_steps: int = field(default=50_000, metadata={"help": "env steps per MinAtar run"})
    eval_every: int = field(default=5_000, metadata={"help": "steps between greedy evaluations"})
    eval_episodes: int = field(default=10, metadata={"help": "episodes per evaluation"})
    stop_when_solved: bool = field(default=True, metadata={"help": "stop a run at its env's reward threshold"})
    jobs: int = field(default=1, metadata={"help": "runs in parallel (processes, one thread each)"})
    learning_starts: int = field(default=0, metadata={"help": "override dqn learning_starts (0 = env default)"})
    out: str = field(default="runs/rl/compare", metadata={"help": "output directory"})


def t_quantile(df: int) -> float:
    """97.5% quantile of Student's t with ``df`` degrees of freedom (1.96 beyond 30)."""
    return _T975[df - 1] if 1 <= df <= len(_T975) else 1.96


def mean_ci(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean over axis 0 and the half-width of its 95% t confidence interval (0 for one seed).

    >>> m, h = mean_ci(np.array([[1.0, 2.0], [3.0, 2.0]]))
    >>> m.tolist(), h.round(2).tolist()
    ([2.0, 2.0], [12.71, 0.0])
    """
    n = len(values)
    mean = values.mean(axis=0)
    if n < 2:
        return mean, np.zeros_like(mean)
    return mean, t_quantile(n - 1) * values.std(axis=0, ddof=1) / math.sqrt(n)


def plan(args: CompareArgs) -> list[Args]:
    """The DQN runs of the comparison, validated before anything starts."""
    envs = [e.strip() for e in args.envs.split(",") if e.strip()]
    schemes = [s.strip() for s in args.schemes.split(",") if s.strip()]
    if not envs or not schemes:
        raise ReplayBankError("compare needs at least one env and one scheme")
    if args.seeds < 1 or args.jobs < 1:
        raise ReplayBankError(f"seeds and jobs must be >= 1, got seeds={args.seeds}, jobs={args.jobs}")
    runs = []
    for env in envs:
        overrides: dict[str, Any] = {}
        for prefix, values in ENV_OVERRIDES.items():
            if env.startswith(prefix):
                overrides.update(values)
        steps = args.minatar_steps if env.startswith("MinAtar/") else args.total_steps
        if args.learning_starts:
            overrides["learning_starts"] = args.learning_starts
        for scheme in schemes:
            for seed in range(args.seeds):
                run = replace(
                    Args(), env_id=env, replay=cast(ReplayName, scheme), seed=seed, total_steps=steps, eval_every=args.eval_every,
                    eval_episodes=args.eval_episodes, stop_when_solved=args.stop_when_solved,
                    out=str(Path(args.out) / env.replace("/", "_") / scheme / f"seed{seed}"), **overrides,
                )
                check_args(run)
                runs.append(run)
    return runs


def _train_one(run: Args) -> dict[str, Any]:
    import torch

    from replaybank.rl.dqn import train

    torch.set_num_threads(1)
    return train(run)


def run(args: CompareArgs) -> dict[str, Any]:
    """Run (or reuse) every DQN run of ``plan(args)``, then summarise and plot."""
    from replaybank.rl.dqn import make_env

    runs = plan(args)
    for env in dict.fromkeys(r.env_id for r in runs):
        make_env(env).close()  # unknown env ids fail here, before hours of other runs
    todo = [r for r in runs if not (Path(r.out) / "metrics.json").exists()]
    if args.jobs == 1:
        for r in todo:
            _train_one(r)
    else:
        with worker_pool(args.jobs, spawn=False) as pool:  # workers end with this process
            list(pool.map(_train_one, todo))
    return summarise(args, runs)


def _load(run: Args) -> tuple[dict[str, Any], list[dict[str, float]]]:
    out = Path(run.out)
    metrics = json.loads((out / "metrics.json").read_text())
    lines = (out / "curve.csv").read_text().split()
    header = lines[0].split(",")
    curve = [dict(zip(header, map(float, line.split(",")))) for line in lines[1:]]
    return metrics, curve


def summarise(args: CompareArgs, runs: list[Args]) -> dict[str, Any]:
    """``compare.json``, ``compare.md`` and one curve plot per env from the runs' files."""
    table: dict[str, dict[str, Any]] = {}
    curves: dict[str, dict[str, np.ndarray]] = {}
    for r in runs:
        metrics, curve = _load(r)
        row = table.setdefault(r.env_id, {}).setdefault(r.replay, {
            "seeds": [], "final_eval_return": [], "env_steps": [], "solved_at_step": [], "replay_time_share": [],
        })
        row["seeds"].append(r.seed)
        row["final_eval_return"].append(metrics["final_eval_return"])
        row["env_steps"].append(metrics["env_steps"])
        row["solved_at_step"].append(metrics["solved_at_step"])
        row["replay_time_share"].append(round(metrics["replay_time_share"], 4))
        grid = np.arange(r.eval_every, r.total_steps + 1, r.eval_every)
        steps = np.array([c["env_step"] for c in curve])
        values = np.array([c["eval_return"] for c in curve])
        # carry the last evaluation forward past an early stop (the run had solved the env)
        filled = values[np.minimum(np.searchsorted(steps, grid), len(values) - 1)]
        curves.setdefault(r.env_id, {}).setdefault(r.replay, np.zeros((0, len(grid))))
        curves[r.env_id][r.replay] = np.vstack([curves[r.env_id][r.replay], filled])
    for env_rows in table.values():
        for row in env_rows.values():
            solved = [s for s in row["solved_at_step"] if s is not None]
            row["solved"] = f"{len(solved)}/{len(row['seeds'])}"
            row["mean_final_eval_return"] = float(np.mean(row["final_eval_return"]))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    payload = {"args": asdict(args), "table": table}
    (out / "compare.json").write_text(json.dumps(payload, indent=2) + "\n")
    _write_markdown(out / "compare.md", table)
    for env, by_scheme in curves.items():
        _plot(out / f"curves_{env.replace('/', '_')}.png", env, by_scheme, args.eval_every)
    return payload


def _write_markdown(path: Path, table: dict[str, dict[str, Any]]) -> None:
    lines = ["| env | replay | seeds | final_eval_return per seed | solved at step per seed | solved | replay share |",
             "|---|---|---|---|---|---|---|"]
    for env, rows in table.items():
        for scheme, row in rows.items():
            finals = ", ".join(f"{v:.1f}" for v in row["final_eval_return"])
            solved = ", ".join("-" if s is None else f"{s:,}" for s in row["solved_at_step"])
            share = f"{np.mean(row['replay_time_share']):.1%}"
            lines.append(f"| {env} | {scheme} | {len(row['seeds'])} | {finals} | {solved} | {row['solved']} | {share} |")
    path.write_text("\n".join(lines) + "\n")


def _plot(path: Path, env: str, by_scheme: dict[str, np.ndarray], every: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4))
    for scheme, values in by_scheme.items():
        x = every * np.arange(1, values.shape[1] + 1)
        mean, half = mean_ci(values)
        ax.plot(x, mean, label=f"{scheme} (n={len(values)})")
        ax.fill_between(x, mean - half, mean + half, alpha=0.2)
    ax.set_xlabel("environment steps")
    ax.set_ylabel("greedy eval return (mean, 95% CI over seeds)")
    ax.set_title(f"DQN replay schemes on {env}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
