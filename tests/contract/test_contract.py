"""Every storage x admission x sampler combination honours the same contract."""

import itertools

import numpy as np
import pytest

from replaybank import (
    ColumnarStorage,
    Fifo,
    GroupBalanced,
    MemmapStorage,
    Prioritized,
    PrioritizedReshuffled,
    RaggedStorage,
    ReplayBankError,
    ReplayBuffer,
    Reservoir,
    Reshuffled,
    Trajectories,
    Uniform,
    Window,
)

STORAGES = {
    "columnar": lambda tmp: ColumnarStorage(),
    "memmap": lambda tmp: MemmapStorage(tmp / "mm"),
    "ragged": lambda tmp: RaggedStorage(),
}
ADMISSIONS = {
    "fifo": Fifo,
    "reservoir": Reservoir,
    "balanced": GroupBalanced,
    "window": lambda: Window(3),
}
SAMPLERS = {
    "uniform": Uniform,
    "reshuffled": Reshuffled,
    "prioritized": lambda: Prioritized(alpha=0.6, beta=0.4),
    "prioritized-rr": lambda: PrioritizedReshuffled(alpha=0.6, beta=0.4),
    "trajectories": lambda: Trajectories(3),
    "trajectories-td": lambda: Trajectories(2, reverse=True, priority="td"),
    "episodes": lambda: Trajectories(None, priority="return"),
}
CAPACITY = 40


def make(storage, admission, sampler, tmp_path, seed=0):
    return ReplayBuffer(
        CAPACITY,
        storage=STORAGES[storage](tmp_path),
        admission=ADMISSIONS[admission](),
        sampler=SAMPLERS[sampler](),
        seed=seed,
    )


def chunk(step, n, ragged):
    t = np.arange(step, step + n)
    cols = {
        "obs": np.stack([t, -t], axis=1).astype(np.float32),
        "reward": (t % 3).astype(np.float32),
        "done": (t % 7 == 6),
    }
    if ragged:
        cols["tokens"] = [np.arange(v % 5 + 1, dtype=np.int32) + v for v in t]
    return cols


def feed(buf, start, steps, ragged):
    kwargs = {}
    for s in range(start, start + steps, 9):
        n = min(9, start + steps - s)
        if buf.admission.requires_groups:
            kwargs["groups"] = (np.arange(s, s + n) // 20).astype(np.int64)
        if buf.sampler.uses_priorities:
            kwargs["priorities"] = np.arange(s, s + n) % 5 + 0.5
        buf.extend(chunk(s, n, ragged), **kwargs)


def draw(buf, rounds=5, batch=8):
    out = []
    for _ in range(rounds):
        b = buf.sample(batch)
        ids = np.asarray(getattr(b.ids, "values", b.ids)).ravel()
        out.append((ids.copy(), None if b.weights is None else b.weights.copy()))
        if buf.sampler.uses_priorities:
            buf.update_priorities(ids, (ids % 11) + 0.1)
    return out


COMBOS = list(itertools.product(STORAGES, ADMISSIONS, SAMPLERS))


@pytest.mark.parametrize("storage,admission,sampler", COMBOS)
def test_contract(storage, admission, sampler, tmp_path):
    if sampler.startswith(("trajectories", "episodes")) and admission != "fifo":
        with pytest.raises(ReplayBankError, match="Fifo"):
            make(storage, admission, sampler, tmp_path)
        return
    ragged = storage == "ragged"
    buf = make(storage, admission, sampler, tmp_path)
    feed(buf, 0, 100, ragged)
    assert 0 < len(buf) <= CAPACITY

    batch = buf.sample(8)
    episodes = sampler == "episodes"
    ids = batch.ids.values if episodes else batch.ids.ravel()
    assert buf.contains(ids).all(), "sampled ids must be stored items"
    # data matches the ids: obs[:, 1] == -obs[:, 0] and the arrival number is encoded in obs
    obs = batch.data["obs"].values if episodes else batch.data["obs"].reshape(-1, 2)
    np.testing.assert_array_equal(obs[:, 1], -obs[:, 0])
    if ragged:
        tokens = batch.data["tokens"]
        for row, t in zip(tokens, obs[:, 0].astype(int)):
            np.testing.assert_array_equal(row, np.arange(t % 5 + 1) + t)
    if sampler.startswith("trajectories"):
        length = buf.sampler.length
        assert batch.data["obs"].shape == (8, length, 2)
        steps = batch.data["obs"][..., 0]
        if buf.sampler.reverse:
            steps = steps[:, ::-1]
        assert (np.diff(steps, axis=1) == 1).all(), "slices are consecutive steps"
        done = batch.data["done"] if not buf.sampler.reverse else batch.data["done"][:, ::-1]
        assert not done[:, :-1].any(), "a slice never crosses an episode end"
    if episodes:
        for row, done in zip(batch.data["obs"], batch.data["done"]):
            assert (np.diff(row[:, 0]) == 1).all() and not done[:-1].any()
    if batch.weights is not None:
        assert (
            batch.weights.shape == (8,)
            and (batch.weights > 0).all()
            and (batch.weights <= 1 + 1e-6).all()
        )

    # exact resume: the saved-and-loaded buffer continues exactly like the original
    path = tmp_path / "save"
    buf.save(path)
    loaded = ReplayBuffer.load(path)
    assert len(loaded) == len(buf)
    for original, copy in ((buf, loaded),):
        feed(original, 100, 23, ragged)
        feed(copy, 100, 23, ragged)
    a, b = draw(buf), draw(loaded)
    for (ia, wa), (ib, wb) in zip(a, b):
        np.testing.assert_array_equal(ia, ib)
        if wa is not None:
            np.testing.assert_allclose(wa, wb)
    a_obs, b_obs = buf.sample(4).data["obs"], loaded.sample(4).data["obs"]
    np.testing.assert_array_equal(getattr(a_obs, "values", a_obs), getattr(b_obs, "values", b_obs))
