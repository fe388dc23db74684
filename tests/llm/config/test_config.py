from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import tomllib

from replaybank.cli import main
from replaybank.llm.config import Config, ConfigError, load_recipes
from replaybank.llm.config.check import check_loop_sources, check_sources
from replaybank.llm.config.loop import LoopConfig
from replaybank.llm.config.names import check_name, is_name


def test_defaults_are_the_embedded_experiment():
    cfg = Config()
    assert cfg.training.base_model == "SmolLM2-135M-Instruct"
    assert cfg.training.mixing_ratio == 0.1
    assert cfg.training.rehearsal_dataset == "python-docs"
    assert cfg.evaluation.arms == ["base", "naive", "self-distill", "routed"]
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


# --- every bad value refused by `replaybank config` ------------------------------------


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
        ({"training": {"mixing_ratio": 0.0}, "evaluation": {"arms": ["naive", "rehearsal-corpus"]}},
         r"mixing_ratio = 0 makes the rehearsal arm .rehearsal-corpus. the naive arm"),
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


#: a model's config alone (no weights): all ``check_sources`` reads of a local model
TINY_LLAMA = json.dumps({"model_type": "llama", "vocab_size": 64, "hidden_size": 16, "intermediate_size": 32,
                         "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1})


def _write_sources(root):
    (root / "docs").mkdir()
    (root / "docs" / "a.txt").write_text("a passage\n\nanother one\n")
    (root / "train.jsonl").write_text('{"prompt": "p", "response": "r"}\n')
    (root / "eval.jsonl").write_text('{"prompt": "q", "response": "s"}\n')
    (root / "probe.jsonl").write_text('{"prompt": "2+2=", "answer": "4"}\n')
    (root / "model").mkdir()
    (root / "model" / "config.json").write_text(TINY_LLAMA)


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
    (snap / "config.json").write_text(TINY_LLAMA)
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


@pytest.mark.parametrize("loop", [False, True])
def test_lora_targets_the_model_lacks_are_named_with_the_modules_it_has(tmp_path, monkeypatch, capsys, loop):
    from replaybank.llm.cli import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text(TINY_LLAMA)
    path = tmp_path / "c.toml"
    path.write_text('[training]\nbase_model = "model"\nlora_target_modules = ["q_proj", "c_attn"]\n')
    check = (lambda p: check_loop_sources(LoopConfig.from_toml(p))) if loop else (lambda p: check_sources(Config.from_toml(p)))
    with pytest.raises(ConfigError, match=r"c.toml:3: \[training\] lora_target_modules = \['q_proj', 'c_attn'\]: "
                                          r"c_attn not found in the model; its linear modules are: down_proj, gate_proj, "
                                          r"k_proj, lm_head, o_proj, q_proj, up_proj, v_proj"):
        check(path)
    if not loop:
        assert main(["config", str(path)]) == 2
        assert "lora_target_modules = ['q_proj', 'c_attn']: c_attn not found" in capsys.readouterr().err
        assert main(["config", "--schema-only", str(path)]) == 0  # the model is not read
    path.write_text('[training]\nbase_model = "model"\nlora_target_modules = ["q_proj", "down_proj"]\n')
    check(path)
    (tmp_path / "model" / "config.json").write_text('{"model_type": "no-such-architecture"}')
    with pytest.raises(ConfigError, match=r"lora_target_modules = .*: base model 'model': transformers cannot read its config"):
        check(path)


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


# Hostile and mistaken configs: names that would become paths, absurd numbers, files that are
# not what the key says, deep or BOM-prefixed TOML, ``--out`` naming a file, and ``replaybank
# loop --print-config`` running the checks a run makes. Every error names the file, the key and
# its line.


def _toml(tmp_path: Path, text: str | bytes, name: str = "c.toml") -> Path:
    path = tmp_path / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
    return path


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ('[recipes."../../../x"]\nsource = "self"\n', 1),
        ('[training]\nseed = 1\n\n[recipes."/abs"]\nsource = "self"\n', 4),
        ('[recipes."a/b"]\nsource = "self"\n', 1),
        ('[recipes.".."]\nsource = "self"\n', 1),
        ('[recipes.".hidden"]\nsource = "self"\n', 1),
        ('[recipes.""]\nsource = "self"\n', 1),
        (f'[recipes.{"x" * 101}]\nsource = "self"\n', 1),
    ],
)
def test_recipe_and_arm_names_that_are_not_names_are_refused_with_their_line(tmp_path, text, line):
    path = _toml(tmp_path, text)
    with pytest.raises(ConfigError, match=rf"c.toml:{line}: \[recipes\.NAME\] name .* is not a name"):
        Config.from_toml(path)
    with pytest.raises(ConfigError, match=rf"c.toml:{line}: .* is not a name"):
        load_recipes(path)


