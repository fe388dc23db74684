"""``examples/reference_7b.toml`` runs as written on CPU once the user's parts are swapped for
local ones: the tiny random Llama for the 7B model, the embedded corpus for the rehearsal dataset,
the embedded tool API for the domain files, the CPU for the GPU, and a tiny step budget."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import tomllib

from replaybank.llm.config import Config

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "reference_7b.toml"


def test_reference_example_keeps_the_references_values() -> None:
    t = Config.from_toml(EXAMPLE).training
    assert (t.lora_rank, t.lora_alpha, t.lora_dropout, t.learning_rate, t.num_train_epochs) == (32, 32, 0.05, 2e-4, 3)
    assert (t.rehearsal_rows_per_epoch, t.rehearsal_prompt_chars, t.rehearsal_max_chars, t.max_seq_length) == (500, 256, 2048, 2048)
    assert t.gradient_checkpointing and t.device == "cuda"
    cfg = Config.from_toml(EXAMPLE)
    assert (cfg.orchestration.num_generations, cfg.orchestration.training_window_size) == (13, 3)
    assert cfg.arm_plan("rehearsal").rows_per_epoch == 500 and len(cfg.data.domain_train) == 13


def test_reference_example_runs_on_cpu_with_local_parts(tiny_model_dir: Path, tmp_path: Path, isolated_cache: Any) -> None:
    pytest.importorskip("torch")
    from replaybank.llm.recipes.rehearsal import run_experiment

    raw = tomllib.loads(EXAMPLE.read_text(encoding="utf-8"))
    # a tiny budget: rows of 128 tokens (the reference's 2048 made every evaluation of the 13
    # generations read 16x the tokens), and the arm the assertions are about (naive is the same path
    # without sources)
    raw["training"].update(base_model=str(tiny_model_dir), rehearsal_dataset="python-docs", device="cpu", num_threads=1,
                           max_seq_length=128)
    raw["data"] = {"domain_train": ["builtin:toolapi"], "domain_eval": ["builtin:toolapi"], "domain_train_rows": 8,
                   "domain_eval_rows": 2, "general_eval_rows": 2}
    raw["evaluation"].update(suite_per_family=1, max_new_tokens=2, probe_pairs=1, generation_batch_size=8,
                             arms=["base", "rehearsal"])
    raw["output"] = {"save_adapters": False}
    cfg = Config.from_dict(raw, source=f"{EXAMPLE.name} (local parts)")
    metrics = run_experiment(cfg, tmp_path / "out", log=lambda _: None, max_steps=1)
    gens = metrics.arms["rehearsal"].generations or []
    assert len(gens) == 13 and [g.lineage for g in gens][-1] == [10, 11, 12]
    assert [g.domain_rows for g in gens][:4] == [8, 16, 24, 24]
    assert gens[0].rehearsal_share == pytest.approx(500 / 508) and gens[3].rehearsal_share == pytest.approx(500 / 524)
    assert all(len(g.train.steps) == 1 for g in gens)  # the tiny budget
    assert metrics.environment["device"] == "cpu"
    assert "## Rehearsal per generation" in (tmp_path / "out" / "report.md").read_text()
