"""One rehearsal recipe for every entry point: the main job's arms, the loop's ``[loop] recipe`` and
``replaybank.hf`` read the same type, the same built-in names and the same ``[recipes.NAME]``
tables; bad recipes are errors that name the file, the line and ``[recipes.NAME] key``."""

from __future__ import annotations

import dataclasses

import pytest

import replaybank.hf
from replaybank.hf import MixError
from replaybank.llm.config import Config, ConfigError, LoopConfig, Recipe
from replaybank.llm.config.recipe import BUILTIN_RECIPES
from replaybank.llm.config.values import key_line
from replaybank.llm.train.kl import KLSpec


class _Peft:
    """Enough of a PEFT model for KLToBase's constructor (it only checks for disable_adapter)."""

    def disable_adapter(self) -> None:  # pragma: no cover - never called here
        raise AssertionError


def _hf_view(recipe: Recipe | str) -> tuple[float, str, float, float, str, bool]:
    """What replaybank.hf does with a recipe: the share mix() applies and the KL term KLToBase runs."""
    from replaybank.hf.recipe import share

    ratio, mix_by = share(None, None, recipe)
    kl = replaybank.hf.KLToBase.from_recipe(_Peft(), recipe)
    return ratio, mix_by, kl.weight, kl.temperature, kl.on, kl.rehearsal_ce


def test_self_distill_is_the_same_recipe_in_the_main_job_the_loop_and_hf():
    arm = Config.from_dict({"evaluation": {"arms": ["base", "naive", "self-distill"]}}).arm_specs()["self-distill"]
    loop = LoopConfig().recipe  # the loop's default
    named = LoopConfig.from_dict({"loop": {"recipe": "self-distill"}}).recipe
    hf = replaybank.hf.recipe("self-distill")
    assert arm == loop == named == hf == Recipe(source=["self"], ratio=0.5, mix_by="rows", kl_to_base=3.0,
                                                kl_temperature=1.0, kl_on="rehearsal", rehearsal_ce=False)
    # each job turns it into the same training: half of the rows, KL weight 3, no cross-entropy on them
    assert KLSpec.from_recipe(arm) == KLSpec.from_recipe(loop) == KLSpec(3.0, 1.0, "rehearsal", rehearsal_ce=False)
    assert _hf_view("self-distill") == (0.5, "rows", 3.0, 1.0, "rehearsal", False)
    # the main job's other built-ins keep taking [training] mixing_ratio / mix_by; self-distill keeps its own
    tuned = Config.from_dict({"training": {"mixing_ratio": 0.2, "mix_by": "tokens"}})
    assert (tuned.arm_specs()["rehearsal-self"].ratio, tuned.arm_specs()["rehearsal-self"].mix_by) == (0.2, "tokens")
    assert tuned.arm_specs()["self-distill"] == arm
    corpus, distill = tuned.arm_plan("rehearsal-corpus"), tuned.arm_plan("self-distill")
    assert (corpus.share, corpus.recipe.mix_by, corpus.from_training) == (0.2, "tokens", True)
    assert (distill.share, distill.recipe, distill.from_training) == (0.5, arm, False)
    # the reference's method stays an arm: general corpus, 10% of rows, cross-entropy
    ref = Config().arm_specs()["rehearsal-corpus"]
    assert (ref.source, ref.ratio, ref.mix_by, ref.rehearsal_ce, ref.kl_to_base) == (["corpus"], 0.1, "rows", True, 0.0)
    assert BUILTIN_RECIPES["rehearsal"] == BUILTIN_RECIPES["rehearsal-corpus"]


