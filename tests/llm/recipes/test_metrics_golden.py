"""The main job's metrics.json and report.md on a tiny random Llama, byte for byte against files
committed under tests/llm/recipes/golden/.

Masked, because they change from run to run: ``wall_seconds``, ``timings``, ``environment``
(machine, library versions, load average); the two temporary paths in ``config``
(``training.base_model``, ``output.out_dir``) and the suite's ``cache`` path and ``model`` key
(both follow the temporary model folder); training time at any depth (``seconds``,
``tokens_per_second`` of the train logs and ``train_total``). In report.md: the header paragraph
(wall time, load average, CPUs) and the timings' values. Everything else, every float included,
must match (CPU, one torch thread). Set
``REPLAYBANK_WRITE_GOLDEN=1`` to rewrite the golden files after a deliberate change of the results.
"""

from __future__ import annotations

import difflib
import json
import os
import re
from pathlib import Path

import pytest

from replaybank.llm.config import Config

GOLDEN = Path(__file__).parent / "golden"
MASK = "<masked>"


@pytest.fixture(autouse=True)
def _own_cache(isolated_cache):
    """Suite answers of the tiny model go to a per-test cache, never the user's."""


def _cfg(model_dir: Path, out: Path) -> Config:
    return Config.from_dict({
        "training": {"base_model": str(model_dir), "batch_size": 5, "learning_rate": 5e-3, "lora_rank": 4,
                     "rehearsal_rows_per_epoch": 20, "mixing_ratio": 0.1, "num_threads": 1},
        "data": {"domain_train_rows": 20, "domain_eval_rows": 5, "general_eval_rows": 4},
        "evaluation": {"eval_points": 2, "arms": ["base", "naive", "rehearsal-corpus"], "suite_per_family": 2,
                       "max_new_tokens": 6, "probe_pairs": 1, "probe_sources": True},
        "output": {"out_dir": str(out), "save_adapters": False},
    })


def masked_metrics(raw: str) -> str:
    """``metrics.json`` with its run-to-run fields masked, written back the way the run writes it."""
    metrics = json.loads(raw)
    assert json.dumps(metrics, indent=2, sort_keys=True) + "\n" == raw  # so masking loses no formatting
    for key in ("wall_seconds", "timings", "environment"):
        metrics[key] = MASK
    metrics["config"]["training"]["base_model"] = MASK
    metrics["config"]["output"]["out_dir"] = MASK
    for suite in metrics["suite"]:
        suite["cache"] = suite["model"] = MASK
    _mask_keys(metrics, {"seconds", "tokens_per_second"})  # training time, at any depth
    return json.dumps(metrics, indent=2, sort_keys=True) + "\n"


def _mask_keys(obj: object, keys: set[str]) -> None:
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k in keys:
                obj[k] = MASK
            else:
                _mask_keys(v, keys)
    elif isinstance(obj, list):
        for v in obj:
            _mask_keys(v, keys)


def masked_report(text: str) -> str:
    text = re.sub(r"^Base model `[^`]*`.*$", "Base model " + MASK, text, count=1, flags=re.M)
    return re.sub(r"^(- [^:\n]+): [0-9.]+$", r"\1: " + MASK, text, flags=re.M)


def test_tiny_run_metrics_and_report_match_golden(full_vocab_model_dir, tmp_path):
    # The golden files are the run of the tiny Llama with SmolLM2's full vocabulary. On the 2k
    # vocabulary of tiny_model_dir the run differs beyond its figures: its random model's suite
    # answers keep other items (an `instruction` family appears) and naive's open retention falls
    # to 0%, so those golden files would pin another schema path, not the same one with new figures.
    from replaybank.llm.recipes.rehearsal import run_experiment

    tiny_model_dir = full_vocab_model_dir

    out = tmp_path / "run"
    run_experiment(_cfg(tiny_model_dir, out), log=lambda m: None, max_steps=2)
    got = {"metrics.json": masked_metrics((out / "metrics.json").read_text(encoding="utf-8")),
           "report.md": masked_report((out / "report.md").read_text(encoding="utf-8"))}
    if os.environ.get("REPLAYBANK_WRITE_GOLDEN"):
        GOLDEN.mkdir(exist_ok=True)
        for name, text in got.items():
            (GOLDEN / name).write_text(text, encoding="utf-8")
    for name, text in got.items():
        want = (GOLDEN / name).read_text(encoding="utf-8")
        diff = "".join(list(difflib.unified_diff(want.splitlines(True), text.splitlines(True), "golden", "run"))[:60])
        assert text == want, f"{name} differs from {GOLDEN / name}:\n{diff}"
