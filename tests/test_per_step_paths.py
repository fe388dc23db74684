"""The per-step shortcuts of prioritized replay: items added one at a time reach the sum tree in
a batch at the next read, and ``update_priorities`` given a batch's own ids skips the id checks.
Both must leave the buffer exactly as the general paths do."""

from __future__ import annotations

import numpy as np
import pytest

from replaybank import Prioritized, ReplayBuffer
from replaybank.errors import ReplayBankError


def _pair(capacity: int = 8) -> tuple[ReplayBuffer, ReplayBuffer]:
    return tuple(ReplayBuffer(capacity, sampler=Prioritized(alpha=0.7, beta=0.5), seed=1) for _ in range(2))  # type: ignore[return-value]


def test_adds_one_at_a_time_weigh_what_extend_gives_them() -> None:
    one, many = _pair()
    for step in range(3):  # three rounds: writes, then a priority update raising the maximum
        for i in range(5):
            one.add(x=np.float32(i))
        many.extend({"x": np.arange(5, dtype=np.float32)})
        for buf in (one, many):
            b = buf.sample(4)
            buf.update_priorities(np.array(b.ids), np.full(4, 2.0 + step))
    assert one.sampler._pending == []  # flushed by the reads
    np.testing.assert_array_equal(one.sampler.trees.leaves, many.sampler.trees.leaves)
    assert one.sampler.max_priority == many.sampler.max_priority == 4.0
    one.add(x=np.float32(9))
    many.extend({"x": np.array([9], np.float32)})
    np.testing.assert_array_equal(one.state_dict()["sampler"]["priorities"], many.state_dict()["sampler"]["priorities"])


def test_a_batchs_own_ids_update_as_the_general_path_does() -> None:
    fast, slow = _pair(16)
    for buf in (fast, slow):
        buf.extend({"x": np.arange(16.0)})
    for _ in range(3):
        a, b = fast.sample(6), slow.sample(6)
        np.testing.assert_array_equal(a.ids, b.ids)
        assert not a.ids.flags.writeable
        p = np.linspace(0.5, 3.0, 6)
        assert fast.update_priorities(a.ids, p) == slow.update_priorities(a.ids.copy(), p) == 6
    np.testing.assert_array_equal(fast.sampler.trees.leaves, slow.sampler.trees.leaves)


def test_after_a_write_the_ids_are_checked_again() -> None:
    buf = ReplayBuffer(4, sampler=Prioritized(), seed=0)
    buf.extend({"x": np.arange(4.0)})
    b = buf.sample(4)
    buf.extend({"x": np.arange(2.0)})  # overwrites the two oldest items
    applied = buf.update_priorities(b.ids, np.ones(4))
    assert applied == int(buf.contains(b.ids).sum())
    with pytest.raises(ReplayBankError, match="finite"):
        buf.update_priorities(buf.sample(2).ids, np.array([1.0, np.nan]))
