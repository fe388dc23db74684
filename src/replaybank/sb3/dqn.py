"""``PERDQN``: SB3's DQN with prioritized replay wired through (Schaul et al. 2016).

SB3's ``DQN.train`` takes the mean Huber loss of a batch and never looks at priorities. This
subclass changes only ``train``: the per-item Huber loss is weighted by the batch's importance
weights, and at each gradient step the sampled items' priorities become their new |TD error| (set
after the forward pass, before the backward pass: nothing in between reads them).
``beta`` is annealed linearly from the buffer's starting value to ``per_beta_final`` over the
``learn`` call, as in the paper. Everything else (exploration, target updates, logging) is SB3's.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import InvalidArgumentError
from .buffers import PrioritizedReplayBuffer

try:
    import torch as th
    from stable_baselines3 import DQN
    from torch.nn import functional as F
except ImportError as err:  # pragma: no cover - exercised only without the extra
    raise ImportError(f"replaybank.sb3 needs stable-baselines3: pip install 'replaybank[sb3]' ({err})") from err

__all__ = ["PERDQN"]


class PERDQN(DQN):
    """DQN with prioritized replay: ``replaybank.sb3.PrioritizedReplayBuffer`` by default.

    Args:
        policy, env: SB3's.
        per_beta_final: ``beta`` at the end of training (1.0 removes the sampling bias fully);
            None keeps the buffer's ``beta`` fixed.
        **kwargs: every other ``DQN`` argument; ``replay_buffer_kwargs`` reaches the buffer
            (``alpha``, ``beta``, ``eps``, ``seed``).

    Raises:
        ReplayBankError: a ``replay_buffer_class`` that is not a ``PrioritizedReplayBuffer``.

    After each gradient step ``self.last_td_errors`` holds the batch's |TD errors| (numpy) and the
    logger records ``train/per_beta`` and ``train/mean_weight``.

    >>> model = PERDQN("MlpPolicy", "CartPole-v1", learning_starts=100, seed=0)   # doctest: +SKIP
    >>> model.learn(5_000)                                                         # doctest: +SKIP
    """

    def __init__(self, policy: Any, env: Any, *, per_beta_final: float | None = 1.0, **kwargs: Any) -> None:
        kwargs.setdefault("replay_buffer_class", PrioritizedReplayBuffer)
        cls = kwargs["replay_buffer_class"]
        if not (isinstance(cls, type) and issubclass(cls, PrioritizedReplayBuffer)):
            raise InvalidArgumentError(
                f"PERDQN(replay_buffer_class={cls!r}): needs replaybank.sb3.PrioritizedReplayBuffer "
                "(or a subclass); use SB3's DQN for uniform replay"
            )
        if per_beta_final is not None and not (0.0 <= per_beta_final < float("inf")):
            raise InvalidArgumentError(f"PERDQN(per_beta_final={per_beta_final!r}): expected a finite value >= 0 or None")
        self.per_beta_final = per_beta_final
        self._beta_start: float | None = None
        self.last_td_errors = np.zeros(0)
        super().__init__(policy, env, **kwargs)

    def _anneal_beta(self, buffer: PrioritizedReplayBuffer) -> None:
        if self._beta_start is None:
            self._beta_start = buffer.beta
        if self.per_beta_final is not None:
            done = 1.0 - self._current_progress_remaining  # 0 -> 1 over learn()
            buffer.beta = self._beta_start + (self.per_beta_final - self._beta_start) * done

    def train(self, gradient_steps: int, batch_size: int = 100) -> None:
        """SB3's ``DQN.train`` with importance weights and priority updates."""
        buffer = self.replay_buffer
        if not isinstance(buffer, PrioritizedReplayBuffer):  # e.g. a buffer loaded from elsewhere
            raise InvalidArgumentError(
                f"PERDQN needs a replaybank.sb3.PrioritizedReplayBuffer, got {type(buffer).__name__}"
            )
        self.policy.set_training_mode(True)
        self._update_learning_rate(self.policy.optimizer)
        self._anneal_beta(buffer)
        losses, weights = [], []
        for _ in range(gradient_steps):
            data = buffer.sample(batch_size, env=self._vec_normalize_env)
            with th.no_grad():
                next_q = self.q_net_target(data.next_observations).max(dim=1)[0].reshape(-1, 1)
                target = data.rewards + (1 - data.dones) * self.gamma * next_q
            current = th.gather(self.q_net(data.observations), dim=1, index=data.actions.long())
            # the new priorities need this forward pass only: set them before the backward pass
            # and the optimizer step, which evict the tree nodes the sample has just walked
            self.last_td_errors = (current - target).detach().abs().reshape(-1).cpu().numpy()
            buffer.update_priorities(data.ids, self.last_td_errors)
            per_item = F.smooth_l1_loss(current, target, reduction="none")
            loss = (data.weights * per_item).mean()
            losses.append(loss.item())
            weights.append(float(data.weights.mean()))
            self.policy.optimizer.zero_grad()
            loss.backward()
            th.nn.utils.clip_grad_norm_(self.policy.parameters(), self.max_grad_norm)
            self.policy.optimizer.step()
        self._n_updates += gradient_steps
        self.logger.record("train/n_updates", self._n_updates, exclude="tensorboard")
        self.logger.record("train/loss", np.mean(losses))
        self.logger.record("train/per_beta", buffer.beta)
        self.logger.record("train/mean_weight", np.mean(weights))
