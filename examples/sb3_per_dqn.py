"""Stable-Baselines3 DQN on CartPole-v1 with replaybank's prioritized replay (``PERDQN``).

SB3 has no prioritized replay (SB3 issue #1242); ``replaybank.sb3.PERDQN`` is SB3's DQN with
``replaybank.sb3.PrioritizedReplayBuffer``, the importance weights applied to the TD loss and the
priorities updated after every gradient step. The hyperparameters are RL Zoo's for CartPole-v1
DQN. ``--buffer`` picks the run: ``per`` (PERDQN), ``uniform`` (SB3's DQN on
``replaybank.sb3.ReplayBuffer``) or ``sb3`` (SB3's DQN on its own buffer); ``--buffer all`` runs
the three in turn with the same seed. Each run reports the greedy mean return over
``--eval-episodes`` episodes and the buffer's share of wall time (``add`` + ``sample`` +
``update_priorities``, timed around the calls). With ``--curve-every N`` it also records a learning
curve: every N env steps the greedy policy plays ``--eval-episodes`` episodes on a separate,
seeded env (``seed + 10000``); that time is taken off the wall time, and nothing the training
draws from changes, so the run trains exactly as without the curve.

    python examples/sb3_per_dqn.py --buffer all --steps 50000 --seed 0 --out runs/sb3_per.json
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ZOO = {  # rl-baselines3-zoo, hyperparams/dqn.yml, CartPole-v1
    "learning_rate": 2.3e-3,
    "batch_size": 64,
    "buffer_size": 100_000,
    "learning_starts": 1000,
    "gamma": 0.99,
    "target_update_interval": 10,
    "train_freq": 256,
    "gradient_steps": 128,
    "exploration_fraction": 0.16,
    "exploration_final_eps": 0.04,
    "policy_kwargs": {"net_arch": [256, 256]},
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--buffer", choices=["per", "uniform", "sb3", "all"], default="per")
    p.add_argument("--steps", type=int, default=50_000, help="env steps per run")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--alpha", type=float, default=0.6, help="PER priority exponent")
    p.add_argument("--beta", type=float, default=0.4, help="PER importance exponent at the start (-> 1)")
    p.add_argument("--learning-starts", type=int, default=ZOO["learning_starts"])
    p.add_argument("--train-freq", type=int, default=ZOO["train_freq"])
    p.add_argument("--gradient-steps", type=int, default=ZOO["gradient_steps"])
    p.add_argument("--eval-episodes", type=int, default=10)
    p.add_argument("--curve-every", type=int, default=0, help="greedy eval every N steps (0: off)")
    p.add_argument("--threads", type=int, default=1, help="torch threads")
    p.add_argument("--out", default=None, help="write the results as JSON here")
    return p.parse_args(argv)


def timed(fn: Callable[..., Any], clock: dict[str, float]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            clock["buffer"] += time.perf_counter() - start

    return wrapper


def curve_callback(
    args: argparse.Namespace, curve: list[dict[str, float]], clock: dict[str, float]
) -> Any:
    """An SB3 callback: every ``args.curve_every`` env steps, the greedy policy plays on its own
    env (deterministic actions draw no random numbers); the time goes to ``clock["eval"]``."""
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.evaluation import evaluate_policy

    class Curve(BaseCallback):
        def _init_callback(self) -> None:
            self.eval_env = make_vec_env("CartPole-v1", n_envs=1, seed=args.seed + 10_000)
            self.next_at = args.curve_every

        def _on_step(self) -> bool:
            if self.num_timesteps >= self.next_at:
                start = time.perf_counter()
                mean, std = evaluate_policy(
                    self.model, self.eval_env, args.eval_episodes, deterministic=True
                )
                curve.append({"step": self.num_timesteps, "return_mean": float(mean),
                              "return_std": float(std)})  # fmt: skip
                clock["eval"] += time.perf_counter() - start
                self.next_at += args.curve_every
            return True

    return Curve()


def run(kind: str, args: argparse.Namespace) -> dict[str, Any]:
    from stable_baselines3 import DQN
    from stable_baselines3.common.evaluation import evaluate_policy

    import replaybank.sb3 as rsb3

    hyper = {**ZOO, "learning_starts": args.learning_starts, "train_freq": args.train_freq,
             "gradient_steps": args.gradient_steps, "seed": args.seed, "device": "cpu"}  # fmt: skip
    if kind == "per":
        model: Any = rsb3.PERDQN(
            "MlpPolicy", "CartPole-v1", replay_buffer_kwargs={"alpha": args.alpha, "beta": args.beta}, **hyper
        )
    elif kind == "uniform":
        model = DQN("MlpPolicy", "CartPole-v1", replay_buffer_class=rsb3.ReplayBuffer, **hyper)
    else:
        model = DQN("MlpPolicy", "CartPole-v1", **hyper)
    clock = {"buffer": 0.0, "eval": 0.0}
    curve: list[dict[str, float]] = []
    buffer = model.replay_buffer
    for name in ("add", "sample", "update_priorities"):
        if hasattr(buffer, name):
            setattr(buffer, name, timed(getattr(buffer, name), clock))
    start = time.perf_counter()
    callback = curve_callback(args, curve, clock) if args.curve_every > 0 else None
    model.learn(args.steps, callback=callback)
    wall = time.perf_counter() - start - clock["eval"]
    mean, std = evaluate_policy(model, model.get_env(), n_eval_episodes=args.eval_episodes, deterministic=True)
    return {
        "buffer": kind,
        "seed": args.seed,
        "steps": model.num_timesteps,
        "gradient_steps": model._n_updates,
        "eval_return_mean": float(mean),
        "eval_return_std": float(std),
        "wall_s": wall,
        "buffer_s": clock["buffer"],
        "buffer_share": clock["buffer"] / wall,
        "curve": curve,
    }


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    args = parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    kinds = ["per", "uniform", "sb3"] if args.buffer == "all" else [args.buffer]
    results = []
    for kind in kinds:
        r = run(kind, args)
        results.append(r)
        print(f"{kind:8s} seed {r['seed']}: return {r['eval_return_mean']:7.1f} ± {r['eval_return_std']:5.1f} "
              f"after {r['steps']} steps; buffer {r['buffer_share']:.1%} of {r['wall_s']:.1f} s")  # fmt: skip
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    return results


if __name__ == "__main__":
    main()