def test_a_recipe_table_is_named_by_every_job(tmp_path):
    table = ('[recipes.half-kl]\nsource = "self"\nratio = 0.25\nmix_by = "tokens"\nkl_to_base = 2.0\n'
             'kl_temperature = 2.0\nrehearsal_ce = false\n')
    run, loop = tmp_path / "run.toml", tmp_path / "loop.toml"
    run.write_text('[evaluation]\narms = ["base", "half-kl"]\n\n' + table)
    loop.write_text('[loop]\nrecipe = "half-kl"\n\n' + table)
    arm = Config.from_toml(run).arm_specs()["half-kl"]
    loop_recipe = LoopConfig.from_toml(loop).recipe
    hf = replaybank.hf.recipe("half-kl", run)
    assert arm == loop_recipe == hf == replaybank.hf.recipe("half-kl", loop)
    assert (hf.ratio, hf.mix_by, hf.kl_to_base, hf.kl_temperature, hf.rehearsal_ce) == (0.25, "tokens", 2.0, 2.0, False)
    assert _hf_view(hf) == (0.25, "tokens", 2.0, 2.0, "rehearsal", False)
    # [arms.NAME] is no table of any job: each refuses it, naming its line and the table to write
    old = tmp_path / "old.toml"
    old.write_text('[evaluation]\narms = ["base", "half-kl"]\n\n' + table.replace("[recipes.", "[arms."))
    for read in (Config.from_toml, LoopConfig.from_toml, lambda path: replaybank.hf.recipe("half-kl", path)):
        with pytest.raises(ConfigError, match=r"old.toml:4: \[arms.half-kl\] is not a section; declare the recipe as \[recipes.half-kl\]"):
            read(old)
    # the effective configs print the recipe as a [recipes.NAME] table that reads back the same
    again = tmp_path / "again.toml"
    again.write_text(Config.from_toml(run).to_toml())
    assert "[recipes.\"half-kl\"]" in again.read_text() and Config.from_toml(again).arm_specs()["half-kl"] == arm
    again.write_text(LoopConfig.from_toml(loop).to_toml())
    assert LoopConfig.from_toml(again).to_dict() == LoopConfig.from_toml(loop).to_dict()


def test_the_loops_old_rehearsal_keys_map_onto_a_recipe():
    # the published default config (benchmarks/results/loop_config.toml) spells self-distill in the old keys
    assert LoopConfig.from_dict({"loop": {"rehearsal": "self", "rehearsal_ratio": 0.5, "kl_weight": 3.0,
                                          "rehearsal_ce": False}}).loop.recipe == "self-distill"
    ce = LoopConfig.from_dict({"loop": {"rehearsal_ratio": 0.1, "kl_weight": 0.0, "rehearsal_ce": True}})
    assert ce.loop.recipe == "rehearsal-self" and ce.recipe == BUILTIN_RECIPES["rehearsal-self"]
    own = LoopConfig.from_dict({"loop": {"rehearsal": "rows.jsonl", "kl_weight": 1.0}})
    assert own.loop.recipe == "loop-keys" and own.recipe == Recipe(["rows.jsonl"], 0.5, kl_to_base=1.0, rehearsal_ce=False)
    assert LoopConfig.from_dict(own.to_dict()).recipe == own.recipe  # and reads back (the grid passes dicts)
    none = LoopConfig.from_dict({"loop": {"rehearsal": "none"}})
    assert none.loop.recipe == "none" and none.recipe is None
    assert LoopConfig().with_(recipe="none").recipe is None  # the grid's arm without rehearsal
    # a recipe from the main job that the loop can run: the base model's own answers with cross-entropy
    assert LoopConfig.from_dict({"loop": {"recipe": "rehearsal-self-kl"}}).recipe == BUILTIN_RECIPES["rehearsal-self-kl"]


