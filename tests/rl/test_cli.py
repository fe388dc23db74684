"""Smoke runs of every ``replaybank rl`` command through the real entry point, tiny budgets."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from replaybank.cli import main

pytest.importorskip("gymnasium")

TINY_DQN = ["--total-steps", "300", "--learning-starts", "128", "--eval-every", "300", "--eval-episodes", "1",
            "--batch-size", "32"]


@pytest.mark.parametrize("replay", ["uniform", "per", "reshuffled", "per-reshuffled"])
def test_dqn_writes_curves_and_metrics(tmp_path: Path, replay: str) -> None:
    out = tmp_path / replay
    assert main(["rl", "dqn", "--env-id", "CartPole-v1", "--replay", replay, "--seed", "0", *TINY_DQN,
                 "--out", str(out)]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["env_steps"] == 300 and metrics["replay"] == replay
    assert np.isfinite(metrics["final_eval_return"]) and 0 <= metrics["replay_time_share"] < 1
    assert (out / "curve.csv").read_text().startswith("env_step,eval_return")
    assert (out / "curve.png").stat().st_size > 0


def test_dqn_runs_on_minatar(tmp_path: Path) -> None:
    pytest.importorskip("minatar")
    assert main(["rl", "dqn", "--env-id", "MinAtar/Breakout-v1", "--replay", "per", *TINY_DQN,
                 "--total-steps", "200", "--eval-every", "200", "--out", str(tmp_path)]) == 0
    assert json.loads((tmp_path / "metrics.json").read_text())["env_steps"] == 200


def test_compare_writes_table_and_ci_plot(tmp_path: Path) -> None:
    assert main(["rl", "compare", "--envs", "CartPole-v1", "--schemes", "uniform,reshuffled", "--seeds", "2",
                 "--total-steps", "300", "--eval-every", "150", "--eval-episodes", "1", "--learning-starts", "128",
                 "--out", str(tmp_path)]) == 0
    table = json.loads((tmp_path / "compare.json").read_text())["table"]["CartPole-v1"]
    assert set(table) == {"uniform", "reshuffled"} and table["uniform"]["seeds"] == [0, 1]
    assert (tmp_path / "curves_CartPole-v1.png").stat().st_size > 0
    assert "| CartPole-v1 | reshuffled | 2 |" in (tmp_path / "compare.md").read_text()


def test_offline_command(tmp_path: Path) -> None:
    assert main(["rl", "offline", "--n-states", "10", "--episodes", "20", "--slice-length", "5", "--seeds", "1",
                 "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "offline.json").read_text())
    assert set(result["updates_to_propagate"]) == {"uniform", "forward", "reverse"}
    assert (tmp_path / "offline.png").stat().st_size > 0


def test_grpo_toy_command(tmp_path: Path) -> None:
    assert main(["rl", "grpo-toy", "--max-updates", "6", "--eval-every", "3", "--seeds", "1", "--out", str(tmp_path)]) == 0
    summary = json.loads((tmp_path / "grpo.json").read_text())["summary"]
    # replay generates fresh_groups (2) groups per update after warm-up, no replay batch_groups (8)
    assert summary["replay"]["tokens_generated"][0] < summary["no_replay"]["tokens_generated"][0]
    assert (tmp_path / "grpo.png").stat().st_size > 0


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["rl", "dqn", "--env-id", "CartPol-v1"], "valid envs: .*CartPole-v1"),
        (["rl", "dqn", "--replay", "prioritised"], "valid replay schemes: uniform, per, reshuffled, per-reshuffled"),
        (["rl", "compare", "--schemes", "uniform,fancy"], "valid replay schemes"),
        (["rl", "grpo", "--max-staleness", "-1"], "max_staleness must be >= 0"),
        (["rl", "grpo-toy", "--max-staleness", "-1"], "max_staleness must be >= 0"),
        (["rl", "offline", "--slice-length", "50"], "slice_length 50 exceeds"),
    ],
)
def test_bad_input_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str],
                                    message: str) -> None:
    assert main([*argv, "--out", str(tmp_path)]) == 2
    import re

    assert re.search(message, capsys.readouterr().err)


def test_rl_cli_imports_no_torch_or_gymnasium() -> None:
    code = ("import argparse, sys; from replaybank.rl.cli import add_subcommands; "
            "add_subcommands(argparse.ArgumentParser().add_subparsers()); "
            "print(sorted(m for m in ('torch', 'gymnasium', 'matplotlib') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
