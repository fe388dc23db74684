"""Per-call cost of ``replaybank.sb3.PrioritizedReplayBuffer`` in the exact call sequence
``PERDQN`` makes (RL Zoo CartPole: add x256 as SB3 passes them, then 128 x (sample(64), the Zoo
network's forward pass, update_priorities, backward, Adam step)), against SB3's ``ReplayBuffer``
(add, sample), thread CPU microseconds per call, best of ``--rounds``.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/sb3_per_calls.py --rounds 5
"""

from __future__ import annotations

import argparse
import os
import time

for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[var] = "1"

import numpy as np  # noqa: E402


def run(kind: str, rounds: int, cycles: int, seed: int = 0) -> dict[str, float]:
    import torch as th
    from gymnasium import spaces
    from stable_baselines3.common.buffers import ReplayBuffer as SB3ReplayBuffer
    from torch.nn import functional as F

    import replaybank.sb3 as rsb3

    th.manual_seed(seed)
    th.set_num_threads(1)
    obs_space = spaces.Box(-np.inf, np.inf, (4,), np.float32)
    act_space = spaces.Discrete(2)
    if kind == "per":
        buf = rsb3.PrioritizedReplayBuffer(100_000, obs_space, act_space, "cpu", seed=seed)
    else:
        buf = SB3ReplayBuffer(100_000, obs_space, act_space, "cpu")
    net = th.nn.Sequential(th.nn.Linear(4, 256), th.nn.ReLU(), th.nn.Linear(256, 256), th.nn.ReLU(), th.nn.Linear(256, 2))
    opt = th.optim.Adam(net.parameters(), lr=2.3e-3)
    rng = np.random.default_rng(seed)
    clock = time.thread_time_ns
    best = {"add": np.inf, "sample": np.inf, "update_priorities": np.inf}
    for _ in range(rounds):
        spent = {"add": 0, "sample": 0, "update_priorities": 0}
        counts = {"add": 0, "sample": 0, "update_priorities": 0}
        for _ in range(cycles):
            for _ in range(256):
                obs = rng.standard_normal((1, 4)).astype(np.float32)
                nxt = rng.standard_normal((1, 4)).astype(np.float32)
                action = np.array([int(rng.integers(2))])
                reward = np.array([1.0], dtype=np.float32)
                done = np.array([False])
                infos = [{"TimeLimit.truncated": False}]
                t = clock()
                buf.add(obs, nxt, action, reward, done, infos)
                spent["add"] += clock() - t
                counts["add"] += 1
            for _ in range(128):
                t = clock()
                data = buf.sample(64)
                spent["sample"] += clock() - t
                counts["sample"] += 1
                current = th.gather(net(data.observations), 1, data.actions.long())
                target = data.rewards + 0.99 * (1 - data.dones)
                if kind == "per":
                    td = (current - target).detach().abs().reshape(-1).cpu().numpy()
                    t = clock()
                    buf.update_priorities(data.ids, td)
                    spent["update_priorities"] += clock() - t
                    counts["update_priorities"] += 1
                    loss = (data.weights * F.smooth_l1_loss(current, target, reduction="none")).mean()
                else:
                    loss = F.smooth_l1_loss(current, target)
                opt.zero_grad()
                loss.backward()
                th.nn.utils.clip_grad_norm_(net.parameters(), 10)
                opt.step()
        for k in best:
            if counts[k]:
                best[k] = min(best[k], spent[k] / counts[k] / 1e3)
    return {k: v for k, v in best.items() if np.isfinite(v)}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--cycles", type=int, default=4)
    args = p.parse_args()
    for kind in ("per", "sb3"):
        run(kind, 1, 1)  # warm up numba and torch
        got = run(kind, args.rounds, args.cycles)
        print(kind, " ".join(f"{k} {v:.1f} us" for k, v in got.items()))


if __name__ == "__main__":
    main()