def test_key_line_finds_keys_in_tables_quoted_names_and_inline_tables():
    text = ('# a run\n[training]\nseed = 1\n\n[recipes."my.recipe"]\n# ratio = 0.9 (a comment)\n'
            'ratio = 0.5\n[recipes]\ninline = { source = "self", ratio = 2 }\n[ recipes . old ]\n"kl_to_base" = 1\n')
    assert key_line(text, "training", "seed") == 3
    from replaybank.llm.config.values import _dotted

    assert _dotted('recipes."my.recipe"') == ("recipes", "my.recipe")  # a dot inside quotes is part of the name
    assert key_line(text.replace('"my.recipe"', "mine"), "recipes.mine", "ratio") == 7  # not the comment's line
    assert key_line(text, "recipes.inline", "ratio") == 9  # inline table: the line that declares it
    assert key_line(text, "recipes.old", "kl_to_base") == 11
    assert key_line(text, "training", "learning_rate") == 2  # not written: the table's header
    assert key_line(text, "loop", "seed") is None


def _fails(tmp_path, name: str, text: str, match: str, job: type = Config) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ConfigError, match=match):
        job.from_toml(path)


@pytest.mark.parametrize(
    "text,match",
    [
        ('[recipes.x]\nratio = 0.2\nsource = ["self", "selff"]\n',
         r"c\.toml:3: \[recipes\.x\] source contains 'selff'; expected some of corpus, self, replay, onpolicy, selfgen; did you mean 'self'\?"),
        ('[recipes.x]\nsource = "self"\n\nrehearsal_ce = false\n',
         r"c\.toml:4: \[recipes\.x\] rehearsal_ce = false trains the rehearsal rows through the KL term only.*kl_to_base = 0\)"),
        ('[recipes.x]\nsource = "self"\nkl_to_base = 0\nrehearsal_ce = false\n', r"c\.toml:4: \[recipes\.x\] rehearsal_ce = false"),
        ('[recipes.x]\nsource = "self"\nratio = 1.0\n', r"c\.toml:3: \[recipes\.x\] ratio = 1\.0: expected a value in \[0, 1\)"),
        ('[recipes.x]\nsource = "self"\nratio = -0.1\n', r"c\.toml:3: \[recipes\.x\] ratio = -0\.1: expected a value >= 0 and < 1"),
        ('[recipes.x]\nsource = "self"\nratio = 0\n', r"c\.toml:3: \[recipes\.x\] has sources \['self'\] but ratio = 0"),
        ('[recipes.x]\nsource = "self"\nkl_weight = 1\n', r"c\.toml:3: unknown key \[recipes\.x\] kl_weight; did you mean 'kl_to_base'\? \(\[loop\] kl_weight is its old spelling"),
        ('[recipes]\nx = { source = "self", ratio = 2 }\n', r"c\.toml:2: \[recipes\.x\] ratio = 2: expected a value in \[0, 1\)"),
        ('[evaluation]\narms = ["base", "self-distil"]\n',
         r"c\.toml:2: \[evaluation\] arms contains 'self-distil'; expected base, a built-in recipe or a \[recipes\.NAME\] table; did you mean 'self-distill'\?"),
        ('[evaluation]\narms = ["base", "x"]\n[recipes.x]\nsource = "rows.jsonl"\n',
         r"c\.toml:4: \[recipes\.x\] source contains 'rows\.jsonl': the main job rehearses with corpus, self, replay"),
        ('[evaluation]\narms = ["base", "x"]\n\n[arms.x]\nsource = "self"\n', r"c\.toml:4: \[arms\.x\] is not a section; declare the recipe as \[recipes\.x\]"),
        ('[recipes.x]\nsource = "self"\n[arms.x]\nsource = "corpus"\n', r"c\.toml:3: \[arms\.x\] is not a section; declare the recipe as \[recipes\.x\]"),
        ('[recipes.none]\nsource = "self"\n', r"c\.toml:1: \[recipes\.none\] cannot be declared; none is no rehearsal"),
    ],
)
def test_bad_recipes_in_the_main_job_name_file_line_and_key(tmp_path, text, match):
    _fails(tmp_path, "c.toml", text, match)


