"""Shard death and restart from checkpoint, timeouts, and a rate limiter shared across processes."""

import time

import numpy as np
import pytest

ray = pytest.importorskip("ray", reason="the dist extra (ray) is not installed")

from replaybank import Prioritized  # noqa: E402
from replaybank.dist import ShardedReplayBuffer, ShardFailedError, ShardTimeoutError  # noqa: E402
from replaybank.dist.ids import generation_of, shard_of  # noqa: E402
from replaybank.ratelimit import RateLimitTimeout, SampleToInsertRatio  # noqa: E402


@pytest.fixture(autouse=True)
def _ray(ray_session):
    return ray_session


def wait_until_alive(buf, deadline=60.0):
    start = time.monotonic()
    while True:
        try:
            return buf.info()
        except ShardFailedError:
            if time.monotonic() - start > deadline:
                raise
            time.sleep(0.2)


def test_killed_shard_fails_calls_in_flight_then_restarts_from_its_checkpoint(tmp_path):
    buf = ShardedReplayBuffer(2, 100, sampler=Prioritized(alpha=1.0, eps=0.0), seed=0,
                              max_restarts=2, checkpoint_dir=str(tmp_path / "ckpt"), timeout=120)  # a restart is slow on a loaded machine
    kept = buf.extend({"x": np.arange(10)}, shard=0)
    buf.extend({"x": np.arange(10, 20)}, shard=1)
    buf.checkpoint()
    lost = buf.extend({"x": np.arange(20, 25)}, shard=0)  # after the checkpoint: lost with the shard
    before = buf.info()
    in_flight = buf.shards[0].ping.remote(delay=20.0)
    time.sleep(0.5)
    ray.kill(buf.shards[0], no_restart=False)
    start = time.monotonic()
    with pytest.raises(ShardFailedError, match="shard 0 died during the call"):
        buf.get(in_flight, [0])
    assert time.monotonic() - start < 10  # a clear error, not a hang until the 20 s call ends
    after = wait_until_alive(buf)
    assert after[0]["pid"] != before[0]["pid"] and after[1]["pid"] == before[1]["pid"]
    assert after[0]["generation"] == 1 and after[0]["size"] == 10 and after[1]["size"] == 10
    assert len(buf) == 20
    # ids from before the checkpoint refer to items that survived but to the old generation:
    # skipped like overwritten items; lost ids are skipped too; nothing raises
    assert buf.update_priorities(np.r_[kept, lost], np.ones(15)) == 0
    new = buf.extend({"x": np.arange(30, 33)}, shard=0)
    assert (shard_of(new) == 0).all() and (generation_of(new) == 1).all() and new.min() > lost.max()
    assert buf.update_priorities(new, [5.0, 5.0, 5.0]) == 3
    b = buf.sample(200)
    assert set(b.data["x"].tolist()) <= set(range(20)) | {30, 31, 32}
    assert {20, 21, 22, 23, 24}.isdisjoint(b.data["x"].tolist())
    buf.close()


def test_shard_that_does_not_answer_times_out():
    buf = ShardedReplayBuffer(1, 10, seed=0, timeout=0.5)
    buf.get(buf.shards[0].info.remote(), timeout=60)  # started (slower than 0.5 s)
    slow = buf.shards[0].ping.remote(delay=3.0)
    start = time.monotonic()
    with pytest.raises(ShardTimeoutError, match="did not answer within 0.5 s"):
        buf.get(slow, [0])
    assert time.monotonic() - start < 2.5
    buf.close()


@ray.remote(num_cpus=0)
def _writer(buf, items, batch):
    for start in range(0, items, batch):
        buf.extend({"x": np.arange(start, start + batch)})
    return items


def test_rate_limiter_is_shared_by_writers_in_other_processes():
    # offset = 2 * min_size = 40, so diff = 2 * inserts - samples stays in [0, 80] once sampling starts
    limiter = SampleToInsertRatio(2.0, min_size=20, error_buffer=40, timeout=30)
    buf = ShardedReplayBuffer(2, 1000, seed=0, rate_limiter=limiter)
    with pytest.raises(RateLimitTimeout, match="needs 20 stored items first"):
        buf.sample(8, timeout=0)
    done = _writer.remote(buf, 400, 10)  # a Ray task writing through its own copy of buf
    sampled, ahead, finished_at = 0, [], None
    while sampled < 2 * 400 - 80:  # the last insert needs 2 * 400 - samples <= max_diff = 80
        sampled += len(buf.sample(8))
        # items the writer has stored (counted by the shards, not the limiter) against the samples
        # drawn so far: an insert is admitted before it is stored, so a shared limiter keeps
        # 2 * stored - sampled <= max_diff = 80; a writer that is not held back reaches 800 - sampled
        ahead.append(2 * len(buf) - sampled)
        if finished_at is None and ray.wait([done], timeout=0)[0]:
            finished_at = sampled
    assert ray.get(done, timeout=60) == 400
    state = ray.get(buf.limiter.state.remote())
    assert state == {"inserts": 400, "samples": sampled, "size": 400}
    assert max(ahead) <= 80, max(ahead)
    # the writer finished only once the samples had caught up: its last insert was admitted at
    # samples >= 720, and every sample admitted so far is one the driver already has back
    assert finished_at is None or finished_at >= 720, finished_at
    buf.close()
