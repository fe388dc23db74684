"""The device check (``benchmarks/gpu/check.sh``) cannot rot without a GPU: its dry run runs every
stage on the CPU with tiny shapes (one subprocess per stage, as on the device), and the table and
``check.json`` hold every stage's figures. The table of a stage that did not finish says why."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

GPU = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu"
STAGES = ["env", "tests", "per", "speed", "memory", "mainjob"]


def _module(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(f"gpu_check_{name}", GPU / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_dry_run_runs_every_stage_and_reports_it(tmp_path: Path) -> None:
    pytest.importorskip("peft")
    torch = pytest.importorskip("torch")
    env = {**os.environ, "PYTHON": sys.executable, "PYTHONPATH": os.pathsep.join(sys.path), "OMP_NUM_THREADS": "1"}
    env.pop("OUT", None)
    proc = subprocess.run(["bash", str(GPU / "check.sh"), "--dry-run", "--out", str(tmp_path)], env=env,
                          capture_output=True, text=True, timeout=900)  # fmt: skip
    log = (tmp_path / "check.log").read_text() if (tmp_path / "check.log").is_file() else ""
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:] + log[-4000:]
    report = json.loads((tmp_path / "check.json").read_text())
    assert report["device"] == "cpu" and report["tiny"] is True
    assert list(report["stages"]) == STAGES and all(e["status"] == "ok" for e in report["stages"].values())
    res = {name: e["result"] for name, e in report["stages"].items()}

    assert res["env"]["torch"] == torch.__version__ and res["env"]["bf16_supported"] is True
    assert res["tests"]["returncode"] == 0 and res["tests"]["counts"].get("passed", 0) >= 1
    assert "failed" not in res["tests"]["counts"]
    per = res["per"]["runs"]
    assert [(r["items"], r["batch"]) for r in per] == [(10_000, 256)] and res["per"]["torch_device"] == "cpu"
    assert all(t["us"] > 0 for t in per[0]["trees"].values()) and "torch cpu k=32" in per[0]["trees"]
    shapes = res["speed"]["shapes"]
    assert [s["shape"] for s in shapes] == ["tiny-llama", "tiny-qwen2", "tiny-qwen2-untied"]
    for s in shapes:
        for runner in ("replaybank", "Trainer"):
            assert s[runner]["steps"] == 1 and s[runner]["tokens_per_s"] == pytest.approx(s["tokens_per_step"] / s[runner]["s_per_step"])
        assert s["ratio"] == pytest.approx(s["replaybank"]["tokens_per_s"] / s["Trainer"]["tokens_per_s"])
    runs = res["memory"]["runs"]
    assert [(r["checkpointing"], r["rows"]) for r in runs] == [(c, n) for c in (False, True) for n in (1, 2, 4, 8)]
    assert all(r["s_per_step"] > 0 and r["peak_gib"] is None and "error" not in r for r in runs)  # no GPU: no peak
    job = res["mainjob"]
    assert job["wall_seconds"] > 0 and job["device"] == "cpu" and job["steps"]["naive"] == job["steps"]["rehearsal-self"] == 1

    table = (tmp_path / "check.md").read_text()
    assert table in proc.stdout and log.count("===== stage ") == len(STAGES)
    for title in _module("report").TITLES.values():
        assert f"## {title}" in table
    assert "| 10,000 | 256 |" in table
    assert "| tiny-qwen2 | 2 x 48 |" in table and "| 8 x 64 | yes |" in table and "s wall**" in table


def test_a_stage_that_did_not_finish_is_named_in_the_table() -> None:
    render = _module("report").render
    report = {"device": "cuda", "tiny": False, "total_seconds": 300.0, "stages": {
        "env": {"status": "ok", "seconds": 9.0, "limit_s": 60, "result": {"gpu": "NVIDIA H200", "bf16_supported": True}},
        "memory": {"status": "timed out after 120 s", "seconds": 120.0, "limit_s": 120},
        "mainjob": {"status": "skipped: the budget is spent", "seconds": 0.0},
    }}  # fmt: skip
    table = render(report)
    assert table.startswith("# Device check: NVIDIA H200, 300.0 s")
    assert "| memory | timed out after 120 s | 120.0 | 120 |" in table and "no figures: timed out after 120 s" in table
    assert "no figures: skipped: the budget is spent" in table
