"""The parameter checks of :mod:`replaybank.ratelimit`: the values a limiter refuses at
construction so that no call can wait forever for counts that never change (issue 29)."""

from __future__ import annotations

import math
import threading
from typing import Any

import numpy as np

from .errors import InvalidArgumentError, InvalidTypeError, ReplayBankError

#: the largest item count (and finite ``diff`` bound) a limiter takes: floats count exactly up to it
MAX_COUNT = 2**53
#: the range of ``samples_per_insert``: past it one insert (or one sample) no longer moves ``diff``
#: by a countable amount and calls wait for counts that never change
MIN_RATIO, MAX_RATIO = 1e-6, 1e6


def check_timeout(timeout: Any) -> float | None:
    """``None`` (wait forever) or seconds >= 0; ``inf``, or more seconds than a lock can wait
    (``threading.TIMEOUT_MAX``, about 292 years), also mean forever."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout >= 0:
        raise ReplayBankError(f"timeout must be None or a number of seconds >= 0, got {timeout!r}")
    if timeout >= threading.TIMEOUT_MAX:
        return None
    return float(timeout)


def check_live(spi: float, min_size: int, lo: float, hi: float) -> None:
    """Refuse a window in which a lone writer and reader could both be blocked for good.

    Both are blocked when ``diff + spi > max_diff`` and ``diff - 1 < min_diff``; no ``diff`` is
    both when the window is at least ``spi + 1`` wide, or (every ``diff`` then an integer) at least
    ``max(spi, 1)`` wide with an integer ``spi`` and integer bounds. The ``min_size`` first
    inserts must fit too: ``min_size * spi <= max_diff``.
    """
    width = hi - lo
    integral = spi.is_integer() and all(math.isinf(b) or b.is_integer() for b in (lo, hi))
    need = max(spi, 1.0) if integral else spi + 1.0
    if width < need:
        raise InvalidArgumentError(
            f"RateLimiter(samples_per_insert={spi:g}, min_diff={lo:g}, max_diff={hi:g}): the window "
            f"max_diff - min_diff = {width:g} must be >= {need:g}, or a writer and a reader can both "
            "wait for each other forever; widen it (error_buffer)"
        )
    if min_size * spi > hi:
        raise InvalidArgumentError(
            f"RateLimiter(min_size={min_size}, samples_per_insert={spi:g}, max_diff={hi:g}): the "
            f"{min_size} inserts sampling waits for move diff to {min_size * spi:g} > max_diff, so "
            "they could never all pass; raise max_diff or lower min_size"
        )


def check_bound(value: Any, name: str) -> float:
    """A ``diff`` bound: a real number, ``-inf`` or ``inf``, finite ones within +-2**53 (past it a
    float no longer counts single items, and a sample would not move ``diff``)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise InvalidTypeError(f"RateLimiter({name}={value!r}): expected a real number")
    x = float(value)
    if math.isnan(x) or (math.isfinite(x) and abs(x) > MAX_COUNT):
        raise InvalidArgumentError(
            f"RateLimiter({name}={value!r}): must be -inf, inf or a finite number within +-2**53"
        )
    return x
