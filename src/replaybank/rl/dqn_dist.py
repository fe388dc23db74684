"""Distributed DQN (Ape-X style): Ray actors collect into a sharded buffer, one learner samples.

``replaybank rl dqn --actors N`` runs this instead of the single-process loop of ``dqn.py``, with the
same ``Args`` (network, n-step returns, double DQN):

* ``--replay per`` (PER, beta annealed to 1) or ``uniform``; the reshuffled schemes have no exact
  sharded form and are refused;
* ``N`` collector actors each run their own environment with epsilon-greedy actions from the latest
  weights the learner broadcast, and write n-step transitions in chunks to their shard of a
  ``ShardedReplayBuffer`` (``--shards``, prioritized, global P(i) exact);
* the learner (this process) samples batches, takes gradient steps, sends ``|TD error|`` back as
  priorities and broadcasts its weights every ``--sync-every`` gradient steps;
* a ``SampleToInsertRatio`` rate limiter shared by all of them keeps ``--samples-per-insert``
  sampled transitions per collected one (``batch_size / samples_per_insert`` environment steps per
  gradient step), within an error buffer of a few chunks: fast actors wait for the learner and the
  learner waits for data, whatever the speed of either.

Outputs as ``dqn.py`` (``curve.csv``, ``curve.png``, ``metrics.json``) plus, in the metrics, the
measured ratio of sampled to inserted transitions after warm-up and the actor/learner step counts.
"""

from __future__ import annotations

import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from replaybank.errors import ReplayBankError
from replaybank.rl.dqn import (
    Args,
    NStepWindow,
    check_args,
    evaluate,
    make_env,
    make_q_network,
    write_outputs,
)

CHUNK = 16  # transitions per write of a collector


class Collector:
    """One actor: an environment, a copy of the Q-network and a handle on the sharded buffer."""

    def __init__(self, args: Args, index: int, num_actors: int, buffer: Any, shard: int) -> None:
        import torch

        torch.set_num_threads(1)
        self.args, self.index, self.buffer, self.shard = args, index, buffer, shard
        self.env = make_env(args.env_id)
        self.q = make_q_network(self.env.observation_space.shape, int(self.env.action_space.n), args.hidden)
        self.lock = threading.Lock()
        self.rng = np.random.default_rng([args.seed, index])
        self.num_actors = num_actors
        self.steps = 0
        self.returns: list[float] = []

    def set_weights(self, state: dict[str, Any]) -> None:
        import torch

        with self.lock:
            self.q.load_state_dict({k: torch.as_tensor(v) for k, v in state.items()})

    def run(self, budget: int) -> dict[str, Any]:
        """Collect ``budget`` environment steps (or until the rate limiter is closed)."""
        import torch

        from replaybank.ratelimit import RateLimiterClosed

        args, n_actions = self.args, int(self.env.action_space.n)
        window = NStepWindow(args.n_step, args.gamma)
        obs, _ = self.env.reset(seed=args.seed * 1000 + self.index)
        episode_return, pending = 0.0, []
        try:
            while self.steps < budget:
                self.steps += 1
                global_step = self.steps * self.num_actors  # the schedule follows all actors' steps
                eps = max(args.eps_end, args.eps_start - (args.eps_start - args.eps_end) * global_step / args.eps_steps)
                if self.rng.random() < eps:
                    action = int(self.rng.integers(n_actions))
                else:
                    with self.lock, torch.inference_mode():
                        action = int(self.q(torch.as_tensor(obs[None], dtype=torch.float32)).argmax())
                next_obs, reward, terminated, truncated, _ = self.env.step(action)
                episode_return += float(reward)
                ready = window.push(obs, action, float(reward), next_obs, terminated, truncated)
                if ready is not None:
                    pending.append(ready)
                    if sum(len(p["action"]) for p in pending) >= CHUNK:
                        self.buffer.extend({k: np.concatenate([p[k] for p in pending]) for k in pending[0]},
                                           shard=self.shard)
                        pending = []
                obs = next_obs
                if terminated or truncated:
                    self.returns.append(episode_return)
                    obs, _ = self.env.reset()
                    episode_return = 0.0
        except RateLimiterClosed:  # the learner has finished
            pass
        return {"steps": self.steps, "episodes": len(self.returns), "returns": self.returns[-20:]}


