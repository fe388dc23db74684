"""Rate limiters: conditions, timeouts, threads holding the sample/insert ratio."""

import math
import threading
import time

import numpy as np
import pytest

from replaybank import EmptyBufferError, ReplayBankError, ReplayBuffer
from replaybank.ratelimit import (
    MinSize,
    RateLimited,
    RateLimiter,
    RateLimiterClosed,
    RateLimitTimeout,
    SampleToInsertRatio,
)


def test_min_size_blocks_sampling_until_enough_items_never_inserts():
    buf = RateLimited(ReplayBuffer(100, seed=0), MinSize(5))
    buf.extend({"x": np.arange(4)})
    with pytest.raises(RateLimitTimeout, match="needs 5 stored items first"):
        buf.sample(2, timeout=0)
    buf.add(x=4)
    assert len(buf.sample(2, timeout=0)) == 2
    for _ in range(50):  # MinSize never blocks writers
        buf.extend({"x": np.arange(10)}, timeout=0)


def test_items_already_stored_count_towards_min_size():
    inner = ReplayBuffer(10, seed=0)
    inner.extend({"x": np.arange(6)})
    assert len(RateLimited(inner, MinSize(5)).sample(3, timeout=0)) == 3


def test_timeout_raises_a_clear_error_after_waiting():
    buf = RateLimited(ReplayBuffer(10, seed=0), SampleToInsertRatio(1.0, min_size=1, error_buffer=2))
    buf.extend({"x": np.arange(3)})  # diff 3 = max_diff: the next insert must wait for samples
    start = time.monotonic()
    with pytest.raises(RateLimitTimeout, match=r"insert of 1 items blocked for 0.2 s .*max_diff=3 but diff=3; sample more"):
        buf.add(x=9, timeout=0.2)
    assert 0.2 <= time.monotonic() - start < 2.0
    assert buf.limiter.inserts == 3 and len(buf) == 3  # nothing counted, nothing written


def test_calls_that_can_never_pass_and_bad_arguments_raise_at_once():
    limiter = SampleToInsertRatio(4.0, min_size=10, error_buffer=16)
    with pytest.raises(ReplayBankError, match="sample of 40 items can never pass"):
        limiter.sample(40)
    with pytest.raises(ReplayBankError, match="insert of 9 items can never pass"):
        limiter.insert(9)
    with pytest.raises(ReplayBankError, match="samples_per_insert"):
        SampleToInsertRatio(0.0, min_size=1, error_buffer=4)
    with pytest.raises(ReplayBankError, match="error_buffer=1 is too small"):
        SampleToInsertRatio(4.0, min_size=1, error_buffer=1)
    with pytest.raises(ReplayBankError, match="min_size"):
        MinSize(-1)
    with pytest.raises(ReplayBankError, match="timeout"):
        MinSize(1, timeout=-1)


def test_failed_calls_are_refunded():
    buf = RateLimited(ReplayBuffer(10, seed=0), MinSize(0))
    with pytest.raises(EmptyBufferError):
        buf.sample(4)
    assert buf.limiter.samples == 0
    with pytest.raises(ReplayBankError):
        buf.extend({"x": np.zeros((2, 2, 2, 2), dtype=object)})
    assert buf.limiter.inserts == 0


def test_close_wakes_waiting_calls():
    limiter = MinSize(10)
    errors = []

    def wait():
        try:
            limiter.sample(1)
        except RateLimiterClosed as err:
            errors.append(err)

    thread = threading.Thread(target=wait)
    thread.start()
    time.sleep(0.1)
    limiter.close()
    thread.join(5)
    assert not thread.is_alive() and len(errors) == 1


