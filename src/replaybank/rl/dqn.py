"""A reference DQN on replaybank: double DQN, n-step returns, prioritized importance weights.

One file, read top to bottom (after CleanRL's ``dqn.py``): ``Args`` -> the n-step window that turns
steps into transitions -> the Q-network -> ``train`` (the loop) -> evaluation and output files.

    replaybank rl dqn --env-id CartPole-v1 --replay per --seed 0 --out runs/rl/dqn

writes ``DIR/curve.csv`` (one row per evaluation), ``DIR/curve.png`` and ``DIR/metrics.json``
(``final_eval_return``: mean greedy return over ``eval_episodes`` episodes of the final network;
``env_steps``; ``solved_at_step``; ``replay_time_share``: share of the training-loop time spent in
``sample`` + ``update_priorities``).

torch and gymnasium are imported inside ``train``; importing this module needs only numpy.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from replaybank import (
    Prioritized,
    PrioritizedReshuffled,
    ReplayBuffer,
    Reshuffled,
    Uniform,
    nstep_returns,
)
from replaybank.errors import ReplayBankError

ReplayName = Literal["uniform", "per", "reshuffled", "per-reshuffled"]
REPLAY_NAMES: tuple[str, ...] = ("uniform", "per", "reshuffled", "per-reshuffled")
MAX_EPISODE_STEPS = 10_000  # time limit for envs registered without one (truncation, not failure)


@dataclass
class Args:
    """Every knob of a DQN run. Defaults solve CartPole-v1 in well under 100k steps."""

    env_id: str = field(default="CartPole-v1", metadata={"help": "gymnasium id; MinAtar/<Game>-v1 works too"})
    replay: ReplayName = field(default="uniform", metadata={"help": "uniform | per | reshuffled | per-reshuffled"})
    seed: int = field(default=0, metadata={"help": "seeds the environment, the network and the buffer"})
    total_steps: int = field(default=100_000, metadata={"help": "environment steps (the budget)"})
    buffer_size: int = field(default=50_000, metadata={"help": "replay capacity in transitions"})
    batch_size: int = field(default=128, metadata={"help": "transitions per gradient step"})
    learning_rate: float = field(default=5e-4, metadata={"help": "Adam step size"})
    gamma: float = field(default=0.99, metadata={"help": "discount"})
    n_step: int = field(default=3, metadata={"help": "steps in the bootstrapped return"})
    hidden: int = field(default=128, metadata={"help": "width of the hidden layers"})
    learning_starts: int = field(default=1_000, metadata={"help": "steps of pure exploration before learning"})
    train_frequency: int = field(default=1, metadata={"help": "environment steps per gradient step"})
    target_update: int = field(default=500, metadata={"help": "gradient steps between target-network copies"})
    eps_start: float = field(default=1.0, metadata={"help": "initial epsilon of epsilon-greedy"})
    eps_end: float = field(default=0.02, metadata={"help": "final epsilon"})
    eps_steps: int = field(default=10_000, metadata={"help": "steps over which epsilon decays linearly"})
    alpha: float = field(default=0.6, metadata={"help": "priority exponent (per, per-reshuffled)"})
    beta: float = field(default=0.4, metadata={"help": "initial importance exponent, annealed to 1"})
    eval_every: int = field(default=5_000, metadata={"help": "steps between greedy evaluations"})
    eval_episodes: int = field(default=10, metadata={"help": "episodes per evaluation"})
    stop_when_solved: bool = field(
        default=True, metadata={"help": "stop at the first evaluation reaching the env's reward threshold"}
    )
    out: str = field(default="runs/rl/dqn", metadata={"help": "output directory"})


def check_args(args: Args) -> None:
    """Raise ``ReplayBankError`` naming the bad field; runs before anything heavy is imported."""
    if args.replay not in REPLAY_NAMES:
        raise ReplayBankError(f"unknown replay {args.replay!r}; valid replay schemes: {', '.join(REPLAY_NAMES)}")
    for name in ("total_steps", "buffer_size", "batch_size", "n_step", "hidden", "train_frequency",
                 "target_update", "eval_every", "eval_episodes"):
        if getattr(args, name) <= 0:
            raise ReplayBankError(f"{name} must be positive, got {getattr(args, name)!r}")
    if not 0.0 <= args.gamma <= 1.0:
        raise ReplayBankError(f"gamma must lie in [0, 1], got {args.gamma!r}")
    if args.learning_starts < 0:
        raise ReplayBankError(f"learning_starts must be >= 0, got {args.learning_starts!r}")


def make_env(env_id: str) -> Any:
    """``gymnasium.make(env_id)`` with MinAtar registered; unknown ids list the valid ones."""
    import gymnasium as gym

    if not any(name.startswith("MinAtar/") for name in gym.registry):
        try:
            import minatar.gym

            minatar.gym.register_envs()
        except ImportError:  # MinAtar is optional; classic-control ids still work
            pass
    if env_id not in gym.registry:
        import difflib

        ids = sorted(gym.registry)
        close = difflib.get_close_matches(env_id, ids, n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise ReplayBankError(f"unknown env {env_id!r}{hint}; valid envs: {', '.join(ids)}")
    # MinAtar ids have no time limit, and a good Breakout policy never loses the ball
    limit = None if gym.spec(env_id).max_episode_steps else MAX_EPISODE_STEPS
    env = gym.make(env_id, max_episode_steps=limit)
    if not hasattr(env.action_space, "n"):
        raise ReplayBankError(f"env {env_id!r} has action space {env.action_space}; DQN needs Discrete")
    return env


def make_sampler(replay: str, alpha: float, beta: float) -> Any:
    """The replaybank sampler behind each ``--replay`` name."""
    if replay == "uniform":
        return Uniform()
    if replay == "reshuffled":
        return Reshuffled()
    if replay == "per":
        return Prioritized(alpha=alpha, beta=beta)
    if replay == "per-reshuffled":
        return PrioritizedReshuffled(alpha=alpha, beta=beta)
    raise ReplayBankError(f"unknown replay {replay!r}; valid replay schemes: {', '.join(REPLAY_NAMES)}")


class NStepWindow:
    """Turns single steps into n-step transitions with ``replaybank.nstep_returns``.

    A step leaves the window once its n-step return is known: when ``n`` newer steps exist, or at
    once when the episode ends (terminated: no bootstrap; truncated: bootstrap from the last obs).
    """

    def __init__(self, n: int, gamma: float) -> None:
        self.n, self.gamma = n, gamma
        self.steps: list[tuple[np.ndarray, int, float, np.ndarray, bool, bool]] = []

    def push(
        self, obs: np.ndarray, action: int, reward: float, next_obs: np.ndarray, terminated: bool, truncated: bool
    ) -> dict[str, np.ndarray] | None:
        """Add a step; return the transitions that are complete (columns), or None."""
        self.steps.append((obs, action, reward, next_obs, terminated, truncated))
        ended = terminated or truncated
        if not ended and len(self.steps) < self.n:
            return None
        obs_, actions, rewards, next_obs_, dones, truncs = zip(*self.steps)
        returns, discounts, last = nstep_returns(
            np.array(rewards), np.array(dones), self.gamma, self.n, truncated=np.array(truncs)
        )
        take = len(self.steps) if ended else 1
        out = {
            "obs": np.stack(obs_[:take]),
            "action": np.array(actions[:take], dtype=np.int64),
            "ret": returns[:take].astype(np.float32),
            "discount": discounts[:take].astype(np.float32),
            "next_obs": np.stack([next_obs_[i] for i in last[:take]]),
        }
        del self.steps[:take]
        return out


def make_q_network(obs_shape: tuple[int, ...], n_actions: int, hidden: int) -> Any:
    """An MLP for vector observations; for MinAtar's (10, 10, C) grids, the MinAtar paper's
    one conv layer (16 3x3 filters) and a hidden layer."""
    import torch.nn as nn

    if len(obs_shape) == 3:
        h, w, c = obs_shape
        return nn.Sequential(
            _channels_first(),
            nn.Conv2d(c, 16, 3), nn.ReLU(), nn.Flatten(),
            nn.Linear(16 * (h - 2) * (w - 2), hidden), nn.ReLU(),
            nn.Linear(hidden, n_actions),
        )
    size = int(np.prod(obs_shape))
    return nn.Sequential(
        nn.Flatten(), nn.Linear(size, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
        nn.Linear(hidden, n_actions),
    )


def _channels_first() -> Any:
    """A layer turning (B, H, W, C) grids into the (B, C, H, W) that ``Conv2d`` reads."""
    import torch.nn as nn

    class _Permute(nn.Module):
        def forward(self, x: Any) -> Any:
            return x.permute(0, 3, 1, 2)

    return _Permute()


def evaluate(q: Any, env_id: str, episodes: int, seed: int) -> np.ndarray:
    """Greedy returns of ``episodes`` episodes (eval env seeded apart from the training env)."""
    import torch

    env = make_env(env_id)
    returns = np.zeros(episodes)
    for k in range(episodes):
        obs, _ = env.reset(seed=seed + k)
        done = False
        while not done:
            with torch.inference_mode():
                action = int(q(torch.as_tensor(obs[None], dtype=torch.float32)).argmax())
            obs, reward, terminated, truncated, _ = env.step(action)
            returns[k] += float(reward)
            done = terminated or truncated
    env.close()
    return returns


def train(args: Args, *, log: bool = True) -> dict[str, Any]:
    """Run DQN as ``args`` says, write the output files, return the metrics."""
    check_args(args)
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(1)
    env = make_env(args.env_id)
    threshold = env.spec.reward_threshold if env.spec is not None else None
    n_actions = int(env.action_space.n)
    rng = np.random.default_rng(args.seed)
    with torch.random.fork_rng():  # network init from the run's seed, global RNG left alone
        torch.manual_seed(args.seed)
        q = make_q_network(env.observation_space.shape, n_actions, args.hidden)
        target = make_q_network(env.observation_space.shape, n_actions, args.hidden)
    target.load_state_dict(q.state_dict())
    optimizer = torch.optim.Adam(q.parameters(), lr=args.learning_rate)
    sampler = make_sampler(args.replay, args.alpha, args.beta)
    buffer = ReplayBuffer(args.buffer_size, sampler=sampler, seed=args.seed)
    window = NStepWindow(args.n_step, args.gamma)

    obs, _ = env.reset(seed=args.seed)
    episode_return, train_returns = 0.0, []
    curve: list[dict[str, float]] = []
    replay_s = extend_s = 0.0
    eval_s, gradient_steps, solved_at, step = 0.0, 0, None, 0
    start = time.perf_counter()
    for step in range(1, args.total_steps + 1):
        epsilon = max(args.eps_end, args.eps_start - (args.eps_start - args.eps_end) * step / args.eps_steps)
        if rng.random() < epsilon:
            action = int(rng.integers(n_actions))
        else:
            with torch.inference_mode():
                action = int(q(torch.as_tensor(obs[None], dtype=torch.float32)).argmax())
        next_obs, reward, terminated, truncated, _ = env.step(action)
        episode_return += float(reward)
        ready = window.push(obs, action, float(reward), next_obs, terminated, truncated)
        if ready is not None:
            t0 = time.perf_counter()
            buffer.extend(ready)
            extend_s += time.perf_counter() - t0
        obs = next_obs
        if terminated or truncated:
            train_returns.append(episode_return)
            obs, _ = env.reset()
            episode_return = 0.0

        # reshuffled samplers never repeat an item in a batch: wait until a whole batch is stored
        learning = step >= args.learning_starts and len(buffer) >= args.batch_size
        if learning and step % args.train_frequency == 0:
            t0 = time.perf_counter()
            if sampler.uses_priorities:  # anneal beta to 1 by the end of the budget
                sampler.beta = args.beta + (1.0 - args.beta) * step / args.total_steps
            batch = buffer.sample(args.batch_size)
            replay_s += time.perf_counter() - t0
            b_obs = torch.as_tensor(batch["obs"], dtype=torch.float32)
            b_next = torch.as_tensor(batch["next_obs"], dtype=torch.float32)
            with torch.no_grad():  # double DQN: online net picks, target net values
                best = q(b_next).argmax(1, keepdim=True)
                bootstrap = target(b_next).gather(1, best).squeeze(1)
                y = torch.as_tensor(batch["ret"]) + torch.as_tensor(batch["discount"]) * bootstrap
            q_sa = q(b_obs).gather(1, torch.as_tensor(batch["action"])[:, None]).squeeze(1)
            td = y - q_sa
            loss_per_item = F.smooth_l1_loss(q_sa, y, reduction="none")
            if batch.weights is not None:
                loss_per_item = loss_per_item * torch.as_tensor(batch.weights)
            optimizer.zero_grad()
            loss_per_item.mean().backward()
            torch.nn.utils.clip_grad_norm_(q.parameters(), 10.0)
            optimizer.step()
            gradient_steps += 1
            if sampler.uses_priorities:
                t0 = time.perf_counter()
                buffer.update_priorities(batch.ids, np.abs(td.detach().numpy()))
                replay_s += time.perf_counter() - t0
            if gradient_steps % args.target_update == 0:
                target.load_state_dict(q.state_dict())

        if step % args.eval_every == 0 or step == args.total_steps:
            t0 = time.perf_counter()
            returns = evaluate(q, args.env_id, args.eval_episodes, seed=10_000 + args.seed * 100)
            eval_s += time.perf_counter() - t0
            recent = float(np.mean(train_returns[-10:])) if train_returns else float("nan")
            curve.append({
                "env_step": step, "eval_return": float(returns.mean()), "eval_return_std": float(returns.std()),
                "train_return_last10": recent, "epsilon": epsilon,
                "seconds": time.perf_counter() - start,
            })
            if log:
                print(f"[{args.replay} seed {args.seed}] step {step:>7,}  eval {returns.mean():7.1f}  "
                      f"train(last10) {recent:7.1f}  {time.perf_counter() - start:6.0f}s", flush=True)
            if threshold is not None and solved_at is None and returns.mean() >= threshold:
                solved_at = step
                if args.stop_when_solved:
                    break
    env.close()
    loop_s = time.perf_counter() - start - eval_s
    metrics = {
        "env_id": args.env_id,
        "replay": args.replay,
        "seed": args.seed,
        "final_eval_return": curve[-1]["eval_return"],
        "env_steps": step,
        "reward_threshold": threshold,
        "solved_at_step": solved_at,
        "episodes": len(train_returns),
        "gradient_steps": gradient_steps,
        "loop_seconds": loop_s,
        "eval_seconds": eval_s,
        "replay_seconds": replay_s,
        "replay_time_share": replay_s / loop_s,
        "extend_seconds": extend_s,
        "extend_time_share": extend_s / loop_s,
        "args": asdict(args),
    }
    write_outputs(Path(args.out), curve, metrics)
    return metrics


def write_outputs(out: Path, curve: list[dict[str, float]], metrics: dict[str, Any]) -> None:
    """``curve.csv``, ``curve.png`` and ``metrics.json`` in ``out``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    columns = list(curve[0])
    lines = [",".join(columns)] + [",".join(f"{row[c]:.6g}" for c in columns) for row in curve]
    (out / "curve.csv").write_text("\n".join(lines) + "\n")
    (out / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
    steps = [row["env_step"] for row in curve]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(steps, [row["eval_return"] for row in curve], marker="o", label="greedy eval (mean of episodes)")
    ax.plot(steps, [row["train_return_last10"] for row in curve], alpha=0.6, label="training (last 10 episodes)")
    if metrics["reward_threshold"] is not None:
        ax.axhline(metrics["reward_threshold"], color="grey", ls="--", lw=1, label="reward threshold")
    ax.set_xlabel("environment steps")
    ax.set_ylabel("episode return")
    ax.set_title(f"DQN {metrics['env_id']}, replay={metrics['replay']}, seed {metrics['seed']}")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "curve.png", dpi=100)
    plt.close(fig)
