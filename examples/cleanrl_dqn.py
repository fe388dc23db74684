"""CleanRL's ``dqn.py`` (CartPole-v1) with replaybank as its replay buffer, uniform or prioritized.

The structure is CleanRL's, read top to bottom: ``Args``, ``make_env``, ``QNetwork``,
``linear_schedule``, then one loop (act, step, store, train every ``train_frequency`` steps, sync
the target network). What changed against CleanRL's file (which uses SB3's ``ReplayBuffer``):

* the buffer: ``replaybank.ReplayBuffer(buffer_size, sampler=..., sample_dtypes=...)``, with
  ``sample_dtypes`` turning the env's float64 rewards and bool terminations into float32 in the
  sampled batch, so the TD target stays float32 (the env's values are stored as they come: no
  per-step cast);
* ``rb.add(obs, real_next_obs, actions, rewards, terminations, infos)`` became one ``extend`` of
  the vector env's rows (one item per env); ``rb.sample(batch, as_tensors="torch", device=...)``
  returns torch tensors; actions come back ``(B,)`` (SB3: ``(B, 1)``), hence ``unsqueeze(1)``;
* ``--per``: ``Prioritized(alpha, beta)`` sampling, the squared TD errors weighted by the batch's
  importance weights, priorities set to |TD error| after each step, ``beta`` annealed to 1;
* gymnasium >= 1.0: the vector env resets in the same step (``AutoresetMode.SAME_STEP``), so a
  finished episode's last observation is in ``infos["final_obs"]``, as CleanRL's
  ``final_observation`` was.

    python examples/cleanrl_dqn.py --total-timesteps 500000            # CleanRL's defaults, uniform
    python examples/cleanrl_dqn.py --per --total-timesteps 100000 --seed 2
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from replaybank import Prioritized, ReplayBuffer, Uniform


@dataclass
class Args:
    seed: int = field(default=1, metadata={"help": "seed of the experiment"})
    cuda: bool = field(default=True, metadata={"help": "use CUDA when available"})
    env_id: str = field(default="CartPole-v1", metadata={"help": "the id of the environment"})
    total_timesteps: int = field(default=500_000, metadata={"help": "total timesteps of the experiment"})
    learning_rate: float = field(default=2.5e-4, metadata={"help": "the learning rate of the optimizer"})
    num_envs: int = field(default=1, metadata={"help": "the number of parallel game environments"})
    buffer_size: int = field(default=10_000, metadata={"help": "the replay memory buffer size"})
    gamma: float = field(default=0.99, metadata={"help": "the discount factor gamma"})
    tau: float = field(default=1.0, metadata={"help": "the target network update rate"})
    target_network_frequency: int = field(default=500, metadata={"help": "timesteps between target syncs"})
    batch_size: int = field(default=128, metadata={"help": "the batch size of sample from the replay memory"})
    start_e: float = field(default=1.0, metadata={"help": "the starting epsilon for exploration"})
    end_e: float = field(default=0.05, metadata={"help": "the ending epsilon for exploration"})
    exploration_fraction: float = field(default=0.5, metadata={"help": "fraction of timesteps to reach end_e"})
    learning_starts: int = field(default=10_000, metadata={"help": "timestep to start learning"})
    train_frequency: int = field(default=10, metadata={"help": "the frequency of training"})
    per: bool = field(default=False, metadata={"help": "prioritized replay instead of uniform"})
    per_alpha: float = field(default=0.6, metadata={"help": "PER priority exponent"})
    per_beta: float = field(default=0.4, metadata={"help": "PER importance exponent at the start (-> 1)"})


def parse_args(argv: list[str] | None = None) -> Args:
    """``Args`` from the command line (CleanRL uses tyro; this is the same flags with argparse)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for f in dataclasses.fields(Args):
        flag = "--" + f.name.replace("_", "-")
        if f.type == "bool":
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=f.default, help=f.metadata["help"])
        else:
            kind = {"int": int, "float": float, "str": str}[str(f.type)]
            parser.add_argument(flag, type=kind, default=f.default, help=f.metadata["help"])
    return Args(**vars(parser.parse_args(argv)))


def make_env(env_id: str, seed: int) -> Any:
    import gymnasium as gym

    def thunk() -> Any:
        env = gym.make(env_id)
        env = gym.wrappers.RecordEpisodeStatistics(env)
        env.action_space.seed(seed)
        return env

    return thunk


