"""``fixed``: a share per rehearsal source that never moves (what a run without a controller does).

The statistics are checked and ignored. A source that is not available gives its share to the
current domain (the share of the others does not grow).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

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

_KEYS = ("schema_version", "name", "config")


class FixedController:
    """The same shares at every step.

    Args:
        limits: sources, floors and the maximum rehearsal share.
        shares: share of every batch per rehearsal source (one number for each, or one for all);
            each at least its floor, together at most ``limits.max_share``.

    Raises:
        ControllerError: on shares below a floor, above the maximum share together, negative, not
            finite, or not numbers (a string or a bool).

    Example:
        >>> c = FixedController(MixLimits(("tools", "agenda"), max_share=0.5), shares=0.1)
        >>> c.mixture([True, False]).round(3).tolist()
        [0.9, 0.1, 0.0]
    """

    name = "fixed"

    def __init__(self, limits: MixLimits, shares: float | Sequence[float] = 0.1) -> None:
        self.limits = limits
        arr = number_array(shares, "fixed(shares)")
        arr = np.full(limits.n, float(arr)) if arr.ndim == 0 else arr
        if arr.shape != (limits.n,) or not np.isfinite(arr).all() or (arr < 0).any():
            raise ControllerError(f"fixed(shares={shares!r}): expected finite numbers >= 0, one or {limits.n}")
        low = np.flatnonzero(arr < limits.floors - 1e-12)
        if low.size:
            i = int(low[0])
            raise ControllerError(
                f"fixed(shares={shares!r}): share {arr[i]} of {limits.sources[i]!r} is below its floor {limits.floors[i]}"
            )
        if arr.sum() > limits.max_share + 1e-12:
            raise ControllerError(
                f"fixed(shares={shares!r}): the shares sum to {arr.sum():.4g}, above max_share={limits.max_share}"
            )
        self.shares = arr

    def config(self) -> dict[str, Any]:
        """The configuration a saved state must match."""
        return {**self.limits.config(), "shares": self.shares.tolist()}

    def mixture(self, available: Sequence[bool] | np.ndarray) -> np.ndarray:
        """``[1 - sum of available shares, shares...]`` with unavailable sources at 0."""
        mask = check_available(available, self.limits)
        shares = np.where(mask[1:], self.shares, 0.0)
        return constrain(np.concatenate([[1.0 - shares.sum()], shares]), self.limits, mask)

    def update(self, stats: SourceStats, available: Sequence[bool] | np.ndarray) -> np.ndarray:
        """The same mixture as :meth:`mixture` (``stats`` are checked, then ignored)."""
        check_stats(stats, check_available(available, self.limits), self.limits)
        return self.mixture(available)

    def state_dict(self) -> dict[str, Any]:
        """Only the configuration: a fixed controller has no state."""
        return {"schema_version": CONTROLLER_SCHEMA_VERSION, "name": self.name, "config": self.config()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Check that ``state`` is of this configuration (``InvalidStateError`` naming the key)."""
        check_header(state, self.name, self.config(), _KEYS)