@pytest.mark.parametrize(
    "text,match",
    [
        ('[loop]\nseed = 1\nrecipe = "self-distil"\n',
         r"l\.toml:3: \[loop\] recipe = 'self-distil' is not a built-in recipe or a \[recipes\.NAME\] table; did you mean 'self-distill'\?"),
        ('[loop]\nrecipe = "self-distill"\nkl_weight = 1.0\n',
         r"l\.toml:2: \[loop\] recipe = 'self-distill' and \[loop\] kl_weight \(line 3\) both set the rehearsal"),
        ('[loop]\nrecipe = "rehearsal-corpus"\n', r"l\.toml:2: \[loop\] recipe = 'rehearsal-corpus' rehearses with source = \['corpus'\]; the loop rehearses with one source"),
        ('[loop]\nrecipe = "mine"\n[recipes.mine]\nsource = ["self", "replay"]\n', r"l\.toml:4: \[loop\] recipe = 'mine' rehearses with source"),
        ('[loop]\nrecipe = "mine"\n[recipes.mine]\nsource = "self"\nkl_to_base = 0.0\nrehearsal_ce = false\n',
         r"l\.toml:6: \[recipes\.mine\] rehearsal_ce = false .*kl_to_base = 0\)"),
        ('[loop]\nkl_weight = -1\n', r"l\.toml:2: \[loop\] kl_weight = -1"),
        ('[loop]\nrehearsal = "corpus"\n', r"l\.toml:2: \[loop\] rehearsal = 'corpus': expected self, none or a \.jsonl file"),
    ],
)
def test_bad_recipes_in_the_loop_name_file_line_and_key(tmp_path, text, match):
    _fails(tmp_path, "l.toml", text, match, LoopConfig)


def test_hf_refuses_an_unknown_recipe_and_a_share_given_twice(tmp_path):
    with pytest.raises(ConfigError, match=r"recipe = 'self-distil' is not a built-in recipe.*did you mean 'self-distill'\?"):
        replaybank.hf.recipe("self-distil")
    from replaybank.hf.recipe import share

    with pytest.raises(MixError, match=r"not both: recipe 'self-distill' sets ratio 0\.5 and mix_by 'rows'"):
        share(0.1, None, "self-distill")
    with pytest.raises(MixError, match=r"give ratio= .* or recipe="):
        share(None, None, None)
    assert share(0.1, None, None) == (0.1, "rows")
    assert replaybank.hf.recipe("none") == BUILTIN_RECIPES["naive"]
    with pytest.raises(MixError, match=r"rehearsal_ce=False trains the rehearsal rows through the KL term only"):
        replaybank.hf.KLToBase.from_recipe(_Peft(), dataclasses.replace(BUILTIN_RECIPES["self-distill"], kl_to_base=0.0))


def test_the_docstring_examples_hold():
    import doctest
    import importlib

    names = ("replaybank.llm.config.recipe", "replaybank.llm.config.values", "replaybank.llm.config.loop",
             "replaybank.hf.recipe", "replaybank.llm.train.kl")  # replaybank.hf.recipe the module, not the function
    for name in names:
        result = doctest.testmod(importlib.import_module(name))
        assert result.attempted > 0 and result.failed == 0, name


def test_control_recipe_trains_rehearsal_rows_alone_and_refuses_what_does_not_apply():
    from replaybank.llm.config import Config, ConfigError
    from replaybank.llm.config.recipe import parse_recipes

    plan = Config.from_dict({"evaluation": {"arms": ["base", "naive", "control"]}}).arm_plan("control")
    assert plan.share == 1.0 and plan.recipe.source == ["self"] and not plan.recipe.domain
    mine = parse_recipes({"mine": {"source": ["corpus"], "domain": False}}, "run.toml")["mine"]
    assert mine.ratio == 0.0 and not mine.domain
    for bad, match in (({"source": ["self"], "domain": False, "ratio": 0.3}, "ratio = 0.3 does not apply"),
                       ({"source": ["replay"], "domain": False}, "domain rows"),
                       ({"source": ["self"], "domain": False, "kl_to_base": 1.0}, "plain cross-entropy")):
        with pytest.raises(ConfigError, match=match):
            parse_recipes({"mine": bad}, "run.toml")
