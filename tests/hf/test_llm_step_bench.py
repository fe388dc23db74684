"""benchmarks/llm_step.py --tiny runs end to end: every runner trains the timed steps on the same
tokens per step, and the result file has the table's fields."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("trl")
pytest.importorskip("peft")
pytest.importorskip("datasets")

SCRIPT = Path(__file__).parents[2] / "benchmarks" / "llm_step.py"


def test_llm_step_tiny(tmp_path):
    out = tmp_path / "llm_step.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, str(SCRIPT), "--tiny", "--repeats", "1", "--steps", "2", "--batch-size", "4",
           "--prompt", "12", "--completion", "4", "--out", str(out)]  # fmt: skip
    proc = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert [r["runner"] for r in result["rows"]] == ["replaybank", "replaybank-fullhead", "Trainer", "SFTTrainer"]
    assert result["tokens_per_step"] == 4 * 16
    for row in result["rows"]:
        assert row["steps"] == 2 and row["s_per_step"] > 0 and 0 <= row["mixing_share"] < 1
    assert "| replaybank | " in proc.stdout and "vs Trainer" in proc.stdout
