from __future__ import annotations

import json

import pytest
import tomllib

from replaybank.llm.config import Config, ConfigError
from replaybank.llm.config.check import check_sources
from replaybank.llm.config.loop import LoopConfig


def test_defaults_are_the_embedded_experiment():
    cfg = Config()
    assert cfg.training.base_model == "SmolLM2-135M-Instruct"
    assert cfg.training.mixing_ratio == 0.1
    assert cfg.training.rehearsal_dataset == "python-docs"
    assert cfg.evaluation.arms == ["base", "naive", "rehearsal-corpus", "self-distill"]
    # the domain budget chosen on a validation split (benchmarks/domain_budget.py), >= 32 held-out
    # requests, every suite item, and the loop's self rows (96, open rows kept) for self-distill
    assert (cfg.data.domain_train_rows, cfg.training.num_train_epochs, cfg.data.domain_eval_rows) == (240, 2, 48)
    assert cfg.evaluation.suite_per_family == 0 and (cfg.data.self_rows, cfg.data.self_open_rows) == (96, True)
    assert cfg.evaluation.generation_precision == "auto"


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
    share, how = cfg.training_share(4500)
    assert share == pytest.approx(0.1) and "rehearsal_rows_per_epoch" in how
    assert cfg.arm_plan("rehearsal-corpus").share_for(4500) == share


def test_mixing_ratio_wins_over_rows_per_epoch():
    cfg = Config.from_dict({"training": {"mixing_ratio": 0.2, "rehearsal_rows_per_epoch": 50}})
    assert cfg.training_share(1000) == (0.2, "mixing_ratio")
    plan = cfg.arm_plan("rehearsal-corpus")
    assert (plan.share, plan.rows_per_epoch, plan.share_for(1000)) == (0.2, None, 0.2)


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
    with pytest.raises(ConfigError, match=r"bad.toml:1: invalid TOML"):
        Config.from_toml(bad)
    bad.write_text("[training]\nlora_rank = 3\n\nseed = = 1\n")  # every error names its line, syntax ones too
    with pytest.raises(ConfigError, match=r"bad.toml:4: invalid TOML \(.*at line 4"):
        Config.from_toml(bad)
    bad.write_text("[training]\nlora_rank = [1,")
    with pytest.raises(ConfigError, match=r"bad.toml:2: invalid TOML"):
        Config.from_toml(bad)
    bad.write_bytes(b"[training]\n\nbase_model = 'caf\xe9'\n")
    with pytest.raises(ConfigError, match=r"bad.toml:3: not valid UTF-8 \(byte 0xe9\)"):
        Config.from_toml(bad)
    bad.write_text("[loop]\nseed = 1\n\n[arms.x]\nsource = []\n")  # recipes are [recipes.NAME]: the table's line
    with pytest.raises(ConfigError, match=r"bad.toml:4: \[arms.x\] is not a section; declare the recipe as \[recipes.x\]"):
        LoopConfig.from_toml(bad)
    typo = tmp_path / "typo.toml"
    typo.write_text("[training]\nlora_rnak = 3\n")
    with pytest.raises(ConfigError, match=r"typo.toml:2: unknown key \[training\] lora_rnak; did you mean 'lora_rank'"):
        Config.from_toml(typo)


def test_printed_config_round_trips():
    cfg = Config.from_dict({"training": {"lora_rank": 4, "seed": 3}, "data": {"general_eval_rows": 5}})
    again = Config.from_dict(tomllib.loads(cfg.to_toml()))
    assert again.to_dict() == cfg.to_dict()


# --- issue 13: every bad value refused by `replaybank config` ------------------------------------


@pytest.mark.parametrize(
    ("section", "key"),
    [("training", "learning_rate"), ("training", "weight_decay"), ("training", "max_grad_norm"),
     ("training", "lora_dropout"), ("training", "mixing_ratio")],
)
@pytest.mark.parametrize("value", [float("inf"), float("-inf"), float("nan")])
def test_non_finite_floats_are_refused(section, key, value):
    with pytest.raises(ConfigError, match=rf"\[{section}\] {key} = -?(inf|nan): expected a finite number"):
        Config.from_dict({section: {key: value}})


def test_non_finite_float_from_a_toml_file(tmp_path):
    path = tmp_path / "inf.toml"
    path.write_text("[training]\nlearning_rate = inf\n")
    with pytest.raises(ConfigError, match=r"inf.toml:2: \[training\] learning_rate = inf: expected a finite number"):
        Config.from_toml(path)


