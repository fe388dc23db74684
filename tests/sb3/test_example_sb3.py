"""examples/sb3_per_dqn.py on a tiny budget: PERDQN, SB3's DQN on replaybank's uniform buffer and
on SB3's own buffer each train, are evaluated and time their buffer."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pytest

pytest.importorskip("stable_baselines3")

EXAMPLE = Path(__file__).parents[2] / "examples" / "sb3_per_dqn.py"


def test_the_example_runs_all_three_buffers(tmp_path) -> None:
    spec = importlib.util.spec_from_file_location("sb3_per_dqn", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = tmp_path / "r.json"
    argv = ["--buffer", "all", "--steps", "300", "--learning-starts", "100", "--train-freq", "50",
            "--gradient-steps", "5", "--eval-episodes", "2", "--out", str(out)]  # fmt: skip
    results = module.main(argv)
    assert [r["buffer"] for r in results] == ["per", "uniform", "sb3"]
    for r in results:
        assert r["steps"] == 300 and r["gradient_steps"] == 5 * (200 // 50)
        assert math.isfinite(r["eval_return_mean"]) and r["eval_return_mean"] >= 8  # CartPole: >= 8 steps
        assert 0 < r["buffer_share"] < 1
    assert json.loads(out.read_text()) == results


def test_the_learning_curve_does_not_change_the_training(tmp_path, monkeypatch) -> None:
    """Evaluating at checkpoints on its own env leaves the trained weights bit-identical, so a run
    with a curve is the run without one; the curve has one point per ``--curve-every`` steps."""
    import torch
    from stable_baselines3.common.off_policy_algorithm import OffPolicyAlgorithm

    spec = importlib.util.spec_from_file_location("sb3_per_dqn", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    trained = []
    learn = OffPolicyAlgorithm.learn

    def keep(self, *args, **kwargs):
        out = learn(self, *args, **kwargs)
        trained.append({k: v.clone() for k, v in self.policy.state_dict().items()})
        return out

    monkeypatch.setattr(OffPolicyAlgorithm, "learn", keep)
    argv = ["--buffer", "per", "--steps", "400", "--learning-starts", "100", "--train-freq", "50",
            "--gradient-steps", "5", "--eval-episodes", "2", "--seed", "3"]  # fmt: skip
    with_curve = module.main([*argv, "--curve-every", "150"])[0]
    without = module.main(argv)[0]
    assert [p["step"] for p in with_curve["curve"]] == [150, 300] and without["curve"] == []
    assert all(p["return_mean"] >= 8 for p in with_curve["curve"])
    assert trained[0].keys() == trained[1].keys()
    assert all(torch.equal(trained[0][k], trained[1][k]) for k in trained[0])
    assert with_curve["eval_return_mean"] == without["eval_return_mean"]
