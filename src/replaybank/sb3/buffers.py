"""SB3's replay buffer interface over a ``replaybank.ReplayBuffer``.

SB3's off-policy algorithms build their buffer as ``replay_buffer_class(buffer_size,
observation_space, action_space, device=, n_envs=, optimize_memory_usage=, **replay_buffer_kwargs)``,
call ``add(obs, next_obs, action, reward, done, infos)`` once per vector-env step and
``sample(batch_size, env=)`` per gradient step. These classes keep that contract and SB3's sample
shapes and dtypes (``observations`` ``(B, *obs_shape)``, ``actions`` ``(B, action_dim)``,
``dones`` and ``rewards`` ``(B, 1)`` float32), with replaybank underneath: each env's transition is
one item (a step of ``n_envs`` envs is one ``extend`` of ``n_envs`` rows), so ``buffer_size`` is
the number of transitions kept, as in SB3.

Checks (every ``add``): the arrays hold ``n_envs`` transitions of the spaces' shapes and ``infos``
is a list of ``n_envs`` dicts (or, with ``handle_timeout_termination=False``, a gymnasium vector
env's one dict: CleanRL's ``dqn.py`` runs on these buffers with only its import changed); with ``check_values=True`` (the default) also the values that would
corrupt training: a reward or a float observation that is NaN or infinite, a ``done`` other than
0 or 1, an action outside a ``Discrete`` / ``MultiDiscrete`` / ``MultiBinary`` space (or a float
action for one), a NaN or infinite ``Box`` action. SB3's own buffer stores all of these;
``check_values=False`` does too (shapes and infos are still checked). ``Box`` actions are not held
to the space's bounds: SB3's off-policy algorithms store them rescaled to ``[-1, 1]``.

Timeouts: with ``handle_timeout_termination=True`` (SB3's default) a transition whose info says
``TimeLimit.truncated`` is stored with ``done = 0``, so the TD target bootstraps through it: what
SB3 computes at sample time as ``dones * (1 - timeouts)``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np

from .. import Prioritized, Uniform
from ..buffer import ReplayBuffer as Bank
from ..checks import check_int, check_real
from ..errors import InvalidArgumentError, InvalidTypeError

try:
    import torch as th
    from gymnasium import spaces
    from stable_baselines3.common.buffers import BaseBuffer
    from stable_baselines3.common.buffers import ReplayBuffer as SB3ReplayBuffer
    from stable_baselines3.common.type_aliases import ReplayBufferSamples
except ImportError as err:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        f"replaybank.sb3 needs stable-baselines3: pip install 'replaybank[sb3]' ({err})"
    ) from err

__all__ = ["PrioritizedReplayBuffer", "PrioritizedReplayBufferSamples", "ReplayBuffer"]

_SPACES = (spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)


class PrioritizedReplayBufferSamples(NamedTuple):
    """``ReplayBufferSamples``' fields (SB3's ``DQN.train`` reads them by name) plus ``weights``
    (``(B, 1)`` float32 importance weights) and ``ids`` (numpy int64, for
    ``update_priorities``)."""

    observations: th.Tensor
    actions: th.Tensor
    next_observations: th.Tensor
    dones: th.Tensor
    rewards: th.Tensor
    discounts: th.Tensor | None
    weights: th.Tensor
    ids: np.ndarray


def _bad(name: str, what: str, value: Any) -> InvalidArgumentError:
    shown = np.asarray(value).ravel()[:8].tolist() if isinstance(value, np.ndarray) else value
    return InvalidArgumentError(f"ReplayBuffer.add({name}): {what} (got {shown!r}); {_OPT_OUT}")


_OPT_OUT = (
    "fix the values the env or the algorithm passes, or build the buffer with check_values=False "
    "(replay_buffer_kwargs={'check_values': False}) to store them unchecked, as SB3's buffer does"
)


def _action_check(space: Any) -> tuple[str, np.ndarray, np.ndarray]:
    """``(kind, low, high)``: how ``add`` checks an action of ``space`` (integers in ``[low, high)``
    for the discrete kinds, finite numbers for a Box)."""
    if isinstance(space, spaces.Discrete):
        first = int(space.start)
        return "discrete", np.array([first]), np.array([first + int(space.n)])
    if isinstance(space, spaces.MultiDiscrete):
        starts = np.asarray(getattr(space, "start", np.zeros_like(space.nvec))).ravel()
        return "discrete", starts, starts + np.asarray(space.nvec).ravel()
    if isinstance(space, spaces.MultiBinary):
        return "discrete", np.zeros(1, np.int64), np.full(1, 2, np.int64)
    return "box", np.zeros(0), np.zeros(0)


def _check_space(space: Any, what: str) -> None:
    if not isinstance(space, _SPACES) or (
        isinstance(space, spaces.MultiBinary) and what == "action" and not isinstance(space.n, int)
    ):
        raise InvalidArgumentError(
            f"replaybank.sb3 buffers hold Box, Discrete, MultiDiscrete and 1-D MultiBinary {what} "
            f"spaces; got {space!r} (for Dict observations use SB3's DictReplayBuffer)"
        )


class ReplayBuffer(SB3ReplayBuffer):
    """Uniform replay for SB3's ``DQN``, ``SAC``, ``TD3``: pass it as ``replay_buffer_class=``.

    Args:
        buffer_size, observation_space, action_space, device, n_envs, optimize_memory_usage,
        handle_timeout_termination: SB3's, as its algorithms pass them (``optimize_memory_usage``
            must stay False: every transition keeps its own ``next_obs``).
        seed: seeds the buffer's sampling. None (default): drawn from numpy's global generator,
            which SB3 seeds with the algorithm's ``seed`` just before it builds the buffer, so a
            seeded run repeats.
        check_values: refuse, in ``add``, the values that would corrupt training (see the module
            doc); False stores them as SB3's buffer does. Shapes and infos are checked either way.

    Raises:
        ReplayBankError: an observation or action space it cannot hold (named),
            ``optimize_memory_usage=True``, a ``buffer_size`` or ``n_envs`` below 1, an unknown
            keyword (named); in ``add``, arrays of the wrong size, ``infos`` that are not
            ``n_envs`` dicts, and (``check_values``) the values the module doc lists.

    >>> from stable_baselines3 import DQN
    >>> model = DQN("MlpPolicy", "CartPole-v1", replay_buffer_class=ReplayBuffer, buffer_size=10_000,
    ...             learning_starts=50, seed=0)
    >>> _ = model.learn(100)
    >>> model.replay_buffer.bank
    ReplayBuffer(100/10000, columns=[obs, next_obs, action, reward, done], sampler=Uniform, admission=Fifo, storage=ColumnarStorage)
    >>> [tuple(t.shape) for t in model.replay_buffer.sample(32)[:5]]
    [(32, 4), (32, 1), (32, 4), (32, 1), (32, 1)]
    """

    def __init__(
        self,
        buffer_size: int,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        device: th.device | str = "auto",
        n_envs: int = 1,
        optimize_memory_usage: bool = False,
        handle_timeout_termination: bool = True,
        *,
        seed: int | None = None,
        check_values: bool = True,
        **unknown: Any,
    ) -> None:
        who = type(self).__name__
        if unknown:
            raise InvalidArgumentError(
                f"{who}: unknown keyword {sorted(unknown)[0]!r} (replay_buffer_kwargs take seed, "
                f"check_values{', alpha, beta, eps' if isinstance(self, PrioritizedReplayBuffer) else ''})"
            )
        check_int(buffer_size, who, "buffer_size", low=1)
        check_int(n_envs, who, "n_envs", low=1)
        if not isinstance(check_values, bool):
            raise InvalidTypeError(f"{who}(check_values={check_values!r}): expected True or False")
        if seed is not None:
            check_int(seed, who, "seed", low=0)
        _check_space(observation_space, "observation")
        _check_space(action_space, "action")
        if optimize_memory_usage:
            raise InvalidArgumentError(
                "replaybank.sb3 buffers keep each transition's next_obs: optimize_memory_usage=True "
                "is not supported (leave it False)"
            )
        # SB3's ReplayBuffer.__init__ would allocate its own arrays: only the base's bookkeeping
        BaseBuffer.__init__(self, buffer_size, observation_space, action_space, device, n_envs=n_envs)
        self.buffer_size = max(buffer_size // n_envs, 1)  # rows of n_envs transitions, as SB3
        self.optimize_memory_usage = False
        self.handle_timeout_termination = handle_timeout_termination
        if seed is None:
            seed = int(np.random.randint(0, 2**31 - 1))
        self._seed = seed
        obs_dtype = observation_space.dtype
        self.spec = {
            "obs": (self.obs_shape, obs_dtype),
            "next_obs": (self.obs_shape, obs_dtype),
            "action": ((self.action_dim,), self._maybe_cast_dtype(action_space.dtype)),
            "reward": ((), np.float32),
            "done": ((), np.float32),
        }
        self.bank = Bank(
            self.buffer_size * n_envs, sampler=self._sampler(), seed=seed, spec=self.spec, cast="unsafe"
        )
        self.check_values = check_values
        self._obs_size = int(np.prod(self.obs_shape))
        self._obs_float = np.dtype(obs_dtype).kind == "f"
        self._action_kind, self._action_low, self._action_high = _action_check(action_space)

    def _sampler(self) -> Any:
        return Uniform()

    # -- SB3's interface ------------------------------------------------------------------------
    def add(  # type: ignore[override]
        self,
        obs: np.ndarray,
        next_obs: np.ndarray,
        action: np.ndarray,
        reward: np.ndarray,
        done: np.ndarray,
        infos: list[dict[str, Any]] | Mapping[str, Any],
    ) -> None:
        """Store one vector-env step: ``n_envs`` transitions.

        ``infos`` is an SB3 VecEnv's list of ``n_envs`` dicts, or, with
        ``handle_timeout_termination=False``, a gymnasium vector env's one dict (unused then), as
        CleanRL's ``dqn.py`` passes it.

        Raises:
            ReplayBankError: naming the argument: an array that does not hold ``n_envs``
                transitions of the spaces' shapes, ``infos`` that are neither ``n_envs`` dicts nor
                (without timeout handling) one dict, and
                with ``check_values`` a NaN / infinite reward or float observation, a ``done``
                other than 0 or 1, an action outside a discrete space or a float one for it.
        """
        n = self.n_envs
        if type(infos) is not list or len(infos) != n or any(type(i) is not dict for i in infos):
            infos = self._check_infos(infos)
        # SB3 passes numpy arrays: no np.asarray call for those (the same values either way)
        array = np.ndarray
        obs = obs if type(obs) is array else self._array(obs, "obs")
        next_obs = next_obs if type(next_obs) is array else self._array(next_obs, "next_obs")
        action = action if type(action) is array else self._array(action, "action")
        reward = reward if type(reward) is array else self._array(reward, "reward")
        done = done if type(done) is array else self._array(done, "done")
        k = "biuf"
        if obs.dtype.kind not in k or next_obs.dtype.kind not in k or action.dtype.kind not in k or (
            reward.dtype.kind not in k or done.dtype.kind not in k
        ):
            for name, arr in zip(("obs", "next_obs", "action", "reward", "done"), (obs, next_obs, action, reward, done)):
                self._array(arr, name)
        size = self._obs_size * n
        if obs.size != size or next_obs.size != size or action.size != self.action_dim * n or (
            reward.size != n or done.size != n
        ):
            self._wrong_size(obs, next_obs, action, reward, done)
        if self.check_values:
            self._check_values(obs, next_obs, action, reward, done)
        if n == 1:  # the per-step path: one item, no batch arrays (ReplayBuffer.add)
            timeout = self.handle_timeout_termination and infos[0].get("TimeLimit.truncated", False)
            shape = self.obs_shape
            self.bank.add(
                obs=obs.reshape(shape),
                next_obs=next_obs.reshape(shape),
                action=action.reshape(self.action_dim),
                reward=reward.item(),
                done=0.0 if timeout else float(done.item()),
            )
            self.pos += 1  # _advance, inline on the per-step path
            if self.pos == self.buffer_size:
                self.full, self.pos = True, 0
            return
        done = np.asarray(done, dtype=np.float32).reshape(n)
        if self.handle_timeout_termination:
            truncated = np.array([info.get("TimeLimit.truncated", False) for info in infos], dtype=np.float32)
            done = done * (1 - truncated)
        self.bank.extend(
            {
                "obs": np.asarray(obs).reshape(n, *self.obs_shape),
                "next_obs": np.asarray(next_obs).reshape(n, *self.obs_shape),
                "action": np.asarray(action).reshape(n, self.action_dim),
                "reward": np.asarray(reward).reshape(n),
                "done": done,
            }
        )
        self._advance()

    def _array(self, value: Any, name: str) -> np.ndarray:
        if value is None:
            raise InvalidArgumentError(f"ReplayBuffer.add({name}=None): expected an array of {self.n_envs} env(s)")
        try:
            arr = np.asarray(value)
        except (TypeError, ValueError) as err:
            raise InvalidArgumentError(f"ReplayBuffer.add({name}): not an array ({err})") from None
        if arr.dtype.kind not in "biuf":
            raise InvalidTypeError(f"ReplayBuffer.add({name}): expected numbers, got dtype {arr.dtype}")
        return arr

    def _check_infos(self, infos: Any) -> list[dict[str, Any]]:
        n = self.n_envs
        if isinstance(infos, Mapping):  # a gymnasium vector env's infos (CleanRL passes them): one dict of arrays
            if self.handle_timeout_termination:
                raise InvalidArgumentError(
                    "ReplayBuffer.add(infos): got one dict (a gymnasium vector env's infos), which holds no per-env "
                    "'TimeLimit.truncated'; with handle_timeout_termination=True pass a list of n_envs dicts (an SB3 "
                    "VecEnv's), or build the buffer with handle_timeout_termination=False and pass the terminations "
                    "as done, as CleanRL does"
                )
            return [{} for _ in range(n)]
        if not isinstance(infos, (list, tuple)) or len(infos) != n:
            got = f"{len(infos)} entries" if isinstance(infos, (list, tuple)) else repr(infos)
            raise InvalidArgumentError(
                f"ReplayBuffer.add(infos): expected a list of {n} dicts, one per env (n_envs={n}), got "
                f"{got}; pass the infos the vector env returned ([{{}}] * n_envs when there are none)"
            )
        for i, info in enumerate(infos):
            if not isinstance(info, Mapping):
                raise InvalidArgumentError(
                    f"ReplayBuffer.add(infos[{i}]): expected a dict, got {type(info).__name__}"
                )
        return list(infos)

    def _wrong_size(self, *arrays: np.ndarray) -> None:
        n, names = self.n_envs, ("obs", "next_obs", "action", "reward", "done")
        per = (self._obs_size, self._obs_size, self.action_dim, 1, 1)
        shapes = (self.obs_shape, self.obs_shape, (self.action_dim,), (), ())
        for name, arr, k, shape in zip(names, arrays, per, shapes):
            if arr.size != k * n:
                raise InvalidArgumentError(
                    f"ReplayBuffer.add({name}): shape {arr.shape} holds {arr.size} values, expected "
                    f"n_envs={n} x {shape} = {k * n} (an array per step of all {n} envs, of the "
                    "spaces the buffer was built with)"
                )

    def _check_values(
        self, obs: np.ndarray, next_obs: np.ndarray, action: np.ndarray, reward: np.ndarray, done: np.ndarray
    ) -> None:
        one = self.n_envs == 1
        if one:  # Python scalars: cheaper than numpy reductions on one value
            r, d = reward.item(), done.item()
            if reward.dtype.kind == "b" or not math.isfinite(r):
                raise _bad("reward", "expected a finite number", reward)
            if d != 0 and d != 1:  # NaN fails both
                raise _bad("done", "expected 0 or 1 (False or True)", done)
        else:
            if reward.dtype.kind == "b" or not np.isfinite(reward).all():
                raise _bad("reward", "expected finite numbers", reward)
            if not ((done == 0) | (done == 1)).all():
                raise _bad("done", "expected 0 or 1 (False or True) per env", done)
        if self._obs_float:
            for name, arr in (("obs", obs), ("next_obs", next_obs)):
                # isfinite does no arithmetic on the values, so an inf raises no floating-point
                # warning (a dot with zeros would: inf * 0); count_nonzero is a plain C loop,
                # cheaper than the reduction of .all() on this per-add path
                if np.count_nonzero(np.isfinite(arr)) != arr.size:
                    raise _bad(name, "a float observation is NaN or infinite", arr)
        if one and self._action_kind == "discrete" and action.size == 1:
            x = action.item()
            if type(x) is int and self._action_low[0] <= x < self._action_high[0]:
                return  # the common case (Discrete): checked without numpy reductions
        if self._action_kind == "box":
            if action.dtype.kind == "f" and not np.isfinite(action).all():
                raise _bad("action", "expected finite numbers", action)
            return
        if action.dtype.kind not in "biu":
            raise _bad(
                "action", f"{self.action_space} takes integer actions, got dtype {action.dtype}", action
            )
        a = action.reshape(self.n_envs, -1)
        low, high = self._action_low, self._action_high
        if (a < low).any() or (a >= high).any():
            lo, hi = (v.tolist()[0] if v.size == 1 else v.tolist() for v in (low, high - 1))
            raise _bad("action", f"outside {self.action_space}: expected integers from {lo} to {hi}", action)

    def _advance(self) -> None:
        self.pos += 1
        if self.pos == self.buffer_size:
            self.full, self.pos = True, 0

    def sample(self, batch_size: int, env: Any = None) -> ReplayBufferSamples:  # type: ignore[override]
        """A uniform batch, SB3's ``ReplayBufferSamples`` on the buffer's device; ``env`` (a
        ``VecNormalize``) normalises observations and rewards as SB3 does."""
        return ReplayBufferSamples(*self._tensors(self.bank.sample(batch_size).data, env))

    def _tensors(self, data: dict[str, np.ndarray], env: Any) -> tuple[th.Tensor, ...]:
        obs, next_obs, reward = data["obs"], data["next_obs"], data["reward"].reshape(-1, 1)
        if env is not None:
            # SB3 types these for dict observations too; this buffer holds Box observations only
            obs, next_obs = self._normalize_obs(obs, env), self._normalize_obs(next_obs, env)  # type: ignore[assignment]
            reward = self._normalize_reward(reward, env)
        arrays = (obs, data["action"], next_obs, data["done"].reshape(-1, 1), reward)
        # the sampled arrays are fresh copies: no second copy (SB3's to_torch copies)
        if self.device.type == "cpu":
            return tuple(map(th.from_numpy, arrays))
        return tuple(th.as_tensor(a, device=self.device) for a in arrays)

    def size(self) -> int:
        """Stored vector-env steps (transitions // n_envs), SB3's meaning."""
        return len(self.bank) // self.n_envs

    def reset(self) -> None:
        """Remove every stored transition (``replaybank.ReplayBuffer.clear``)."""
        self.bank.clear()
        self.pos, self.full = 0, False

    def _get_samples(self, batch_inds: np.ndarray, env: Any = None) -> ReplayBufferSamples:
        raise NotImplementedError("replaybank.sb3 buffers sample through sample(), not by SB3 row index")

    # -- pickling (SB3's save_replay_buffer / load_replay_buffer) -------------------------------
    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["bank"] = self.bank.state_dict()  # arrays and RNG state; the lock is not picklable
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        bank_state = state.pop("bank")
        self.__dict__.update(state)
        self.__dict__.setdefault("check_values", True)  # a buffer pickled before the value checks
        self._obs_size = int(np.prod(self.obs_shape))
        self._obs_float = np.dtype(self.observation_space.dtype).kind == "f"
        self._action_kind, self._action_low, self._action_high = _action_check(self.action_space)
        self.bank = Bank(
            self.buffer_size * self.n_envs, sampler=self._sampler(), seed=0, spec=self.spec, cast="unsafe"
        )
        self.bank.load_state_dict(bank_state)


class PrioritizedReplayBuffer(ReplayBuffer):
    """Proportional prioritized replay (``replaybank.Prioritized``) for SB3 algorithms.

    Samples are :class:`PrioritizedReplayBufferSamples`: SB3's fields plus ``weights`` and ``ids``.
    SB3's own ``DQN`` reads only the usual fields (it would replay by priority but neither weigh
    the loss nor update priorities); :class:`replaybank.sb3.PERDQN` does both.

    Args:
        alpha, beta, eps: ``Prioritized``'s (priority exponent, importance-weight exponent in
            ``[0, 1]``, added to every priority: ``eps > 0``, so an item whose TD error is 0 is
            still replayed); ``beta`` may be changed later (``PERDQN`` anneals it).
        the rest: :class:`ReplayBuffer`'s.

    Raises:
        ReplayBankError: ``eps`` not finite and > 0, ``beta`` outside ``[0, 1]`` (weights
            ``(N * P)^-beta`` with a larger exponent underflow to 0 for all but the rarest items),
            ``alpha`` out of ``Prioritized``'s range; :class:`ReplayBuffer`'s.
    """

    def __init__(
        self,
        buffer_size: int,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        device: th.device | str = "auto",
        n_envs: int = 1,
        optimize_memory_usage: bool = False,
        handle_timeout_termination: bool = True,
        *,
        alpha: float = 0.6,
        beta: float = 0.4,
        eps: float = 1e-6,
        seed: int | None = None,
        check_values: bool = True,
        **unknown: Any,
    ) -> None:
        check_real(eps, type(self).__name__, "eps", low=0.0, low_open=True)
        check_real(beta, type(self).__name__, "beta", low=0.0, high=1.0)
        Prioritized(alpha=alpha, beta=beta, eps=eps)  # refuses bad values before anything is built
        self._per_args = {"alpha": alpha, "beta": beta, "eps": eps}
        super().__init__(
            buffer_size,
            observation_space,
            action_space,
            device,
            n_envs,
            optimize_memory_usage,
            handle_timeout_termination,
            seed=seed,
            check_values=check_values,
            **unknown,
        )

    def _sampler(self) -> Any:
        args = self._per_args
        return Prioritized(alpha=args["alpha"], beta=args["beta"], eps=args["eps"])

    @property
    def beta(self) -> float:
        """The importance-weight exponent of the next sample."""
        return float(self.bank.sampler.beta)  # type: ignore[attr-defined]

    @beta.setter
    def beta(self, value: float) -> None:
        check_real(value, type(self).__name__, "beta", low=0.0, high=1.0)
        self.bank.sampler.beta = value  # type: ignore[attr-defined]
        self._per_args["beta"] = self.bank.sampler.beta  # type: ignore[attr-defined]

    def sample(self, batch_size: int, env: Any = None) -> PrioritizedReplayBufferSamples:  # type: ignore[override]
        """A batch drawn by priority; its ``ids`` are read-only (see ``update_priorities``)."""
        batch = self.bank.sample(batch_size)
        weights = batch.weights.reshape(-1, 1)
        weights = th.from_numpy(weights) if self.device.type == "cpu" else th.as_tensor(weights, device=self.device)
        obs, actions, next_obs, dones, rewards = self._tensors(batch.data, env)
        ids = np.asarray(batch.ids)  # the same (read-only) array: update_priorities knows it
        return PrioritizedReplayBufferSamples(obs, actions, next_obs, dones, rewards, None, weights, ids)

    def update_priorities(self, ids: np.ndarray, priorities: Any) -> int:
        """Set the sampled items' priorities (e.g. |TD error|, a tensor or an array); ids
        overwritten since are skipped. Returns how many were applied. The ``ids`` of the last
        sample, given back before anything is added, skip the id checks
        (``replaybank.ReplayBuffer.update_priorities``); priorities are always checked."""
        if isinstance(priorities, th.Tensor):
            priorities = priorities.detach().to("cpu", th.float64).numpy()
        if type(priorities) is not np.ndarray or priorities.ndim != 1 or priorities.dtype.char not in "fd":
            priorities = np.asarray(priorities, dtype=np.float64).reshape(-1)
        # a 1-D float32 / float64 array goes as it is: the buffer checks it and reads it as float64
        return self.bank.update_priorities(ids, priorities)
