"""The adapter comparison harness on constructed inputs: the arms it reads from a run folder, the
flat scalars per seed, mean ± std over seeds, the routed targets and the table
(replaybank.llm.adapters.compare; the measurement itself runs in benchmarks/adapter_comparison.py)."""

from __future__ import annotations

import json

import pytest

from replaybank.llm.adapters.compare import (
    ComparisonError,
    adapter_folder,
    best,
    check_targets,
    flatten,
    read_run,
    summarise_seeds,
    table,
)

SKILLS = ["toolapi", "agenda"]


def _seed(routed, oracle, retention, naive=(0.2, 0.9), bwt=-0.5):
    return {
        "skills": SKILLS,
        "approaches": {
            "naive": {"accuracy": list(naive), "retention": 0.8, "retention_family": {"code": 0.5, "open": None},
                      "memory_bytes": 4_000_000, "latency_ms": 100.0},
            "routed": {"accuracy": list(routed), "retention": retention, "memory_bytes": 8_000_000, "latency_ms": 110.0,
                       "routing": {"accuracy": 0.9, "fallback_skill": 0.1, "fallback_general": 1.0}},
            "oracle": {"accuracy": list(oracle), "retention": None, "memory_bytes": 8_000_000},
        },
        "run_matrix": {"naive": {"R": [[0.7, 0.0], [0.2, 0.9]], "backward_transfer": bwt}},
    }


def test_flatten_gives_the_gap_to_each_skills_own_adapter_on_the_same_seed():
    flat = flatten(_seed(routed=(0.6, 0.8), oracle=(0.7, 0.8), retention=0.97))
    assert flat["routed"]["gap_toolapi"] == pytest.approx(-0.1) and flat["routed"]["gap_agenda"] == 0.0
    assert flat["routed"]["acc_mean"] == pytest.approx(0.7) and flat["routed"]["memory_mb"] == 8.0
    assert flat["routed"]["routing_accuracy"] == 0.9 and flat["routed"]["fallback_general"] == 1.0
    assert "gap_toolapi" not in flat["oracle"] and "retention" not in flat["oracle"]
    assert flat["naive"]["retention_code"] == 0.5 and "retention_open" not in flat["naive"]  # None is not a figure
    assert flat["naive"]["backward_transfer"] == -0.5 and "backward_transfer" not in flat["routed"]


def test_seeds_aggregate_to_mean_and_sample_std():
    seeds = [_seed((0.6, 0.8), (0.7, 0.8), 0.97), _seed((0.7, 0.8), (0.7, 0.9), 0.93),
             _seed((0.8, 0.8), (0.7, 0.7), 0.96)]
    agg = summarise_seeds(seeds)
    gap = agg["routed"]["gap_toolapi"]
    assert gap["values"] == pytest.approx([-0.1, 0.0, 0.1]) and gap["mean"] == pytest.approx(0.0)
    assert gap["std"] == pytest.approx(0.1) and gap["n"] == 3  # ddof = 1
    assert agg["routed"]["retention"]["mean"] == pytest.approx(0.953333, abs=1e-6)
    assert summarise_seeds(seeds[:1])["routed"]["retention"]["std"] is None  # one seed: no spread


def test_the_routed_targets_are_checked_on_the_seed_means():
    within = summarise_seeds([_seed((0.66, 0.8), (0.7, 0.8), 0.96), _seed((0.7, 0.8), (0.7, 0.8), 0.95)])
    t = check_targets(within, SKILLS)
    assert t["skills"]["toolapi"]["gap"] == pytest.approx(-0.02) and t["retention"]["met"] and t["met"] is True
    below = summarise_seeds([_seed((0.6, 0.8), (0.7, 0.8), 0.99), _seed((0.6, 0.8), (0.7, 0.8), 0.99)])
    assert check_targets(below, SKILLS)["skills"]["toolapi"]["met"] is False and check_targets(below, SKILLS)["met"] is False
    exactly = summarise_seeds([_seed((0.65, 0.8), (0.7, 0.8), 0.95)])  # 5 points below and 95%: met
    assert check_targets(exactly, SKILLS)["met"] is True
    low = summarise_seeds([_seed((0.7, 0.8), (0.7, 0.8), 0.949)])
    assert check_targets(low, SKILLS)["retention"]["met"] is False
    assert check_targets({"naive": {}}, SKILLS)["met"] is None  # routed not measured: neither met nor failed


def test_the_table_shows_mean_and_std_per_approach_and_best_names_the_margin():
    agg = summarise_seeds([_seed((0.6, 0.8), (0.7, 0.8), 0.97), _seed((0.7, 0.8), (0.7, 0.8), 0.97)])
    lines = table(agg, SKILLS).splitlines()
    assert lines[0].startswith("| approach | toolapi acc % | agenda acc % | mean acc % | worst gap vs own (pts)")
    routed = next(line for line in lines if line.startswith("| routed |"))
    assert "| 65.0 ± 7.1 | 80.0 ± 0.0 | 72.5 ± 3.5 | -5.0 ± 7.1 | 97.0 ± 0.0 | 8.0 ± 0.0 | 110 ± 0 | 90.0 ± 0.0 | 100.0 ± 0.0 |" in routed
    b = best(agg)
    assert b["approach"] == "routed" and b["next"] == "naive" and b["margin"] == pytest.approx(0.175) and b["memory_mb"] == 8.0


