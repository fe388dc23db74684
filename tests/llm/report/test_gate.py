"""The retention gate: its config keys (errors with the file's line), the pure verdict, and
``replaybank run --require-floor``'s exit status (run_experiment replaced by constructed metrics)."""

from __future__ import annotations

import argparse
import re

import pytest
import tomllib

from replaybank.llm import cli
from replaybank.llm.config import Config, ConfigError
from replaybank.llm.config.floor import resolve_floors
from replaybank.llm.config.values import key_line
from replaybank.llm.report.families import family_summary, interval_method
from replaybank.llm.report.gate import GATE_EXIT, evaluate_gate, gate_failure
from replaybank.llm.results import (
    ArmMatrix,
    ArmResult,
    ArmSummary,
    Effect,
    Interval,
    Mixing,
    ProbeSection,
    RunResult,
    Stat,
    Targets,
)


def _write(tmp_path, text: str):
    path = tmp_path / "run.toml"
    path.write_text(text)
    return path


def test_default_floor_is_090_for_every_family_and_a_table_sets_some():
    cfg = Config()
    assert cfg.evaluation.retention_floor == 0.9 and cfg.evaluation.gate_arm == ""
    assert resolve_floors(cfg.evaluation.retention_floor, ["open", "code"]) == {"open": 0.9, "code": 0.9}
    cfg = Config.from_dict({"evaluation": {"retention_floor": {"code": 0.5, "arithmetic": 1}, "gate_arm": "naive"}})
    assert resolve_floors(cfg.evaluation.retention_floor, ["conversation", "arithmetic", "code"]) == {
        "conversation": 0.9, "arithmetic": 1.0, "code": 0.5}
    # the effective config writes the table back as TOML that reads the same
    again = Config.from_dict(tomllib.loads(cfg.to_toml()))
    assert again.evaluation.retention_floor == {"code": 0.5, "arithmetic": 1}


@pytest.mark.parametrize(
    "text, match",
    [
        ("[evaluation]\nseeds = 2\nretention_floor = 1.5\n",
         r"run\.toml:3: \[evaluation\] retention_floor = 1\.5: expected a number in \[0, 1\]"),
        ("[evaluation]\nretention_floor = -0.1\n", r"run\.toml:2: \[evaluation\] retention_floor = -0\.1: expected"),
        ("[evaluation]\nretention_floor = \"high\"\n", r"run\.toml:2: \[evaluation\] retention_floor = 'high': expected a number"),
        ("[evaluation]\nretention_floor = true\n", r"run\.toml:2: .*retention_floor = True: expected a number"),
        ("[evaluation]\nretention_floor = nan\n", r"run\.toml:2: .*retention_floor = nan: expected a number in \[0, 1\]"),
        ("# floors\n[evaluation]\nretention_floor = {conversation = 0.9, cod = 0.8}\n",
         r"run\.toml:3: \[evaluation\] retention_floor names an unknown family 'cod'; did you mean 'code'\?"),
        ("[evaluation.retention_floor]\nconversation = 0.9\ncode = 2\n",
         r"run\.toml:3: \[evaluation\] retention_floor\.code = 2: expected a number in \[0, 1\]"),
        ("[evaluation]\nretention_floor.arithmetic = 0.8\nretention_floor.maths = 0.8\n",
         r"run\.toml:3: .*unknown family 'maths'"),
        ("[evaluation]\narms = [\"base\", \"naive\"]\n\ngate_arm = \"rehearsal-self\"\n",
         r"run\.toml:4: \[evaluation\] gate_arm = 'rehearsal-self': expected one of the trained arms of \[evaluation\] arms \(naive\)"),
        ("[evaluation]\ngate_arm = \"base\"\n", r"run\.toml:2: \[evaluation\] gate_arm = 'base'"),
    ],
)
def test_bad_floor_or_gate_arm_names_file_line_and_key(tmp_path, text, match):
    with pytest.raises(ConfigError, match=match):
        Config.from_toml(_write(tmp_path, text))


def test_without_a_file_the_error_names_the_source_and_key():
    with pytest.raises(ConfigError, match=r"^<config>: \[evaluation\] retention_floor = 3: expected"):
        Config.from_dict({"evaluation": {"retention_floor": 3}})


def test_key_line_follows_tables_dotted_and_quoted_keys():
    text = ('[training]\nseed = 1\n\n[evaluation]\n"retention_floor" = 0.5  # a comment\n'
            '[recipes.mixed]\nsource = ["self"]\n[evaluation.retention_floor]\ncode = 1\n')
    assert key_line(text, "training", "seed") == 2
    assert key_line(text, "evaluation", "retention_floor") == 5
    assert key_line(text, "recipes.mixed", "source") == 7
    assert key_line(text, "evaluation.retention_floor", "code") == 9
    assert key_line(text, "evaluation", "gate_arm") == 4  # not written: the table's header
    assert key_line(text, "output", "out_dir") is None
    assert key_line("evaluation.gate_arm = 'x'\n", "evaluation", "gate_arm") == 1


