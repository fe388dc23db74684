from __future__ import annotations

import pytest
import tomllib

from replaybank.llm.config import Config, ConfigError


def test_defaults_are_the_embedded_experiment():
    cfg = Config()
    assert cfg.training.base_model == "SmolLM2-135M-Instruct"
    assert cfg.training.mixing_ratio == 0.1
    assert cfg.training.rehearsal_dataset == "python-docs"
    assert cfg.evaluation.arms == ["base", "naive", "rehearsal-corpus", "rehearsal-self", "rehearsal-self-kl"]


def test_reference_keys_accepted(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text(
        """
[orchestration]
num_generations = 13
training_window_size = 3

[training]
base_model = "Qwen/Qwen2.5-Coder-7B-Instruct"
inner_loss = "sft"
lora_rank = 32
lora_alpha = 32
lora_dropout = 0.05
learning_rate = 2e-4
weight_decay = 0.0
num_train_epochs = 3
rehearsal_dataset = "HuggingFaceH4/stack-exchange-paired"
rehearsal_split = "train"
rehearsal_text_field = "text"
rehearsal_rows_per_epoch = 500
rehearsal_prompt = "Continue the following passage"
rehearsal_prompt_chars = 256
rehearsal_max_chars = 2048
max_seq_length = 2048
[data]
domain_train = ["builtin:toolapi"]
"""
    )
    cfg = Config.from_toml(path)
    assert cfg.training.lora_alpha == 32 and cfg.orchestration.num_generations == 13
    # rows-per-epoch without mixing_ratio: converted to the share it amounts to
    share, how = cfg.effective_mixing_ratio(4500)
    assert share == pytest.approx(0.1) and "rehearsal_rows_per_epoch" in how


def test_mixing_ratio_wins_over_rows_per_epoch():
    cfg = Config.from_dict({"training": {"mixing_ratio": 0.2, "rehearsal_rows_per_epoch": 50}})
    assert cfg.effective_mixing_ratio(1000) == (0.2, "mixing_ratio")


@pytest.mark.parametrize(
    "data,match",
    [
        ({"training": {"learnig_rate": 1e-3}}, r"unknown key \[training\] learnig_rate; did you mean 'learning_rate'"),
        ({"trainig": {}}, r"unknown section \[trainig\]; did you mean 'training'"),
        ({"training": {"mixing_ratio": 1.0}}, r"mixing_ratio = 1.0: expected a value in \[0, 1\)"),
        ({"training": {"mixing_ratio": -0.1}}, r"mixing_ratio = -0.1: expected a value >= 0"),
        ({"training": {"lora_rank": "8"}}, r"lora_rank = '8': expected an integer"),
        ({"training": {"lora_rank": 2.5}}, r"lora_rank = 2.5: expected an integer"),
        ({"training": {"learning_rate": 0}}, r"learning_rate = 0: expected a value > 0"),
        ({"training": {"inner_loss": "dpo"}}, r"inner_loss = 'dpo': expected one of 'sft'"),
        ({"orchestration": {"lineage": "windw"}}, r"did you mean 'window'"),
        ({"evaluation": {"arms": ["base", "naiv"]}}, r"arms contains 'naiv'.*did you mean 'naive'"),
        ({"output": {"save_adapters": 1}}, r"expected true or false"),
        ({"training": {"lora_target_modules": []}}, r"lora_target_modules is empty"),
        ({"orchestration": {"num_generations": 3}, "data": {"domain_train": ["a.jsonl", "b.jsonl"]}}, r"domain_train has 2 entries"),
    ],
)
def test_config_errors_name_key_value_and_expectation(data, match):
    with pytest.raises(ConfigError, match=match):
        Config.from_dict(data)


def test_file_errors(tmp_path):
    with pytest.raises(ConfigError, match="config file not found"):
        Config.from_toml(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[training\nlora_rank = 3")
    with pytest.raises(ConfigError, match=r"bad.toml: invalid TOML"):
        Config.from_toml(bad)
    typo = tmp_path / "typo.toml"
    typo.write_text("[training]\nlora_rnak = 3\n")
    with pytest.raises(ConfigError, match=r"typo.toml: unknown key \[training\] lora_rnak; did you mean 'lora_rank'"):
        Config.from_toml(typo)


def test_printed_config_round_trips():
    cfg = Config.from_dict({"training": {"lora_rank": 4, "seed": 3}, "data": {"general_eval_rows": 5}})
    again = Config.from_dict(tomllib.loads(cfg.to_toml()))
    assert again.to_dict() == cfg.to_dict()
