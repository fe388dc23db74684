"""examples/cleanrl_dqn.py on a tiny budget, uniform and prioritized: the loop runs CleanRL's
structure on replaybank, the TD target stays float32, and PER updates the priorities."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("gymnasium")
torch = pytest.importorskip("torch")

EXAMPLE = Path(__file__).parents[2] / "examples" / "cleanrl_dqn.py"


def load():
    spec = importlib.util.spec_from_file_location("cleanrl_dqn", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the file runs
    spec.loader.exec_module(module)
    return module


TINY = ["--total-timesteps", "500", "--learning-starts", "100", "--batch-size", "32",
        "--target-network-frequency", "50", "--no-cuda", "--seed", "0"]  # fmt: skip


@pytest.mark.parametrize("per", [False, True])
def test_cleanrl_dqn_runs_on_replaybank(per) -> None:
    torch.set_num_threads(1)
    out = load().main(TINY + (["--per"] if per else []))
    rb = out["buffer"]
    assert len(rb) == 500 and out["args"].per is per
    assert len(out["losses"]) == sum(1 for s in range(500) if s > 100 and s % 10 == 0) and all(math.isfinite(x) for x in out["losses"])
    assert len(out["episodic_returns"]) >= 5  # CartPole episodes under random-ish play
    batch = rb.sample(16, as_tensors="torch")
    assert batch["reward"].dtype == torch.float32 and batch["done"].dtype == torch.float32
    assert batch["action"].dtype == torch.int64 and tuple(batch["obs"].shape) == (16, 4)
    assert rb.spec["done"].dtype == np.bool_ and rb.spec["reward"].dtype == np.float64  # stored as given
    stored = rb.get(rb.sample(400).ids)
    assert stored["done"].any()  # terminations were stored
    if per:
        leaves = rb.sampler.trees.leaves[: len(rb)]
        assert len(np.unique(leaves)) > 50  # |TD error| priorities, item by item
        assert rb.sampler.beta > 0.4
        assert batch.weights.dtype == torch.float32


def test_the_flags_are_cleanrls() -> None:
    args = load().parse_args(["--buffer-size", "77", "--per", "--learning-rate", "1e-3"])
    assert (args.buffer_size, args.per, args.learning_rate, args.batch_size) == (77, True, 1e-3, 128)


def test_cleanrls_own_dqn_lines_run_on_the_sb3_drop_in() -> None:
    """CleanRL's dqn.py with one import changed (``from replaybank.sb3 import ReplayBuffer``): its
    constructor call, its ``rb.add`` of a gymnasium vector env's step (infos a dict) and its TD lines
    on attribute-style batches, actions ``(B, 1)`` for ``gather``."""
    pytest.importorskip("stable_baselines3")
    import gymnasium as gym
    import torch.nn.functional as F

    from replaybank.sb3 import ReplayBuffer

    torch.manual_seed(0)
    envs = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")])
    rb = ReplayBuffer(1000, envs.single_observation_space, envs.single_action_space, "cpu",
                      handle_timeout_termination=False)
    obs, _ = envs.reset(seed=0)
    envs.single_action_space.seed(0)
    stored = {}
    for _ in range(40):
        actions = np.array([envs.single_action_space.sample()])
        next_obs, rewards, terminations, truncations, infos = envs.step(actions)
        rb.add(obs, next_obs, actions, rewards, terminations, infos)
        stored[obs[0].tobytes()] = (int(actions[0]), float(rewards[0]), float(terminations[0]), next_obs[0])
        obs = next_obs
    q_network = torch.nn.Linear(4, 2)
    target_network = torch.nn.Linear(4, 2)
    data = rb.sample(16)
    assert tuple(data.actions.shape) == (16, 1) and data.actions.dtype == torch.int64
    assert tuple(data.rewards.shape) == tuple(data.dones.shape) == (16, 1) and tuple(data.observations.shape) == (16, 4)
    gamma = 0.99
    with torch.no_grad():  # CleanRL's dqn.py, as written
        target_max, _ = target_network(data.next_observations).max(dim=1)
        td_target = data.rewards.flatten() + gamma * target_max * (1 - data.dones.flatten())
    old_val = q_network(data.observations).gather(1, data.actions).squeeze()
    loss = F.mse_loss(td_target, old_val)
    assert torch.isfinite(loss)
    # each row is a stored transition, and the lines computed on its own values
    for k in range(16):
        action, reward, done, nxt = stored[data.observations[k].numpy().tobytes()]
        assert int(data.actions[k, 0]) == action and float(data.rewards[k, 0]) == reward
        np.testing.assert_array_equal(data.next_observations[k].numpy(), nxt)
        with torch.no_grad():
            expected = reward + gamma * target_network(torch.from_numpy(nxt)).max() * (1 - done)
            assert float(td_target[k]) == pytest.approx(float(expected), rel=1e-5)
            assert float(old_val[k]) == pytest.approx(float(q_network(data.observations[k])[action]))


def test_a_gymnasium_info_dict_is_refused_where_timeouts_are_read_from_it() -> None:
    pytest.importorskip("stable_baselines3")
    from gymnasium import spaces

    from replaybank import ReplayBankError
    from replaybank.sb3 import ReplayBuffer

    rb = ReplayBuffer(10, spaces.Box(-1, 1, (2,), np.float32), spaces.Discrete(2), "cpu")
    o = np.zeros((1, 2), np.float32)
    with pytest.raises(ReplayBankError, match=r"add\(infos\): got one dict .* handle_timeout_termination=False"):
        rb.add(o, o, np.array([1]), np.array([1.0]), np.array([False]), {})
