"""The torch priority tree (``Prioritized(device=...)``): the numpy tree's results bit for bit on
the CPU device, its distribution, its updates, its errors and its state. Every test runs on torch's
CPU device; the ``cuda`` ones also on a GPU, and are skipped where there is none. It needs only
numpy, torch and pytest (no scipy, no hypothesis), as the device check runs it on the GPU machine
(``benchmarks/gpu``) with that machine's own packages."""

import numpy as np
import pytest

from replaybank import ReplayBuffer
from replaybank.errors import InvalidArgumentError, InvalidTypeError, ReplayBankError
from replaybank.samplers import Prioritized, PrioritizedReshuffled
from replaybank.samplers.sumtree import PairedTrees

torch = pytest.importorskip("torch")
from replaybank.samplers.torch_tree import TorchPairTree  # noqa: E402

CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not CUDA, reason="no CUDA device here")
DEVICES = ["cpu", pytest.param("cuda", marks=needs_cuda)]
# the chi-square distribution's 0.999 quantile by degrees of freedom (scipy.stats.chi2.ppf(0.999, df)):
# a statistic above it has p < 1e-3
CHI2_999 = {49: 85.351, 98: 147.010}


def chi_square(counts, expected):
    return float(((counts - expected) ** 2 / expected).sum())


def random_updates(rng, capacity, rounds=4, n=300):
    """Batches of (slots, priorities) with repeated slots and zeros (empty slots)."""
    for _ in range(rounds):
        idx = rng.integers(0, capacity, n)
        yield idx, rng.random(n) * 10 * (rng.random(n) < 0.8)


@pytest.mark.parametrize("capacity,branching", [(1, 2), (5, 2), (777, 3), (4096, 8), (20_000, 32)])
def test_the_cpu_torch_tree_gives_the_numpy_trees_leaves_slots_and_weights_bit_for_bit(capacity, branching):
    # inner sums: numpy adds a node's children pairwise, torch in its own order, so the total may
    # differ in its last bit; a draw moves only if it falls within that bit of a boundary (never here)
    rng = np.random.default_rng(capacity)
    ref, tree = PairedTrees(capacity, branching=branching), TorchPairTree(capacity, branching=branching)
    for idx, p in random_updates(rng, capacity):
        assert tree.update_powered(idx, p, 1e-6, 0.6) == ref.update_powered(idx, p, 1e-6, 0.6)
        np.testing.assert_array_equal(tree.leaves, ref.leaves)
        assert tree.total == pytest.approx(ref.total, rel=1e-13) and tree.minimum == ref.minimum
        mass = rng.random(2000) * ref.total  # the same masses: the same leaves
        np.testing.assert_array_equal(tree.find(mass), ref.find(mass))
        u = rng.random(512)  # the same uniform draws: the same slots and weights
        (slots, weights), (want, want_w) = tree.stratified(u, 0.4), ref.stratified(u, 0.4)
        np.testing.assert_array_equal(slots, want)
        np.testing.assert_array_equal(weights, want_w)
        assert weights.dtype == np.float32 and slots.dtype == np.int64


@pytest.mark.parametrize("case", range(40))
def test_a_repeated_slot_takes_the_last_value_given_and_the_roots_follow(case):
    rng = np.random.default_rng(case)
    capacity, branching = int(rng.integers(1, 200)), int(rng.choice([2, 3, 8, 32]))
    values = np.array([0.0, 0.5, 1.0, 3.0, 1e-6])
    batches = [(rng.integers(0, capacity, n), rng.choice(values, n)) for n in rng.integers(1, 30, rng.integers(1, 5))]
    tree = TorchPairTree(capacity, branching=branching)
    plain = np.zeros(capacity)
    for idx, new in batches:
        tree.update(idx, new)
        for i, v in zip(idx, new):
            plain[i] = v  # in order: the last one stays
    np.testing.assert_array_equal(tree.leaves, plain)
    np.testing.assert_allclose(tree.total, plain.sum(), rtol=1e-12)
    assert tree.minimum == (plain[plain > 0].min() if (plain > 0).any() else np.inf)
    if plain.sum() > 0:  # a zero leaf is never found, even at the edges of the mass
        edges = np.array([0.0, np.nextafter(tree.total, 0), tree.total * 0.5])
        assert (plain[tree.find(edges)] > 0).all()


def test_load_rebuilds_both_trees_from_the_leaves():
    rng = np.random.default_rng(3)
    values = rng.random(1000) * (rng.random(1000) < 0.5)
    ref, tree = PairedTrees(1000, branching=32), TorchPairTree(1000, branching=32)
    ref.load(values)
    tree.load(values)
    np.testing.assert_array_equal(tree.leaves, values)
    assert tree.total == pytest.approx(ref.total, rel=1e-13) and tree.minimum == ref.minimum


