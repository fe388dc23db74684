"""``RolloutBuffer`` under a producer thread (generation) racing the learner's ``sample`` calls."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import numpy as np
import pytest

from replaybank.errors import ReplayBankError
from replaybank.rl.rollouts import RolloutBuffer

GROUP, BATCH_GROUPS, STALENESS, REUSE = 4, 3, 2, 2


def _producer(buf: RolloutBuffer, versions: int, per_version: int, added: list[tuple[int, int, frozenset[int]]],
              done: threading.Event) -> None:
    """Generates ``per_version`` groups per policy version, advancing the version as a learner would."""
    rng = np.random.default_rng(1)
    try:
        for v in range(versions):
            buf.set_policy_version(v)
            for _ in range(per_version):
                tokens = [rng.integers(0, 50, size=rng.integers(1, 6)) for _ in range(GROUP)]
                # add and read the group's ids under one hold of the (re-entrant) lock: read after
                # add_group returned, a racing sample could serve the group to exhaustion and evict
                # it first, and its served ids would look like nobody's (seen once in a full run)
                with buf.lock:
                    gid = buf.add_group(v, tokens, rng.random(GROUP), [-rng.random(len(t)) for t in tokens], version=v)
                    ids = buf.groups[gid].ids
                added.append((gid, v, frozenset(ids.tolist())))
                time.sleep(0)  # let the learner in between groups
    finally:
        done.set()


def test_producer_thread_and_learner_never_break_the_invariants() -> None:
    buf = RolloutBuffer(256, max_staleness=STALENESS, max_reuse=REUSE, min_fresh=1 / 3, seed=0)
    added: list[tuple[int, int, frozenset[int]]] = []
    done = threading.Event()
    producer = threading.Thread(target=_producer, args=(buf, 60, 5, added, done))
    served: dict[int, int] = {}
    batches = 0
    producer.start()
    while not done.is_set() or buf.live_groups >= BATCH_GROUPS:
        try:
            batch = buf.sample(BATCH_GROUPS * GROUP)
        except ReplayBankError:  # too few live (or fresh) groups right now: the producer catches up
            if done.is_set():
                break
            continue
        batches += 1
        assert batch.staleness.max() <= STALENESS, "a rollout past the staleness bound was served"
        gids, counts = np.unique(batch.group_id, return_counts=True)
        assert len(gids) == BATCH_GROUPS and (counts == GROUP).all(), "a group was split or repeated in a batch"
        for i in batch.ids.tolist():
            served[i] = served.get(i, 0) + 1
        assert batch.uses.max() <= REUSE
    producer.join()
    assert batches > 50  # the two threads really interleaved
    assert max(served.values()) <= REUSE, "a rollout was served more than max_reuse times"
    # no lost or duplicated group: ids 0..n-1, each once, and every rollout is live or counted evicted
    assert sorted(g for g, _, _ in added) == list(range(60 * 5))
    assert len(buf) + sum(buf.evicted.values()) == 60 * 5 * GROUP
    assert buf.evicted["capacity"] == 0
    owner = {i: g for g, _, ids in added for i in ids}  # every served rollout came from an added group
    assert set(served) <= set(owner)


def test_sampling_concurrently_from_two_learners_serves_each_group_within_its_reuse_limit() -> None:
    rng = np.random.default_rng(2)
    buf = RolloutBuffer(4096, max_staleness=0, max_reuse=3, seed=0)
    for _ in range(200):
        tokens = [rng.integers(0, 50, size=3) for _ in range(GROUP)]
        buf.add_group(0, tokens, rng.random(GROUP), [-rng.random(3) for _ in tokens], version=0)
    seen: list[np.ndarray] = []

    def learner() -> None:
        while True:
            try:
                seen.append(buf.sample(2 * GROUP).ids)
            except ReplayBankError:
                return

    threads = [threading.Thread(target=learner) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ids, counts = np.unique(np.concatenate(seen), return_counts=True)
    assert counts.max() <= 3
    assert len(buf) + buf.evicted["reuse"] == 200 * GROUP  # nothing lost, nothing evicted twice
    assert counts.sum() >= (200 * GROUP - len(buf)) * 3 - 2 * GROUP  # evicted groups were used up


def _filled_buffer() -> RolloutBuffer:
    rng = np.random.default_rng(3)
    buf = RolloutBuffer(64, max_staleness=1, max_reuse=2, seed=0)
    for _ in range(4):
        buf.add_group(0, [rng.integers(0, 50, size=3) for _ in range(GROUP)], rng.random(GROUP),
                      [-rng.random(3) for _ in range(GROUP)], version=0)
    return buf


@pytest.mark.parametrize(
    "call",
    [
        lambda b: b.set_policy_version(5),  # evicts every group: the race the producer test once hit
        lambda b: b.add_group(0, [np.arange(3)] * GROUP, np.zeros(GROUP), [np.zeros(3)] * GROUP, version=0),
        lambda b: b.sample(2 * GROUP),
        lambda b: b.state_dict(),
        lambda b: b.load_state_dict(b.state_dict()),
        lambda b: len(b),
        lambda b: b.live_groups,
        lambda b: b.live_ids,
    ],
    ids=["set_policy_version", "add_group", "sample", "state_dict", "load_state_dict", "len", "live_groups", "live_ids"],
)
def test_every_public_method_waits_for_the_lock(call: Callable[[RolloutBuffer], object]) -> None:
    buf = _filled_buffer()
    finished = threading.Event()

    def other_thread() -> None:
        call(buf)
        finished.set()

    with buf.lock:  # a learner (or producer) in the middle of a call
        t = threading.Thread(target=other_thread)
        t.start()
        assert not finished.wait(0.2), "the method ran while another thread held the buffer's lock"
    t.join(5)
    assert finished.is_set()
