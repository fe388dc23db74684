"""Issue 29, configs: names that would become paths, absurd numbers, files that are not what the key
says, deep or BOM-prefixed TOML, ``--out`` naming a file, and ``replaybank loop --print-config``
running the checks a run makes. Every error names the file, the key and its line."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from replaybank.cli import main
from replaybank.llm.config import Config, ConfigError, load_recipes
from replaybank.llm.config.check import check_sources
from replaybank.llm.config.loop import LoopConfig
from replaybank.llm.config.names import check_name, is_name


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
    """Found by tests/llm/test_config_fuzz.py: ``[recipes.x]`` with ``kl_to_base = 0`` and no source was
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
