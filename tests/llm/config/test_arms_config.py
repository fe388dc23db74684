"""Arms declared in config.toml: [recipes.NAME] tables, built-in names, validation."""

from __future__ import annotations

import pytest

from replaybank.llm.config import DEFAULT_ARMS, Config, ConfigError


def test_builtin_arms_and_the_historical_names_still_work():
    cfg = Config()
    assert cfg.evaluation.arms == DEFAULT_ARMS
    specs = cfg.arm_specs()
    assert specs["rehearsal"].source == specs["rehearsal-corpus"].source == ["corpus"]
    assert specs["rehearsal-self-kl"].kl_to_base > 0 and specs["rehearsal-self-kl"].source == ["self"]
    old = Config.from_dict({"evaluation": {"arms": ["base", "naive", "rehearsal"]}})
    assert old.evaluation.arms == ["base", "naive", "rehearsal"]
    # built-in rehearsal arms follow [training] mixing_ratio and mix_by
    tuned = Config.from_dict({"training": {"mixing_ratio": 0.2, "mix_by": "tokens"}}).arm_specs()["rehearsal-self"]
    assert (tuned.ratio, tuned.mix_by) == (0.2, "tokens")


def test_declared_arm_is_parsed_run_and_round_trips(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text(
        '[recipes.self-replay-kl]\nsource = ["self", "replay"]\nratio = 0.15\nmix_by = "tokens"\n'
        'kl_to_base = 0.5\nkl_temperature = 2\n\n[recipes.rehearsal-self]\nsource = "self"\nratio = 0.3\n'
    )
    cfg = Config.from_toml(path)
    spec = cfg.arm_specs()["self-replay-kl"]
    assert (spec.source, spec.ratio, spec.mix_by, spec.kl_to_base, spec.kl_temperature) == (["self", "replay"], 0.15, "tokens", 0.5, 2.0)
    assert cfg.arm_specs()["rehearsal-self"].ratio == 0.3  # a table replaces the built-in arm of that name
    # declared arms join the default list (rehearsal-self is a built-in outside the defaults: declared, it runs)
    assert cfg.evaluation.arms == DEFAULT_ARMS + ["self-replay-kl", "rehearsal-self"]
    again = Config.from_dict(cfg.to_dict())
    assert again.arm_specs()["self-replay-kl"] == spec
    toml = tmp_path / "again.toml"
    toml.write_text(cfg.to_toml())
    assert Config.from_toml(toml).recipes == cfg.recipes
    # with an explicit [evaluation] arms, only those run
    only = Config.from_dict({"evaluation": {"arms": ["naive", "x"]}, "recipes": {"x": {"source": "corpus"}}})
    assert only.evaluation.arms == ["naive", "x"]


@pytest.mark.parametrize(
    "data,match",
    [
        ({"recipes": {"x": {"source": "selff"}}}, r"\[recipes.x\] source contains 'selff'; expected some of corpus, self, replay, onpolicy, selfgen; did you mean 'self'\?"),
        ({"recipes": {"x": {"sources": "self"}}}, r"unknown key \[recipes.x\] sources; did you mean 'source'\?"),
        ({"recipes": {"x": {"source": "self", "ratio": 1.0}}}, r"\[recipes.x\] ratio = 1.0: expected a value in \[0, 1\)"),
        ({"recipes": {"x": {"source": "self", "ratio": 0}}}, r"ratio = 0; give a ratio in \(0, 1\)"),
        ({"recipes": {"x": {"source": "self", "mix_by": "bytes"}}}, r"mix_by = 'bytes': expected one of 'rows', 'tokens'"),
        ({"recipes": {"x": {"source": "self", "kl_temperature": 0}}}, r"kl_temperature = 0: expected a value >= 0.01 and <= 100"),
        ({"recipes": {"x": {"kl_to_base": 1.0}}}, r"applies to rehearsal rows, but the arm has no source"),
        ({"recipes": {"base": {"source": "self"}}}, r"\[recipes.base\] cannot be declared"),
        ({"recipes": {"x": "self"}}, r"\[recipes.x\] must be a table"),
        ({"recipes": {"x": {"source": ["self", "self"]}}}, r"lists a source twice"),
        ({"evaluation": {"arms": ["base", "rehearsal-slef"]}}, r"arms contains 'rehearsal-slef'.*did you mean 'rehearsal-self'\?"),
        ({"evaluation": {"arms": ["naive", "naive"]}}, r"lists an arm twice"),
        ({"data": {"domain_eval": ["a", "b", "c"]}}, r"domain_eval has 3 entries but \[orchestration\] num_generations = 1"),
    ],
)
def test_bad_arms_name_the_key_and_the_fix(data, match):
    with pytest.raises(ConfigError, match=match):
        Config.from_dict(data)


def test_kl_only_rehearsal_arm_needs_sources_and_the_kl_term():
    cfg = Config.from_dict({"recipes": {"distil": {"source": ["self"], "ratio": 0.3, "kl_to_base": 2.0, "rehearsal_ce": False}}})
    assert cfg.arm_specs()["distil"].rehearsal_ce is False
    with pytest.raises(ConfigError, match=r"\[recipes.distil\] rehearsal_ce = false .* kl_to_base = 0\)"):
        Config.from_dict({"recipes": {"distil": {"source": ["self"], "ratio": 0.3, "rehearsal_ce": False}}})
    with pytest.raises(ConfigError, match=r"\[recipes.distil\] rehearsal_ce = false .* source = \[\]"):
        Config.from_dict({"recipes": {"distil": {"kl_to_base": 1.0, "kl_on": "all", "rehearsal_ce": False}}})


def test_naive_arm_with_kl_on_domain_prompts_is_allowed():
    cfg = Config.from_dict({"recipes": {"anchored": {"kl_to_base": 0.5, "kl_on": "all"}}})
    assert cfg.arm_specs()["anchored"].source == []