def buffer(device, *, capacity=64, seed=0, **kw):
    return ReplayBuffer(capacity, sampler=Prioritized(device=device, **kw), seed=seed)


def frequencies(buf, priorities, batches, batch_size=256):
    ids = buf.extend({"x": np.arange(len(priorities))}, priorities=priorities)
    counts = np.zeros(len(priorities))
    for _ in range(batches):
        b = buf.sample(batch_size)
        np.add.at(counts, np.searchsorted(ids, b.ids), 1)
    return counts


@pytest.mark.parametrize("device", DEVICES)
def test_draws_follow_priorities_to_the_alpha(device):
    # 51,200 draws over 50 items: chi-square p > 1e-3 and every share within 0.004 of P(i)
    # (stratified draws vary less than the multinomial the test assumes, so it is conservative)
    p = np.random.default_rng(1).uniform(0.1, 5.0, 50)
    counts = frequencies(buffer(device, capacity=50, alpha=0.6, eps=0.0), p, 200)
    want = p**0.6 / (p**0.6).sum()
    assert chi_square(counts, want * counts.sum()) < CHI2_999[49]
    assert np.abs(counts / counts.sum() - want).max() < 0.004


@pytest.mark.parametrize("device", DEVICES)
def test_a_priority_1e4_times_the_rest_gets_its_share_and_the_rest_still_theirs(device):
    p = np.ones(100)
    p[17] = 1e4
    counts = frequencies(buffer(device, capacity=100, alpha=1.0, eps=0.0), p, 400)
    n = counts.sum()
    want = p / p.sum()  # item 17: 0.99020; each other: 9.9e-5
    assert abs(counts[17] / n - want[17]) < 5e-4  # stratified: within a draw per batch of 256
    rest = np.delete(counts, 17)
    assert chi_square(rest, np.full(99, rest.sum() / 99)) < CHI2_999[98]
    assert abs(rest.sum() - n * (1 - want[17])) < 4 * np.sqrt(n * want[17] * (1 - want[17]))


def drive(buf, rng, steps=30, batch=64):
    """Writes (batched and one by one), samples and priority updates; what was sampled."""
    out = []
    for step in range(steps):
        if step % 3 == 0:
            buf.extend({"x": rng.integers(0, 9, 20)}, priorities=rng.random(20) * (step % 2))
        buf.add(x=step)
        b = buf.sample(batch)
        out.append((b.ids.copy(), b.weights.copy()))
        td = rng.random(batch) * 3
        td[::7] = 0.0
        buf.update_priorities(b.ids, td)
        buf.update_priorities(b.ids[:5], np.full(5, 4.0))  # ids sampled again: the last wins
    return out


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("branching", [None, 8])
def test_a_buffer_on_the_torch_tree_samples_what_the_default_tree_does(device, branching):
    # the default tree is numba's (branching 8) or numpy's (32); with the same branching the trees
    # add in the same order, otherwise sums may differ in the last bit, which moves a draw only
    # when it falls within that bit of a boundary (never, with these seeds)
    a = drive(buffer(None, capacity=200, branching=branching), np.random.default_rng(5))
    b = drive(buffer(device, capacity=200, branching=branching), np.random.default_rng(5))
    for (ids, w), (ids_t, w_t) in zip(a, b):
        np.testing.assert_array_equal(ids_t, ids)
        np.testing.assert_allclose(w_t, w, rtol=1e-6)
        assert isinstance(w_t, np.ndarray) and w_t.dtype == np.float32


def test_mass_min_mass_probabilities_and_clear():
    buf = buffer("cpu", capacity=8, alpha=1.0, eps=0.0)
    assert (buf.sampler.mass(), buf.sampler.min_mass()) == (0.0, np.inf)
    buf.extend({"x": np.arange(3)}, priorities=[2.0, 0.5, 5.0])
    assert (buf.sampler.mass(), buf.sampler.min_mass()) == (7.5, 0.5)
    np.testing.assert_array_equal(buf.sampler.probabilities()[:3], np.array([2.0, 0.5, 5.0]) / 7.5)
    buf.clear()
    assert buf.sampler.mass() == 0.0 and isinstance(buf.sampler.trees, TorchPairTree)
    buf.extend({"x": np.arange(2)})
    assert buf.sampler.mass() == 2.0  # new items weigh 1 again


def test_as_tensors_puts_the_weights_where_asked():
    buf = buffer("cpu", capacity=8)
    buf.extend({"x": np.arange(4)}, priorities=[1.0, 2.0, 3.0, 4.0])
    b = buf.sample(4, as_tensors="torch", device="cpu")
    assert isinstance(b.weights, torch.Tensor) and isinstance(b.ids, np.ndarray)


