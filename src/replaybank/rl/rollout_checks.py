"""What :class:`~replaybank.rl.rollouts.RolloutBuffer` refuses on write and on load.

On write (``add_group``, ``set_policy_version``): ids, token ids and policy versions are integers
(a float token is refused, never truncated; a ``bool`` is not a number), ``>= 0`` and within
int64; rewards, advantages and log-probs are finite, also once stored as float32, and a log-prob
is at most :data:`LOGPROB_TOLERANCE` above 0 (a probability is at most 1). On load
(``load_state_dict``): the whole state is checked (keys, types, ranges, every live group against
the stored rollouts) before anything is restored. Every error is a ``ReplayBankError``
(``InvalidTypeError``, ``InvalidArgumentError``, ``InvalidStateError``) naming the value.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from replaybank.checks import check_int, check_state_keys, state_number
from replaybank.errors import (
    InvalidArgumentError,
    InvalidStateError,
    InvalidTypeError,
    ReplayBankError,
)

#: the largest id, token id or policy version taken (int64, with room to count past it)
MAX_ID = 2**62
#: how far above 0 a log-probability may be: float error in a log-softmax (``1e-7`` is common in
#: float32), never a probability above 1; a larger value is refused (it is a logit or a sign slip)
LOGPROB_TOLERANCE = 1e-6
_STATE_KEYS = ("schema_version", "buffer", "rng", "policy_version", "next_group", "groups", "evicted")
_EVICTED_KEYS = ("stale", "reuse", "capacity")


def check_version(version: Any, where: str) -> int:
    """A policy version: an integer in ``[0, 2**62]`` (``1.7`` and ``True`` refused)."""
    return check_int(version, "RolloutBuffer", where, low=0, high=MAX_ID)


def integers(values: Any, where: str) -> np.ndarray:
    """A 1-D sequence of integers in ``[0, 2**62]`` as int64; floats are refused, not truncated."""
    try:
        arr = np.asarray(values)
    except (ValueError, TypeError, OverflowError) as err:
        raise InvalidTypeError(f"RolloutBuffer: {where} is not a sequence of integers ({err})") from None
    if arr.ndim != 1 or (arr.size and arr.dtype.kind not in "iu"):
        if arr.size == 0 and arr.ndim == 1:
            return arr.astype(np.int64)
        raise InvalidTypeError(
            f"RolloutBuffer: {where} must be a 1-D sequence of integers, got dtype {arr.dtype} shape {arr.shape}"
            " (float token ids are refused, not truncated)"
        )
    if arr.size and (int(arr.min()) < 0 or int(arr.max()) > MAX_ID):
        raise InvalidArgumentError(f"RolloutBuffer: {where} holds values outside [0, 2**62]: [{arr.min()}, {arr.max()}]")
    return arr.astype(np.int64)


def finite32(values: Any, where: str, ndim: int = 1) -> np.ndarray:
    """Real numbers, finite in float64 and once stored as float32, as float32."""
    try:
        arr = np.asarray(values)
    except (ValueError, TypeError) as err:
        raise InvalidTypeError(f"RolloutBuffer: {where} is not an array of numbers ({err})") from None
    if arr.ndim != ndim or (arr.size and arr.dtype.kind not in "iuf"):
        raise InvalidTypeError(f"RolloutBuffer: {where} must be {ndim}-D real numbers, got dtype {arr.dtype} shape {arr.shape}")
    with np.errstate(over="ignore", invalid="ignore"):
        out = arr.astype(np.float32)
    if out.size and not np.isfinite(out).all():
        bad = arr.reshape(-1)[int(np.argmin(np.isfinite(out).reshape(-1)))]
        raise InvalidArgumentError(f"RolloutBuffer: {where} holds {float(bad)!r}: every value must be finite (float32)")
    return out


def log_probs(values: Any, where: str) -> np.ndarray:
    """Finite log-probabilities (:func:`finite32`), each ``<= LOGPROB_TOLERANCE``."""
    out = finite32(values, where)
    if out.size and float(out.max()) > LOGPROB_TOLERANCE:
        k = int(np.argmax(out))
        raise InvalidArgumentError(
            f"RolloutBuffer: {where} holds {float(out[k])!r} at token {k}: a log-probability is <= 0 "
            f"(up to {LOGPROB_TOLERANCE:g} of float error); pass log-softmax values of the sampled "
            "tokens, not logits or probabilities"
        )
    return out


def _rows(value: Any, name: str) -> list[Any]:
    if isinstance(value, (str, bytes, Mapping)) or not hasattr(value, "__iter__") or not hasattr(value, "__len__"):
        raise InvalidTypeError(f"add_group: {name} must be a sequence of rows, got {type(value).__name__}")
    return list(value)


def check_group(
    prompt_id: Any, tokens: Sequence[Any], rewards: Any, logprobs: Sequence[Any], version: Any, advantages: Any
) -> tuple[int, list[np.ndarray], np.ndarray, list[np.ndarray], int, np.ndarray | None]:
    """``add_group``'s arguments checked and converted (see the module doc)."""
    pid = check_int(prompt_id, "RolloutBuffer.add_group", "prompt_id", low=0, high=MAX_ID)
    ver = check_version(version, "add_group version")
    toks = [integers(t, f"add_group: tokens of rollout {k}") for k, t in enumerate(_rows(tokens, "tokens"))]
    lps = [log_probs(lp, f"add_group: log-probs of rollout {k}") for k, lp in enumerate(_rows(logprobs, "logprobs"))]
    rew = finite32(rewards, "add_group: rewards")
    adv = None if advantages is None else finite32(advantages, "add_group: advantages")
    if adv is not None and adv.shape != rew.shape:
        raise InvalidArgumentError(f"add_group: {adv.size} advantages for {rew.size} rewards")
    return pid, toks, rew, lps, ver, adv