def q_network(envs: Any) -> Any:
    """CleanRL's ``QNetwork``: 120 and 84 hidden units."""
    from torch import nn

    return nn.Sequential(
        nn.Linear(int(np.prod(envs.single_observation_space.shape)), 120),
        nn.ReLU(),
        nn.Linear(120, 84),
        nn.ReLU(),
        nn.Linear(84, envs.single_action_space.n),
    )


def linear_schedule(start_e: float, end_e: float, duration: float, t: int) -> float:
    slope = (end_e - start_e) / duration
    return max(slope * t + start_e, end_e)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    import gymnasium as gym
    import torch
    import torch.nn.functional as F

    args = parse_args(argv)
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    device = torch.device("cuda" if torch.cuda.is_available() and args.cuda else "cpu")

    envs = gym.vector.SyncVectorEnv(
        [make_env(args.env_id, args.seed + i) for i in range(args.num_envs)],
        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
    )
    assert isinstance(envs.single_action_space, gym.spaces.Discrete), "only discrete action space is supported"

    qnet = q_network(envs).to(device)
    optimizer = torch.optim.Adam(qnet.parameters(), lr=args.learning_rate)
    target = q_network(envs).to(device)
    target.load_state_dict(qnet.state_dict())

    rb = ReplayBuffer(
        args.buffer_size,
        sampler=Prioritized(alpha=args.per_alpha, beta=args.per_beta) if args.per else Uniform(),
        seed=args.seed,
        sample_dtypes={"reward": "float32", "done": "float32"},
    )
    start_time = time.time()
    returns: list[float] = []
    losses: list[float] = []

    obs, _ = envs.reset(seed=args.seed)
    for global_step in range(args.total_timesteps):
        epsilon = linear_schedule(args.start_e, args.end_e, args.exploration_fraction * args.total_timesteps, global_step)
        if random.random() < epsilon:
            actions = np.array([envs.single_action_space.sample() for _ in range(envs.num_envs)])
        else:
            q_values = qnet(torch.Tensor(obs).to(device))
            actions = torch.argmax(q_values, dim=1).cpu().numpy()

        next_obs, rewards, terminations, truncations, infos = envs.step(actions)
        if "final_info" in infos:
            episode = infos["final_info"]["episode"]
            returns += [float(r) for r in episode["r"][episode["_r"]]]

        real_next_obs = next_obs.copy()  # a finished episode's next obs is its last, not the reset one
        for idx in np.flatnonzero(terminations | truncations):
            real_next_obs[idx] = infos["final_obs"][idx]
        rb.extend({"obs": obs, "next_obs": real_next_obs, "action": actions, "reward": rewards, "done": terminations})
        obs = next_obs

        if global_step > args.learning_starts:
            if global_step % args.train_frequency == 0:
                if args.per:  # anneal beta to 1 over the run
                    rb.sampler.beta = args.per_beta + (1 - args.per_beta) * global_step / args.total_timesteps  # type: ignore[attr-defined]
                data = rb.sample(args.batch_size, as_tensors="torch", device=device)
                with torch.no_grad():
                    target_max, _ = target(data["next_obs"]).max(dim=1)
                    td_target = data["reward"] + args.gamma * target_max * (1 - data["done"])
                old_val = qnet(data["obs"]).gather(1, data["action"].unsqueeze(1)).squeeze(1)
                if args.per:
                    td_error = td_target - old_val
                    loss = (data.weights * td_error.pow(2)).mean()
                    rb.update_priorities(data.ids, td_error.detach().abs().cpu().numpy())
                else:
                    loss = F.mse_loss(td_target, old_val)
                losses.append(loss.item())

                optimizer.zero_grad()
                loss.backward()
                optimizer.step()

            if global_step % args.target_network_frequency == 0:
                for target_param, q_param in zip(target.parameters(), qnet.parameters()):
                    target_param.data.copy_(args.tau * q_param.data + (1.0 - args.tau) * target_param.data)

    envs.close()
    sps = int(args.total_timesteps / (time.time() - start_time))
    last = returns[-10:]
    print(f"{'per' if args.per else 'uniform'} seed {args.seed}: {len(returns)} episodes, "
          f"mean return of the last {len(last)}: {np.mean(last) if last else float('nan'):.1f}, SPS {sps}")  # fmt: skip
    return {"args": args, "episodic_returns": returns, "losses": losses, "buffer": rb, "sps": sps}


if __name__ == "__main__":
    main()