def run(args: Args, actors: int, shards: int, samples_per_insert: float, sync_every: int = 50,
        log: bool = True) -> dict[str, Any]:
    """Train with ``actors`` collectors and ``shards`` buffer shards; write outputs, return metrics."""
    check_args(args)
    if actors < 1 or shards < 1:
        raise ReplayBankError(f"--actors and --shards must be >= 1, got actors={actors}, shards={shards}")
    if not samples_per_insert > 0:
        raise ReplayBankError(f"--samples-per-insert must be > 0, got {samples_per_insert!r}")
    if args.replay not in ("uniform", "per"):
        raise ReplayBankError(
            f"--replay {args.replay} with --actors: a sharded buffer samples exactly only with uniform or per"
        )
    import ray
    import torch
    import torch.nn.functional as F

    from replaybank import Prioritized, Uniform
    from replaybank.dist import ShardedReplayBuffer
    from replaybank.ratelimit import RateLimitTimeout, SampleToInsertRatio

    torch.set_num_threads(1)
    started_ray = not ray.is_initialized()
    if started_ray:
        ray.init(num_cpus=max(2, actors), include_dashboard=False, log_to_driver=False)
    env = make_env(args.env_id)
    threshold = env.spec.reward_threshold if env.spec is not None else None
    n_actions = int(env.action_space.n)
    with torch.random.fork_rng():
        torch.manual_seed(args.seed)
        q = make_q_network(env.observation_space.shape, n_actions, args.hidden)
        target = make_q_network(env.observation_space.shape, n_actions, args.hidden)
    target.load_state_dict(q.state_dict())
    optimizer = torch.optim.Adam(q.parameters(), lr=args.learning_rate)
    # the window must let one chunk (CHUNK * spi sampled items) and one batch through at a time
    error_buffer = 2 * CHUNK * samples_per_insert + args.batch_size
    limiter = SampleToInsertRatio(samples_per_insert, min_size=max(args.learning_starts, args.batch_size),
                                  error_buffer=error_buffer)
    sampler = Prioritized(alpha=args.alpha, beta=args.beta) if args.replay == "per" else Uniform()
    buffer = ShardedReplayBuffer(shards, args.buffer_size, sampler=sampler,
                                 seed=args.seed, rate_limiter=limiter, timeout=120.0)
    remote = ray.remote(Collector).options(num_cpus=0, max_concurrency=2)
    collectors: list[Any] = [remote.remote(args, i, actors, buffer, i % shards) for i in range(actors)]

    def broadcast() -> None:
        ref = ray.put({k: v.detach().numpy() for k, v in q.state_dict().items()})
        for c in collectors:
            c.set_weights.remote(ref)

    broadcast()
    budget = -(-args.total_steps // actors)
    runs = [c.run.remote(budget) for c in collectors]
    curve: list[dict[str, float]] = []
    ratio_trace: list[tuple[int, int]] = []
    gradient_steps, solved_at, inserts, next_eval = 0, None, 0, args.eval_every
    replay_s = eval_s = 0.0
    start = time.perf_counter()
    pending: list[Any] = []
    while True:
        t0 = time.perf_counter()
        buffer.beta = args.beta + (1.0 - args.beta) * min(1.0, inserts / args.total_steps)
        try:
            batch = buffer.sample(args.batch_size, timeout=2.0)
        except RateLimitTimeout:
            if not ray.wait(runs, num_returns=len(runs), timeout=0)[1]:
                break  # every collector has spent its budget: nothing more will come
            continue
        replay_s += time.perf_counter() - t0
        b_obs = torch.as_tensor(batch["obs"], dtype=torch.float32)
        b_next = torch.as_tensor(batch["next_obs"], dtype=torch.float32)
        with torch.no_grad():
            best = q(b_next).argmax(1, keepdim=True)
            y = torch.as_tensor(batch["ret"]) + torch.as_tensor(batch["discount"]) * target(b_next).gather(1, best).squeeze(1)
        q_sa = q(b_obs).gather(1, torch.as_tensor(batch["action"])[:, None]).squeeze(1)
        loss_per_item = F.smooth_l1_loss(q_sa, y, reduction="none")
        if batch.weights is not None:
            loss_per_item = loss_per_item * torch.as_tensor(batch.weights)
        loss = loss_per_item.mean()
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(q.parameters(), 10.0)
        optimizer.step()
        gradient_steps += 1
        t0 = time.perf_counter()
        if buffer.prioritized:
            pending += buffer.update_priorities_async(batch.ids, np.abs((y - q_sa).detach().numpy()))
        if len(pending) > 4 * shards:  # keep the refs bounded; errors surface here
            buffer.get(pending)
            pending = []
        replay_s += time.perf_counter() - t0
        if gradient_steps % args.target_update == 0:
            target.load_state_dict(q.state_dict())
        if gradient_steps % sync_every == 0:
            broadcast()
            state = ray.get(buffer.limiter.state.remote())
            inserts = state["inserts"]
            ratio_trace.append((state["inserts"], state["samples"]))
        if inserts >= next_eval:
            next_eval += args.eval_every
            t0 = time.perf_counter()
            returns = evaluate(q, args.env_id, args.eval_episodes, seed=10_000 + args.seed * 100)
            eval_s += time.perf_counter() - t0
            curve.append({"env_step": inserts, "eval_return": float(returns.mean()),
                          "eval_return_std": float(returns.std()), "train_return_last10": float("nan"),
                          "epsilon": float("nan"), "seconds": time.perf_counter() - start})
            if log:
                print(f"[dist {actors} actors] env steps {inserts:>7,}  gradient steps {gradient_steps:>6,}  "
                      f"eval {returns.mean():7.1f}  {time.perf_counter() - start:6.0f}s", flush=True)
            if threshold is not None and solved_at is None and returns.mean() >= threshold:
                solved_at = inserts
                if args.stop_when_solved:
                    break
    state = ray.get(buffer.limiter.state.remote())
    # stop the collectors before the actors they call go away: a closed limiter makes their next
    # (or current, blocked) write raise RateLimiterClosed, which ends their loop
    ray.get(buffer.limiter.close.remote())
    results = ray.get(runs)
    buffer.close()
    loop_s = time.perf_counter() - start - eval_s
    returns = evaluate(q, args.env_id, args.eval_episodes, seed=10_000 + args.seed * 100)
    env_steps = int(sum(r["steps"] for r in results))
    curve.append({"env_step": state["inserts"], "eval_return": float(returns.mean()),
                  "eval_return_std": float(returns.std()), "train_return_last10": float("nan"),
                  "epsilon": float("nan"), "seconds": time.perf_counter() - start})
    warm = max(args.learning_starts, args.batch_size)
    after = [(i, s) for i, s in ratio_trace if i > 2 * warm]
    measured = (after[-1][1] - after[0][1]) / max(after[-1][0] - after[0][0], 1) if len(after) > 1 else float("nan")
    metrics = {
        "env_id": args.env_id, "replay": args.replay, "seed": args.seed,
        "actors": actors, "shards": shards,
        "final_eval_return": float(returns.mean()), "env_steps": env_steps,
        "transitions_inserted": state["inserts"], "transitions_sampled": state["samples"],
        "reward_threshold": threshold, "solved_at_step": solved_at,
        "gradient_steps": gradient_steps, "loop_seconds": loop_s, "eval_seconds": eval_s,
        "replay_seconds": replay_s, "replay_time_share": replay_s / max(loop_s, 1e-9),
        "samples_per_insert_target": samples_per_insert,
        "samples_per_insert_measured": measured,
        "samples_per_insert_error_buffer": error_buffer,
        "env_steps_per_gradient_step": env_steps / max(gradient_steps, 1),
        "episodes": int(sum(r["episodes"] for r in results)),
        "args": asdict(args),
    }
    write_outputs(Path(args.out), curve, metrics)
    if started_ray:
        ray.shutdown()
    return metrics