@pytest.mark.parametrize(
    ("data", "match"),
    [
        ({"training": {"batch_size": 10**20}}, r"batch_size = 100000000000000000000: expected a value in \[1, 65536\]"),
        ({"training": {"batch_size": 65_537}}, r"batch_size = 65537: expected a value in \[1, 65536\]"),
        ({"training": {"save_every": 2**70}}, r"save_every = 1180591620717411303424: expected an integer that fits in 64 bits"),
        ({"training": {"learning_rate": 10**400}}, r"learning_rate = 1000.*: expected a finite number"),
        ({"training": {"seed": -5}}, r"\[training\] seed = -5: expected a value >= 0 and <= 2147483647"),
        ({"training": {"seed": 2**31}}, r"seed = 2147483648: expected a value in \[0, 2147483647\]"),
        ({"data": {"domain_train_rows": 10**9}}, r"domain_train_rows = 1000000000: expected a value in \[1, 10000000\]"),
        ({"output": {"out_dir": ""}}, r"\[output\] out_dir = '': expected a non-empty string"),
        ({"output": {"out_dir": "   "}}, r"out_dir = '   ': expected a non-empty string"),
        ({"training": {"base_model": ""}}, r"\[training\] base_model = '': expected a non-empty string"),
        ({"data": {"domain_train": ["builtin:toolapi", ""]}}, r"domain_train = \['builtin:toolapi', ''\]: expected non-empty strings"),
        ({"evaluation": {"arms": []}}, r"\[evaluation\] arms is empty; expected one or more of base, naive, rehearsal"),
        ({"evaluation": {"arms": ["naive", "naive"]}}, r"arms = \['naive', 'naive'\] lists an arm twice"),
        ({"training": {"rehearsal_prompt_chars": 500, "rehearsal_max_chars": 400}},
         r"rehearsal_prompt_chars = 500 is not below \[training\] rehearsal_max_chars = 400"),
        ({"training": {"rehearsal_prompt_chars": 400}}, r"rehearsal_prompt_chars = 400 is not below"),
        ({"training": {"mixing_ratio": 0.0}}, r"mixing_ratio = 0 makes the rehearsal arm .rehearsal-corpus. the naive arm"),
        ({"recipes": {"x": {"source": "self", "ratio": 0.0}}}, r"\[recipes.x\] has sources \[.self.\] but ratio = 0"),
    ],
)
def test_out_of_range_and_inconsistent_values_are_refused(data, match):
    with pytest.raises(ConfigError, match=match):
        Config.from_dict(data)


def test_values_at_the_bounds_are_accepted():
    cfg = Config.from_dict({
        "training": {"batch_size": 65_536, "seed": 0, "rehearsal_prompt_chars": 399, "rehearsal_max_chars": 400},
        "evaluation": {"arms": ["base", "naive"]},
    })
    assert cfg.training.batch_size == 65_536 and cfg.training.rehearsal_prompt_chars == 399
    # no rehearsal arm: a zero share is then meaningful; rows_per_epoch alone sets the share
    assert Config.from_dict({"training": {"mixing_ratio": 0.0}, "evaluation": {"arms": ["naive"]}})
    assert Config.from_dict({"training": {"rehearsal_rows_per_epoch": 50}}).training.mixing_ratio == 0.1


@pytest.mark.parametrize("text", ["", "\n\n  \n", "# only a comment\n", "[training]\n[data]\n"])
def test_a_config_file_that_sets_nothing_is_refused(tmp_path, text):
    path = tmp_path / "empty.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=r"empty.toml: config file sets no keys.*leave the config argument out"):
        Config.from_toml(path)


def test_a_config_file_with_one_key_is_fine(tmp_path):
    path = tmp_path / "one.toml"
    path.write_text("[training]\nseed = 3\n")
    assert Config.from_toml(path).training.seed == 3


# --- check_sources: the files and models a config names must be there --------------------------


def _write_sources(root):
    (root / "docs").mkdir()
    (root / "docs" / "a.txt").write_text("a passage\n\nanother one\n")
    (root / "train.jsonl").write_text('{"prompt": "p", "response": "r"}\n')
    (root / "eval.jsonl").write_text('{"prompt": "q", "response": "s"}\n')
    (root / "probe.jsonl").write_text('{"prompt": "2+2=", "answer": "4"}\n')
    (root / "model").mkdir()
    (root / "model" / "config.json").write_text("{}")


def test_builtins_and_existing_paths_pass(tmp_path, monkeypatch):
    check_sources(Config.from_dict({}))  # the embedded default experiment
    _write_sources(tmp_path)
    monkeypatch.chdir(tmp_path)  # relative paths resolve from the current directory, as in a run
    cfg = Config.from_dict({
        "training": {"base_model": "model", "rehearsal_dataset": "docs"},
        "data": {"domain_train": ["train.jsonl"], "domain_eval": str(tmp_path / "eval.jsonl"),
                 "general_eval": "docs/a.txt", "probe": "probe.jsonl"},
    })
    check_sources(cfg)


