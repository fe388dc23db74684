"""Rollout replay for RL post-training of language models (GRPO-style), after arXiv 2604.08706.

Generating completions is the expensive part of RL post-training; reusing recent rollouts for a
few updates cuts it, provided they are not too stale and the update corrects for the policy having
moved. ``RolloutBuffer`` keeps rollouts (prompt id, group id, completion tokens, reward, advantage,
behaviour log-probs, policy version) and enforces:

* a staleness bound: a rollout of policy version ``v`` is served only while
  ``current_version - v <= max_staleness``; ``set_policy_version`` evicts the others at once;
* a reuse limit: a rollout is served at most ``max_reuse`` times, then evicted;
* group-aware sampling: a batch holds whole groups (GRPO's advantages are relative to the group),
  never a part of one;
* a minimum share of the newest rollouts: at least ``ceil(min_fresh * groups_per_batch)`` groups
  of every batch come from the newest policy version stored.

``importance_ratio`` gives the per-token ratio ``pi_current / pi_behaviour`` for off-policy
correction (PPO/GRPO clipped surrogate, or truncated importance weights).

Storage is a ``ReplayBuffer`` with ``RaggedStorage``: tokens and log-probs are ragged columns (one
flat array each, no Python objects), ids are the buffer's, and ``state_dict`` covers it. Which
rollouts are *live* is kept here, in a per-group index, because the core buffer has no way to
remove chosen items on demand and no sampler that draws whole groups: an evicted rollout leaves the
index at once (it is never served again, and ``live_ids`` no longer lists it) and its slot is
reclaimed by the buffer's FIFO overwrite. If the capacity is too small, FIFO overwrite reaches live
rollouts first; their whole group is then evicted (reason ``"capacity"``), never split.

Thread safety: every public method holds one re-entrant lock for its whole run, so a producer
thread may ``add_group`` (and ``set_policy_version``) while the learner calls ``sample``, as in
asynchronous RL where generation of the next batch overlaps learning on this one. Each call sees
and leaves a consistent buffer: a batch never holds part of a group, a rollout served past the
staleness bound or the reuse limit, or a group added while the batch was being drawn.

>>> import numpy as np
>>> buf = RolloutBuffer(capacity=64, max_staleness=1, max_reuse=2, min_fresh=0.5, seed=0)
>>> g = buf.add_group(prompt_id=7, tokens=[np.array([1, 2]), np.array([3])], rewards=[1.0, 0.0],
...                   logprobs=[np.array([-0.1, -0.2]), np.array([-0.5])], version=0)
>>> batch = buf.sample(2)
>>> batch.group_id.tolist(), batch.tokens.lengths.tolist(), batch.advantage.round(3).tolist()
([0, 0], [2, 1], [1.0, -1.0])
>>> buf.set_policy_version(2)   # version-0 rollouts are now 2 versions old > max_staleness
{'stale': 2}
>>> len(buf)
0
"""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from replaybank import Ragged, RaggedStorage, ReplayBuffer
from replaybank.checks import check_int, check_state_keys
from replaybank.errors import EmptyBufferError, InvalidStateError, ReplayBankError
from replaybank.rl.rollout_checks import check_group, check_state, check_version

SCHEMA_VERSION = 1


