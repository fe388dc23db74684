"""Shared settings of the loop tests: a tiny config (as a dict or TOML) and a rehearsal file."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest


def tiny_loop_config(model_dir: Path, tmp: Path, **loop: Any) -> dict[str, Any]:
    """A loop config small enough for a tiny random model: seconds per generation."""
    rehearsal = tmp / "rehearsal.jsonl"
    if not rehearsal.exists():
        rows = [{"prompt": f"Name a colour number {i}.", "response": f"Colour {i} is blue."} for i in range(6)]
        rehearsal.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    base = {
        "generations": 2, "demos": 4, "tasks_per_generation": 3, "samples_per_task": 2, "context_examples": 2,
        "max_new_tokens": 6, "generation_batch_size": 8, "eval_tasks": 3, "validation_tasks": 2,
        "suite_per_family": 1, "rehearsal": str(rehearsal), "rehearsal_ratio": 0.25,
    }
    base.update(loop)
    training = {"base_model": str(model_dir), "batch_size": 4, "max_seq_length": 64, "num_train_epochs": 1,
                "lora_rank": 2, "lora_alpha": 4, "learning_rate": 1e-3}
    return {"loop": base, "training": training}


def to_toml(cfg: dict[str, Any]) -> str:
    lines = []
    for section, values in cfg.items():
        lines.append(f"[{section}]")
        lines += [f"{k} = {json.dumps(v)}" for k, v in values.items()]
    return "\n".join(lines) + "\n"


def kill_at(cmd: list[str], marker: str, env: dict[str, str], timeout: float = 300) -> list[str]:
    """Run ``cmd``, SIGKILL it as soon as a stdout line contains ``marker``; return the lines seen."""
    seen: list[str] = []
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    assert proc.stdout is not None
    for line in proc.stdout:
        seen.append(line)
        if marker in line:
            os.kill(proc.pid, signal.SIGKILL)
            break
    proc.wait(timeout=timeout)
    assert proc.returncode == -signal.SIGKILL, f"the loop ended before {marker!r}: {''.join(seen)[-2000:]}"
    return seen


@pytest.fixture
def tiny_cfg(tiny_model_dir: Path, tmp_path: Path, isolated_cache: Path) -> Any:
    """``tiny_cfg(**loop_keys)`` -> a config dict for the tiny random Llama (per-test cache)."""

    def make(**loop: Any) -> dict[str, Any]:
        return tiny_loop_config(tiny_model_dir, tmp_path, **loop)

    return make
