"""replaybank as the replay buffer of Stable-Baselines3's off-policy algorithms (extra ``sb3``).

* :class:`ReplayBuffer`: uniform replay, a drop-in ``replay_buffer_class=`` for ``DQN``, ``SAC``,
  ``TD3`` (``DDPG``), vector envs and ``n_envs > 1`` included, timeouts handled like SB3's
  ``handle_timeout_termination``.
* :class:`PrioritizedReplayBuffer`: proportional PER (``replaybank.Prioritized``); its samples
  carry importance ``weights`` and item ``ids``.
* :class:`PERDQN`: SB3's ``DQN`` with the weights applied to the TD loss and the priorities set to
  the new |TD errors| after every gradient step (SB3's own DQN ignores both).

SB3 is imported when one of these names is first used, not by ``import replaybank``:

>>> import replaybank.sb3                        # doctest: +SKIP
>>> model = replaybank.sb3.PERDQN("MlpPolicy", "CartPole-v1", seed=0)   # doctest: +SKIP
>>> model.learn(20_000)                                                  # doctest: +SKIP

See docs/sb3.md.
"""

from __future__ import annotations

from typing import Any

__all__ = ["PERDQN", "PrioritizedReplayBuffer", "PrioritizedReplayBufferSamples", "ReplayBuffer"]

_WHERE = {
    "ReplayBuffer": "buffers",
    "PrioritizedReplayBuffer": "buffers",
    "PrioritizedReplayBufferSamples": "buffers",
    "PERDQN": "dqn",
}


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'replaybank.sb3' has no attribute {name!r}")
    from importlib import import_module

    return getattr(import_module(f".{_WHERE[name]}", __name__), name)
