"""``[evaluation] choose``, ``scales``, ``scale_profiles``, ``keep_skill`` and ``checkpoints``: checked with the file's line; the
effective config of a ``choose = "last"`` run reads as it did before these keys."""

from __future__ import annotations

import pytest

from replaybank.llm.config import Config, ConfigError


def _write(tmp_path, body: str):
    path = tmp_path / "run.toml"
    path.write_text(body, encoding="utf-8")
    return path


@pytest.mark.parametrize(("body", "match"), [
    ('[evaluation]\nchoose = "floor"\nscales = [0.5, 0.0]\n', r"run.toml:3: \[evaluation\] scales = \[0.5, 0.0\]: 0.0 is outside \(0, 2\]"),
    ('[evaluation]\nchoose = "floor"\nscales = [2.5]\n', r"run.toml:3: .*2.5 is outside \(0, 2\]"),
    ('[evaluation]\nchoose = "floor"\nscales = []\n', r"run.toml:3: \[evaluation\] scales is empty"),
    ('[evaluation]\nchoose = "floor"\nscales = [0.5, 0.5]\n', r"run.toml:3: .*lists a scale twice"),
    ('[evaluation]\nchoose = "floor"\nscales = ["half"]\n', r"run.toml:3: \[evaluation\] scales = \['half'\]: expected a list of numbers"),
    ('[evaluation]\nchoose = "floor"\nscale_profiles = ["deep"]\n', r"run.toml:3: .*contains 'deep'.*did you mean 'depth'"),
    ('[evaluation]\nchoose = "best"\n', r"run.toml:2: \[evaluation\] choose = 'best': expected one of 'last', 'floor'"),
    ('[evaluation]\nscales = [0.5]\n', r"run.toml:2: \[evaluation\] scales is set but \[evaluation\] choose = 'last' never reads it"),
    ('[data]\nvalidation_suite = ""\n\n[evaluation]\nchoose = "floor"\n', r"run.toml:2: \[evaluation\] choose = \"floor\" chooses on the validation split, but \[data\] validation_suite is empty"),
    ('[evaluation]\nchoose = "floor"\narms = ["base", "peer-osf"]\n', r"run.toml:2: .*'peer-osf' is a peer method's adapter"),
    ('[evaluation]\nchoose = "floor"\nkeep_skill = 1.5\n', r"run.toml:3: \[evaluation\] keep_skill = 1.5: .*\[0, 1\]"),
    ('[evaluation]\nchoose = "floor"\nkeep_skill = -0.1\n', r"run.toml:3: \[evaluation\] keep_skill = -0.1: "),
    ('[evaluation]\nchoose = "floor"\nkeep_skill = nan\n', r"run.toml:3: \[evaluation\] keep_skill = nan: expected a finite number"),
    ('[evaluation]\nchoose = "floor"\nkeep_skill = inf\n', r"run.toml:3: \[evaluation\] keep_skill = inf: expected a finite number"),
    ('[evaluation]\nchoose = "floor"\nkeep_skill = true\n', r"run.toml:3: \[evaluation\] keep_skill = True: expected a number"),
    ('[evaluation]\nkeep_skill = 0.5\n', r"run.toml:2: \[evaluation\] keep_skill is set but \[evaluation\] choose = 'last' never reads it"),
    ('[evaluation]\nchoose = "floor"\ncheckpoints = -1\n', r"run.toml:3: \[evaluation\] checkpoints = -1: "),
    ('[evaluation]\nchoose = "floor"\ncheckpoints = true\n', r"run.toml:3: \[evaluation\] checkpoints = True: expected an integer"),
    ('[evaluation]\nchoose = "floor"\ncheckpoints = 1.5\n', r"run.toml:3: \[evaluation\] checkpoints = 1.5: expected an integer"),
    ('[evaluation]\ncheckpoints = 2\n', r"run.toml:2: \[evaluation\] checkpoints is set but \[evaluation\] choose = 'last' never reads it"),
    ('[evaluation]\nchoose = "floor"\narms = ["base", "peer-sdft"]\ncheckpoints = 2\n', r"run.toml:4: \[evaluation\] checkpoints = 2 keeps .*'peer-sdft' trains through TRL"),
])
def test_bad_operating_point_keys_name_the_key_and_line(tmp_path, body, match):
    with pytest.raises(ConfigError, match=match):
        Config.from_toml(_write(tmp_path, body))


def test_choose_floor_reads_and_writes_its_keys_and_last_leaves_them_out(tmp_path):
    cfg = Config.from_toml(_write(tmp_path, '[evaluation]\nchoose = "floor"\nscales = [0.5, 1, 1.5]\nscale_profiles = ["uniform", "depth"]\n'))
    assert (cfg.evaluation.scales, cfg.evaluation.scale_profiles) == ([0.5, 1.0, 1.5], ["uniform", "depth"])
    assert cfg.to_dict()["evaluation"]["scales"] == [0.5, 1.0, 1.5]
    again = Config.from_toml(_write(tmp_path, cfg.to_toml()))
    assert again.to_dict() == cfg.to_dict()
    last = Config()
    assert not {"choose", "scales", "scale_profiles", "keep_skill", "checkpoints"} & set(last.to_dict()["evaluation"])
    assert "scales =" not in last.to_toml() and "keep_skill" not in last.to_toml()


def test_keep_skill_defaults_to_half_and_zero_turns_it_off(tmp_path):
    assert Config.from_dict({"evaluation": {"choose": "floor"}}).evaluation.keep_skill == 0.5
    cfg = Config.from_toml(_write(tmp_path, '[evaluation]\nchoose = "floor"\nkeep_skill = 0\n'))
    assert cfg.evaluation.keep_skill == 0.0 and cfg.to_dict()["evaluation"]["keep_skill"] == 0.0
    assert Config.from_toml(_write(tmp_path, cfg.to_toml())).evaluation.keep_skill == 0.0


def test_checkpoints_default_to_none_and_are_written_under_floor(tmp_path):
    assert Config.from_dict({"evaluation": {"choose": "floor"}}).evaluation.checkpoints == 0
    cfg = Config.from_toml(_write(tmp_path, '[evaluation]\nchoose = "floor"\ncheckpoints = 3\n'))
    assert cfg.to_dict()["evaluation"]["checkpoints"] == 3
    assert Config.from_toml(_write(tmp_path, cfg.to_toml())).evaluation.checkpoints == 3
    # peer-sdft is refused only when checkpoints are kept
    assert Config.from_dict({"evaluation": {"choose": "floor", "arms": ["base", "peer-sdft"]}}).evaluation.checkpoints == 0
