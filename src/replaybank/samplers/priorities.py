"""The priority checks, the sum-tree leaf limit, the powered leaves and the importance weights
that the buffer, every prioritized sampler (``Prioritized``, ``PrioritizedReshuffled``,
prioritized ``Trajectories``) and every tree (numpy, numba, torch) share."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from ..errors import InvalidArgumentError, InvalidTypeError


# Every leaf of a sum tree stays below this share of the largest float, so the total of
# ``capacity`` leaves stays finite.
def leaf_limit(capacity: int) -> float:
    """The largest scaled priority ``(p + eps) ** alpha`` one slot may hold in a tree of
    ``capacity`` leaves (so their total stays below the largest float64)."""
    return float(np.finfo(np.float64).max) / max(int(capacity), 1) / 2


def powered(priorities: np.ndarray, eps: float, alpha: float) -> tuple[np.ndarray, float]:
    """The leaves ``(priorities + eps) ** alpha`` and ``max(priorities)`` (``-inf`` for none): what
    a tree's ``update_powered`` stores and returns (numpy's power, so every tree gets the same bits).

    >>> powered(np.array([1.0, 3.0]), 1.0, 0.5)
    (array([1.41421356, 2.        ]), 3.0)
    """
    return (priorities + eps) ** alpha, float(priorities.max()) if len(priorities) else -np.inf


_TINY = np.finfo(np.float32).tiny


def importance_weights(ratios: np.ndarray, beta: float) -> np.ndarray:
    """float32 ``ratios ** -beta`` where ``ratios`` are ``leaf / min leaf``: importance weights
    normalised so the largest possible is 1, at least float32's smallest normal number (never 0).
    The power is numpy's (SIMD, about a quarter of a scalar ``pow`` per value in a kernel), so the
    numpy, numba and torch trees give the same bits.

    >>> importance_weights(np.array([1.0, 4.0]), 0.5)
    array([1. , 0.5], dtype=float32)
    """
    weights = (ratios**-beta).astype(np.float32)
    return np.maximum(weights, _TINY, out=weights)


def check_priorities(
    priorities: Any, n: int, where: str = "priorities", limit: float = np.inf
) -> np.ndarray:
    """Validate priorities: a finite, non-negative real number per item (at most ``limit``).

    Raises ``InvalidTypeError`` for strings, complex or object values, ``InvalidArgumentError``
    for a wrong count, NaN, infinite, negative or too large values; the message names ``where``.
    """
    try:
        p = np.asarray(priorities)
    except (ValueError, TypeError) as err:  # ragged nested lists
        raise InvalidTypeError(f"{where}: expected {n} real numbers, got {_brief(priorities)} ({err})") from None
    if p.dtype.kind not in "iuf":
        raise InvalidTypeError(
            f"{where}: expected real numbers, got dtype {p.dtype} ({_brief(priorities)}); "
            "complex, bool, string and object values are refused"
        )
    p = p.astype(np.float64, copy=False)
    if p.ndim == 0:
        p = np.full(n, float(p))
    if p.shape != (n,):
        raise InvalidArgumentError(f"{where}: expected {n} values (one per item), got shape {p.shape}")
    if n and not _within()(p, float(limit)):
        bad = ~(p >= 0) | ~(p <= limit)
        i = int(np.argmax(bad))
        if np.isfinite(p[i]) and p[i] >= 0:
            raise InvalidArgumentError(
                f"{where}[{i}] = {p[i]!r} is above {limit:.6g}, the largest priority this sampler can hold "
                "(larger ones would overflow its sum tree); rescale the priorities"
            )
        raise InvalidArgumentError(f"{where}[{i}] = {p[i]!r}: priorities must be finite and >= 0")
    return p


def _numpy_within(p: np.ndarray, limit: float) -> bool:
    # two reductions cover NaN (min is NaN), -inf and negatives (min < 0) and +inf / too large (max)
    return bool(p.min() >= 0 and p.max() <= limit)


_WITHIN: list[Any] = []  # the value check, chosen on first use


def _within() -> Any:
    """The compiled value check (``_numba_checks.within``), or the numpy one without numba or
    when ``REPLAYBANK_KERNELS=numpy`` asks for the fallback (read at the first check)."""
    if not _WITHIN:
        check: Any = _numpy_within
        if os.environ.get("REPLAYBANK_KERNELS", "").lower() != "numpy":
            try:
                from ._numba_checks import within as check
            except ImportError:
                pass
        _WITHIN.append(check)
    return _WITHIN[0]


def _brief(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
