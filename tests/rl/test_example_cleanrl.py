"""examples/cleanrl_dqn.py on a tiny budget, uniform and prioritized: the loop runs CleanRL's
structure on replaybank, the TD target stays float32, and PER updates the priorities."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("gymnasium")
torch = pytest.importorskip("torch")

EXAMPLE = Path(__file__).parents[2] / "examples" / "cleanrl_dqn.py"


def load():
    spec = importlib.util.spec_from_file_location("cleanrl_dqn", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the file runs
    spec.loader.exec_module(module)
    return module


TINY = ["--total-timesteps", "500", "--learning-starts", "100", "--batch-size", "32",
        "--target-network-frequency", "50", "--no-cuda", "--seed", "0"]  # fmt: skip


@pytest.mark.parametrize("per", [False, True])
def test_cleanrl_dqn_runs_on_replaybank(per) -> None:
    torch.set_num_threads(1)
    out = load().main(TINY + (["--per"] if per else []))
    rb = out["buffer"]
    assert len(rb) == 500 and out["args"].per is per
    assert len(out["losses"]) == sum(1 for s in range(500) if s > 100 and s % 10 == 0) and all(math.isfinite(x) for x in out["losses"])
    assert len(out["episodic_returns"]) >= 5  # CartPole episodes under random-ish play
    batch = rb.sample(16, as_tensors="torch")
    assert batch["reward"].dtype == torch.float32 and batch["done"].dtype == torch.float32
    assert batch["action"].dtype == torch.int64 and tuple(batch["obs"].shape) == (16, 4)
    assert rb.spec["done"].dtype == np.bool_ and rb.spec["reward"].dtype == np.float64  # stored as given
    stored = rb.get(rb.sample(400).ids)
    assert stored["done"].any()  # terminations were stored
    if per:
        leaves = rb.sampler.trees.leaves[: len(rb)]
        assert len(np.unique(leaves)) > 50  # |TD error| priorities, item by item
        assert rb.sampler.beta > 0.4
        assert batch.weights.dtype == torch.float32


def test_the_flags_are_cleanrls() -> None:
    args = load().parse_args(["--buffer-size", "77", "--per", "--learning-rate", "1e-3"])
    assert (args.buffer_size, args.per, args.learning_rate, args.batch_size) == (77, True, 1e-3, 128)
