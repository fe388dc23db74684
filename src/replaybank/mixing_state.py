"""A :class:`~replaybank.mixing.Mixer`'s saved position, checked whole before any of it is set.

The mixer calls these from ``load_state_dict`` and ``set_shares``; ``replaybank.hf.plan`` checks a
mix plan's inner mixer state with :func:`check_mixer_state` before restoring anything. This module
never imports ``mixing`` (it is given the mixer, typed by :class:`MixerLike`).
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from replaybank.checks import check_state_keys, state_array, state_number
from replaybank.errors import InvalidArgumentError, InvalidStateError
from replaybank.quotas import Shares, check_shares

MIXER_SCHEMA_VERSION = 1
_STATE_KEYS = ("schema_version", "seed", "sizes", "shares", "batch_size", "epoch", "step", "taken", "cursor", "credit")
_MAX_POSITION = 2**53  # epochs, steps and cycled rows past it are no position a run reaches
_MAX_CREDIT = 2.0


class MixerLike(Protocol):
    """What the checks read of a mixer."""

    sizes: np.ndarray
    shares: np.ndarray
    base_shares: np.ndarray
    batch_size: int
    seed: int
    epoch_source: int
    carry_credit: bool

    def replay(
        self, step: int, start: np.ndarray, taken: int = 0, shares: np.ndarray | None = None
    ) -> tuple[int | None, np.ndarray]: ...


def check_mixer_state(state: Any, mixer: MixerLike) -> dict[str, Any]:
    """``state`` checked against ``mixer`` (see :meth:`Mixer.load_state_dict`); returns the
    position as ``epoch``, ``step``, ``taken`` (ints), ``cursor`` (int64), ``credit`` and
    ``epoch_credit`` (float64), ``shares`` (normalised) and ``segment`` (``(step, taken, credit)``
    where the shares took effect)."""
    who = "Mixer"
    if not isinstance(state, dict) or state.get("schema_version") != MIXER_SCHEMA_VERSION:
        got = state.get("schema_version") if isinstance(state, dict) else type(state).__name__
        raise InvalidStateError(f"mixer state has schema_version {got!r}, expected {MIXER_SCHEMA_VERSION}")
    check_state_keys(state, who, _STATE_KEYS, ("epoch_credit", "segment") if mixer.carry_credit else ("segment",))
    for key, mine in (("seed", mixer.seed), ("sizes", mixer.sizes.tolist()), ("batch_size", mixer.batch_size)):
        got = state[key]
        if isinstance(mine, list):
            same = isinstance(got, (list, tuple)) and [type(x) is int and x for x in got] == mine
        else:
            same = type(got) is int and got == mine
        if not same:
            raise InvalidStateError(f"mixer state has {key}={got!r}, this mixer has {mine!r}")
    n = mixer.sizes.size
    shares = state_array(state, "shares", who, shape=(n,), low=0.0)
    if "segment" in state:  # steered: the saved shares are the ones in use, bit for bit
        try:
            checked_shares(shares, mixer, "state['shares']")
        except InvalidArgumentError as err:
            raise InvalidStateError(str(err)) from None
        if abs(float(shares.sum()) - 1.0) > 1e-9:
            raise InvalidStateError(f"mixer state has shares {state['shares']} summing to {shares.sum()}, not 1 (altered state)")
    elif np.allclose(shares / max(shares.sum(), 1e-300), mixer.base_shares):
        shares = mixer.base_shares
    else:
        raise InvalidStateError(f"mixer state has shares {state['shares']}, this mixer has {mixer.base_shares.tolist()}")
    n_epoch = int(mixer.sizes[mixer.epoch_source])
    out = {
        "epoch": state_number(state, "epoch", who, integer=True, low=0, high=_MAX_POSITION),
        "step": state_number(state, "step", who, integer=True, low=0, high=_MAX_POSITION),
        "taken": state_number(state, "taken", who, integer=True, low=0, high=n_epoch),
        "cursor": state_array(state, "cursor", who, shape=(n,), integer=True, low=0, high=_MAX_POSITION),
        # largest remainder with carried credit keeps every entry in (-1, 1) and the sum at 0
        "credit": state_array(state, "credit", who, shape=(n,), low=-_MAX_CREDIT, high=_MAX_CREDIT),
    }
    out["epoch_credit"] = _epoch_credit(state, mixer, out["epoch"])
    out["shares"] = shares
    out["segment"] = _segment(state, out)
    # the in-epoch position is a function of the step: replay the quotas from where the shares
    # took effect (the epoch's start, unless steered since) to it
    seg_step, seg_taken, seg_credit = out["segment"]
    taken, credit = mixer.replay(out["step"] - seg_step, seg_credit, seg_taken, shares)
    if taken is None:
        raise InvalidStateError(f"mixer state has step={out['step']}, past the end of an epoch of this mixer")
    if out["taken"] != taken or not np.allclose(out["credit"], credit, rtol=0.0, atol=1e-9):
        raise InvalidStateError(
            f"mixer state has taken={out['taken']}, credit={out['credit'].tolist()} at step {out['step']}; "
            f"this mixer is at taken={taken}, credit={credit.tolist()} there (altered state)"
        )
    return out


def checked_shares(shares: Shares, mixer: MixerLike, where: str) -> np.ndarray:
    """``shares`` normalised, for ``mixer``'s sources: a positive share needs rows, and the epoch
    source needs a positive share (else no epoch would end)."""
    try:
        new = check_shares(shares)
    except ValueError as err:
        raise InvalidArgumentError(f"Mixer.{where}: {err}") from None
    if new.shape != mixer.shares.shape:
        raise InvalidArgumentError(f"Mixer.{where}: {new.size} shares for {mixer.shares.size} sources")
    empty = np.flatnonzero((new > 0) & (mixer.sizes < 1))
    if empty.size:
        raise InvalidArgumentError(f"Mixer.{where}: source {int(empty[0])} has share {new[empty[0]]:.3g} but no rows")
    if new[mixer.epoch_source] <= 0:
        raise InvalidArgumentError(f"Mixer.{where}: epoch source {mixer.epoch_source} has share 0; no epoch would end")
    return new


def _segment(state: dict[str, Any], out: dict[str, Any]) -> tuple[int, int, np.ndarray]:
    """Where the saved shares took effect: the saved ``segment`` (checked against the position),
    or the epoch's start for a state that was never steered."""
    if "segment" not in state:
        return 0, 0, out["epoch_credit"]
    seg, who = state["segment"], "Mixer segment"
    check_state_keys(seg, who, ("step", "taken", "credit"))
    step = state_number(seg, "step", who, integer=True, low=0, high=out["step"])
    taken = state_number(seg, "taken", who, integer=True, low=0, high=out["taken"])
    credit = state_array(seg, "credit", who, shape=out["credit"].shape, low=-_MAX_CREDIT, high=_MAX_CREDIT)
    if abs(float(credit.sum())) > 1e-6:
        raise InvalidStateError(f"mixer state has segment credit={credit.tolist()}: credit sums to 0 (altered state)")
    return step, taken, credit


def _epoch_credit(state: dict[str, Any], mixer: MixerLike, epoch: int) -> np.ndarray:
    """The credit the saved epoch began with: zeros without ``carry_credit``; with it the saved
    ``epoch_credit`` (a state saved before the key existed is taken only at epoch 0, where it
    was zeros too: later epochs restarted the credit then)."""
    zeros = np.zeros_like(mixer.shares)
    if not mixer.carry_credit:
        return zeros
    if "epoch_credit" not in state:
        if epoch == 0:
            return zeros
        raise InvalidStateError(
            f"mixer state at epoch {epoch} has no epoch_credit: it was saved by a version that "
            "restarted the quota credit every epoch, and cannot be continued exactly"
        )
    credit = state_array(state, "epoch_credit", "Mixer", shape=(mixer.sizes.size,), low=-_MAX_CREDIT, high=_MAX_CREDIT)
    if abs(float(credit.sum())) > 1e-6:
        raise InvalidStateError(f"mixer state has epoch_credit={credit.tolist()}: credit sums to 0 (altered state)")
    return credit
