"""``proxy``: a small policy learnt on a cheap proxy run, then frozen (PROXYMIX-style).

The policy reads the same statistics as every controller. With ``rise_i = loss_i + trend_i - 1``
(the predicted relative rise of source ``i``'s held-out loss) over the available sources, and
``F`` the sum of their floors:

* rehearsal total ``R = F + (max_share - F) * sigmoid(w[0:5] . [1, mean rise, max rise,
  domain loss - 1, domain trend])``;
* split over the sources ``softmax(w[5] * rise_i + w[6] * trend_i)``, lifted to the floors
  (:func:`~replaybank.controllers.base.constrain`).

:func:`fit_proxy` learns the 7 weights by the cross-entropy method: derivative-free, it needs only
a score per candidate (one proxy run each: a smaller budget or fewer domains of the same model)
and tolerates noisy scores, which is what a handful of short runs give. The policy is then frozen:
it keeps no state but the last statistics, so a resumed run continues exactly.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from replaybank.checks import check_int, state_array
from replaybank.controllers.base import (
    CONTROLLER_SCHEMA_VERSION,
    ControllerError,
    MixLimits,
    SourceStats,
    check_available,
    check_header,
    check_stats,
    constrain,
    number_array,
)
from replaybank.errors import InvalidArgumentError

#: what each of the 7 weights multiplies
PROXY_FEATURES = ("bias", "mean_rise", "max_rise", "domain_loss", "domain_trend", "split_rise", "split_trend")
_KEYS = ("schema_version", "name", "config", "loss", "trend")
_SMOOTH = 0.7


def proxy_mixture(weights: np.ndarray, stats: SourceStats, limits: MixLimits, mask: np.ndarray) -> np.ndarray:
    """The frozen policy's mixture (see the module).

    Example:
        >>> lim = MixLimits(("a", "b"), max_share=0.4)
        >>> s = SourceStats(np.array([0.5, 1.3, 1.0]), np.array([-0.1, 0.0, 0.0]))
        >>> w = np.array([-2.0, 10.0, 0.0, 0.0, 0.0, 5.0, 0.0])
        >>> proxy_mixture(w, s, lim, np.array([True, True, True])).round(3).tolist()
        [0.849, 0.123, 0.028]
    """
    avail = mask[1:]
    if not avail.any():
        return constrain(np.array([1.0, *np.zeros(limits.n)]), limits, mask)
    loss, trend = np.nan_to_num(stats.loss, nan=1.0), np.nan_to_num(stats.trend, nan=0.0)
    rise = (loss + trend - 1.0)[1:][avail]
    x = np.array([1.0, rise.mean(), rise.max(), loss[0] - 1.0, trend[0]])
    floor = float(limits.floors[avail].sum())
    total = floor + (limits.max_share - floor) / (1.0 + np.exp(-np.clip(weights[:5] @ x, -50, 50)))
    z = weights[5] * rise + weights[6] * trend[1:][avail]
    split = np.exp(z - z.max())
    desired = np.zeros(limits.n + 1)
    desired[1:][avail] = total * split / split.sum()
    desired[0] = 1.0 - total
    return constrain(desired, limits, mask)


class ProxyController:
    """A frozen proxy-learnt policy (see the module; weights from :func:`fit_proxy`).

    Raises:
        ControllerError: on weights that are not 7 finite numbers (strings and bools refused).

    Example:
        >>> c = ProxyController(MixLimits(("tools",), max_share=0.5), weights=[-2, 0, 0, 0, 0, 0, 0])
        >>> c.mixture([True]).round(3).tolist()
        [0.94, 0.06]
    """

    name = "proxy"

    def __init__(self, limits: MixLimits, weights: Sequence[float]) -> None:
        w = number_array(weights, "proxy(weights)")
        if w.shape != (len(PROXY_FEATURES),) or not np.isfinite(w).all():
            raise ControllerError(
                f"proxy(weights={weights!r}): expected {len(PROXY_FEATURES)} finite numbers ({', '.join(PROXY_FEATURES)})"
            )
        self.limits, self.weights = limits, w
        n = limits.n + 1
        self._loss, self._trend = np.ones(n), np.zeros(n)  # a start: nothing learnt or forgotten

    def config(self) -> dict[str, Any]:
        """The configuration a saved state must match."""
        return {**self.limits.config(), "weights": self.weights.tolist()}

    def mixture(self, available: Sequence[bool] | np.ndarray) -> np.ndarray:
        """The policy's mixture for the last statistics read (a start before any)."""
        mask = check_available(available, self.limits)
        return proxy_mixture(self.weights, SourceStats(self._loss, self._trend), self.limits, mask)

    def update(self, stats: SourceStats, available: Sequence[bool] | np.ndarray) -> np.ndarray:
        """The policy's mixture for ``stats`` (kept for :meth:`mixture` and the saved state)."""
        mask = check_available(available, self.limits)
        stats = check_stats(stats, mask, self.limits)
        self._loss = np.where(mask, stats.loss, 1.0)
        self._trend = np.where(mask, stats.trend, 0.0)
        return self.mixture(available)

    def state_dict(self) -> dict[str, Any]:
        """The configuration and the last statistics read."""
        return {
            "schema_version": CONTROLLER_SCHEMA_VERSION, "name": self.name, "config": self.config(),
            "loss": self._loss.tolist(), "trend": self._trend.tolist(),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` (checked whole first; ``InvalidStateError`` naming the key)."""
        check_header(state, self.name, self.config(), _KEYS)
        n = self.limits.n + 1
        loss = state_array(state, "loss", "proxy controller", shape=(n,), low=0.0)
        trend = state_array(state, "trend", "proxy controller", shape=(n,))
        self._loss, self._trend = loss, trend


@dataclass(frozen=True)
class ProxyFit:
    """What :func:`fit_proxy` found: the best weights, their score, the best score per round."""

    weights: np.ndarray
    score: float
    history: list[float]


def fit_proxy(
    score: Callable[[np.ndarray], float],
    rng: np.random.Generator,
    *,
    rounds: int = 8,
    population: int = 12,
    elite: int = 3,
    init_std: float = 2.0,
) -> ProxyFit:
    """Learn the policy's weights by the cross-entropy method.

    Each round draws ``population`` weight vectors from a Gaussian, scores each (``score(weights)``:
    one proxy run, higher is better, e.g. average accuracy minus forgetting), and refits the
    Gaussian to the ``elite`` best (smoothed: 0.7 new, 0.3 old, plus a small decaying noise floor
    on the spread). ``rounds * population`` proxy runs in all.

    Raises:
        ControllerError: on counts out of range or a score that is not a finite number.

    Example:
        >>> target = np.array([1.0, 2.0, 0.0, 0.0, 0.0, 1.0, 0.0])
        >>> fit = fit_proxy(lambda w: -float(((w - target) ** 2).sum()), np.random.default_rng(0), rounds=15)
        >>> bool(fit.score > -0.5)
        True
    """
    init_std = float(init_std)
    if not np.isfinite(init_std) or init_std <= 0:
        raise ControllerError(f"fit_proxy(init_std={init_std!r}): expected a finite number > 0")
    try:
        rounds = check_int(rounds, "fit_proxy", "rounds", low=1)
        population = check_int(population, "fit_proxy", "population", low=2)
        elite = check_int(elite, "fit_proxy", "elite", low=1, high=population)
    except InvalidArgumentError as err:
        raise ControllerError(str(err)) from None
    dim = len(PROXY_FEATURES)
    mean, std = np.zeros(dim), np.full(dim, float(init_std))
    best_w, best = mean.copy(), -np.inf
    history: list[float] = []
    for _ in range(rounds):
        cand = mean + std * rng.standard_normal((population, dim))
        scores = np.empty(population)
        for i, w in enumerate(cand):
            s = score(w.copy())
            if isinstance(s, bool) or not isinstance(s, (int, float, np.floating)) or not np.isfinite(s):
                raise ControllerError(f"fit_proxy: score returned {s!r} for weights {w.round(3).tolist()}; expected a finite number")
            scores[i] = float(s)
        top = np.argsort(-scores, kind="stable")[:elite]
        if scores[top[0]] > best:
            best, best_w = float(scores[top[0]]), cand[top[0]].copy()
        # smoothed refit plus a decaying noise floor: plain CEM collapses its spread too early
        mean = _SMOOTH * cand[top].mean(axis=0) + (1 - _SMOOTH) * mean
        noise = (0.05 * init_std) ** 2 / (len(history) + 1)
        std = np.sqrt(_SMOOTH * cand[top].var(axis=0) + (1 - _SMOOTH) * std**2 + noise)
        history.append(float(scores[top[0]]))
    return ProxyFit(best_w, best, history)
