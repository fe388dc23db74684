"""benchmarks/campaign.py: a few cheap cases of the adversarial campaign, each in its own process as
the script runs them, and the classification itself (refused, silent, traceback, hang, data loss,
a write outside the named folder) on cases made to show each outcome."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def campaign() -> Any:
    spec = importlib.util.spec_from_file_location("campaign", ROOT / "benchmarks" / "campaign.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["campaign"] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(("name", "message"), [
    ("c_fixed_string_share", "ControllerError: fixed(shares) = '0.1': expected numbers, got a string"),
    ("h_rows_unserialisable", "MixError: "),
    ("f_nul_read_regular", "the path holds a NUL byte"),
    ("t_overwrite_user_folder", "not a trace folder"),
])
def test_cheap_cases_are_refused_in_their_own_process_with_nothing_lost(campaign, tmp_path, name, message):
    # no template needed: these cases build nothing from it
    r = campaign.run_case(name, tmp_path / "cases", tmp_path / "no-template")
    assert (r.outcome, r.data_loss, r.outside_write) == ("refused", False, False), r
    assert message in r.message
    assert r.surface == campaign.CASES[name][0] and r.what


def _child(campaign: Any, capsys: Any, name: str, work: Path) -> dict[str, Any]:
    for sub in ("sb", "tmp"):
        (work / sub).mkdir(parents=True, exist_ok=True)
    campaign.run_in_child(name, work, work / "no-template")
    line = [x for x in capsys.readouterr().out.splitlines() if x.startswith(campaign.MARK)][-1]
    return json.loads(line[len(campaign.MARK):])


def test_a_case_is_a_traceback_when_the_check_it_meets_is_gone(campaign, tmp_path, capsys, monkeypatch):
    import replaybank.hf.embedded as embedded

    assert _child(campaign, capsys, "h_rows_unserialisable", tmp_path / "a")["outcome"] == "refused"

    def unchecked(rows: Any, path: Any) -> None:  # write_rows without its serialisation check
        Path(path).write_text("".join(json.dumps(r) + "\n" for r in rows))

    monkeypatch.setattr(embedded, "write_rows", unchecked)
    r = _child(campaign, capsys, "h_rows_unserialisable", tmp_path / "b")
    assert r["outcome"] == "traceback" and r["message"].startswith("TypeError: Object of type set")


def test_silent_acceptance_data_loss_and_outside_writes_are_each_found(campaign, tmp_path, capsys, monkeypatch):
    def accepts_and_damages(ctx: Any) -> Any:
        named = ctx.sb / "named"
        named.mkdir()
        (named / "kept.txt").write_text("mine")
        (ctx.sb / "user.txt").write_text("mine")
        ctx.arm(named=[named], keep=[named / "kept.txt"])
        (named / "kept.txt").write_text("overwritten")  # a kept file changed: data loss
        (named / "new.txt").write_text("fine")          # inside the named folder: allowed
        (ctx.sb / "elsewhere.txt").write_text("x")      # outside it
        return campaign.must_refuse(lambda: None, "a bad thing")

    def raises_value_error(ctx: Any) -> Any:
        ctx.arm()
        return campaign.must_refuse(lambda: int("x"), "x")

    monkeypatch.setitem(campaign.CASES, "x_damage", ("files", accepts_and_damages))
    monkeypatch.setitem(campaign.CASES, "x_value_error", ("files", raises_value_error))
    r = _child(campaign, capsys, "x_damage", tmp_path / "a")
    assert (r["outcome"], r["data_loss"], r["outside_write"]) == ("silent", True, True)
    assert "named/kept.txt" in r["integrity"] and "elsewhere.txt" in r["integrity"] and "new.txt" not in r["integrity"]
    # a ValueError is not a replaybank error, though replaybank's errors are ValueErrors
    assert _child(campaign, capsys, "x_value_error", tmp_path / "b")["outcome"] == "traceback"


def test_a_case_past_its_timeout_is_a_hang(campaign, tmp_path):
    r = campaign.run_case("c_fixed_string_share", tmp_path / "cases", tmp_path / "no-template", timeout=0.05)
    assert r.outcome == "hang" and "killed" in r.message


def test_the_table_counts_each_outcome_per_surface(campaign):
    R = campaign.CaseResult
    rows = campaign.table([R("sb3", "a", "", "refused", ""), R("sb3", "b", "", "silent", "", data_loss=True),
                           R("hf", "c", "", "hang", "", outside_write=True)])
    by = {r["surface"]: r for r in rows}
    assert by["sb3"] == {"surface": "sb3", "cases": 2, "refused": 1, "ok": 0, "silent": 1, "traceback": 0, "hang": 0,
                         "data_loss": 1, "outside_write": 0}
    assert by["all"]["cases"] == 3 and by["all"]["hang"] == 1 and by["all"]["outside_write"] == 1
    assert set(campaign.CASES) and {s for s, _ in campaign.CASES.values()} == set(campaign.SURFACES)