@pytest.mark.parametrize("spi,batch,eb", [(4.0, 8, 16.0), (0.5, 2, 6.0)])
def test_threads_hold_the_ratio_within_the_error_buffer(spi, batch, eb):
    """A producer adding one item at a time and a consumer sampling batches, both as fast as they
    can: every observed state keeps diff in [min_diff, max_diff] once sampling started, and the
    final ratio is samples_per_insert up to error_buffer items."""
    limiter = SampleToInsertRatio(spi, min_size=20, error_buffer=eb, timeout=10)
    buf = RateLimited(ReplayBuffer(1000, seed=0), limiter)
    observed: list[float] = []
    stop = threading.Event()

    produced = threading.Event()

    def produce():
        for i in range(600):
            buf.add(x=i)
            look()
        produced.set()

    def consume():
        while not produced.is_set():
            try:
                buf.sample(batch, timeout=0.05)
                look()
            except RateLimitTimeout:  # the producer is behind; check whether it has finished
                continue

    def look():
        with limiter._cond:
            if limiter.samples:
                observed.append(limiter.diff)

    def watch():
        while not stop.is_set():
            look()
            time.sleep(0.0005)

    threads = [threading.Thread(target=f) for f in (produce, consume, watch)]
    for t in threads:
        t.start()
    threads[0].join(60)
    threads[1].join(60)
    stop.set()
    threads[2].join(5)
    assert limiter.inserts == 600 and len(observed) > 100
    assert min(observed) >= limiter.min_diff and max(observed) <= limiter.max_diff
    offset = spi * 20
    assert abs(limiter.samples - (spi * limiter.inserts - offset)) <= eb + batch


# -- parameters that would make a call wait forever are refused at construction ---------
@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: RateLimiter(1.0, 0, math.inf, math.inf), "min_diff < inf"),
        (lambda: RateLimiter(1.0, 0, -math.inf, -math.inf), "max_diff > -inf"),
        (lambda: RateLimiter(1.0, 0, math.nan, 1.0), "min_diff=nan"),
        (lambda: RateLimiter(1.0, 0, -(2.0**60), 1.0), "2\\*\\*53"),
        (lambda: RateLimiter(1e300, 0, -10, 10), "samples_per_insert"),
        (lambda: RateLimiter("1", 0, -10, 10), "samples_per_insert"),
        (lambda: SampleToInsertRatio(1e300, 10**9, 1e300), "error_buffer"),
        (lambda: SampleToInsertRatio(1e5, 10**15, 8e4), "min_diff"),
        (lambda: MinSize(2**60), "min_size"),
        # diff = 0.5 after one insert and one sample: neither 1 more insert nor 1 sample fits
        (lambda: RateLimiter(1.5, 0, 0.0, 1.5), "wait for each other forever"),
        (lambda: SampleToInsertRatio(1.5, 0, 0.75), "wait for each other forever"),
        (lambda: RateLimiter(1.0, 10, -5, 5), "could never all pass"),
    ],
)
def test_parameters_that_would_wait_forever_are_refused(make, match):
    with pytest.raises(ReplayBankError, match=match):
        make()


def test_an_infinite_timeout_waits_forever_until_woken():
    limiter = SampleToInsertRatio(2, 4, 8)
    threading.Timer(0.2, limiter.close).start()
    with pytest.raises(RateLimiterClosed):  # was OverflowError from Condition.wait(inf)
        limiter.sample(1, timeout=float("inf"))
    assert MinSize(1, timeout=math.inf).timeout is None
    assert MinSize(1, timeout=1e300).timeout is None


def test_state_is_checked_before_any_count_is_set():
    limiter = SampleToInsertRatio(1.0, min_size=1, error_buffer=4)
    limiter.insert(2)
    for bad in ({"inserts": 1, "samples": -1, "size": 1}, {"inserts": 1, "samples": 0},
                {"inserts": 1.5, "samples": 0, "size": 1}, {"inserts": 2**60, "samples": 0, "size": 1}):
        with pytest.raises(ReplayBankError):
            limiter.load_state_dict(bad)
        assert limiter.state_dict() == {"inserts": 2, "samples": 0, "size": 2}
