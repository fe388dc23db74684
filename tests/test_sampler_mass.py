"""``Prioritized.mass()`` / ``min_mass()``: the sampling mass a sharded buffer reads from each shard,
checked against the stored priorities after writes, ring overwrites and priority updates, with both
tree kernels (numba and the numpy fallback)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from replaybank import ReplayBuffer
from replaybank.errors import ReplayBankError
from replaybank.samplers import Prioritized, PrioritizedReshuffled


@pytest.fixture(params=["numba", "numpy"])
def kernels(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "numba":
        pytest.importorskip("numba")
        monkeypatch.delenv("REPLAYBANK_KERNELS", raising=False)
    else:
        monkeypatch.setenv("REPLAYBANK_KERNELS", "numpy")
    return str(request.param)


@pytest.mark.parametrize("cls", [Prioritized, PrioritizedReshuffled])
def test_mass_tracks_stored_priorities(kernels: str, cls: type[Prioritized]) -> None:
    rng = np.random.default_rng(0)
    alpha, eps, capacity = 0.6, 1e-3, 50
    sampler = cls(alpha=alpha, eps=eps)
    buf = ReplayBuffer(capacity, sampler=sampler, seed=0)
    assert sampler.mass() == 0.0 and sampler.min_mass() == math.inf
    stored: dict[int, float] = {}  # id -> priority of the items currently in the buffer
    for step in range(30):
        n = int(rng.integers(1, 12))
        # heavy-tailed priorities: masses span several orders of magnitude
        pr = rng.pareto(1.0, n) * 10.0 ** rng.integers(-3, 3)
        ids = buf.extend({"x": np.arange(n)}, priorities=pr)
        stored.update(zip(ids.tolist(), pr.tolist()))
        keys = np.array(sorted(stored))
        live = buf.contains(keys)
        assert live.sum() == min(len(keys), capacity)  # the ring overwrote the oldest items
        stored = {int(i): stored[int(i)] for i in keys[live]}
        if step % 3 == 2:  # new priorities for a random half of the stored items
            upd = rng.choice(sorted(stored), size=len(stored) // 2, replace=False)
            new = rng.exponential(2.0, len(upd))
            buf.update_priorities(upd, new)
            stored.update(zip(upd.tolist(), new.tolist()))
        masses = (np.array(list(stored.values())) + eps) ** alpha
        assert len(buf) == len(stored)
        assert sampler.mass() == pytest.approx(masses.sum(), rel=1e-9)
        assert sampler.min_mass() == pytest.approx(masses.min(), rel=1e-12)
        assert sampler.probabilities().sum() == pytest.approx(1.0, rel=1e-9)


def test_min_mass_skips_zero_priorities_and_sets_the_weights(kernels: str) -> None:
    sampler = Prioritized(alpha=1.0, beta=1.0, eps=0.0)
    buf = ReplayBuffer(8, sampler=sampler, seed=0)
    ids = buf.extend({"x": np.arange(4)}, priorities=[0.0, 4.0, 0.0, 2.0])
    assert sampler.mass() == 6.0
    assert sampler.min_mass() == 2.0  # zero-mass items are never drawn, so they do not count
    batch = buf.sample(64)
    # weight (P(i) / min P)^-beta: 1 for the smallest-mass item, 0.5 for twice its mass
    expected = np.where(batch.data["x"] == 3, 1.0, 0.5)
    np.testing.assert_allclose(batch.weights, expected)
    assert buf.update_priorities(ids[[1, 3]], np.array([0.0, 0.0])) == 2
    assert sampler.mass() == 0.0 and sampler.min_mass() == math.inf


def test_unbound_sampler_says_so() -> None:
    with pytest.raises(ReplayBankError, match=r"Prioritized.mass\(\): .*not bound"):
        Prioritized().mass()
    with pytest.raises(ReplayBankError, match=r"min_mass\(\)"):
        Prioritized().min_mass()


def test_shard_stats_read_the_sampler_mass() -> None:
    """The Ray-free core of a shard: the ``(size, mass, min_mass)`` the driver splits batches by."""
    from replaybank.dist.shard import Shard
    from replaybank.samplers import Uniform

    shard = Shard(0, 8, {"sampler": Prioritized(alpha=1.0, beta=0.4, eps=0.0)}, seed=0)
    assert shard.stats() == (0, 0.0, math.inf)
    shard.extend({"x": np.arange(3)}, priorities=np.array([3.0, 1.0, 6.0]))
    assert shard.stats() == (3, 10.0, 1.0)
    _, _, weights, stats = shard.sample(16, beta=1.0)
    assert shard.buffer.sampler.beta == 1.0  # type: ignore[attr-defined]
    assert stats == (3, 10.0, 1.0) and weights is not None and weights.min() == pytest.approx(1 / 6)
    uniform = Shard(1, 8, {"sampler": Uniform()}, seed=0)
    uniform.extend({"x": np.arange(5)})
    assert uniform.stats() == (5, 5.0, 1.0)
