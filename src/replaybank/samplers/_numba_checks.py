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
