from __future__ import annotations

import numpy as np
import pytest

from replaybank import Trajectories
from replaybank.errors import ReplayBankError
from replaybank.rl.offline import (
    OfflineArgs,
    chain_dataset,
    load_trajectories,
    updates_to_propagate,
)


def test_reverse_sampling_reaches_the_start_state_in_fewer_updates() -> None:
    """The Trajectory-level Replay claim on a 20-state chain: reverse slices propagate the end
    reward to state 0 in fewer transition updates than uniform transitions, on every seed."""
    args = OfflineArgs(n_states=20, episodes=100, slice_length=10, batch_slices=8)
    for seed in range(3):
        reverse = updates_to_propagate(args, "reverse", seed)["updates"]
        forward = updates_to_propagate(args, "forward", seed)["updates"]
        uniform = updates_to_propagate(args, "uniform", seed)["updates"]
        assert reverse is not None and uniform is not None and forward is not None
        assert reverse < uniform, (seed, reverse, uniform)
        assert reverse < forward, (seed, reverse, forward)


def test_slices_stay_inside_one_episode_and_reverse_runs_backwards() -> None:
    rng = np.random.default_rng(0)
    episodes = chain_dataset(8, 30, 0.7, rng)
    buf = load_trajectories(episodes, Trajectories(5, reverse=True), seed=0)
    assert len(buf) == sum(len(e["state"]) for e in episodes)
    batch = buf.sample(64).data
    s, s2 = batch["state"], batch["next_state"]  # (64, 5), last step first
    # walking a reversed slice backwards in time: each step's next_state is the later step's state
    np.testing.assert_array_equal(s2[:, 1:], s[:, :-1])
    assert not batch["done"][:, 1:].any()  # an episode end can only be the slice's last step


def test_load_trajectories_rejects_bad_episodes() -> None:
    with pytest.raises(ReplayBankError, match="no episodes"):
        load_trajectories([], Trajectories(2))
    with pytest.raises(ReplayBankError, match="equal, non-zero length"):
        load_trajectories([{"state": np.arange(3), "reward": np.zeros(2)}], Trajectories(2))
    with pytest.raises(ReplayBankError, match="'done' column"):
        load_trajectories([{"state": np.arange(3), "done": np.zeros(3, bool)}], Trajectories(2))