def test_the_loop_refuses_a_recipe_name_that_is_a_path(tmp_path):
    path = _toml(tmp_path, '[loop]\nrecipe = "../x"\n\n[recipes."../x"]\nsource = "self"\nratio = 0.5\n')
    with pytest.raises(ConfigError, match=r"c.toml:4: \[recipes.NAME\] name '../x' is not a name"):
        LoopConfig.from_toml(path)


def test_names_allow_what_the_builtins_and_users_write(tmp_path):
    for name in ("self-distill", "rehearsal-self-kl", "my.recipe", "arm_2", "_x", "A.b-c_d"):
        assert check_name(name, "recipe") == name
    for bad in ("", ".", "..", "../x", "/abs", "a/b", "a\\b", "-x", "x y", "x" * 101, 3, None):
        assert not is_name(bad)
    cfg = Config.from_toml(_toml(tmp_path, '[recipes."my.recipe"]\nsource = "self"\n'))
    assert "my.recipe" in cfg.recipes


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("[training]\n\nlearning_rate = 1e300\n", r"c.toml:3: \[training\] learning_rate = 1e\+300: expected a value in \(0, 10\]"),
        ("[training]\nweight_decay = 1e308\n", r"c.toml:2: \[training\] weight_decay = 1e\+308: expected a value in \[0, 10\]"),
        ("[training]\nmax_grad_norm = 1e300\n", r"c.toml:2: \[training\] max_grad_norm = 1e\+300: expected a value in \[0, 1000000.0\]"),
        ('[recipes.x]\nsource = "self"\nkl_to_base = 1\nkl_temperature = 1e300\n', r"c.toml:4: \[recipes.x\] kl_temperature = 1e\+300"),
    ],
)
def test_numbers_have_sane_upper_bounds(tmp_path, text, match):
    with pytest.raises(ConfigError, match=match):
        Config.from_toml(_toml(tmp_path, text))


def test_loop_temperature_has_an_upper_bound(tmp_path):
    with pytest.raises(ConfigError, match=r"c.toml:3: \[loop\] temperature = 1e\+300: expected a value in \[0, 100\]"):
        LoopConfig.from_toml(_toml(tmp_path, "[loop]\nseed = 1\ntemperature = 1e300\n"))


def test_an_empty_recipe_table_and_a_ratio_without_sources_are_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"c.toml:3: \[recipes.x\] is empty; give at least its source"):
        Config.from_toml(_toml(tmp_path, "[training]\nseed = 1\n[recipes.x]\n"))
    with pytest.raises(ConfigError, match=r"c.toml:3: \[recipes.x\] ratio = 0.3 with source = \[\]: a share of no rehearsal rows"):
        Config.from_toml(_toml(tmp_path, "[recipes.x]\nsource = []\nratio = 0.3\n"))
    # still valid: source = [] alone (a naive arm), and a KL term on every row without sources
    assert Config.from_toml(_toml(tmp_path, "[recipes.x]\nsource = []\n")).recipes["x"].source == []
    assert Config.from_dict({"recipes": {"a": {"kl_to_base": 0.5, "kl_on": "all"}}}).recipes["a"].kl_to_base == 0.5


def test_deeply_nested_toml_is_a_config_error(tmp_path):
    path = _toml(tmp_path, "[training]\nx = " + "[" * 50_000 + "]" * 50_000 + "\n")
    for read in (Config.from_toml, LoopConfig.from_toml, load_recipes):
        with pytest.raises(ConfigError, match=r"c.toml: invalid config: arrays or tables nested too deep"):
            read(path)