def _run(tmp_path, arms, recipes, summary):
    (tmp_path / "metrics.json").write_text(json.dumps({
        "config": {"evaluation": {"arms": arms}, "recipes": recipes, "orchestration": {"num_generations": 2},
                   "training": {"base_model": "m", "device": "cpu"}},
        "arms": {a: {"summary": {"domain_exact_match": {"mean": v}}} for a, v in summary.items()}, "seeds": [0, 1]}))
    return tmp_path


def test_read_run_finds_the_per_skill_arm_and_the_best_rehearsal_arm(tmp_path):
    fresh = {"per-skill": {"source": [], "fresh_adapter": True}, "self-replay": {"source": ["self", "replay"]}}
    root = _run(tmp_path, ["base", "naive", "rehearsal-replay", "self-replay", "per-skill"], fresh,
                {"naive": 0.4, "rehearsal-replay": 0.5, "self-replay": 0.6, "per-skill": 0.9})
    run = read_run(root)
    assert (run.per_skill, run.carried, run.seeds, run.generations) == ("per-skill", ["naive", "self-replay"], [0, 1], 2)
    assert read_run(root, carried=["naive"]).carried == ["naive"]
    with pytest.raises(ComparisonError, match="arm 'rehearsal-self' was not trained"):
        read_run(root, carried=["rehearsal-self"])
    with pytest.raises(ComparisonError, match=r"adapters/per-skill/seed0/gen1: missing .* save_adapters = true"):
        adapter_folder(run, "per-skill", 0, 1)
    (root / "adapters" / "per-skill" / "seed0").mkdir(parents=True)
    (root / "elsewhere").mkdir()
    (root / "adapters" / "per-skill" / "seed0" / "gen1").symlink_to(root / "elsewhere")
    with pytest.raises(ComparisonError, match="missing or not a folder"):  # a link out is not the run's adapter
        adapter_folder(run, "per-skill", 0, 1)


def test_read_run_refuses_a_run_without_exactly_one_per_skill_arm(tmp_path):
    with pytest.raises(ComparisonError, match="no such file"):
        read_run(tmp_path)
    root = _run(tmp_path, ["base", "naive"], {}, {"naive": 0.4})
    with pytest.raises(ComparisonError, match=r"0 arms with fresh_adapter = true .*\[recipes.per-skill\]"):
        read_run(root)
    (tmp_path / "metrics.json").write_text(json.dumps({"config": {}}))
    with pytest.raises(ComparisonError, match="not a `replaybank run` metrics file"):
        read_run(root)


@pytest.mark.usefixtures("isolated_cache")
def test_measure_seed_on_a_tiny_run_serves_every_approach_and_gives_the_base_back(tiny_model_dir, tmp_path):
    import torch
    from peft import PeftModel

    from replaybank.llm.adapters.compare import Settings, measure_seed
    from replaybank.llm.config import Config
    from replaybank.llm.model import load_model
    from replaybank.llm.recipes.rehearsal import run_experiment

    cfg = Config.from_dict({
        "orchestration": {"num_generations": 2, "training_window_size": 1},
        "training": {"base_model": str(tiny_model_dir), "batch_size": 5, "learning_rate": 5e-3, "lora_rank": 2, "num_threads": 1},
        "data": {"domain_train_rows": 10, "domain_eval_rows": 3, "general_eval_rows": 3,
                 "domain_train": ["builtin:toolapi", "builtin:agenda"], "domain_eval": ["builtin:toolapi", "builtin:agenda"]},
        "evaluation": {"arms": ["base", "naive", "rehearsal-replay", "per-skill"], "eval_points": 1, "suite_per_family": 1,
                       "max_new_tokens": 4, "probe_sources": False},
        "recipes": {"per-skill": {"source": [], "fresh_adapter": True}},
    })
    run_experiment(cfg, tmp_path / "run", log=lambda m: None, max_steps=1, seeds=1)
    run = read_run(tmp_path / "run")
    assert run.carried == ["naive", "rehearsal-replay"]
    base, tok = load_model(str(tiny_model_dir), "cpu", lambda m: None)
    before = {k: v.clone() for k, v in base.state_dict().items()}
    seen: list[str] = []
    res = measure_seed(base, tok, run, 0, Settings(merges=("linear", "cat"), latency_requests=2), tmp_path / "lib", seen.append)
    assert seen == ["naive", "rehearsal-replay", "merge-linear", "merge-cat", "routed", "oracle"] == list(res["approaches"])
    a = res["approaches"]
    assert res["skills"] == ["toolapi", "agenda"] and all(len(x["accuracy"]) == 2 for x in a.values())
    # the same adapters on the same held-out rows score what the run scored
    assert res["run_agreement"] == {"oracle": 0.0, "naive": 0.0, "rehearsal-replay": 0.0}
    one = a["naive"]["memory_bytes"]
    assert a["merge-linear"]["memory_bytes"] == one and a["merge-cat"]["memory_bytes"] == 2 * one  # rank r1 + r2
    assert a["routed"]["memory_bytes"] == a["oracle"]["memory_bytes"] == 2 * one
    assert a["routed"]["routing"]["accuracy"] >= 0.5  # qx and agenda requests share few content words
    assert a["oracle"]["retention"] is None and a["naive"]["retention"] is not None
    assert a["naive"]["latency_ms"] > 0 and a["oracle"]["latency_n"] == 1  # the oracle serves skill requests only
    assert not isinstance(base, PeftModel) and not any("lora" in k for k in base.state_dict())
    assert all(torch.equal(before[k], v) for k, v in base.state_dict().items())


def test_the_docstring_examples_hold():
    import doctest

    from replaybank.llm.adapters import compare

    assert doctest.testmod(compare).failed == 0
