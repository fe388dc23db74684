"""Global sampling semantics, routing, bad input and save/load of ShardedReplayBuffer."""

import json

import numpy as np
import pytest

pytest.importorskip("ray", reason="the dist extra (ray) is not installed")
from scipy import stats  # noqa: E402

from replaybank import (  # noqa: E402
    CorruptSaveError,
    EmptyBufferError,
    Prioritized,
    ReplayBankError,
    ReplayBuffer,
    Reshuffled,
)
from replaybank.dist import ShardedReplayBuffer  # noqa: E402
from replaybank.dist.ids import SHARD_SHIFT, generation_of, shard_of  # noqa: E402

# every chi-square test below must reach this p-value; with fixed seeds the outcome is fixed, and
# a correct sampler fails one such test with probability 1e-4
P_MIN = 1e-4


@pytest.fixture(autouse=True)
def _ray(ray_session):
    return ray_session


def fill(buf, sizes, priorities=None):
    """Write sizes[s] items (x = 0, 1, ...) to shard s; returns the x values per shard."""
    start, out = 0, []
    for s, n in enumerate(sizes):
        x = np.arange(start, start + n)
        kw = {} if priorities is None else {"priorities": priorities[start:start + n]}
        buf.extend({"x": x}, shard=s, **kw)
        out.append(x)
        start += n
    return out