BAD = [
    ([1.0, float("nan"), 1.0], InvalidArgumentError),
    ([1.0, -1.0, 1.0], InvalidArgumentError),
    ([1.0, float("inf"), 1.0], InvalidArgumentError),
    ([1.0, 2.0], InvalidArgumentError),
    ([[1.0, 2.0, 3.0]], InvalidArgumentError),
    (["a", "b", "c"], InvalidTypeError),
    ([1.0, 1e308, 1.0], InvalidArgumentError),
]


@pytest.mark.parametrize("bad,error", BAD)
def test_bad_priorities_are_refused_as_the_default_tree_refuses_them(bad, error):
    messages = []
    for device in (None, "cpu"):
        buf = buffer(device, capacity=8, alpha=1.0, eps=0.0)
        ids = buf.extend({"x": np.arange(3)})
        with pytest.raises(error) as got:
            buf.extend({"x": np.arange(3)}, priorities=bad)
        messages.append(str(got.value))
        with pytest.raises(error) as got:
            buf.update_priorities(ids, bad)
        messages.append(str(got.value))
        np.testing.assert_array_equal(buf.sampler.trees.leaves[:3], 1.0)  # nothing changed
    assert messages[:2] == messages[2:]


@pytest.mark.parametrize(
    "device,words",
    [
        ("tpu", "not a torch device"),
        ("gpu", "not a torch device"),
        (True, "not a torch device"),
        ("meta", "runs on 'cpu' or 'cuda', not 'meta'"),
        pytest.param("cuda", "CUDA is not available here", marks=pytest.mark.skipif(CUDA, reason="CUDA here")),
        pytest.param("cuda:99", "CUDA device(s)", marks=needs_cuda),
    ],
)
def test_a_device_the_tree_cannot_use_is_refused_by_name(device, words):
    with pytest.raises(InvalidArgumentError) as got:
        Prioritized(device=device)
    assert f"Prioritized(device={device!r})" in str(got.value) and words in str(got.value)


def test_rrm_refuses_a_device():
    with pytest.raises(InvalidArgumentError, match="leave device=None for PrioritizedReshuffled"):
        PrioritizedReshuffled(device="cpu")


def test_sampling_all_zero_priorities_is_refused():
    buf = buffer("cpu", capacity=8, eps=0.0)
    buf.extend({"x": np.arange(3)}, priorities=[0.0, 0.0, 0.0])
    with pytest.raises(ReplayBankError, match="all stored priorities are zero"):
        buf.sample(2)


def plain(value):
    """Every value in a state: numpy arrays and Python scalars, never a tensor."""
    if isinstance(value, dict):
        return all(plain(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return all(plain(v) for v in value)
    return not isinstance(value, torch.Tensor)


@pytest.mark.parametrize("device", DEVICES)
def test_state_round_trips_through_numpy_onto_either_tree(device, tmp_path):
    rng = np.random.default_rng(9)
    buf = buffer(device, capacity=100, seed=4)
    drive(buf, rng, steps=10)
    state = buf.state_dict()
    assert plain(state) and isinstance(state["sampler"]["priorities"], np.ndarray)
    after = drive(buf, np.random.default_rng(1), steps=5)
    for target in (device, None):  # resumed on the torch tree and on the numpy/numba tree
        other = buffer(target, capacity=100, seed=123)
        other.load_state_dict(state)
        for (ids, w), (ids_o, w_o) in zip(after, drive(other, np.random.default_rng(1), steps=5)):
            np.testing.assert_array_equal(ids_o, ids)
            np.testing.assert_allclose(w_o, w, rtol=1e-6)
    buf.save(tmp_path / "save")  # a save does not record the device: it loads onto the default tree
    loaded = ReplayBuffer.load(tmp_path / "save")
    assert loaded.sampler.device is None
    np.testing.assert_array_equal(loaded.sampler.trees.leaves, buf.sampler.trees.leaves)


@needs_cuda
def test_the_cuda_tree_lives_on_the_gpu_and_hands_back_numpy():
    buf = buffer("cuda", capacity=1000)
    buf.extend({"x": np.arange(1000)}, priorities=np.arange(1000) % 7)
    tree = buf.sampler.trees
    assert tree._sum[0].device.type == "cuda" and tree._min[-1].device.type == "cuda"
    b = buf.sample(256)
    assert isinstance(b.ids, np.ndarray) and isinstance(b.weights, np.ndarray)
    b = buf.sample(256, as_tensors="torch", device="cuda")
    assert b.weights.device.type == "cuda"
