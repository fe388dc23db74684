"""Uniform sampling with replacement: every stored item equally likely, draws independent."""

from __future__ import annotations

import numpy as np

from .base import SamplerBase, View, check_can_sample, uniform_slots


class Uniform(SamplerBase):
    """Each slot of a batch is an independent uniform draw over the stored items.

    >>> from replaybank import ReplayBuffer
    >>> buf = ReplayBuffer(8, sampler=Uniform(), seed=0)
    >>> _ = buf.extend({"x": np.arange(8)})
    >>> buf.sample(4).data["x"]
    array([6, 5, 4, 2])
    """

    def sample(
        self, batch_size: int, view: View, rng: np.random.Generator
    ) -> tuple[np.ndarray, None]:
        check_can_sample(batch_size, view, True, "Uniform")
        return uniform_slots(batch_size, view, rng), None
