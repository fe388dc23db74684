"""SB3's algorithms on replaybank buffers, tiny budgets: DQN with both buffers, PERDQN's weights
and priority updates, SAC / TD3, a vector env with n_envs > 1, save/load of the buffer."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("stable_baselines3")
th = pytest.importorskip("torch")

from stable_baselines3 import DQN, SAC, TD3  # noqa: E402
from stable_baselines3.common.env_util import make_vec_env  # noqa: E402

from replaybank import ReplayBankError  # noqa: E402
from replaybank.sb3 import PERDQN, PrioritizedReplayBuffer, ReplayBuffer  # noqa: E402

TINY = {"learning_starts": 64, "buffer_size": 2_000, "batch_size": 32, "train_freq": 4, "device": "cpu"}


@pytest.fixture(autouse=True)
def one_thread() -> None:
    th.set_num_threads(1)


@pytest.mark.parametrize("buffer", [ReplayBuffer, PrioritizedReplayBuffer])
def test_dqn_trains_on_both_buffers(buffer) -> None:
    model = DQN("MlpPolicy", "CartPole-v1", replay_buffer_class=buffer, seed=0, **TINY)
    model.learn(300)
    assert isinstance(model.replay_buffer, buffer)
    assert len(model.replay_buffer.bank) == 300 and model.replay_buffer.size() == 300
    assert model._n_updates == (300 - 64) // 4
    reference = DQN("MlpPolicy", "CartPole-v1", seed=0, **TINY)
    reference.learn(300)
    # SB3's own buffer saw the same env steps (same seed): the same rewards were stored
    ours, theirs = model.replay_buffer.sample(64), reference.replay_buffer.sample(64)
    for name in ("observations", "actions", "next_observations", "dones", "rewards"):
        a, b = getattr(ours, name), getattr(theirs, name)
        assert (tuple(a.shape), a.dtype) == (tuple(b.shape), b.dtype), name


def test_perdqn_weights_the_loss_and_updates_priorities(monkeypatch) -> None:
    updates: list[tuple[int, int]] = []
    original = PrioritizedReplayBuffer.update_priorities

    def counting(self, ids, priorities):
        applied = original(self, ids, priorities)
        updates.append((len(ids), applied))
        return applied

    monkeypatch.setattr(PrioritizedReplayBuffer, "update_priorities", counting)
    model = PERDQN(
        "MlpPolicy", "CartPole-v1", seed=0, replay_buffer_kwargs={"alpha": 0.6, "beta": 0.4}, **TINY
    )
    buffer = model.replay_buffer
    assert isinstance(buffer, PrioritizedReplayBuffer) and buffer.beta == 0.4
    model.learn(300)
    steps = (300 - 64) // 4
    assert len(updates) == steps and all(n == 32 and applied == 32 for n, applied in updates)
    leaves = buffer.bank.sampler.trees.leaves[: len(buffer.bank)]  # type: ignore[attr-defined]
    assert len(np.unique(leaves)) > 100  # priorities now differ item by item (|TD| + eps) ** alpha
    assert buffer.beta == pytest.approx(1.0)  # annealed over learn()
    assert model.last_td_errors.shape == (32,) and np.isfinite(model.last_td_errors).all()
    weights = buffer.sample(32).weights
    assert float(weights.min()) < 1.0  # non-uniform priorities give non-uniform weights


def test_perdqn_refuses_a_uniform_buffer() -> None:
    with pytest.raises(ReplayBankError, match="PrioritizedReplayBuffer"):
        PERDQN("MlpPolicy", "CartPole-v1", replay_buffer_class=ReplayBuffer, **TINY)


def test_vector_env_with_several_envs() -> None:
    env = make_vec_env("CartPole-v1", n_envs=3, seed=0)
    model = PERDQN("MlpPolicy", env, seed=0, **TINY)
    model.learn(300)
    buffer = model.replay_buffer
    assert len(buffer.bank) == model.num_timesteps == 300 and buffer.size() == 100
    done = buffer.bank.get(buffer.bank.sample(200).ids)["done"]
    assert set(np.unique(done).tolist()) <= {0.0, 1.0}


@pytest.mark.parametrize("algo", [SAC, TD3])
def test_sac_and_td3_run_on_the_uniform_buffer(algo) -> None:
    kwargs = {k: v for k, v in TINY.items() if k != "train_freq"}
    model = algo("MlpPolicy", "Pendulum-v1", replay_buffer_class=ReplayBuffer, seed=0, **kwargs)
    model.learn(120)
    sample = model.replay_buffer.sample(8)
    assert tuple(sample.actions.shape) == (8, 1) and sample.actions.dtype == th.float32
    assert len(model.replay_buffer.bank) == 120


def test_save_and_load_replay_buffer(tmp_path) -> None:
    model = PERDQN("MlpPolicy", "CartPole-v1", seed=0, **TINY)
    model.learn(150)
    model.save_replay_buffer(tmp_path / "rb.pkl")
    other = PERDQN("MlpPolicy", "CartPole-v1", seed=1, **TINY)
    other.load_replay_buffer(tmp_path / "rb.pkl")
    a, b = model.replay_buffer, other.replay_buffer
    stored = len(a.bank)  # 150 steps, rounded up to whole train_freq rounds
    assert stored >= 150 and len(b.bank) == stored and b.beta == a.beta
    np.testing.assert_array_equal(a.sample(16).ids, b.sample(16).ids)
    other.learn(80, reset_num_timesteps=False)
    assert len(other.replay_buffer.bank) >= stored + 80


def test_perdqn_loss_is_the_importance_weighted_huber_loss() -> None:
    from stable_baselines3.common.logger import configure
    from torch.nn import functional as F

    model = PERDQN("MlpPolicy", "CartPole-v1", seed=0, **TINY)
    model.learn(100)
    model.set_logger(configure(None, [""]))
    buffer = model.replay_buffer
    data = buffer.sample(32)
    weights = th.linspace(0.05, 1.0, 32).reshape(-1, 1)  # far from uniform: the mean would differ
    data = data._replace(weights=weights)
    buffer.sample = lambda *_a, **_k: data  # type: ignore[method-assign]
    with th.no_grad():
        next_q = model.q_net_target(data.next_observations).max(dim=1)[0].reshape(-1, 1)
        target = data.rewards + (1 - data.dones) * model.gamma * next_q
        current = th.gather(model.q_net(data.observations), dim=1, index=data.actions.long())
        per_item = F.smooth_l1_loss(current, target, reduction="none")
    model.train(gradient_steps=1, batch_size=32)
    logged = model.logger.name_to_value["train/loss"]
    assert logged == pytest.approx(float((weights * per_item).mean()), rel=1e-5)
    assert logged != pytest.approx(float(per_item.mean()), rel=1e-3)  # the unweighted loss differs
    assert model.logger.name_to_value["train/mean_weight"] == pytest.approx(float(weights.mean()))


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(per_beta_final=1e300), r"PERDQN\(per_beta_final=1e\+300\): must be a finite number >= 0.0 and <= 1.0"),
        (dict(per_beta_final="1"), r"PERDQN\(per_beta_final='1'\): expected a real number, got str"),
        (dict(learning_rat=1e-3), r"PERDQN: unknown keyword 'learning_rat'; did you mean 'learning_rate'\?"),
        (dict(batch_size="32"), r"PERDQN\(batch_size='32'\): expected a number"),
        (dict(gamma=True), r"PERDQN\(gamma=True\): expected a number"),
        (dict(replay_buffer_kwargs={"alpah": 0.6}), r"PERDQN\(replay_buffer_kwargs\): unknown keyword 'alpah'; did you mean 'alpha'\?"),
        (dict(replay_buffer_kwargs={"alpha": "0.6"}), r"alpha='0.6'\): expected a real number, got str"),
        (dict(replay_buffer_kwargs={"eps": 0.0}), r"eps=0.0\): must be a finite number > 0"),
        (dict(replay_buffer_kwargs=[1]), r"PERDQN\(replay_buffer_kwargs=\[1\]\): expected a dict"),
        (dict(buffer_size=0), r"PrioritizedReplayBuffer\(buffer_size=0\): must be an integer >= 1"),
    ],
)
def test_perdqn_arguments_are_named(kwargs, message) -> None:
    args = {**{k: v for k, v in TINY.items() if k not in kwargs}, **kwargs}
    with pytest.raises(ReplayBankError, match=message):
        PERDQN("MlpPolicy", "CartPole-v1", **args)
