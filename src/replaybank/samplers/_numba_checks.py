"""The priority value check of ``priorities.check_priorities`` as one compiled pass (numba,
``replaybank[fast]``): every value finite, >= 0 and <= the sampler's limit. As numpy it is two
reductions, ``min`` and ``max``, about a microsecond each on a batch of 256; compiled, one pass
of a fraction of that. It only answers yes or no: on no, the numpy code finds the first bad
value and writes the error message.
"""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True, nogil=True)
def within(values: np.ndarray, limit: float) -> bool:
    """True when every value is in ``[0, limit]`` (NaN is not)."""
    for x in values:
        if not (x >= 0.0 and x <= limit):
            return False
    return True


@numba.njit(cache=True, nogil=True)
def shifted(values: np.ndarray, limit: float, eps: float) -> tuple[bool, np.ndarray, float]:
    """``within`` and the next step of a priority update in one pass: ``(ok, values + eps as
    float64, max(values))``. On not ok the rest is meaningless (the caller takes the checked path,
    which writes the error). The sum is IEEE's, the bits numpy's ``values + eps`` gives."""
    out = np.empty(len(values))
    top = -np.inf
    for i in range(len(values)):
        x = np.float64(values[i])
        if not (x >= 0.0 and x <= limit):
            return False, out, top
        out[i] = x + eps
        if x > top:
            top = x
    return True, out, top