def draw_counts(buf, n_items, draws, batch=500):
    counts = np.zeros(n_items)
    weights = {}
    for _ in range(draws // batch):
        b = buf.sample(batch)
        np.add.at(counts, b.data["x"], 1)
        if b.weights is not None:
            weights.update(zip(b.data["x"].tolist(), b.weights.tolist()))
    return counts, weights


def test_uniform_is_uniform_over_all_items_with_unequal_shards():
    # shards of 5, 45 and 150 items: a per-shard-uniform scheme would give shard 0 a third of draws
    buf = ShardedReplayBuffer(3, 600, seed=1)
    fill(buf, [5, 45, 150])
    assert len(buf) == 200
    counts, _ = draw_counts(buf, 200, 40_000)
    assert stats.chisquare(counts).pvalue > P_MIN
    # the shard shares themselves, tested separately (multinomial over sizes)
    share = np.array([counts[:5].sum(), counts[5:50].sum(), counts[50:].sum()])
    assert stats.chisquare(share, 40_000 * np.array([5, 45, 150]) / 200).pvalue > P_MIN
    buf.close()


@pytest.mark.parametrize("alpha,beta", [(0.6, 0.4), (1.0, 1.0)])
def test_prioritized_matches_a_single_buffer_with_skewed_priorities(alpha, beta):
    rng = np.random.default_rng(0)
    sizes = [20, 60, 40]
    n = sum(sizes)
    # skewed: log-normal priorities, and a few items a hundred times more likely; shard 0 holds most mass
    prio = rng.lognormal(0.0, 1.0, n)
    prio[[0, 3, 7]] = 200.0
    sampler = Prioritized(alpha=alpha, beta=beta)
    buf = ShardedReplayBuffer(3, 300, sampler=sampler, seed=2, timeout=180)  # generous: actors start slowly on a loaded machine
    fill(buf, sizes, prio)
    single = ReplayBuffer(300, sampler=Prioritized(alpha=alpha, beta=beta), seed=0)
    single.extend({"x": np.arange(n)}, priorities=prio)
    p_single = single.sampler.probabilities()[:n]  # FIFO: slot == x
    counts, weights = draw_counts(buf, n, 60_000)
    assert stats.chisquare(counts, 60_000 * p_single).pvalue > P_MIN
    # weights: (N P(i))^-beta over the largest possible one, global N and global min P: exact
    expected = (p_single / p_single.min()) ** -beta
    got = np.array([weights[i] for i in sorted(weights)])
    np.testing.assert_allclose(got, expected[sorted(weights)], rtol=1e-5)
    assert len(weights) > 0.9 * n
    buf.close()


def test_weights_stay_global_after_priority_updates_and_beta_changes():
    buf = ShardedReplayBuffer(2, 100, sampler=Prioritized(alpha=1.0, beta=0.5, eps=0.0), seed=3)
    ids = np.concatenate([buf.extend({"x": np.arange(10)}, priorities=np.ones(10), shard=0),
                          buf.extend({"x": np.arange(10, 20)}, priorities=np.full(10, 4.0), shard=1)])
    assert buf.update_priorities(ids[[19]], [0.5]) == 1  # the global minimum now lives in shard 1
    buf.beta = 1.0
    b = buf.sample(200)
    p = np.where(b.data["x"] < 10, 1.0, 4.0)
    p[b.data["x"] == 19] = 0.5
    np.testing.assert_allclose(b.weights, (p / 0.5) ** -1.0, rtol=1e-6)
    buf.close()


def test_ids_encode_their_shard_and_routing_needs_no_lookup():
    buf = ShardedReplayBuffer(3, 30, sampler=Prioritized(alpha=1.0, eps=0.0), seed=4)
    per_shard = [buf.extend({"x": np.arange(4) + 10 * s}, shard=s) for s in range(3)]
    more = buf.extend({"x": np.arange(4) + 100})  # round robin starts at shard 0
    for s, ids in enumerate(per_shard):
        assert ids.dtype == np.int64 and (shard_of(ids) == s).all() and (generation_of(ids) == 0).all()
    assert (shard_of(more) == 0).all() and more.min() > per_shard[0].max()  # increasing within a shard
    # raise shard 2's priorities: only its mass changes
    before = buf.stats()
    assert buf.update_priorities(per_shard[2], np.full(4, 5.0)) == 4
    after = buf.stats()
    assert after[0] == before[0] and after[1] == before[1] and after[2][1] == 20.0
    np.testing.assert_array_equal(buf.get_items(np.r_[per_shard[2], per_shard[1]])["x"], [20, 21, 22, 23, 10, 11, 12, 13])
    buf.close()


def test_bad_input_names_the_argument():
    with pytest.raises(ReplayBankError, match="num_shards"):
        ShardedReplayBuffer(0, 10)
    with pytest.raises(ReplayBankError, match="capacity=2 is smaller than num_shards=3"):
        ShardedReplayBuffer(3, 2)
    with pytest.raises(ReplayBankError, match="Reshuffled"):
        ShardedReplayBuffer(2, 10, sampler=Reshuffled())
    buf = ShardedReplayBuffer(2, 10, sampler=Prioritized(), seed=0)
    with pytest.raises(EmptyBufferError):
        buf.sample(4)
    buf.extend({"x": np.arange(3), "y": np.zeros((3, 2), np.float32)})
    with pytest.raises(ReplayBankError, match=r"missing column\(s\) \['y'\]"):
        buf.extend({"x": np.arange(3)})  # would go to shard 1, whose spec would then differ
    with pytest.raises(ReplayBankError, match="column 'y'"):
        buf.extend({"x": np.arange(3), "y": np.zeros((3, 5), np.float32)})
    with pytest.raises(ReplayBankError, match="never issued by this buffer"):
        buf.update_priorities(np.array([5 << SHARD_SHIFT]), [1.0])  # shard 5 of 2: another buffer's id
    with pytest.raises(ReplayBankError, match="never issued"):
        buf.update_priorities(np.array([(1 << SHARD_SHIFT) | 999]), [1.0])  # shard 1 never issued it
    with pytest.raises(ReplayBankError, match="shard=7"):
        buf.extend({"x": np.arange(1), "y": np.zeros((1, 2))}, shard=7)
    with pytest.raises(ReplayBankError, match="batch_size"):
        buf.sample(0)
    buf.close()


def test_save_load_restores_the_same_next_batches(tmp_path):
    buf = ShardedReplayBuffer(2, 128, sampler=Prioritized(alpha=0.7, beta=0.5), seed=5)
    rng = np.random.default_rng(1)
    for _ in range(5):
        buf.extend({"obs": rng.random((12, 3), dtype=np.float32), "a": rng.integers(0, 4, 12)},
                   priorities=rng.random(12))
    b = buf.sample(16)
    buf.update_priorities(b.ids, rng.random(16))
    buf.save(tmp_path / "save")
    loaded = ShardedReplayBuffer.load(tmp_path / "save")
    assert len(loaded) == len(buf) == 60
    for _ in range(3):
        x, y = buf.sample(32), loaded.sample(32)
        np.testing.assert_array_equal(x.ids, y.ids)
        np.testing.assert_array_equal(x.data["obs"], y.data["obs"])
        np.testing.assert_array_equal(x.weights, y.weights)
        # ids issued before the save stay valid after the load
        new = rng.random(32)
        assert buf.update_priorities(x.ids, new) == loaded.update_priorities(y.ids, new) == 32
    ids = buf.extend({"obs": np.zeros((2, 3), np.float32), "a": np.zeros(2, np.int64)})
    np.testing.assert_array_equal(ids, loaded.extend({"obs": np.zeros((2, 3)), "a": np.zeros(2, np.int64)}))
    buf.close()
    loaded.close()


def test_load_refuses_altered_or_escaping_saves(tmp_path):
    buf = ShardedReplayBuffer(2, 20, seed=6)
    buf.extend({"x": np.arange(6)})
    buf.save(tmp_path / "s")
    buf.close()
    root = tmp_path / "s"
    manifest = json.loads((root / "manifest.json").read_text())
    core = root / manifest["version"] / "shard-001" / "manifest.json"
    text = core.read_text()
    core.write_text(text.replace('"capacity": 10', '"capacity": 11'))
    with pytest.raises(CorruptSaveError, match="shard-001.*checksum mismatch"):
        ShardedReplayBuffer.load(root)
    core.write_text(text)
    bad = dict(manifest, shards=[dict(manifest["shards"][0], dir="../../etc"), manifest["shards"][1]])
    (root / "manifest.json").write_text(json.dumps(bad))
    with pytest.raises(CorruptSaveError, match=r"shards\[0\].dir is '../../etc'"):
        ShardedReplayBuffer.load(root)
    (root / "manifest.json").write_text(json.dumps(dict(manifest, format="pickle")))
    with pytest.raises(CorruptSaveError, match="format"):
        ShardedReplayBuffer.load(root)
