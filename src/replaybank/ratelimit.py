"""Rate limiting between writers and readers of a buffer (Reverb's rate limiters).

A rate limiter keeps the number of sampled items per inserted item near a target, so that a fast
learner does not overfit a few transitions and fast actors do not flood the buffer with data that is
never replayed. It counts ``inserts`` and ``samples`` (items, not calls) and their difference
``diff = inserts * samples_per_insert - samples``:

* an insert of ``n`` items may proceed when ``diff + n * samples_per_insert <= max_diff``;
* a sample of ``n`` items may proceed when ``size >= min_size`` and ``diff - n >= min_diff``.

A call that may not proceed waits (up to ``timeout`` seconds, ``None`` = forever, ``0`` = raise at
once) for calls from other threads to change the counts, then raises ``RateLimitTimeout``. A call is
admitted whole, so once sampling has started ``diff`` never leaves ``[min_diff, max_diff]``; a call
too large to ever fit raises ``ReplayBankError`` at once instead of waiting forever.

``RateLimited(buffer, limiter)`` applies a limiter to a ``ReplayBuffer`` (or anything with
``extend``/``add``/``sample``); ``replaybank.dist`` shares one limiter between processes.

>>> import numpy as np
>>> from replaybank import ReplayBuffer
>>> buf = RateLimited(ReplayBuffer(100, seed=0), SampleToInsertRatio(2.0, min_size=4, error_buffer=8))
>>> _ = buf.extend({"x": np.arange(4)})
>>> len(buf.sample(4)), buf.limiter.diff
(4, 4.0)
>>> buf.sample(8, timeout=0)
Traceback (most recent call last):
...
replaybank.ratelimit.RateLimitTimeout: sample of 8 items blocked by SampleToInsertRatio(samples_per_insert=2.0, min_size=4, error_buffer=8.0) (inserts=4, samples=4, size=4): needs diff - 8 >= min_diff=0 but diff=4; insert more items or wait for writers
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Mapping
from typing import Any

import numpy as np

from .checks import check_real, check_state_keys, state_number
from .errors import InvalidArgumentError, InvalidTypeError, ReplayBankError

__all__ = [
    "RateLimiter",
    "MinSize",
    "SampleToInsertRatio",
    "RateLimitTimeout",
    "RateLimiterClosed",
    "RateLimited",
]

_UNSET: Any = object()


# -- parameter checks: what a limiter refuses at construction, so that no call can wait forever
# for counts that never change ------------------------------------------------------------------
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


class RateLimitTimeout(TimeoutError):
    """A call waited longer than its timeout for the rate limiter to let it through."""


class RateLimiterClosed(RuntimeError):
    """The rate limiter was closed (shutdown) while a call waited or before it started."""


class RateLimiter:
    """Block inserts and samples to hold ``samples / inserts`` near ``samples_per_insert``.

    Args:
        samples_per_insert: target number of sampled items per inserted item (> 0).
        min_size: items that must have been inserted before any sample (>= 0).
        min_diff, max_diff: the allowed range of ``diff`` (may be infinite).
        timeout: default seconds a call waits (``None`` forever, ``0`` never); each call may
            override it.

    Thread-safe: one limiter is shared by the producer and consumer threads.
    """

    def __init__(
        self,
        samples_per_insert: float,
        min_size: int,
        min_diff: float,
        max_diff: float,
        *,
        timeout: float | None = None,
    ) -> None:
        spi = check_real(samples_per_insert, "RateLimiter", "samples_per_insert")
        if not MIN_RATIO <= spi <= MAX_RATIO:
            raise InvalidArgumentError(
                f"samples_per_insert must be finite and in [{MIN_RATIO:g}, {MAX_RATIO:g}], got "
                f"{samples_per_insert!r}"
            )
        if isinstance(min_size, bool) or not isinstance(min_size, int) or min_size < 0:
            raise ReplayBankError(f"min_size must be an integer >= 0, got {min_size!r}")
        if min_size > MAX_COUNT:
            raise InvalidArgumentError(f"min_size must be <= 2**53, got {min_size!r}")
        lo, hi = check_bound(min_diff, "min_diff"), check_bound(max_diff, "max_diff")
        if lo == math.inf or hi == -math.inf or lo > hi:
            # an infinite lower bound above every diff (or upper bound below) blocks every call
            raise InvalidArgumentError(
                f"need -inf <= min_diff <= max_diff <= inf with min_diff < inf and max_diff > -inf, "
                f"got min_diff={min_diff!r}, max_diff={max_diff!r}"
            )
        check_live(spi, min_size, lo, hi)
        self.samples_per_insert = spi
        self.min_size = min_size
        self.min_diff = lo
        self.max_diff = hi
        self.timeout = check_timeout(timeout)
        self.inserts = 0
        self.samples = 0
        self.size = 0  # items inserted, plus those already stored when the limiter was attached
        self.closed = False
        self._cond = threading.Condition()

    def __repr__(self) -> str:
        return (
            f"RateLimiter(samples_per_insert={self.samples_per_insert}, min_size={self.min_size}, "
            f"min_diff={self.min_diff}, max_diff={self.max_diff})"
        )

    @property
    def diff(self) -> float:
        return self.inserts * self.samples_per_insert - self.samples

    # -- conditions ---------------------------------------------------------------------------
    def can_insert(self, n: int = 1) -> bool:
        return self.diff + n * self.samples_per_insert <= self.max_diff

    def can_sample(self, n: int = 1) -> bool:
        return self.size >= self.min_size and self.diff - n >= self.min_diff

    def _check_fits(self, n: int, what: str) -> None:
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ReplayBankError(f"{what}: item count must be an integer >= 0, got {n!r}")
        # the widest window diff can move in: an insert needs diff + n*spi <= max_diff with diff
        # possibly as low as min_diff, a sample needs diff - n >= min_diff with diff <= max_diff
        need = n * self.samples_per_insert if what == "insert" else n
        if need > self.max_diff - self.min_diff:
            raise ReplayBankError(
                f"{what} of {n} items can never pass {self!r}: it moves diff by {need:g}, more "
                f"than max_diff - min_diff = {self.max_diff - self.min_diff:g}; split the call or "
                "widen the error buffer"
            )

    # -- acquiring ----------------------------------------------------------------------------
    def insert(self, n: int = 1, *, timeout: float | None = _UNSET) -> None:
        """Wait until ``n`` items may be inserted, then count them as inserted."""
        self._acquire("insert", n, timeout)

    def sample(self, n: int = 1, *, timeout: float | None = _UNSET) -> None:
        """Wait until ``n`` items may be sampled, then count them as sampled."""
        self._acquire("sample", n, timeout)

    def refund(self, what: str, n: int) -> None:
        """Undo the count of a call that failed after it was let through."""
        with self._cond:
            if what == "insert":
                self.inserts -= n
                self.size -= n
            else:
                self.samples -= n
            self._cond.notify_all()

    def add_stored(self, n: int) -> None:
        """Count ``n`` items that were already stored (they count towards ``min_size`` only)."""
        with self._cond:
            self.size += n
            self._cond.notify_all()

    def close(self) -> None:
        """Wake every waiting call with ``RateLimiterClosed``; later calls raise it too."""
        with self._cond:
            self.closed = True
            self._cond.notify_all()

    def _acquire(self, what: str, n: int, timeout: float | None) -> None:
        self._check_fits(n, what)
        timeout = self.timeout if timeout is _UNSET else check_timeout(timeout)
        allowed = self.can_insert if what == "insert" else self.can_sample
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while not allowed(n):
                if self.closed:
                    raise RateLimiterClosed(f"{what} of {n} items: the rate limiter was closed")
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise RateLimitTimeout(self._blocked_message(what, n, timeout))
                self._cond.wait(left)
            if self.closed:
                raise RateLimiterClosed(f"{what} of {n} items: the rate limiter was closed")
            if what == "insert":
                self.inserts += n
                self.size += n
            else:
                self.samples += n
            self._cond.notify_all()

    def _blocked_message(self, what: str, n: int, timeout: float | None) -> str:
        waited = "" if not timeout else f" for {timeout:g} s"
        head = (
            f"{what} of {n} items blocked{waited} by {self!r} "
            f"(inserts={self.inserts}, samples={self.samples}, size={self.size}): "
        )
        if what == "insert":
            return head + (
                f"needs diff + {n * self.samples_per_insert:g} <= max_diff={self.max_diff:g} but "
                f"diff={self.diff:g}; sample more (is the learner running?) or wait for readers"
            )
        if self.size < self.min_size:
            return head + f"needs {self.min_size} stored items first; insert more items"
        return head + (
            f"needs diff - {n} >= min_diff={self.min_diff:g} but diff={self.diff:g}; insert more "
            "items or wait for writers"
        )

    # -- state --------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        with self._cond:
            return {"inserts": self.inserts, "samples": self.samples, "size": self.size}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore the counts of :meth:`state_dict`; all checked before any is set.

        Raises:
            InvalidStateError: a missing or unknown key, or a count that is not an integer in
                ``[0, 2**53]``.
        """
        check_state_keys(state, "RateLimiter", ("inserts", "samples", "size"))
        counts = {k: state_number(state, k, "RateLimiter", integer=True, low=0, high=MAX_COUNT)
                  for k in ("inserts", "samples", "size")}
        with self._cond:
            self.inserts, self.samples, self.size = counts["inserts"], counts["samples"], counts["size"]
            self._cond.notify_all()

    def __getstate__(self) -> dict[str, Any]:  # picklable (to hand to a Ray actor), lock rebuilt
        state = self.__dict__.copy()
        del state["_cond"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._cond = threading.Condition()


class MinSize(RateLimiter):
    """Block sampling until ``min_size`` items were inserted; never block inserts.

    >>> MinSize(10).can_sample(1)
    False
    """

    def __init__(self, min_size: int, *, timeout: float | None = None) -> None:
        super().__init__(1.0, min_size, -math.inf, math.inf, timeout=timeout)

    def __repr__(self) -> str:
        return f"MinSize({self.min_size})"


class SampleToInsertRatio(RateLimiter):
    """Hold ``samples / inserts`` at ``samples_per_insert`` within ``error_buffer`` sampled items.

    ``diff`` is kept in ``[offset - error_buffer, offset + error_buffer]`` with
    ``offset = samples_per_insert * min_size`` (Reverb's definition), so after warm-up the count of
    sampled items stays within ``error_buffer`` of ``samples_per_insert * inserts - offset``.
    ``error_buffer`` must let a single insert and a single sample through: ``2 * error_buffer >=
    max(1, samples_per_insert)`` when both are integers, ``2 * error_buffer >= samples_per_insert
    + 1`` otherwise (a narrower window can leave ``diff`` where neither fits: a deadlock); calls of
    many items need a proportionally larger window.
    """

    def __init__(
        self,
        samples_per_insert: float,
        min_size: int,
        error_buffer: float,
        *,
        timeout: float | None = None,
    ) -> None:
        eb = check_real(error_buffer, "SampleToInsertRatio", "error_buffer")
        if not 0 < eb <= MAX_COUNT:
            raise InvalidArgumentError(
                f"error_buffer must be finite, > 0 and <= 2**53, got {error_buffer!r}"
            )
        spi = check_real(samples_per_insert, "SampleToInsertRatio", "samples_per_insert")
        if 2 * eb < max(1.0, spi):
            raise ReplayBankError(
                f"error_buffer={error_buffer!r} is too small for samples_per_insert="
                f"{samples_per_insert!r}: need 2 * error_buffer >= max(1, samples_per_insert)"
            )
        offset = spi * min_size if isinstance(min_size, int) else 0.0
        super().__init__(spi, min_size, offset - eb, offset + eb, timeout=timeout)
        self.error_buffer = eb

    def __repr__(self) -> str:
        return (
            f"SampleToInsertRatio(samples_per_insert={self.samples_per_insert}, "
            f"min_size={self.min_size}, error_buffer={self.error_buffer})"
        )


def _rows(columns: Mapping[str, Any]) -> int:
    if not columns:
        return 0
    return len(next(iter(columns.values())))


class RateLimited:
    """A buffer whose ``extend``/``add``/``sample`` go through ``limiter`` first.

    Items already stored when it is wrapped count towards ``min_size``. Other attributes
    (``update_priorities``, ``save``, ``len()``...) pass straight to the buffer. If the buffer call
    fails after the limiter let it through, the count is refunded.
    """

    def __init__(self, buffer: Any, limiter: RateLimiter) -> None:
        self.buffer = buffer
        self.limiter = limiter
        stored = len(buffer)
        if stored:
            limiter.add_stored(stored)

    def extend(
        self, columns: Mapping[str, Any], *, timeout: float | None = _UNSET, **kwargs: Any
    ) -> Any:
        n = _rows(columns)
        self.limiter.insert(n, timeout=timeout)
        try:
            return self.buffer.extend(columns, **kwargs)
        except BaseException:
            self.limiter.refund("insert", n)
            raise

    def add(self, *, timeout: float | None = _UNSET, **item: Any) -> Any:
        self.limiter.insert(1, timeout=timeout)
        try:
            return self.buffer.add(**item)
        except BaseException:
            self.limiter.refund("insert", 1)
            raise

    def sample(self, batch_size: int, *, timeout: float | None = _UNSET, **kwargs: Any) -> Any:
        self.limiter.sample(batch_size, timeout=timeout)
        try:
            return self.buffer.sample(batch_size, **kwargs)
        except BaseException:
            self.limiter.refund("sample", batch_size)
            raise

    def __len__(self) -> int:
        return len(self.buffer)

    def __getattr__(self, name: str) -> Any:
        if name in ("buffer", "limiter"):  # not set yet (during unpickling)
            raise AttributeError(name)
        return getattr(self.buffer, name)