def group_advantages(rewards: Sequence[float] | np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """GRPO advantages: rewards standardised within their group, ``(r - mean) / (std + eps)``.

    >>> group_advantages([1.0, 0.0, 0.0, 1.0]).round(3).tolist()
    [1.0, -1.0, -1.0, 1.0]
    """
    r = np.asarray(rewards, dtype=np.float64)
    return ((r - r.mean()) / (r.std() + eps)).astype(np.float32)


def importance_ratio(current_logprobs: Any, behaviour_logprobs: Any, clip: float | None = None) -> Any:
    """Per-token ``exp(log pi_current - log pi_behaviour)``; with ``clip``, truncated at ``clip``.

    Works on numpy arrays and on torch tensors (``current_logprobs`` may carry gradients; the
    behaviour log-probs are constants). Shapes must match (e.g. ``batch.logprobs.values``).

    >>> importance_ratio(np.log([0.5, 0.2]), np.log([0.25, 0.4])).round(3).tolist()
    [2.0, 0.5]
    """
    if hasattr(current_logprobs, "new_tensor"):  # torch, without importing it here
        behaviour = current_logprobs.new_tensor(np.asarray(behaviour_logprobs))
        ratio = (current_logprobs - behaviour).exp()
        return ratio if clip is None else ratio.clamp(max=clip)
    ratio = np.exp(np.asarray(current_logprobs) - np.asarray(behaviour_logprobs))
    return ratio if clip is None else np.minimum(ratio, clip)


@dataclass
class RolloutBatch:
    """Whole groups of rollouts. Per-rollout arrays are aligned; ``tokens`` and ``logprobs`` are
    ``Ragged`` (one row per rollout, ``logprobs.values`` aligned with ``tokens.values``)."""

    ids: np.ndarray
    prompt_id: np.ndarray
    group_id: np.ndarray
    tokens: Ragged
    reward: np.ndarray
    advantage: np.ndarray
    logprobs: Ragged
    version: np.ndarray
    staleness: np.ndarray  # current policy version - version, per rollout
    uses: np.ndarray  # times served, this batch included
    fresh_share: float  # share of groups from the newest version stored

    def __len__(self) -> int:
        return len(self.ids)


@dataclass
class _Group:
    ids: np.ndarray
    version: int
    uses: int = 0


class RolloutBuffer:
    """Rollouts for GRPO-style training with bounded staleness and reuse.

    Args:
        capacity: rollouts stored at most (the storage ring's size).
        max_staleness: serve a rollout while ``current_version - its version <= max_staleness``
            (0 = on-policy only).
        max_reuse: times a rollout may be served before it is evicted (>= 1).
        min_fresh: minimum share (0..1) of each batch's groups from the newest version stored.
        seed: seed of all sampling randomness.

    Raises:
        ReplayBankError: on any argument out of range (named in the message).
    """

    def __init__(
        self, capacity: int, *, max_staleness: int, max_reuse: int = 4, min_fresh: float = 0.0, seed: int | None = None
    ) -> None:
        if isinstance(max_staleness, bool) or not isinstance(max_staleness, (int, np.integer)) or max_staleness < 0:
            raise ReplayBankError(f"max_staleness must be an integer >= 0 (policy versions), got {max_staleness!r}")
        if isinstance(max_reuse, bool) or not isinstance(max_reuse, (int, np.integer)) or max_reuse < 1:
            raise ReplayBankError(f"max_reuse must be an integer >= 1, got {max_reuse!r}")
        if isinstance(min_fresh, bool) or not isinstance(min_fresh, (int, float, np.integer, np.floating)) or not (
            0.0 <= min_fresh <= 1.0
        ):
            raise ReplayBankError(f"min_fresh must lie in [0, 1], got {min_fresh!r}")
        self.max_staleness = int(max_staleness)
        self.max_reuse = int(max_reuse)
        self.min_fresh = float(min_fresh)
        self.buffer = ReplayBuffer(capacity, storage=RaggedStorage(), seed=seed)
        self.rng = np.random.default_rng(seed)
        self.policy_version = 0
        self.groups: dict[int, _Group] = {}  # live groups by group id, in insertion order
        self.next_group = 0
        self.evicted = {"stale": 0, "reuse": 0, "capacity": 0}  # rollouts, by reason
        self.lock = threading.RLock()  # held by every public method (see the module docstring)

    def __len__(self) -> int:
        with self.lock:
            return sum(len(g.ids) for g in self.groups.values())

    @property
    def live_ids(self) -> np.ndarray:
        """Ids of the rollouts that may still be served."""
        with self.lock:
            parts = [g.ids for g in self.groups.values()]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)

    @property
    def live_groups(self) -> int:
        """Groups that may still be served."""
        with self.lock:
            return len(self.groups)

    # -- writing --------------------------------------------------------------------------------
    def add_group(
        self,
        prompt_id: int,
        tokens: Sequence[np.ndarray],
        rewards: Sequence[float] | np.ndarray,
        logprobs: Sequence[np.ndarray],
        version: int,
        advantages: Sequence[float] | np.ndarray | None = None,
    ) -> int:
        """Store the completions sampled for one prompt as one group; returns its group id.

        Args:
            prompt_id: which prompt the group answers.
            tokens: one int array of completion tokens per rollout.
            rewards: one reward per rollout.
            logprobs: per rollout, the behaviour policy's log-prob of each completion token.
            version: the policy version that generated them (<= the current version).
            advantages: per rollout; default ``group_advantages(rewards)``.
        """
        pid, toks, rew, lps, ver, adv = check_group(prompt_id, tokens, rewards, logprobs, version, advantages)
        g = len(toks)
        if g == 0:
            raise ReplayBankError("add_group: a group needs at least one rollout")
        if g > self.buffer.capacity:
            raise ReplayBankError(f"add_group: a group of {g} rollouts exceeds the capacity {self.buffer.capacity}")
        if len(rew) != g or len(lps) != g:
            raise ReplayBankError(f"add_group: {g} token rows but {len(rew)} rewards and {len(lps)} log-prob rows")
        for k, (t, lp) in enumerate(zip(toks, lps)):
            if len(t) != len(lp):
                raise ReplayBankError(f"add_group: rollout {k} has {len(t)} tokens but {len(lp)} log-probs")
        if adv is None:
            adv = group_advantages(rew)
        with self.lock:
            return self._add_group(pid, toks, rew, lps, ver, adv)

    def _add_group(
        self, prompt_id: int, tokens: Sequence[np.ndarray], rewards: Sequence[float] | np.ndarray,
        logprobs: Sequence[np.ndarray], version: int, adv: np.ndarray,
    ) -> int:
        g = len(tokens)
        if version > self.policy_version:
            raise ReplayBankError(
                f"add_group: version {version} is newer than the current policy version {self.policy_version}; "
                "call set_policy_version first"
            )
        group_id = self.next_group
        self.next_group += 1
        wraps = len(self.buffer) + g > self.buffer.capacity  # FIFO will overwrite older rollouts
        ids = self.buffer.extend({
            "prompt_id": np.full(g, prompt_id, dtype=np.int64),
            "group_id": np.full(g, group_id, dtype=np.int64),
            "tokens": list(tokens),
            "reward": np.asarray(rewards, dtype=np.float32),
            "advantage": adv,
            "logprobs": list(logprobs),
            "version": np.full(g, version, dtype=np.int64),
        })
        if wraps:  # drop every group that lost a member, so no group is ever served in part
            self._evict_overwritten()
        self.groups[group_id] = _Group(ids, int(version))
        if self.policy_version - version > self.max_staleness:  # stale on arrival
            self._evict(group_id, "stale")
        return group_id

    def _evict_overwritten(self) -> None:
        for gid in [gid for gid, g in self.groups.items() if not self.buffer.contains(g.ids).all()]:
            self._evict(gid, "capacity")

    def _evict(self, group_id: int, reason: str) -> None:
        self.evicted[reason] += len(self.groups.pop(group_id).ids)

    def set_policy_version(self, version: int) -> dict[str, int]:
        """Advance the current policy version and evict every group older than the staleness
        bound. Returns ``{"stale": rollouts evicted}``."""
        version = check_version(version, "set_policy_version version")
        with self.lock:  # evicting while a learner's sample() picks groups would serve a removed group
            if version < self.policy_version:
                raise ReplayBankError(f"policy version may not go back: {version} < {self.policy_version}")
            self.policy_version = int(version)
            stale = [gid for gid, g in self.groups.items() if version - g.version > self.max_staleness]
            count = sum(len(self.groups[gid].ids) for gid in stale)
            for gid in stale:
                self._evict(gid, "stale")
            return {"stale": count}

    # -- reading --------------------------------------------------------------------------------
    def sample(self, batch_size: int) -> RolloutBatch:
        """Whole groups, ``batch_size // group size`` of them, without repeats in a batch.

        At least ``ceil(min_fresh * groups)`` groups come from the newest version stored; the rest
        are uniform over the live groups. Each served rollout's use count goes up by one, and
        groups that reach ``max_reuse`` are evicted after this batch.

        Raises:
            EmptyBufferError: nothing live is stored.
            ReplayBankError: a group is larger than ``batch_size``, groups differ in size, or too
                few groups (or too few fresh groups) are live to fill the batch.
        """
        batch_size = check_int(batch_size, "RolloutBuffer.sample", "batch_size", low=1)
        with self.lock:
            return self._sample(batch_size)

    def _sample(self, batch_size: int) -> RolloutBatch:
        if not self.groups:
            raise EmptyBufferError("no live rollouts: add_group() first (or they were all evicted)")
        sizes = {len(g.ids) for g in self.groups.values()}
        if len(sizes) != 1:
            raise ReplayBankError(f"live groups differ in size {sorted(sizes)}; a batch of whole groups needs one size")
        size = sizes.pop()
        if size > batch_size:
            raise ReplayBankError(
                f"a group has {size} rollouts, more than batch_size={batch_size}; groups are never split, "
                f"so batch_size must be >= {size}"
            )
        n_groups = batch_size // size
        if n_groups > len(self.groups):
            raise ReplayBankError(
                f"batch_size={batch_size} needs {n_groups} groups of {size}, but only {len(self.groups)} are live"
            )
        gids = np.fromiter(self.groups, dtype=np.int64, count=len(self.groups))
        versions = np.array([self.groups[int(g)].version for g in gids])
        newest = gids[versions == versions.max()]
        need_fresh = math.ceil(self.min_fresh * n_groups - 1e-9)
        if need_fresh > len(newest):
            raise ReplayBankError(
                f"min_fresh={self.min_fresh} needs {need_fresh} groups of the newest version {versions.max()}, "
                f"but {len(newest)} are stored; generate more fresh groups or lower min_fresh"
            )
        fresh = self.rng.choice(newest, size=need_fresh, replace=False)
        rest = np.setdiff1d(gids, fresh)
        chosen = np.concatenate([fresh, self.rng.choice(rest, size=n_groups - need_fresh, replace=False)])
        ids = np.concatenate([self.groups[int(g)].ids for g in chosen])
        uses = np.repeat([self.groups[int(g)].uses + 1 for g in chosen], size)
        data = self.buffer.get(ids)
        n_fresh = int(np.isin(chosen, newest).sum())
        for g in chosen.tolist():
            self.groups[g].uses += 1
            if self.groups[g].uses >= self.max_reuse:
                self._evict(g, "reuse")
        version = np.asarray(data["version"])
        return RolloutBatch(
            ids=ids, prompt_id=np.asarray(data["prompt_id"]), group_id=np.asarray(data["group_id"]),
            tokens=data["tokens"], reward=np.asarray(data["reward"]),  # type: ignore[arg-type]
            advantage=np.asarray(data["advantage"]), logprobs=data["logprobs"],  # type: ignore[arg-type]
            version=version, staleness=self.policy_version - version, uses=uses,
            fresh_share=n_fresh / n_groups,
        )

    # -- state ----------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        with self.lock:
            return self._state_dict()

    def _state_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "buffer": self.buffer.state_dict(),
            "rng": self.rng.bit_generator.state,
            "policy_version": self.policy_version,
            "next_group": self.next_group,
            "groups": {str(k): {"ids": g.ids, "version": g.version, "uses": g.uses} for k, g in self.groups.items()},
            "evicted": dict(self.evicted),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a :meth:`state_dict`; everything is checked before anything is restored.

        Raises:
            InvalidStateError: another schema version; a missing or unknown key; the buffer's
                own state refused; a bad RNG state; a policy version, group id, version, use
                count or eviction count that is not an integer in range (``uses`` in
                ``[0, max_reuse)``, a version no staler than ``max_staleness``); a group whose ids
                are not stored, are shared, or belong to another group or version.
        """
        if not isinstance(state, Mapping) or state.get("schema_version") != SCHEMA_VERSION:
            got = state.get("schema_version") if isinstance(state, Mapping) else type(state).__name__
            raise InvalidStateError(f"RolloutBuffer state schema_version {got!r} is not {SCHEMA_VERSION}")
        check_state_keys(state, "RolloutBuffer", tuple(self._state_dict()))
        with self.lock:
            buffer = ReplayBuffer(self.buffer.capacity, storage=RaggedStorage())
            try:
                buffer.load_state_dict(state["buffer"])
            except (ValueError, TypeError, KeyError) as err:  # ReplayBankError included
                raise InvalidStateError(f"RolloutBuffer state['buffer']: {err}") from None
            rng = np.random.default_rng()
            try:
                rng.bit_generator.state = state["rng"]
            except (ValueError, TypeError, KeyError) as err:
                raise InvalidStateError(f"RolloutBuffer state['rng']: not a PCG64 state ({err})") from None
            checked = check_state(state, buffer, self.max_reuse, self.max_staleness)
            # all checked: restore
            self.buffer, self.rng = buffer, rng
            self.policy_version, self.next_group = checked["policy_version"], checked["next_group"]
            self.groups = {gid: _Group(ids, v, u) for gid, (ids, v, u) in checked["groups"].items()}
            self.evicted = checked["evicted"]
