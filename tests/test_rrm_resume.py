"""RR-M saves written before the one-tree layout load and draw as they did.

``fixtures/rrm_save_267a97b`` is a ``PrioritizedReshuffled`` buffer (64 slots, 120 items written
over 30 sample/update steps, lognormal(0, 2) priorities, alpha 0.7, beta 0.5, eps 0) saved by
``main`` at 267a97b, where the mask was a second tree; ``expected.json`` holds the ids and
weights that code drew in 12 sample(16) + update_priorities steps after loading it (the same on
its compiled and numpy kernels). The state format is unchanged, so a load must give those draws
again, bit for bit, on either kernel.
"""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from replaybank import PrioritizedReshuffled, ReplayBuffer

SAVED = Path(__file__).parent / "fixtures" / "rrm_save_267a97b"


def draws(buf: ReplayBuffer, steps: int) -> list[dict[str, list]]:
    rng = np.random.default_rng(9)
    got = []
    for _ in range(steps):
        b = buf.sample(16)
        buf.update_priorities(b.ids, rng.lognormal(0.0, 2.0, 16))
        got.append({"ids": b.ids.tolist(), "weights": [float(w) for w in b.weights]})
    return got


@pytest.mark.parametrize("kernels", ["numba", "numpy"])
def test_a_save_from_before_the_one_tree_layout_draws_as_it_did(kernels, monkeypatch, tmp_path):
    monkeypatch.setenv("REPLAYBANK_KERNELS", kernels)
    shutil.copytree(SAVED / "buffer", tmp_path / "buffer")  # a load must not write next to the fixture
    buf = ReplayBuffer.load(tmp_path / "buffer")
    assert isinstance(buf.sampler, PrioritizedReshuffled)
    if kernels == "numba":
        pytest.importorskip("numba")
    assert (buf.sampler._fast is None) == (kernels == "numpy")
    expected = json.loads((SAVED / "expected.json").read_text())["steps"]
    assert draws(buf, len(expected)) == expected


def test_a_save_from_the_compiled_trees_loads_into_the_numpy_fallback(monkeypatch, tmp_path):
    pytest.importorskip("numba")
    buf = ReplayBuffer.load(SAVED / "buffer")
    draws(buf, 5)
    buf.save(tmp_path / "again")
    monkeypatch.setenv("REPLAYBANK_KERNELS", "numpy")
    back = ReplayBuffer.load(tmp_path / "again")
    assert back.sampler._fast is None
    for name in ("count", "base", "anchor"):
        np.testing.assert_array_equal(getattr(back.sampler, name), getattr(buf.sampler, name))
    np.testing.assert_array_equal(back.sampler.trees.leaves, buf.sampler.trees.leaves)
    np.testing.assert_array_equal(back.sampler.mask.leaves, buf.sampler.mask.leaves)
    assert back.sampler.mask.total == pytest.approx(buf.sampler.mask.total, rel=1e-12)
    assert draws(back, 6) == draws(buf, 6)