def test_a_utf8_byte_order_mark_is_accepted(tmp_path):
    bom = b"\xef\xbb\xbf"
    assert Config.from_toml(_toml(tmp_path, bom + b"[training]\nlearning_rate = 0.001\n")).training.learning_rate == 0.001
    assert LoopConfig.from_toml(_toml(tmp_path, bom + b"[loop]\nseed = 4\n")).loop.seed == 4
    assert set(load_recipes(_toml(tmp_path, bom + b'[recipes.m]\nsource = "self"\n'))) == {"m"}
    # and the line numbers of errors are unchanged by it
    with pytest.raises(ConfigError, match=r"c.toml:2: \[loop\] seed = -1"):
        LoopConfig.from_toml(_toml(tmp_path, bom + b"[loop]\nseed = -1\n"))


def test_section_and_cross_check_errors_name_the_line(tmp_path):
    cases = [
        ("\n[trainig]\nseed = 1\n", r"c.toml:2: unknown section \[trainig\]; did you mean 'training'"),
        ("[training]\n\nrehearsal_prompt_chars = 500\n", r"c.toml:3: \[training\] rehearsal_prompt_chars = 500 is not below"),
        ('[evaluation]\n\narms = ["naive", "naive"]\n', r"c.toml:3: \[evaluation\] arms = .* lists an arm twice"),
        ('[data]\n\ndomain_train = ["a.jsonl", "b.jsonl"]\n', r"c.toml:3: \[data\] domain_train has 2 entries"),
    ]
    for text, match in cases:
        with pytest.raises(ConfigError, match=match):
            Config.from_toml(_toml(tmp_path, text))
    with pytest.raises(ConfigError, match=r"c.toml:3: unknown key \[loop\] sed; did you mean 'seed'"):
        LoopConfig.from_toml(_toml(tmp_path, "[loop]\n\nsed = 1\n"))
    with pytest.raises(ConfigError, match=r"c.toml:2: \[loop\] levels = \[5\]: expected some of 1, 2, 3, 4"):
        LoopConfig.from_toml(_toml(tmp_path, "[loop]\nlevels = [5]\n"))


@pytest.mark.parametrize("key", ["probe", "suite"])
def test_a_probe_or_suite_file_that_is_not_one_is_refused_before_the_model_loads(tmp_path, monkeypatch, key):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "hostname").write_text("myhost\n", encoding="utf-8")  # what /etc/hostname holds
    cfg = Config.from_toml(_toml(tmp_path, f'[data]\n\n{key} = "hostname"\n'))
    with pytest.raises(ConfigError, match=rf"c.toml:3: \[data\] {key} = 'hostname': not a {key} file \(hostname:1: malformed JSON"):
        check_sources(cfg)


