"""``bandit``: Exp3-style exponential weights over {current domain, each available source}.

Per update ``t`` (after an evaluation), over the available arms (arm 0 the current domain):

* reward (:func:`bandit_rewards`): the current domain earns ``tolerance / scale``; a rehearsal
  source earns ``clip((loss + trend_weight * trend - 1) / scale, 0, 1)``, the rise of the held-out
  loss it guards against, predicted one evaluation ahead, relative to its start. A source gains
  share over the domain once its predicted rise exceeds ``tolerance``;
* gain: ``full`` feedback uses every arm's reward; ``sampled`` feedback reads one source per
  update, the one :meth:`BanditController.probe` drew (uniformly among the ``m`` available, with
  the passed RNG), its reward times ``m``: Exp3's importance-weighted estimate, unbiased for the
  full feedback, so a caller needs one held-out evaluation per update. (The probe picks what is
  measured, not what is trained, so it is drawn uniformly rather than from the mixture: a source
  at its floor is measured as often as any.) The domain's reward needs no measurement;
* score: ``s <- discount * s + lr * gain`` (discount < 1 forgets old rewards: the task moves);
* mixture (:func:`exp3_mixture`): ``(1 - g) * softmax(prior + s) + g / K`` with decaying
  exploration ``g = explore / sqrt(t + 1)``, then :func:`~replaybank.controllers.base.constrain`.

The prior starts the mixture at ``start_share`` of rehearsal: ``log(1 - start_share)`` for the
domain, ``log(start_share / m)`` for a source that becomes available while ``m`` are.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np

from replaybank import schema
from replaybank.checks import check_real, state_array, state_number
from replaybank.controllers.base import (
    CONTROLLER_SCHEMA_VERSION,
    ControllerError,
    MixLimits,
    SourceStats,
    check_available,
    check_header,
    check_stats,
    constrain,
)
from replaybank.errors import InvalidArgumentError, InvalidStateError, ReplayBankError

Feedback = Literal["full", "sampled"]
_KEYS = ("schema_version", "name", "config", "t", "score", "prior", "seen", "probe", "rng")


def bandit_rewards(stats: SourceStats, tolerance: float, scale: float, trend_weight: float) -> np.ndarray:
    """Rewards in ``[0, 1]`` per arm (see the module); NaN statistics give 0.

    Example:
        >>> s = SourceStats(np.array([0.6, 1.2, 1.0]), np.array([-0.1, 0.05, 0.0]))
        >>> bandit_rewards(s, tolerance=0.05, scale=0.5, trend_weight=1.0).round(3).tolist()
        [0.1, 0.5, 0.0]
    """
    rise = np.nan_to_num(stats.loss + trend_weight * stats.trend - 1.0, nan=0.0)
    out = np.clip(rise / scale, 0.0, 1.0)
    out[0] = min(tolerance / scale, 1.0)
    return out


def exp3_mixture(logits: np.ndarray, mask: np.ndarray, gamma: float) -> np.ndarray:
    """``(1 - gamma) * softmax(logits) + gamma / K`` over the ``K`` arms where ``mask``; 0 elsewhere.

    Example:
        >>> exp3_mixture(np.log([0.9, 0.1, 0.5]), np.array([True, True, False]), 0.2).round(3).tolist()
        [0.82, 0.18, 0.0]
    """
    z = np.where(mask, logits, -np.inf)
    w = np.exp(z - z[mask].max())
    return np.where(mask, (1.0 - gamma) * w / w.sum() + gamma / int(mask.sum()), 0.0)


class BanditController:
    """Exp3-style replay controller (see the module for the math).

    Args:
        limits: sources, floors and the maximum rehearsal share.
        rng: the generator ``sampled`` feedback draws its probes with (its state is saved).
        lr: step size of the scores. discount: in ``[0, 1]``, weight of past scores.
        tolerance: rise in held-out loss (relative to the start) accepted before a source gains
            share over the domain. scale: the rise that earns the full reward 1.
        trend_weight: evaluations ahead the trend extrapolates the loss.
        explore: exploration at ``t = 0``, decaying as ``1 / sqrt(t + 1)``.
        start_share: rehearsal share before any statistics (the prior).
        feedback: ``"full"`` (every arm's statistics read) or ``"sampled"`` (one probed arm).

    Raises:
        ControllerError: on a parameter out of range (naming it) or an ``rng`` that is no
            ``numpy.random.Generator``.

    Example:
        >>> c = BanditController(MixLimits(("tools",), max_share=0.5), np.random.default_rng(0))
        >>> c.mixture([True]).round(3).tolist()
        [0.86, 0.14]
        >>> c.update(SourceStats(np.array([0.7, 1.3]), np.array([-0.1, 0.1])), [True]).round(3).tolist()
        [0.795, 0.205]
    """

    name = "bandit"

    def __init__(
        self,
        limits: MixLimits,
        rng: np.random.Generator,
        *,
        lr: float = 1.0,
        discount: float = 0.9,
        tolerance: float = 0.05,
        scale: float = 0.5,
        trend_weight: float = 1.0,
        explore: float = 0.1,
        start_share: float = 0.1,
        feedback: Feedback = "full",
    ) -> None:
        if not isinstance(rng, np.random.Generator):
            raise ControllerError(f"bandit(rng={rng!r}): expected a numpy.random.Generator (seeded by the caller)")
        if feedback not in ("full", "sampled"):
            raise ControllerError(f"bandit(feedback={feedback!r}): expected 'full' or 'sampled'")
        try:
            self.lr = check_real(lr, "bandit", "lr", low=0.0, low_open=True, high=1e6)
            self.discount = check_real(discount, "bandit", "discount", low=0.0, high=1.0)
            self.scale = check_real(scale, "bandit", "scale", low=0.0, low_open=True, high=1e6)
            self.tolerance = check_real(tolerance, "bandit", "tolerance", low=0.0, high=self.scale)
            self.trend_weight = check_real(trend_weight, "bandit", "trend_weight", low=0.0, high=1e6)
            self.explore = check_real(explore, "bandit", "explore", low=0.0, high=1.0)
            self.start_share = check_real(start_share, "bandit", "start_share", low=0.0, low_open=True, high=0.999)
        except InvalidArgumentError as err:
            raise ControllerError(str(err)) from None
        self.limits, self.rng, self.feedback = limits, rng, feedback
        n = limits.n + 1
        self._t = 0
        self._score = np.zeros(n)
        self._prior = np.zeros(n)
        self._prior[0] = np.log1p(-self.start_share)
        self._seen = np.zeros(n, dtype=bool)
        self._seen[0] = True
        self._probe: int | None = None

    def config(self) -> dict[str, Any]:
        """The configuration a saved state must match."""
        params = ("lr", "discount", "tolerance", "scale", "trend_weight", "explore", "start_share", "feedback")
        return {**self.limits.config(), **{k: getattr(self, k) for k in params}, "rng": type(self.rng.bit_generator).__name__}

    # -- the mixture ------------------------------------------------------------------------------
    def _entered(self, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        prior, seen = self._prior.copy(), self._seen.copy()
        new = mask & ~seen
        if new.any():
            prior[new] = np.log(self.start_share / int(mask[1:].sum()))
            seen |= new
        return prior, seen

    def _mix(self, prior: np.ndarray, score: np.ndarray, mask: np.ndarray, t: int) -> np.ndarray:
        p = exp3_mixture(prior + score, mask, self.explore / np.sqrt(t + 1.0))
        return constrain(p, self.limits, mask)

    def mixture(self, available: Sequence[bool] | np.ndarray) -> np.ndarray:
        """The mixture now, for ``available`` (changes nothing)."""
        mask = check_available(available, self.limits)
        prior, _ = self._entered(mask)
        return self._mix(prior, self._score, mask, self._t)

    def probe(self, available: Sequence[bool] | np.ndarray) -> int:
        """The source (``1..n``) whose held-out loss the next ``sampled`` update reads, drawn once
        uniformly among the available ones with the passed RNG; 0 when none is available."""
        if self._probe is None:
            mask = check_available(available, self.limits)
            arms = np.flatnonzero(mask[1:]) + 1
            self._probe = int(self.rng.choice(arms)) if arms.size else 0
        return self._probe

    def update(self, stats: SourceStats, available: Sequence[bool] | np.ndarray) -> np.ndarray:
        """Read one evaluation's statistics; return the next mixture.

        With ``sampled`` feedback only the statistics of the source :meth:`probe` drew are read (the
        others may be NaN). Raises ``ControllerError`` on bad statistics or mask, changing nothing.
        """
        mask = check_available(available, self.limits)
        if self.feedback == "full":
            stats = check_stats(stats, mask, self.limits)
        else:
            arm = self.probe(available)
            read = np.zeros_like(mask)
            read[arm] = mask[arm] and arm > 0  # a probe drawn under an older mask reads nothing
            stats = check_stats(stats, read, self.limits)
        prior, seen = self._entered(mask)
        reward = bandit_rewards(stats, self.tolerance, self.scale, self.trend_weight)
        if self.feedback == "full":
            gain = np.where(mask, reward, 0.0)
        else:
            gain = np.zeros_like(reward)
            gain[0] = reward[0]
            gain[arm] = reward[arm] * int(mask[1:].sum()) if read[arm] else 0.0
        score = np.where(mask, self.discount * self._score + self.lr * gain, self._score)
        mix = self._mix(prior, score, mask, self._t + 1)
        self._prior, self._seen, self._score, self._t = prior, seen, score, self._t + 1
        self._probe = None
        return mix

    # -- state ------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Scores, prior, step, pending probe and the RNG's state; JSON-ready."""
        return {
            "schema_version": CONTROLLER_SCHEMA_VERSION,
            "name": self.name,
            "config": self.config(),
            "t": self._t,
            "score": self._score.tolist(),
            "prior": self._prior.tolist(),
            "seen": self._seen.tolist(),
            "probe": self._probe,
            "rng": self.rng.bit_generator.state,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`; every entry is checked before any is set.

        Raises:
            InvalidStateError: on another schema version or configuration (naming the key: a
                state of another sequence has other ``sources``), a missing or unknown key, or an
                entry of the wrong shape, type or range.
        """
        check_header(state, self.name, self.config(), _KEYS)
        who, n = "bandit controller", self.limits.n + 1
        t = state_number(state, "t", who, integer=True, low=0, high=2**53)
        score = state_array(state, "score", who, shape=(n,))
        prior = state_array(state, "prior", who, shape=(n,), high=0.0)
        seen = np.asarray(state["seen"])
        if seen.shape != (n,) or seen.dtype != np.bool_ or not seen[0]:
            raise InvalidStateError(f"{who} state['seen']: expected {n} bools, the first True")
        probe = state["probe"]
        if probe is not None:
            probe = state_number(state, "probe", who, integer=True, low=0, high=n - 1)
            if probe > 0 and not seen[probe]:
                raise InvalidStateError(f"{who} state['probe']={probe}: a source never available")
        kind = type(self.rng.bit_generator).__name__
        saved = state["rng"]
        if not isinstance(saved, Mapping) or saved.get("bit_generator") != kind:
            got = saved.get("bit_generator") if isinstance(saved, Mapping) else type(saved).__name__
            raise InvalidStateError(f"{who} state['rng']: not a {kind} state (bit_generator {got!r})")
        try:  # exactly numpy's keys, integer leaves in range (a 2**300 or 1.5 is refused, not cast)
            rng = schema.rng(saved, f"{who} state['rng']")
        except ReplayBankError as err:
            raise InvalidStateError(str(err)) from None
        self._t, self._score, self._prior, self._seen = t, score, prior, seen
        self._probe = probe
        self.rng.bit_generator.state = rng.bit_generator.state
