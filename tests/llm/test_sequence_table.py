"""benchmarks/sequence_table.py on the committed three-skill run: the table's figures are the matrix's."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "benchmarks" / "results" / "sequence3"


def _module():
    spec = importlib.util.spec_from_file_location("sequence_table", ROOT / "benchmarks" / "sequence_table.py")
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


def test_seed_figures_follow_the_accuracy_matrix() -> None:
    metrics = json.loads((RUN / "metrics.json").read_text())
    figures = _module().seed_figures(metrics)
    assert set(figures) == {"fixed10", "fixed30", "bandit", "onpolicy10"}  # base has one row: no sequence
    for arm, rows in figures.items():
        assert len(rows) == 3
        for k, row in enumerate(rows):
            R = np.asarray(metrics["arms"][arm]["matrix"]["per_seed"][k]["R"])
            assert row["final_row"] == R[-1].tolist()
            assert row["average_accuracy"] == pytest.approx(np.mean(R[-1]), abs=1e-9)
            assert row["backward_transfer"] == pytest.approx(np.mean(R[-1, :-1] - np.diag(R)[:-1]), abs=1e-9)
            assert row["forgetting"] == [R[:-1, j].max() - R[-1, j] for j in range(2)]


def test_the_script_prints_the_table_and_paired_differences(tmp_path: Path) -> None:
    out = tmp_path / "table.json"
    text = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "sequence_table.py"), str(RUN), "--out", str(out)],
                          capture_output=True, text=True, check=True).stdout  # fmt: skip
    assert "| bandit | +0.375 ± 0.021 | -0.125 ± 0.136 |" in text
    assert "Paired differences against fixed30" in text
    summary = json.loads(out.read_text())
    bwt = [r["backward_transfer"] for r in summary["bandit"]["seeds"]]
    ref = [r["backward_transfer"] for r in summary["fixed30"]["seeds"]]
    assert summary["bandit"]["paired_vs_fixed30"]["backward_transfer"] == [a - b for a, b in zip(bwt, ref, strict=True)]
    assert len(summary["onpolicy10"]["paired_vs_fixed10"]["average_accuracy"]) == 3
