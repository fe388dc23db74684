"""`replaybank run` with the loop's recipe: arms ["base", "self-distill"] end to end on a tiny random
Llama (the base model's answers faked, all cut at the generation budget and kept as open rows)."""

from __future__ import annotations

import json

import pytest

from replaybank.errors import ReplayBankError
from replaybank.llm.config import Config


@pytest.fixture(autouse=True)
def _own_cache(isolated_cache):
    """Suite answers and self rows of the tiny model go to a per-test cache, never the user's."""


@pytest.fixture
def long_self_answers(monkeypatch):
    """Every 'own answer' of the base model runs into the token budget (truncated)."""
    import replaybank.llm.data.selfsynth as selfsynth
    from replaybank.llm.eval.decode import Generation

    def fake(model, tokenizer, prompts, **kw):
        return [Generation(f"Here is a long answer number {k} that goes on and on", True, 96) for k, _ in enumerate(prompts)]

    monkeypatch.setattr(selfsynth, "generate_detailed", fake)


def _cfg(model_dir, **data):
    return Config.from_dict({
        "training": {"base_model": str(model_dir), "batch_size": 4, "learning_rate": 5e-3, "lora_rank": 2, "num_threads": 1},
        "data": {"domain_train_rows": 8, "domain_eval_rows": 2, "general_eval_rows": 2, "self_rows": 4, **data},
        "evaluation": {"arms": ["base", "self-distill"], "suite_per_family": 1, "max_new_tokens": 3, "probe_sources": False},
        "output": {"save_adapters": False},
    })


def test_self_distill_arm_runs_in_the_main_job(tiny_model_dir, tmp_path, long_self_answers):
    from replaybank.llm.recipes.rehearsal import run_experiment

    # self_open_rows = false drops answers cut at the budget (here: all of them)
    with pytest.raises(ReplayBankError, match="no usable"):
        run_experiment(_cfg(tiny_model_dir, self_open_rows=False), tmp_path / "dropped", log=lambda m: None, max_steps=1)
    # the default (true) keeps them as open rows, as the loop does
    out = tmp_path / "run"
    run_experiment(_cfg(tiny_model_dir), out, log=lambda m: None, max_steps=2)
    saved = json.loads((out / "metrics.json").read_text())
    arm = saved["arms"]["self-distill"]
    assert arm["spec"] == {"source": ["self"], "ratio": 0.5, "mix_by": "rows", "kl_to_base": 3.0, "kl_temperature": 1.0,
                           "kl_on": "rehearsal", "rehearsal_ce": False}
    assert arm["share"] == 0.5  # its own share, not [training] mixing_ratio (0.1)
    steps = arm["generations"][0]["train"]["steps"]
    assert len(steps) == 2 and all(s["source_rows"] == {"domain": 2, "self": 2} for s in steps)  # half of every batch
    assert all(s["kl"] is not None and s["kl"] >= 0 for s in steps)  # the KL term ran on the self rows
    assert saved["data_per_seed"][0]["self"]["open"] == 4  # every kept row is an open one
    assert "| self-distill |" in (out / "report.md").read_text()
