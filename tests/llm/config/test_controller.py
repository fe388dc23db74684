"""A recipe's replay controller keys: read from [recipes.NAME] by every job, bad
values refused with the file's line, and one controller built from a recipe."""

from __future__ import annotations

import numpy as np
import pytest
import tomllib

from replaybank.llm.config import Config, ConfigError, LoopConfig
from replaybank.llm.config.controller import recipe_controller
from replaybank.llm.config.recipe import parse_recipes


def _parse(text: str):
    return parse_recipes(tomllib.loads(text)["recipes"], "run.toml", text=text)


def test_ratio_auto_is_a_bandit_starting_at_the_default_share():
    spec = _parse('[recipes.auto]\nsource = ["corpus", "self"]\nratio = "auto"\n')["auto"]
    assert (spec.controller, spec.ratio, spec.floor, spec.max_share) == ("bandit", 0.1, 0.0, 0.5)
    ctl = recipe_controller(spec, seed=0)
    assert ctl.name == "bandit" and ctl.limits.sources == ("corpus", "self")
    np.testing.assert_allclose(ctl.mixture([True, True]).sum(), 1.0)
    assert abs(ctl.mixture([True, True])[1:].sum() - 0.1 * 0.9 - 0.1 / 3) < 0.05  # the prior plus exploration


def test_fixed_controller_keeps_the_ratio_and_no_controller_builds_none():
    spec = _parse('[recipes.f]\nsource = ["corpus", "self"]\nratio = 0.3\ncontroller = "fixed"\n')["f"]
    np.testing.assert_allclose(recipe_controller(spec, seed=0).mixture([True, True]), [0.7, 0.15, 0.15])
    plain = _parse('[recipes.p]\nsource = "corpus"\nratio = 0.3\n')["p"]
    assert plain.controller == "none" and recipe_controller(plain, seed=0) is None


def test_proxy_weights_and_bandit_params_reach_the_controller():
    text = ('[recipes.p]\nsource = "corpus"\ncontroller = "proxy"\nmax_share = 0.4\n'
            'controller_params = {weights = [-2, 10, 0, 0, 0, 5, 0]}\n'
            '[recipes.b]\nsource = "corpus"\ncontroller = "bandit"\n[recipes.b.controller_params]\ndiscount = 0.5\nfeedback = "sampled"\n')
    got = _parse(text)
    assert recipe_controller(got["p"], 0).weights.tolist() == [-2, 10, 0, 0, 0, 5, 0]
    b = recipe_controller(got["b"], 0)
    assert (b.discount, b.feedback) == (0.5, "sampled")


@pytest.mark.parametrize(("text", "message"), [
    ('[recipes.a]\nsource = ["corpus", "self"]\ncontroller = "bandt"\n',
     r"run.toml:3: \[recipes.a\] controller = 'bandt': expected one of .*did you mean 'bandit'\?"),
    ('[recipes.a]\nsource = ["corpus", "self"]\ncontroller = "bandit"\nfloor = 0.3\nmax_share = 0.5\n',
     r"run.toml:4: \[recipes.a\] floor = 0.3 per source x 2 sources = 0.6 is above max_share = 0.5"),
    ('[recipes.a]\nsource = "corpus"\ncontroller = "bandit"\nfloor = 0.6\nmax_share = 0.5\n',
     r"run.toml:4: \[recipes.a\] floor = 0.6 is above max_share = 0.5"),
    ('[recipes.a]\nsource = "corpus"\ncontroller = "bandit"\ncontroller_params = {discont = 0.5}\n',
     r"run.toml:4: .*has no parameter 'discont'.*did you mean 'discount'\?"),
    ('[recipes.a]\nsource = "corpus"\ncontroller = "bandit"\ncontroller_params = {discount = 1.5}\n',
     r"run.toml:4: .*discount"),
    ('[recipes.a]\nsource = "corpus"\ncontroller = "bandit"\ncontroller_params = {lr = nan}\n',
     r"run.toml:4: .*controller_params.lr = nan: expected a finite number"),
    ('[recipes.a]\nsource = "corpus"\ncontroller = "bandit"\ncontroller_params = {start_share = 0.2}\n',
     r"run.toml:4: .*start_share.*set ratio instead"),
    ('[recipes.a]\nsource = "corpus"\ncontroller = "bandit"\ncontroller_params = [1, 2]\n',
     r"run.toml:4: .*controller_params = \[1, 2\]: expected a table"),
    ('[recipes.a]\nsource = "corpus"\ncontroller = "proxy"\n', r"run.toml:3: .*needs controller_params.weights"),
    ('[recipes.a]\nsource = "corpus"\ncontroller = "proxy"\ncontroller_params = {weights = [1, 2]}\n',
     r"run.toml:4: .*expected 7 finite numbers"),
    ('[recipes.a]\nsource = "corpus"\nratio = 0.6\ncontroller = "fixed"\n', r"run.toml:3: .*ratio = 0.6 .*outside \[0, 0.5\]"),
    ('[recipes.a]\nsource = "corpus"\nratio = "auto"\ncontroller = "fixed"\n', r'run.toml:3: .*ratio = "auto" is controller = "bandit"'),
    ('[recipes.a]\nsource = "corpus"\nratio = "often"\n', r"run.toml:3: .*ratio = 'often': expected a number"),
    ('[recipes.a]\nsource = "corpus"\nfloor = 0.1\n', r"run.toml:3: \[recipes.a\] floor is read only with a controller"),
    ('[recipes.a]\nsource = []\ncontroller = "bandit"\n', r"run.toml:3: .*source = \[\]"),
    ('[recipes.a]\nsource = "corpus"\ncontroller = "bandit"\ntrend_window = 1\n', r"run.toml:4: .*trend_window = 1"),
])
def test_bad_controller_keys_name_the_line(text, message):
    with pytest.raises(ConfigError, match=message):
        _parse(text)


def test_both_jobs_read_the_controller_from_the_shared_recipe():
    table = {"recipes": {"steered": {"source": "corpus", "ratio": "auto", "max_share": 0.3}}}
    run = Config.from_dict({**table, "evaluation": {"arms": ["base", "steered"]}})
    assert run.arm_specs()["steered"].controller == "bandit"
    loop = LoopConfig.from_dict({"recipes": {"steered": {"source": "self", "ratio": "auto"}}, "loop": {"recipe": "steered"}})
    assert loop.recipe.controller == "bandit"
    assert Config.from_dict(run.to_dict()).arm_specs()["steered"] == run.arm_specs()["steered"]  # the written config reads back


@pytest.mark.parametrize(("params", "message"), [
    ("{rng = 1}", r"run.toml:4: .*controller 'bandit': parameter 'rng' is set by replaybank"),
    ("{limits = 1}", r"run.toml:4: .*controller 'bandit': parameter 'limits' is set by replaybank"),
    ('{lr = "1.0"}', r"run.toml:4: .*lr='1.0'"),
])
def test_controller_params_that_collide_or_are_strings_name_the_line(params, message):
    with pytest.raises(ConfigError, match=message):
        _parse(f'[recipes.a]\nsource = "corpus"\ncontroller = "bandit"\ncontroller_params = {params}\n')


def test_proxy_weights_given_as_a_string_name_the_line():
    with pytest.raises(ConfigError, match=r"run.toml:4: .*proxy\(weights\) = '1234567': expected numbers, got a string"):
        _parse('[recipes.a]\nsource = "corpus"\ncontroller = "proxy"\ncontroller_params = {weights = "1234567"}\n')
