"""``PERDQN``: SB3's DQN with prioritized replay wired through (Schaul et al. 2016).

SB3's ``DQN.train`` takes the mean Huber loss of a batch and never looks at priorities. This
subclass changes only ``train``: the per-item Huber loss is weighted by the batch's importance
weights, and at each gradient step the sampled items' priorities become their new |TD error| (set
after the forward pass, before the backward pass: nothing in between reads them).
``beta`` is annealed linearly from the buffer's starting value to ``per_beta_final`` over the
``learn`` call, as in the paper. Everything else (exploration, target updates, logging) is SB3's.
"""

from __future__ import annotations

import difflib
import inspect
from typing import Any

import numpy as np

from ..checks import check_real
from ..errors import InvalidArgumentError, InvalidTypeError
from .buffers import PrioritizedReplayBuffer

try:
    import torch as th
    from stable_baselines3 import DQN
    from torch.nn import functional as F
except ImportError as err:  # pragma: no cover - exercised only without the extra
    raise ImportError(f"replaybank.sb3 needs stable-baselines3: pip install 'replaybank[sb3]' ({err})") from err

__all__ = ["PERDQN"]


def _unknown(key: str, accepted: list[str], where: str) -> InvalidArgumentError:
    close = difflib.get_close_matches(key, accepted, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return InvalidArgumentError(f"{where}: unknown keyword {key!r}{hint}")


def _check_kwargs(kwargs: dict[str, Any], buffer_class: type) -> None:
    """``DQN``'s keywords by name, numbers where its defaults are numbers, and the buffer's
    ``replay_buffer_kwargs`` by name, before SB3 would fail on them with a ``TypeError``."""
    params = inspect.signature(DQN.__init__).parameters
    accepted = [p for p in params if p not in ("self", "policy", "env")]
    for key, value in kwargs.items():
        if key not in accepted:
            raise _unknown(key, accepted + ["per_beta_final"], "PERDQN")
        default = params[key].default
        number = isinstance(default, (int, float)) and not isinstance(default, bool)
        if number and (isinstance(value, (str, bytes, bool)) or value is None):
            raise InvalidTypeError(
                f"PERDQN({key}={value!r}): expected a number (DQN's default is {default!r})"
            )
    buffer_kwargs = kwargs.get("replay_buffer_kwargs")
    if buffer_kwargs is None:
        return
    if not isinstance(buffer_kwargs, dict):
        raise InvalidTypeError(f"PERDQN(replay_buffer_kwargs={buffer_kwargs!r}): expected a dict")
    sig = inspect.signature(buffer_class).parameters
    fixed = ("buffer_size", "observation_space", "action_space", "device", "n_envs",
             "optimize_memory_usage", "unknown")  # fmt: skip
    taken = [p for p in sig if p not in fixed]
    for key in buffer_kwargs:
        if key not in taken:
            raise _unknown(str(key), taken, "PERDQN(replay_buffer_kwargs)")


class PERDQN(DQN):
    """DQN with prioritized replay: ``replaybank.sb3.PrioritizedReplayBuffer`` by default.

    Args:
        policy, env: SB3's.
        per_beta_final: ``beta`` at the end of training, in ``[0, 1]`` (1.0 removes the sampling
            bias fully); None keeps the buffer's ``beta`` fixed.
        **kwargs: every other ``DQN`` argument; ``replay_buffer_kwargs`` reaches the buffer
            (``alpha``, ``beta``, ``eps``, ``seed``, ``check_values``).

    Raises:
        ReplayBankError: a ``replay_buffer_class`` that is not a ``PrioritizedReplayBuffer``, a
            ``per_beta_final`` outside ``[0, 1]``, a keyword ``DQN`` or the buffer does not take
            (named, with a "did you mean"), a string or bool where ``DQN`` takes a number.

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
        if per_beta_final is not None:
            check_real(per_beta_final, "PERDQN", "per_beta_final", low=0.0, high=1.0)
        _check_kwargs(kwargs, cls)
        self.per_beta_final = per_beta_final
        self._beta_start: float | None = None
        self.last_td_errors = np.zeros(0)
        super().__init__(policy, env, **kwargs)

    def _anneal_beta(self, buffer: PrioritizedReplayBuffer) -> None:
        if self._beta_start is None:
            self._beta_start = buffer.beta
        if self.per_beta_final is not None:
            # 0 -> 1 over learn(); held at 1 when training goes on past the planned total
            done = min(max(1.0 - self._current_progress_remaining, 0.0), 1.0)
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