def test_locally_cached_hf_model_id_passes(tmp_path, monkeypatch):
    import huggingface_hub.constants

    snap = tmp_path / "models--owner--tiny" / "snapshots" / "abc"
    snap.mkdir(parents=True)
    (snap / "config.json").write_text("{}")
    (tmp_path / "models--owner--tiny" / "refs").mkdir()
    (tmp_path / "models--owner--tiny" / "refs" / "main").write_text("abc")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path))
    check_sources(Config.from_dict({"training": {"base_model": "owner/tiny"}}))
    with pytest.raises(ConfigError, match=r"base_model = 'owner/missing': no such local path, and not in the local Hugging Face cache"):
        check_sources(Config.from_dict({"training": {"base_model": "owner/missing"}}))


@pytest.mark.parametrize(
    ("data", "match"),
    [
        ({"training": {"rehearsal_dataset": "missing.jsonl"}}, r"\[training\] rehearsal_dataset = 'missing.jsonl': no such file or folder \(looked in .*missing.jsonl\)"),
        ({"training": {"rehearsal_dataset": "nobody/no-dataset"}}, r"\[training\] rehearsal_dataset = 'nobody/no-dataset': no such local path"),
        ({"data": {"domain_train": ["missing/gen0.jsonl"]}}, r"\[data\] domain_train = 'missing/gen0.jsonl': no such file or folder"),
        ({"data": {"domain_eval": "missing.jsonl"}}, r"\[data\] domain_eval = 'missing.jsonl': no such file or folder.*expected 'builtin:toolapi'"),
        ({"data": {"general_eval": "missing.txt"}}, r"\[data\] general_eval = 'missing.txt': no such file or folder"),
        ({"data": {"probe": "missing.jsonl"}}, r"\[data\] probe = 'missing.jsonl': no such file .*expected 'builtin' or a JSONL file"),
        ({"training": {"base_model": "./no-model"}}, r"\[training\] base_model = './no-model': no such folder or file"),
        ({"training": {"base_model": "no-model.gguf"}}, r"\[training\] base_model = 'no-model.gguf': no such .gguf file"),
        ({"training": {"base_model": "empty_folder"}}, r"\[training\] base_model = 'empty_folder': folder has no config.json"),
        ({"training": {"rehearsal_dataset": "empty_folder"}}, r"\[training\] rehearsal_dataset = 'empty_folder': folder holds no .txt/"),
        ({"data": {"domain_eval": "data.csv"}}, r"\[data\] domain_eval = 'data.csv': unsupported file type '.csv'"),
        ({"output": {"out_dir": "data.csv"}}, r"\[output\] out_dir = 'data.csv': exists and is not a folder"),
    ],
)
def test_missing_sources_are_named_with_file_key_and_path(tmp_path, monkeypatch, data, match):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "empty_folder").mkdir()
    (tmp_path / "data.csv").write_text("a,b\n")
    path = tmp_path / "c.toml"
    path.write_text("\n".join(
        f"[{section}]\n" + "\n".join(f"{k} = {json.dumps(v)}" for k, v in keys.items()) for section, keys in data.items()
    ))
    with pytest.raises(ConfigError, match=r"c.toml:\d+: " + match):
        check_sources(Config.from_toml(path))


def test_every_missing_source_is_listed_at_once(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = Config.from_dict({
        "training": {"rehearsal_dataset": "r.jsonl"}, "data": {"domain_eval": "e.jsonl", "probe": "p.jsonl"},
    }, source="x.toml")
    with pytest.raises(ConfigError) as info:
        check_sources(cfg)
    lines = str(info.value).splitlines()
    assert [line.split(" = ")[0] for line in lines] == [
        "x.toml: [training] rehearsal_dataset", "x.toml: [data] domain_eval", "x.toml: [data] probe",
    ]


def test_config_command_checks_sources_unless_schema_only(tmp_path, monkeypatch, capsys):
    from replaybank.llm.cli import main

    monkeypatch.chdir(tmp_path)
    path = tmp_path / "c.toml"
    path.write_text('[data]\nprobe = "gone.jsonl"\n')
    assert main(["config", str(path)]) == 2
    assert "[data] probe = 'gone.jsonl': no such file" in capsys.readouterr().err
    assert main(["config", "--schema-only", str(path)]) == 0
    assert 'probe = "gone.jsonl"' in capsys.readouterr().out