def check_state(state: Any, buffer: Any, max_reuse: int, max_staleness: int) -> dict[str, Any]:
    """The parts of a ``RolloutBuffer`` state, checked against each other and against ``buffer``
    (a scratch ``ReplayBuffer`` the state's ``buffer`` entry was already loaded into)."""
    who = "RolloutBuffer"
    check_state_keys(state, who, _STATE_KEYS)
    policy = state_number(state, "policy_version", who, integer=True, low=0, high=MAX_ID)
    next_group = state_number(state, "next_group", who, integer=True, low=0, high=MAX_ID)
    evicted = state["evicted"]
    check_state_keys(evicted, f"{who} evicted", _EVICTED_KEYS)
    counts = {k: state_number(evicted, k, f"{who} evicted", integer=True, low=0, high=MAX_ID) for k in _EVICTED_KEYS}
    groups = state["groups"]
    if not isinstance(groups, Mapping):
        raise InvalidStateError(f"{who} state['groups']: expected a mapping, got {type(groups).__name__}")
    out: dict[int, tuple[np.ndarray, int, int]] = {}
    seen: set[int] = set()
    for key, g in groups.items():
        where = f"{who} state['groups'][{key!r}]"
        if not isinstance(key, (str, int)) or isinstance(key, bool) or not str(key).isdigit():
            raise InvalidStateError(f"{where}: a group id must be an integer >= 0")
        gid = int(key)
        if gid >= next_group:
            raise InvalidStateError(f"{where}: group id {gid} was never issued (next_group={next_group})")
        check_state_keys(g, where, ("ids", "version", "uses"))
        version = state_number(g, "version", where, integer=True, low=0, high=policy)
        if policy - version > max_staleness:
            raise InvalidStateError(f"{where}: version {version} is stale at policy version {policy} (would be evicted)")
        uses = state_number(g, "uses", where, integer=True, low=0, high=max_reuse - 1)
        try:
            ids = integers(g["ids"], f"{where}['ids']")
        except InvalidArgumentError as err:
            raise InvalidStateError(str(err)) from None
        if ids.size == 0 or seen.intersection(ids.tolist()) or len(set(ids.tolist())) != ids.size:
            raise InvalidStateError(f"{where}: ids must be distinct, non-empty and in no other group")
        seen.update(ids.tolist())
        try:
            stored = bool(buffer.contains(ids).all())
        except ReplayBankError:  # ids the buffer never issued
            stored = False
        if not stored:
            raise InvalidStateError(f"{where}: ids {ids.tolist()[:5]} are not all stored in the buffer")
        data = buffer.get(ids)
        if (np.asarray(data["group_id"]) != gid).any() or (np.asarray(data["version"]) != version).any():
            raise InvalidStateError(f"{where}: the stored rollouts belong to another group or version")
        for col in ("reward", "advantage", "logprobs"):
            values = np.asarray(getattr(data[col], "values", data[col]), dtype=np.float64)
            if not np.isfinite(values).all():
                raise InvalidStateError(f"{where}: a stored {col} is NaN or infinite")
            if col == "logprobs" and values.size and values.max() > LOGPROB_TOLERANCE:
                raise InvalidStateError(f"{where}: a stored log-prob is {float(values.max())!r}, above 0")
        for col in ("prompt_id", "tokens"):
            values = np.asarray(getattr(data[col], "values", data[col]))
            if values.size and (values.min() < 0 or values.max() > MAX_ID):
                raise InvalidStateError(f"{where}: a stored {col} is outside [0, 2**62]")
        out[gid] = (ids, version, uses)
    return {"policy_version": policy, "next_group": next_group, "groups": out, "evicted": counts}