def _fams(**retention: tuple[float, float, float] | None) -> dict[str, Interval | None]:
    return {fam: None if r is None else Interval(*r) for fam, r in retention.items()}


def test_gate_uses_the_mean_and_marks_clearly_below_by_the_upper_bound():
    fams = {
        "naive": _fams(conversation=(0.1, 0.0, 0.3), code=(0.95, 0.9, 1.0)),
        "self": _fams(conversation=(0.88, 0.8, 0.97), code=(0.9, 0.85, 0.95), open=None),
    }
    floors = {"conversation": 0.9, "code": 0.9, "open": 0.9}
    g = evaluate_gate(fams, floors, chosen="self", chosen_by="best_arm")
    rows = g.arms["self"].families
    # 0.88 < 0.9 fails although the interval reaches 0.97; exactly at the floor passes; no retention: not gated
    assert [rows[f].status for f in ("conversation", "code", "open")] == ["fail", "pass", "n/a"]
    assert g.arms["naive"].families["conversation"].status == "clearly below"
    assert g.arms["self"].failed == ["conversation"] and g.passed is False
    assert gate_failure(g) == (
        "retention floor not met by arm 'self' (best_arm): conversation 88.0% < floor 90.0% (95% CI 80.0-97.0%)"
    )
    lower = evaluate_gate(fams, {"conversation": 0.85, "code": 0.9}, chosen="self", chosen_by="gate_arm")
    assert lower.passed is True and gate_failure(lower) is None
    assert "no arm to gate" in gate_failure(evaluate_gate(fams, floors, chosen=None, chosen_by="best_arm"))


def _suite_arm(items: list[dict]) -> ArmResult:
    """An arm's results of which only the suite's items matter here."""
    return ArmResult.from_json({
        "general_loss": 2.0, "docs_loss": 2.0, "domain_loss": 2.0, "domain_losses": [2.0],
        "probe_score": 0.0, "probe_logprob": 0.0,
        "suite": {"families": {}, "leakage": 0.0, "retention": {}, "n": {}, "items": items},
        "domain": {"exact_match": 0.0, "call_score": None, "n": 1}, "matrix": {"R": [[0.0]]},
    }, where="test arm")


def _metrics(kept: int) -> RunResult:
    """Constructed metrics of one seed: the chosen arm keeps ``kept`` of 10 code items the base gets right."""
    item = lambda i, s: {"id": f"k{i}", "family": "code", "prompt": f"write f{i}", "score": s, "answer": "..."}  # noqa: E731
    seed = {"base": _suite_arm([item(i, 1.0) for i in range(10)]),
            "rehearsal-self": _suite_arm([item(i, float(i < kept)) for i in range(10)])}
    fams = family_summary([seed], [0], resamples=200)
    gate = evaluate_gate({"rehearsal-self": {f: s.retention for f, s in fams["rehearsal-self"].families.items()}},
                         {"code": 0.9}, chosen="rehearsal-self", chosen_by="best_arm")
    arm = ArmSummary(summary={"leakage": Stat(0.0, None, 1, [0.0])}, matrix=ArmMatrix([[0.0]], []))
    return RunResult(
        arms={"rehearsal-self": arm}, effect=Effect(criteria={}), targets=Targets(arms={}, best_arm="rehearsal-self"),
        gate=gate, intervals=interval_method(), probe=ProbeSection({}, []),
        mixing=Mixing(0.0, "fixed", 1, "rows", "constructed"), data={}, data_per_seed=[], suite=[], config={},
        config_source="constructed", wall_seconds=1.0,
    )


@pytest.mark.parametrize("kept, flag, status", [(9, True, 0), (8, True, GATE_EXIT), (8, False, 0)])
def test_require_floor_exit_status(monkeypatch, capsys, kept, flag, status):
    from replaybank.llm.recipes import rehearsal

    monkeypatch.setattr(cli, "check_sources", lambda cfg: None)
    monkeypatch.setattr(rehearsal, "run_experiment", lambda cfg, out, **kw: _metrics(kept))
    parser = argparse.ArgumentParser(prog="replaybank")
    cli.add_subcommands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["run", *(["--require-floor"] if flag else [])])
    assert args.func(args) == status
    captured = capsys.readouterr()
    assert '"passed": ' + ("true" if kept >= 9 else "false") in captured.out
    if status:
        assert GATE_EXIT == 3
        assert re.fullmatch(r"replaybank: retention floor not met by arm 'rehearsal-self' \(best_arm\): "
                            r"code 80\.0% < floor 90\.0% \(95% CI \d+\.\d-100\.0%\)\n", captured.err)
    else:
        assert "retention floor" not in captured.err
