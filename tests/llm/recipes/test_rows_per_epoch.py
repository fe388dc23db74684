"""``rehearsal_rows_per_epoch`` (set without ``mixing_ratio``) is the rehearsal rows of every
virtual epoch in every generation, whatever the size of the generation's lineage."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from replaybank.llm.config import Config


def test_share_follows_the_lineage_size() -> None:
    cfg = Config.from_dict({"training": {"rehearsal_rows_per_epoch": 500}})
    plan = cfg.arm_plan("rehearsal")
    assert plan.rows_per_epoch == 500 and plan.from_training
    assert [plan.share_for(n) for n in (1500, 3000, 4500)] == [0.25, 500 / 3500, 0.1]
    assert [cfg.training_share(n)[0] for n in (1500, 3000, 4500)] == [0.25, 500 / 3500, 0.1]
    assert cfg.arm_plan("self-distill").rows_per_epoch is None  # a recipe's own ratio is never converted
    fixed = Config.from_dict({"training": {"rehearsal_rows_per_epoch": 500, "mixing_ratio": 0.2}}).arm_plan("rehearsal")
    assert fixed.rows_per_epoch is None and fixed.share_for(1500) == 0.2


def test_every_generation_draws_the_rows_per_epoch(tiny_model_dir: Path, tmp_path: Path, isolated_cache: Any) -> None:
    pytest.importorskip("torch")
    from replaybank.llm.recipes.rehearsal import run_experiment

    cfg = Config.from_dict({
        "orchestration": {"num_generations": 3, "training_window_size": 3},
        "training": {"base_model": str(tiny_model_dir), "batch_size": 6, "lora_rank": 2, "num_threads": 1,
                     "rehearsal_rows_per_epoch": 6},
        "data": {"domain_train_rows": 12, "domain_eval_rows": 3, "general_eval_rows": 3},
        "recipes": {"fixed": {"source": ["corpus"], "ratio": 0.2}},
        "evaluation": {"arms": ["rehearsal", "fixed"], "eval_points": 1, "suite_per_family": 1, "max_new_tokens": 4,
                       "probe_sources": False},
        "output": {"save_adapters": False},
    })
    metrics = run_experiment(cfg, tmp_path / "out", log=lambda m: None)
    gens = metrics.arms["rehearsal"].generations or []
    assert [g.domain_rows for g in gens] == [12, 24, 36]
    assert [g.rehearsal_share for g in gens] == pytest.approx([6 / 18, 6 / 30, 6 / 42])
    drawn = [g.sources["corpus"].rows_per_epoch for g in gens]
    assert all(abs(d - 6) <= 1 for d in drawn), drawn  # before: 6, 12, 18 (the first share kept)
    # a [recipes.NAME] ratio is a share, not converted: its rows grow with the lineage
    fixed = metrics.arms["fixed"].generations or []
    assert [g.rehearsal_share for g in fixed] == [0.2, 0.2, 0.2]
    assert fixed[2].sources["corpus"].rows_per_epoch > 2 * fixed[0].sources["corpus"].rows_per_epoch
    report = (tmp_path / "out" / "report.md").read_text()
    assert "## Rehearsal per generation" in report and "| rehearsal | 2 | 36 | 0.1429 | corpus 6" in report
