"""``fresh_adapter = true``: one adapter per skill inside the main job (the adapter library's comparison).

The config checks on constructed tables; end to end on the tiny random Llama over two domains: the
per-skill arm's adapter of generation 0 is naive's (same init, same rows), and its adapter of
generation 1 is a fresh adapter trained on domain 1 alone, not naive's continuation.
"""

from __future__ import annotations

import json

import pytest

from replaybank.llm.config import Config, ConfigError, LoopConfig
from replaybank.llm.config.recipe import parse_recipes, recipe_dict


def test_fresh_adapter_is_written_only_when_set_and_reads_back():
    specs = parse_recipes({"per-skill": {"source": [], "fresh_adapter": True}, "plain": {"source": "self"}}, "run.toml")
    assert specs["per-skill"].fresh_adapter and specs["per-skill"].ratio == 0
    assert recipe_dict(specs["per-skill"])["fresh_adapter"] is True
    assert "fresh_adapter" not in recipe_dict(specs["plain"])  # configs written before the key read back the same
    cfg = Config.from_dict({"recipes": {"per-skill": {"source": [], "fresh_adapter": True}}})
    again = Config.from_dict(cfg.to_dict())
    assert again.arm_specs()["per-skill"].fresh_adapter and "per-skill" in again.evaluation.arms
    assert "fresh_adapter = true" in cfg.to_toml(with_help=False)


def test_fresh_adapter_refuses_rows_of_earlier_generations_naming_the_line():
    text = '[recipes.x]\nsource = ["self", "replay"]\nratio = 0.2\nfresh_adapter = true\n'
    with pytest.raises(ConfigError, match=r"run.toml:4: \[recipes.x\] fresh_adapter = true .* 'replay'"):
        parse_recipes({"x": {"source": ["self", "replay"], "ratio": 0.2, "fresh_adapter": True}}, "run.toml", text=text)
    with pytest.raises(ConfigError, match="'onpolicy'"):
        parse_recipes({"x": {"source": ["onpolicy"], "fresh_adapter": True}}, "run.toml")
    with pytest.raises(ConfigError, match="fresh_adapter = .yes.: expected true or false"):
        parse_recipes({"x": {"source": [], "fresh_adapter": "yes"}}, "run.toml")
    assert parse_recipes({"x": {"source": ["self"], "fresh_adapter": True}}, "run.toml")["x"].source == ["self"]


def test_the_loop_refuses_a_fresh_adapter_recipe():
    with pytest.raises(ConfigError, match=r"fresh_adapter = true, an arm of `replaybank run`"):
        LoopConfig.from_dict({"loop": {"recipe": "mine"}, "recipes": {"mine": {"source": "self", "ratio": 0.5,
                                                                                "fresh_adapter": True}}})


@pytest.fixture(autouse=True)
def _own_cache(isolated_cache):
    """Suite answers of the tiny model go to a per-test cache, never the user's."""


def _tensors(folder):
    from replaybank.llm.train.peft_files import read_tensors

    return read_tensors(folder / "adapter_model.safetensors")


def test_a_fresh_adapter_arm_trains_each_domain_alone(tiny_model_dir, tmp_path):
    import torch

    from replaybank.llm.data.prepare import prepare
    from replaybank.llm.model import load_model
    from replaybank.llm.recipes.rehearsal import run_experiment
    from replaybank.llm.train import KLSpec, train_lora
    from replaybank.llm.train.adapter import fresh_adapter

    cfg = Config.from_dict({
        "orchestration": {"num_generations": 2, "training_window_size": 2},  # naive carries gen 0's rows on too
        "training": {"base_model": str(tiny_model_dir), "batch_size": 5, "learning_rate": 5e-3, "lora_rank": 2,
                     "num_threads": 1, "lora_dropout": 0.0},
        "data": {"domain_train_rows": 10, "domain_eval_rows": 3, "general_eval_rows": 3,
                 "domain_train": ["builtin:toolapi", "builtin:agenda"], "domain_eval": ["builtin:toolapi", "builtin:agenda"]},
        "evaluation": {"arms": ["base", "naive", "per-skill"], "eval_points": 1, "suite_per_family": 2,
                       "max_new_tokens": 4, "probe_sources": False},
        "recipes": {"per-skill": {"source": [], "fresh_adapter": True}},
    })
    out = tmp_path / "run"
    metrics = run_experiment(cfg, out, log=lambda m: None, max_steps=2, seeds=1)
    per_skill = out / "adapters" / "per-skill" / "seed0"
    lineages = [json.loads((per_skill / f"gen{g}" / "replaybank.json").read_text())["lineage"] for g in (0, 1)]
    assert lineages == [[0], [1]]
    gens = metrics.arms["per-skill"].generations or []
    assert [g.lineage for g in gens] == [[0], [1]] and [g.domain_rows for g in gens] == [10, 10]
    assert [g.lineage for g in metrics.arms["naive"].generations or []] == [[0], [0, 1]]
    assert "per-skill" not in metrics.targets.arms and metrics.gate.chosen_arm != "per-skill"

    fresh0, fresh1 = _tensors(per_skill / "gen0"), _tensors(per_skill / "gen1")
    naive0 = _tensors(out / "adapters" / "naive" / "seed0" / "gen0")
    naive1 = _tensors(out / "adapters" / "naive" / "seed0" / "gen1")
    assert all(torch.equal(fresh0[k], naive0[k]) for k in fresh0)  # same init, same rows, same order
    assert max(float((fresh1[k] - naive1[k]).abs().max()) for k in fresh1) > 1e-4

    # the reference: a fresh adapter (add_lora's seeded init) trained on domain 1's rows alone
    model, tok = load_model(str(tiny_model_dir), "cpu", lambda m: None)
    data = prepare(cfg, tok)
    with fresh_adapter(model, cfg.training) as peft_model:
        train_lora(peft_model, int(tok.pad_token_id), data.domain_generations[1], cfg.training,
                   checkpoint_dir=tmp_path / "ref", max_steps=2, sources=[], kl=KLSpec.from_recipe(cfg.arm_specs()["naive"]))
        from peft import get_peft_model_state_dict

        ref = get_peft_model_state_dict(peft_model)
    assert set(ref) == set(fresh1)
    assert max(float((ref[k] - fresh1[k]).abs().max()) for k in ref) < 1e-6
