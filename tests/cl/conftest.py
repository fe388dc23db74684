from __future__ import annotations

import numpy as np
import pytest

from replaybank.cl.streams import Stream, split_stream


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch = pytest.importorskip("torch")
    torch.set_num_threads(1)


def tiny_arrays(seed: int = 0, n_per_class: int = 12, n_classes: int = 4, dim: int = 6):
    """Well-separated Gaussian blobs: tiny but learnable."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(0, 3, size=(n_classes, dim))
    y = np.repeat(np.arange(n_classes), n_per_class)
    x = centers[y] + rng.normal(0, 0.5, size=(len(y), dim))
    return x.astype(np.float32), y, x[::2].astype(np.float32), y[::2]


@pytest.fixture
def make_arrays():  # type: ignore[no-untyped-def]
    return tiny_arrays


@pytest.fixture
def tiny_stream() -> Stream:
    return split_stream(*tiny_arrays(), n_tasks=2, name="tiny")
