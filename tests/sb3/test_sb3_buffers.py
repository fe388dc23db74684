"""replaybank.sb3 buffers against SB3's own ReplayBuffer: same shapes and dtypes, the same stored
transitions, timeouts handled alike, the spaces it cannot hold named, pickling."""

from __future__ import annotations

import importlib
import pickle
import sys

import numpy as np
import pytest

pytest.importorskip("stable_baselines3")
gym = pytest.importorskip("gymnasium")
th = pytest.importorskip("torch")

from gymnasium import spaces  # noqa: E402
from stable_baselines3.common.buffers import ReplayBuffer as SB3Buffer  # noqa: E402

from replaybank import ReplayBankError  # noqa: E402
from replaybank.sb3 import PrioritizedReplayBuffer, ReplayBuffer  # noqa: E402

CASES = {
    "box-discrete": (spaces.Box(-1, 1, (4,), np.float32), spaces.Discrete(3)),
    "image-box": (spaces.Box(0, 255, (3, 5, 5), np.uint8), spaces.Box(-1, 1, (2,), np.float64)),
    "discrete-multidiscrete": (spaces.Discrete(7), spaces.MultiDiscrete([2, 3])),
    "multibinary": (spaces.MultiBinary(5), spaces.MultiBinary(3)),
}


def feed(buffers, obs_space, act_space, n_envs, steps, seed=0):
    """The same vector-env steps into every buffer; returns the stored (obs, action) pairs."""
    obs_space.seed(seed)
    act_space.seed(seed + 1)
    rng = np.random.default_rng(seed)
    stored = []
    for _ in range(steps):
        obs = np.stack([np.asarray(obs_space.sample()) for _e in range(n_envs)])
        nxt = np.stack([np.asarray(obs_space.sample()) for _e in range(n_envs)])
        act = np.stack([np.asarray(act_space.sample()) for _e in range(n_envs)])
        reward = rng.normal(size=n_envs)  # float64, as a vector env gives them
        done = rng.random(n_envs) < 0.3
        infos = [{"TimeLimit.truncated": bool(d and rng.random() < 0.5)} for d in done]
        for buf in buffers:
            buf.add(obs, nxt, act, reward, done, infos)
        stored += [(obs[i], act[i]) for i in range(n_envs)]
    return stored


@pytest.mark.parametrize("n_envs", [1, 3])
@pytest.mark.parametrize("case", sorted(CASES))
def test_samples_match_sb3_shapes_and_dtypes_and_hold_stored_transitions(case, n_envs) -> None:
    obs_space, act_space = CASES[case]
    ours = ReplayBuffer(60, obs_space, act_space, device="cpu", n_envs=n_envs, seed=0)
    per = PrioritizedReplayBuffer(60, obs_space, act_space, device="cpu", n_envs=n_envs, seed=0)
    theirs = SB3Buffer(60, obs_space, act_space, device="cpu", n_envs=n_envs)
    stored = feed([ours, per, theirs], obs_space, act_space, n_envs, steps=12)
    assert ours.size() == theirs.size() == 12 and len(ours.bank) == 12 * n_envs
    expected = theirs.sample(16)
    for got in (ours.sample(16), per.sample(16)):
        for name in ("observations", "actions", "next_observations", "dones", "rewards"):
            a, b = getattr(got, name), getattr(expected, name)
            assert (tuple(a.shape), a.dtype, a.device) == (tuple(b.shape), b.dtype, b.device), name
        key = lambda o, a: (np.asarray(o, np.float64).ravel().tobytes(), np.asarray(a, np.float32).ravel().tobytes())  # noqa: E731
        pairs = {key(o, a) for o, a in stored}
        for o, a in zip(got.observations.numpy(), got.actions.numpy()):
            assert key(o, a) in pairs  # every sampled (obs, action) is a stored transition's
    weights = per.sample(16).weights
    assert tuple(weights.shape) == (16, 1) and weights.dtype == th.float32 and float(weights.max()) <= 1.0


