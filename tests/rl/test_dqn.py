from __future__ import annotations

import numpy as np
import pytest

from replaybank.errors import ReplayBankError
from replaybank.rl.dqn import REPLAY_NAMES, Args, NStepWindow, check_args, make_sampler


def _obs(t: int) -> np.ndarray:
    return np.array([t], dtype=np.float32)


def test_nstep_window_emits_each_step_once_with_its_nstep_return() -> None:
    w = NStepWindow(n=3, gamma=0.5)
    out = []
    # episode of 5 steps, reward 1 each, terminated at the end; then a truncated 2-step episode
    steps = [(t, t == 4, False) for t in range(5)] + [(10 + t, False, t == 1) for t in range(2)]
    for t, term, trunc in steps:
        ready = w.push(_obs(t), t % 2, 1.0, _obs(t + 1), term, trunc)
        if ready is not None:
            out.append(ready)
    cols = {k: np.concatenate([o[k] for o in out]) for k in out[0]}
    np.testing.assert_array_equal(cols["obs"].ravel(), [0, 1, 2, 3, 4, 10, 11])
    np.testing.assert_allclose(cols["ret"], [1.75, 1.75, 1.75, 1.5, 1.0, 1.5, 1.0])
    # bootstrap: gamma^3 mid-episode, 0 when the window reached the termination, gamma^m at truncation
    np.testing.assert_allclose(cols["discount"], [0.125, 0.125, 0.0, 0.0, 0.0, 0.25, 0.5])
    np.testing.assert_array_equal(cols["next_obs"].ravel(), [3, 4, 5, 5, 5, 12, 12])
    assert not w.steps


def test_every_replay_name_has_a_sampler_and_unknown_names_list_them() -> None:
    for name in REPLAY_NAMES:
        make_sampler(name, 0.6, 0.4)
    with pytest.raises(ReplayBankError, match="uniform, per, reshuffled, per-reshuffled"):
        check_args(Args(replay="prioritised"))  # type: ignore[arg-type]
    with pytest.raises(ReplayBankError, match="gamma"):
        check_args(Args(gamma=1.5))
