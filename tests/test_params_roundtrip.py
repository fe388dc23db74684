"""Every parameter a sampler, admission or storage constructor accepts survives save/load, and the
loader refuses exactly what the constructor refuses (one source of truth for the ranges: the
constructors; ``manifest.PARAMS`` checks types only)."""

import inspect
import json

import numpy as np
import pytest

from replaybank import ReplayBankError, ReplayBuffer, manifest
from replaybank import admission as admission_mod
from replaybank import samplers as samplers_mod
from replaybank import storage as storage_mod
from replaybank.errors import CorruptSaveError
from replaybank.manifest import digest


def resign(root, edit):
    raw = json.loads((root / "manifest.json").read_text())
    edit(raw)
    raw["manifest_sha256"] = digest(raw)
    (root / "manifest.json").write_text(json.dumps(raw))


MODULES = {"sampler": samplers_mod, "admission": admission_mod, "storage": storage_mod}
REGISTRIES = {
    "sampler": manifest.SAMPLERS,
    "admission": manifest.ADMISSIONS,
    "storage": manifest.STORAGES,
}


@pytest.mark.parametrize("kind", sorted(REGISTRIES))
def test_the_manifest_records_every_constructor_parameter(kind):
    for name, params in REGISTRIES[kind].items():
        cls = getattr(MODULES[kind], name)
        # where the columns (load's directory=) or the trees (Prioritized(device=)) live, not what
        # the buffer holds: never saved (a device="cuda" save loads onto the numpy/numba tree)
        accepted = [p for p in inspect.signature(cls).parameters if p not in ("directory", "device")]
        assert sorted(params) == sorted(accepted), name
        assert all(p in manifest.PARAMS for p in params), name


S = samplers_mod
# edge values of every range the constructors accept
SAMPLERS = [
    S.Prioritized(alpha=0, beta=0, eps=0, branching=2),
    S.Prioritized(alpha=2.5, beta=1.0, eps=1e-3, branching=1024),
    S.PrioritizedReshuffled(alpha=1.0, beta=0.0, eps=0.5, branching=1024),
    S.Trajectories(None, reverse=True),
    S.Trajectories(1, priority="td", alpha=0.0, beta=2.0, eps=0.0, done_key="end"),
    S.Trajectories(4, priority="return", reward_key="r", done_key="end"),
]
ADMISSIONS = [admission_mod.Window(1), admission_mod.Window(10**9), admission_mod.GroupBalanced()]
STORAGES = [
    storage_mod.ColumnarStorage(check_memory=False),
    storage_mod.RaggedStorage(check_memory=False),
]


def roundtrip(tmp_path, **parts):
    buf = ReplayBuffer(16, seed=0, **parts)
    n = 12
    buf.extend(
        {
            "x": np.arange(n, dtype=np.float32),
            "end": np.arange(n) % 5 == 4,
            "done": np.arange(n) % 5 == 4,
            "r": np.ones(n),
            "reward": np.ones(n),
        },
        groups=np.arange(n) % 2 if "admission" in parts else None,
    )
    buf.save(tmp_path / "b")
    back = ReplayBuffer.load(tmp_path / "b")
    for kind, obj in parts.items():
        got = getattr(back, kind)
        assert type(got) is type(obj)
        for p in REGISTRIES[kind][type(obj).__name__]:
            assert getattr(got, p) == getattr(obj, p), (kind, p)
    a, b = buf.sample(4), back.sample(4)
    assert np.array_equal(
        np.asarray(a.ids.values if hasattr(a.ids, "values") else a.ids),
        np.asarray(b.ids.values if hasattr(b.ids, "values") else b.ids),
    )


@pytest.mark.parametrize("sampler", SAMPLERS, ids=lambda s: type(s).__name__)
def test_sampler_parameters_round_trip(tmp_path, sampler):
    roundtrip(tmp_path, sampler=sampler)


@pytest.mark.parametrize("admission", ADMISSIONS, ids=lambda a: type(a).__name__)
def test_admission_parameters_round_trip(tmp_path, admission):
    roundtrip(tmp_path, admission=admission)


@pytest.mark.parametrize("storage", STORAGES, ids=lambda s: type(s).__name__)
def test_storage_parameters_round_trip(tmp_path, storage):
    roundtrip(tmp_path, storage=storage)


@pytest.mark.parametrize(
    "cls, params, key, value",
    [
        (
            "Prioritized",
            {"alpha": 0.6, "beta": 0.4, "eps": 1e-6, "branching": 8},
            "branching",
            1025,
        ),
        ("Prioritized", {"alpha": 0.6, "beta": 0.4, "eps": 1e-6, "branching": 8}, "alpha", -0.5),
        ("Prioritized", {"alpha": 0.6, "beta": 0.4, "eps": 1e-6, "branching": 8}, "eps", -1.0),
    ],
)
def test_the_loader_refuses_what_the_constructor_refuses(tmp_path, cls, params, key, value):
    with pytest.raises(ReplayBankError) as direct:
        getattr(samplers_mod, cls)(**{**params, key: value})
    buf = ReplayBuffer(8, sampler=getattr(samplers_mod, cls)(**params), seed=0)
    buf.extend({"x": np.arange(4)})
    buf.save(tmp_path / "b")
    resign(tmp_path / "b", lambda m: m["sampler"]["params"].__setitem__(key, value))
    with pytest.raises(CorruptSaveError) as loaded:
        ReplayBuffer.load(tmp_path / "b")
    assert str(direct.value) in str(loaded.value)