def test_doctests() -> None:
    import doctest

    import replaybank.sb3.buffers as module

    assert doctest.testmod(module).failed == 0


def test_timeouts_bootstrap_like_sb3() -> None:
    obs_space, act_space = spaces.Box(-10, 10, (1,), np.float32), spaces.Discrete(2)
    kinds = {0.0: (False, False), 1.0: (True, False), 2.0: (True, True)}  # obs -> (done, truncated)
    for handle in (True, False):
        ours = ReplayBuffer(10, obs_space, act_space, device="cpu", handle_timeout_termination=handle, seed=0)
        theirs = SB3Buffer(10, obs_space, act_space, device="cpu", handle_timeout_termination=handle)
        for value, (done, truncated) in kinds.items():
            args = (np.array([[value]], np.float32),) * 2 + (np.array([0]), np.array([1.0]))
            for buf in (ours, theirs):
                buf.add(*args, np.array([done]), [{"TimeLimit.truncated": truncated}])
        for buf in (ours, theirs):
            s = buf.sample(64)
            by_obs = dict(zip(s.observations[:, 0].tolist(), s.dones[:, 0].tolist()))
            want = {0.0: 0.0, 1.0: 1.0, 2.0: 0.0 if handle else 1.0}
            assert by_obs == want, (type(buf).__module__, handle)


@pytest.mark.parametrize(
    "obs_space, act_space, match",
    [
        (spaces.Dict({"a": spaces.Discrete(2)}), spaces.Discrete(2), "observation spaces; got Dict"),
        (spaces.Box(-1, 1, (2,)), spaces.Tuple((spaces.Discrete(2),)), "action spaces; got Tuple"),
        (spaces.Box(-1, 1, (2,)), spaces.MultiBinary([2, 2]), "action spaces; got MultiBinary"),
    ],
)
def test_spaces_it_cannot_hold_are_named(obs_space, act_space, match) -> None:
    with pytest.raises(ReplayBankError, match=match):
        ReplayBuffer(10, obs_space, act_space, device="cpu")


def test_optimize_memory_usage_and_bad_per_parameters_are_refused() -> None:
    box, disc = spaces.Box(-1, 1, (2,), np.float32), spaces.Discrete(2)
    with pytest.raises(ReplayBankError, match="optimize_memory_usage"):
        ReplayBuffer(10, box, disc, device="cpu", optimize_memory_usage=True, handle_timeout_termination=False)
    with pytest.raises(ReplayBankError, match="alpha"):
        PrioritizedReplayBuffer(10, box, disc, device="cpu", alpha=-1.0)


def test_priorities_steer_sampling_and_pickling_keeps_everything() -> None:
    box, disc = spaces.Box(-10, 10, (1,), np.float32), spaces.Discrete(2)
    buf = PrioritizedReplayBuffer(8, box, disc, device="cpu", alpha=1.0, beta=0.5, eps=1e-12, seed=0)
    for i in range(4):
        obs = np.array([[i]], np.float32)
        buf.add(obs, obs, np.array([0]), np.array([0.0]), np.array([False]), [{}])
    s = buf.sample(64)
    id_of = dict(zip(s.observations[:, 0].tolist(), s.ids.tolist()))
    assert sorted(id_of) == [0.0, 1.0, 2.0, 3.0]  # all four were drawn at equal priority
    ids = np.array([id_of[v] for v in (0.0, 1.0, 2.0, 3.0)])
    assert buf.update_priorities(ids, th.tensor([0.0, 0.0, 0.0, 5.0])) == 4  # a tensor, as PERDQN's
    after = buf.sample(32)
    assert set(after.observations[:, 0].tolist()) == {3.0}
    buf.beta = 0.9
    back = pickle.loads(pickle.dumps(buf))
    assert back.beta == 0.9 and len(back.bank) == 4
    np.testing.assert_array_equal(back.sample(8).ids, buf.sample(8).ids)


