import subprocess
import sys

import numpy as np

from replaybank import ReplayBuffer
from replaybank.cli import main


def test_import_and_help_stay_numpy_only():
    code = (
        "import sys, replaybank; from replaybank.cli import build_parser; build_parser(); "
        "print(sorted(m for m in ('torch', 'transformers', 'gymnasium', 'numba') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_help_lists_every_command(capsys):
    main([])
    text = capsys.readouterr().out
    for command in ("demo", "inspect", "run", "config", "probe", "cl", "rl", "store"):
        assert command in text


def test_demo_prints_a_row_per_sampler(capsys):
    assert main(["demo", "--capacity", "3000", "--batch", "32"]) == 0
    out = capsys.readouterr().out
    for name in (
        "Uniform",
        "Reshuffled",
        "Prioritized",
        "PrioritizedReshuffled",
        "Trajectories(16)",
    ):
        assert name in out


def test_inspect_describes_a_save(tmp_path, capsys):
    buf = ReplayBuffer(10, seed=0)
    buf.extend({"obs": np.zeros((4, 3), np.float32)})
    buf.save(tmp_path / "b")
    assert main(["inspect", str(tmp_path / "b")]) == 0
    out = capsys.readouterr().out
    assert "4 / 10 items" in out and "obs: <f4 (3,)" in out


def test_inspect_of_a_non_save_is_a_clear_error(tmp_path, capsys):
    assert main(["inspect", str(tmp_path)]) == 2
    assert "not a saved replaybank buffer" in capsys.readouterr().err
