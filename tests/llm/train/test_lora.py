"""The LoRA loop's pure pieces: epoch slices."""

from __future__ import annotations

import numpy as np
import pytest

from replaybank.llm.train import epoch_slice


def test_epoch_slice_seeded_distinct_without_replacement():
    a0 = epoch_slice(100, 30, seed=5, epoch=0)
    assert np.array_equal(a0, epoch_slice(100, 30, seed=5, epoch=0))
    a1 = epoch_slice(100, 30, seed=5, epoch=1)
    assert not np.array_equal(a0, a1)
    assert len(set(a0.tolist())) == 30  # no repeats when the pool is large enough
    # seed + epoch: epoch 1 of seed 5 is epoch 0 of seed 6, as the reference does it
    assert np.array_equal(a1, epoch_slice(100, 30, seed=6, epoch=0))


def test_epoch_slice_small_pool_warns_and_replaces():
    with pytest.warns(UserWarning, match="sampling with replacement"):
        s = epoch_slice(5, 12, seed=0, epoch=0)
    assert s.size == 12 and s.max() < 5
    with pytest.raises(ValueError, match="empty"):
        epoch_slice(0, 3, seed=0, epoch=0)