def test_reset_empties_and_size_counts_vector_steps() -> None:
    box, disc = spaces.Box(-1, 1, (2,), np.float32), spaces.Discrete(2)
    buf = ReplayBuffer(100, box, disc, device="cpu", n_envs=2, seed=0)
    feed([buf], box, disc, 2, steps=5)
    assert buf.size() == 5 and buf.pos == 5
    buf.reset()
    assert buf.size() == 0 and len(buf.bank) == 0 and buf.pos == 0


def test_without_sb3_the_error_names_the_extra(monkeypatch) -> None:
    for name in [m for m in sys.modules if m.startswith("replaybank.sb3.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "stable_baselines3", None)
    monkeypatch.setitem(sys.modules, "stable_baselines3.common.buffers", None)
    with pytest.raises(ImportError, match=r"replaybank\[sb3\]"):
        importlib.import_module("replaybank.sb3.buffers")


@pytest.mark.parametrize("buffer", [ReplayBuffer, PrioritizedReplayBuffer])
@pytest.mark.parametrize("n_envs", [1, 3])
def test_samples_carry_each_transitions_own_next_obs_and_reward(buffer, n_envs) -> None:
    # obs i leads to next_obs 100 + i with reward 0.5 * i - 3 and done i % 2: a buffer that gave
    # next_obs = obs, zero rewards or another transition's done would not match
    box, disc = spaces.Box(-1000, 1000, (2,), np.float32), spaces.Discrete(3)
    buf = buffer(64, box, disc, device="cpu", n_envs=n_envs, seed=0)
    for step in range(10):
        i = np.arange(step * n_envs, (step + 1) * n_envs)
        obs = np.stack([i, -i], axis=1).astype(np.float32)
        buf.add(obs, obs + 100, i % 3, 0.5 * i - 3, i % 2 == 1, [{} for _ in range(n_envs)])
    s = buf.sample(48)
    i = s.observations[:, 0].numpy()
    np.testing.assert_array_equal(s.next_observations[:, 0].numpy(), i + 100)
    np.testing.assert_array_equal(s.next_observations[:, 1].numpy(), -i + 100)
    np.testing.assert_array_equal(s.rewards[:, 0].numpy(), 0.5 * i - 3)
    np.testing.assert_array_equal(s.dones[:, 0].numpy(), i % 2)
    np.testing.assert_array_equal(s.actions[:, 0].numpy(), i % 3)
    assert len(set(i.tolist())) > 5


def _step(n_envs: int = 1, **change):
    o = np.zeros((n_envs, 2), np.float32)
    step = dict(obs=o, next_obs=o, action=np.ones(n_envs, np.int64), reward=np.ones(n_envs),
                done=np.zeros(n_envs, bool), infos=[{} for _ in range(n_envs)])  # fmt: skip
    step.update(change)
    return step


BOX2, DISC3 = spaces.Box(-1, 1, (2,), np.float32), spaces.Discrete(3)


class Normalizer:
    """Stands for SB3's ``VecNormalize``: the two methods a buffer's ``sample(env=...)`` calls."""

    def normalize_obs(self, obs):
        return obs * 2

    def normalize_reward(self, reward):
        return reward / 4


@pytest.mark.parametrize("buffer", [ReplayBuffer, PrioritizedReplayBuffer])
def test_a_vec_normalize_env_scales_the_sampled_rewards_and_observations_as_sb3_does(buffer) -> None:
    box, disc = spaces.Box(-1000, 1000, (2,), np.float32), spaces.Discrete(3)
    ours, theirs = buffer(64, box, disc, device="cpu", seed=0), SB3Buffer(64, box, disc, device="cpu")
    for i in range(10):
        obs = np.array([[i, -i]], np.float32)
        for buf in (ours, theirs):
            buf.add(obs, obs + 100, np.array([i % 3]), np.array([0.5 * i - 3]), np.array([False]), [{}])
    s = ours.sample(32, env=Normalizer())
    i = s.observations[:, 0].numpy() / 2
    np.testing.assert_array_equal(s.next_observations[:, 0].numpy(), 2 * (i + 100))
    np.testing.assert_array_equal(s.rewards[:, 0].numpy(), (0.5 * i - 3) / 4)
    assert s.rewards.dtype == theirs.sample(4, env=Normalizer()).rewards.dtype == th.float32


@pytest.mark.parametrize("n_envs", [1, 2])
@pytest.mark.parametrize(
    "change, message",
    [
        (dict(obs=np.zeros((1, 3), np.float32)), r"add\(obs\): shape \(1, 3\) holds 3 values, expected n_envs=\d x \(2,\)"),
        (dict(next_obs=np.zeros(5, np.float32)), r"add\(next_obs\): shape \(5,\) holds 5 values"),
        (dict(action=np.zeros((4, 2), np.int64)), r"add\(action\): shape \(4, 2\) holds 8 values"),
        (dict(reward=np.zeros(7)), r"add\(reward\): shape \(7,\) holds 7 values"),
        (dict(infos=[]), r"add\(infos\): expected a list of \d dicts, one per env .*got 0 entries"),
        (dict(infos=None), r"add\(infos\): expected a list of \d dicts, one per env .*got None"),
        (dict(done=None), r"add\(done=None\): expected an array"),
        (dict(reward=np.array(["a"])), r"add\(reward\): expected numbers, got dtype <U1"),
    ],
)
def test_wrong_shapes_and_infos_are_named(n_envs, change, message) -> None:
    buf = ReplayBuffer(10, BOX2, DISC3, device="cpu", n_envs=n_envs, seed=0)
    with pytest.raises(ReplayBankError, match=message):
        buf.add(**_step(n_envs, **change))
    with pytest.raises(ReplayBankError, match=r"add\(infos\[0\]\): expected a dict, got NoneType"):
        buf.add(**_step(n_envs, infos=[None] * n_envs))
    assert len(buf.bank) == 0


def test_an_n_envs_mismatch_is_named() -> None:
    buf = ReplayBuffer(10, BOX2, DISC3, device="cpu", n_envs=2, seed=0)
    with pytest.raises(ReplayBankError, match=r"add\(obs\): shape \(1, 2\) holds 2 values, expected n_envs=2 x \(2,\) = 4"):
        buf.add(**_step(1, infos=[{}, {}]))


@pytest.mark.parametrize("n_envs", [1, 2])
@pytest.mark.parametrize(
    "change, message",
    [
        (dict(reward=np.nan), r"add\(reward\): expected (a )?finite numbers?"),
        (dict(reward=np.inf), r"add\(reward\): expected (a )?finite numbers?"),
        (dict(done=2.0), r"add\(done\): expected 0 or 1"),
        (dict(done=np.nan), r"add\(done\): expected 0 or 1"),
        (dict(action=3), r"add\(action\): outside Discrete\(3\): expected integers from 0 to 2"),
        (dict(action=-1), r"add\(action\): outside Discrete\(3\)"),
        (dict(action=1.0), r"add\(action\): Discrete\(3\) takes integer actions, got dtype float64"),
        (dict(obs=np.nan), r"add\(obs\): a float observation is NaN or infinite"),
        (dict(next_obs=-np.inf), r"add\(next_obs\): a float observation is NaN or infinite"),
    ],
)
def test_values_that_would_corrupt_training_are_refused_unless_opted_out(n_envs, change, message) -> None:
    key, value = next(iter(change.items()))
    like = _step(n_envs)[key]
    bad = np.full(like.shape, value, dtype=np.float64 if isinstance(value, float) else like.dtype)
    if key == "obs" or key == "next_obs":
        bad = bad.astype(np.float32)
    for cls in (ReplayBuffer, PrioritizedReplayBuffer):
        buf = cls(10, BOX2, DISC3, device="cpu", n_envs=n_envs, seed=0)
        with pytest.raises(ReplayBankError, match=message + r".*check_values=False"):
            buf.add(**_step(n_envs, **{key: bad}))
        assert len(buf.bank) == 0
        lenient = cls(10, BOX2, DISC3, device="cpu", n_envs=n_envs, seed=0, check_values=False)
        lenient.add(**_step(n_envs, **{key: bad}))  # stored as SB3's own buffer would
        assert len(lenient.bank) == n_envs


def test_actions_of_other_discrete_spaces_and_box_are_checked() -> None:
    multi = ReplayBuffer(10, BOX2, spaces.MultiDiscrete([2, 3]), device="cpu", seed=0)
    multi.add(**_step(1, action=np.array([[1, 2]])))
    with pytest.raises(ReplayBankError, match=r"add\(action\): outside MultiDiscrete\(\[2 3\]\): expected integers from \[0, 0\] to \[1, 2\]"):
        multi.add(**_step(1, action=np.array([[1, 3]])))
    binary = ReplayBuffer(10, BOX2, spaces.MultiBinary(2), device="cpu", seed=0)
    with pytest.raises(ReplayBankError, match=r"add\(action\): outside MultiBinary\(2\)"):
        binary.add(**_step(1, action=np.array([[0, 2]])))
    box = ReplayBuffer(10, BOX2, spaces.Box(-2, 2, (1,), np.float32), device="cpu", seed=0)
    box.add(**_step(1, action=np.array([[-1.0]], np.float32)))  # SB3 stores Box actions rescaled
    with pytest.raises(ReplayBankError, match=r"add\(action\): expected finite numbers"):
        box.add(**_step(1, action=np.array([[np.nan]], np.float32)))


@pytest.mark.parametrize(
    "build, message",
    [
        (lambda: ReplayBuffer(0, BOX2, DISC3, device="cpu"), r"ReplayBuffer\(buffer_size=0\): must be an integer >= 1"),
        (lambda: ReplayBuffer(-5, BOX2, DISC3, device="cpu"), r"ReplayBuffer\(buffer_size=-5\): must be an integer >= 1"),
        (lambda: ReplayBuffer(10.0, BOX2, DISC3, device="cpu"), r"ReplayBuffer\(buffer_size=10.0\): expected an integer"),
        (lambda: ReplayBuffer(10, BOX2, DISC3, device="cpu", n_envs=0), r"ReplayBuffer\(n_envs=0\): must be an integer >= 1"),
        (lambda: ReplayBuffer(10, BOX2, DISC3, device="cpu", alpha=0.5), r"ReplayBuffer: unknown keyword 'alpha'"),
        (lambda: ReplayBuffer(10, BOX2, DISC3, device="cpu", check_values="no"), r"check_values='no'\): expected True or False"),
        (lambda: PrioritizedReplayBuffer(10, BOX2, DISC3, device="cpu", eps=0.0), r"PrioritizedReplayBuffer\(eps=0.0\): must be a finite number > 0"),
        (lambda: PrioritizedReplayBuffer(10, BOX2, DISC3, device="cpu", beta=1e300), r"PrioritizedReplayBuffer\(beta=1e\+300\): must be a finite number >= 0.0 and <= 1.0"),
        (lambda: PrioritizedReplayBuffer(10, BOX2, DISC3, device="cpu", alpha="0.6"), r"alpha='0.6'\): expected a real number, got str"),
        (lambda: PrioritizedReplayBuffer(10, BOX2, DISC3, device="cpu", epss=1.0), r"PrioritizedReplayBuffer: unknown keyword 'epss'"),
    ],
)
def test_bad_construction_arguments_are_named(build, message) -> None:
    with pytest.raises(ReplayBankError, match=message):
        build()


def test_a_buffer_pickled_without_the_value_checks_loads_with_them_on() -> None:
    buf = ReplayBuffer(10, BOX2, DISC3, device="cpu", seed=0)
    buf.add(**_step(1))
    state = buf.__getstate__()
    for key in ("check_values", "_obs_size", "_obs_float", "_action_kind", "_action_low", "_action_high"):
        state.pop(key)
    back = ReplayBuffer.__new__(ReplayBuffer)
    back.__setstate__(state)
    assert back.check_values and len(back.bank) == 1
    with pytest.raises(ReplayBankError, match=r"add\(reward\)"):
        back.add(**_step(1, reward=np.array([np.nan])))