def test_loop_print_config_makes_the_checks_of_a_run(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tasks.txt").write_text("not json\n", encoding="utf-8")
    cases = [
        ('[loop]\ntasks = "nope.jsonl"\n', r"c.toml:2: \[loop\] tasks = 'nope.jsonl': no such file"),
        ('[loop]\n\ntasks = "tasks.txt"\n', r"c.toml:3: \[loop\] tasks = 'tasks.txt': not a task file \(tasks.txt:1: malformed JSON"),
        ('[loop]\nrecipe = "mine"\n[recipes.mine]\nsource = "gone.jsonl"\nratio = 0.5\n',
         r"c.toml:4: \[recipes.mine\] source = 'gone.jsonl': no such file"),
        ('[loop]\nrehearsal = "gone.jsonl"\nrehearsal_ratio = 0.5\nrehearsal_ce = true\n',
         r"c.toml:2: \[loop\] rehearsal = 'gone.jsonl': no such file"),
        ('[training]\nbase_model = "./no-model"\n', r"c.toml:2: \[training\] base_model = './no-model': no such folder or file"),
        ("[loop]\ntemperature = 1e300\n", r"c.toml:2: \[loop\] temperature = 1e\+300: expected a value in \[0, 100\]"),
        ("# only a comment\n[loop]\n", r"c.toml: config file sets no keys"),
        ("", r"c.toml: config file sets no keys"),
    ]
    for text, match in cases:
        path = _toml(tmp_path, text)
        assert main(["loop", str(path), "--print-config"]) == 2, text
        captured = capsys.readouterr()
        assert captured.out == ""
        assert re.search(match, captured.err), (match, captured.err)
    # --schema-only prints a config whose files are elsewhere
    path = _toml(tmp_path, '[loop]\ntasks = "nope.jsonl"\n')
    assert main(["loop", str(path), "--print-config", "--schema-only"]) == 0
    assert 'tasks = "nope.jsonl"' in capsys.readouterr().out


def test_out_naming_an_existing_file_is_a_clear_error(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "afile").write_text("x", encoding="utf-8")
    assert main(["loop", "--out", "afile", "--generations", "1"]) == 2
    assert "--out afile: exists and is not a folder" in capsys.readouterr().err
    assert main(["run", "--out", "afile", "--max-steps", "1"]) == 2
    assert "afile: exists and is not a folder; choose another --out" in capsys.readouterr().err


def test_a_lora_target_module_the_model_lacks_is_a_model_error_before_any_training(tiny_model_dir, tmp_path):
    """``lora_target_modules = ["qproj"]`` (a typo of q_proj) was accepted by the config; the run must
    refuse it naming the modules the model has, before wrapping the model (PEFT's own error is a
    plain ValueError raised mid-setup)."""
    import dataclasses

    from replaybank.llm.config import Training
    from replaybank.llm.model import ModelError, load_model
    from replaybank.llm.train import add_lora

    model, _ = load_model(str(tiny_model_dir), "cpu", log=lambda m: None)
    cfg = dataclasses.replace(Training(), lora_target_modules=["q_proj", "qproj"])
    with pytest.raises(ModelError, match=r"lora_target_modules: qproj not found in the model; its linear modules are: .*q_proj"):
        add_lora(model, cfg)
    assert not any("lora_" in n for n, _ in model.named_parameters())  # nothing wrapped


def test_a_recipe_without_sources_has_no_share_and_its_written_config_reads_back(tmp_path):
    """Found by tests/llm/config/test_config_fuzz.py: ``[recipes.x]`` with ``kl_to_base = 0`` and no source was
    accepted with the default ratio 0.1 (a share of no rehearsal rows), and the effective config
    written from it (``to_dict`` / ``replaybank config``) was then refused on reading back."""
    cfg = Config.from_toml(_toml(tmp_path, "[training]\nseed = 1\n\n[recipes.other]\nkl_to_base = 0\n"))
    assert cfg.recipes["other"].source == [] and cfg.recipes["other"].ratio == 0.0
    assert Config.from_dict(cfg.to_dict()).to_dict() == cfg.to_dict()
    again = Config.from_toml(_toml(tmp_path, cfg.to_toml(), "effective.toml"))
    assert again.recipes["other"] == cfg.recipes["other"]
    loop = LoopConfig.from_toml(_toml(tmp_path, '[loop]\nrecipe = "x"\n\n[recipes.x]\nsource = []\n'))
    assert loop.recipes["x"].ratio == 0.0 and LoopConfig.from_dict(loop.to_dict()).to_dict() == loop.to_dict()


def test_the_validation_suite_must_load_and_share_nothing_with_the_suite(tmp_path, monkeypatch):
    import json

    from replaybank.llm.eval.suite import BUILTIN_VALIDATION, load_suite

    monkeypatch.chdir(tmp_path)
    assert Config().data.validation_suite == BUILTIN_VALIDATION
    check_sources(Config())
    check_sources(Config.from_toml(_toml(tmp_path, '[data]\nvalidation_suite = ""\n')))  # no split declared
    item = load_suite()[0]
    (tmp_path / "val.jsonl").write_text(json.dumps({"id": "v1", "family": item.family, "prompt": item.prompt,
                                                    "check": item.check}) + "\n", encoding="utf-8")
    cases = [
        ('[data]\n\nvalidation_suite = "val.jsonl"\n',
         rf"c.toml:3: \[data\] validation_suite = 'val.jsonl': not a validation split of \[data\] suite = 'builtin': "
         rf"val.jsonl: item v1 .* repeats test item {item.id}"),
        ('[data]\nvalidation_suite = "builtin"\n',
         r"c.toml:2: \[data\] validation_suite = 'builtin': no such file .*expected 'builtin:validation'"),
        ('[data]\nvalidation_suite = "c.toml"\n', r"c.toml:2: \[data\] validation_suite = 'c.toml': not a suite file"),
    ]
    for text, match in cases:
        with pytest.raises(ConfigError, match=match):
            check_sources(Config.from_toml(_toml(tmp_path, text)))
