"""The typed ``state.json`` (:class:`replaybank.llm.loop.state.LoopState`, its rows
:mod:`replaybank.llm.loop.results`): a state written by the loop reads back into them and writes
back byte for byte; a key of the wrong type, or one the records would not write back, is refused
with the file and the key named."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from replaybank.llm.loop.act import Score
from replaybank.llm.loop.results import Acted, GenerationRow, ResumedAct
from replaybank.llm.loop.state import (
    STATE_FILE,
    LoopState,
    StateError,
    check_state,
    read_state,
    write_state,
)

RESULTS = Path(__file__).resolve().parents[3] / "benchmarks" / "results" / "loop_levels"


@pytest.mark.parametrize("name", ["raw-s0", "levels-s0"])
def test_a_written_state_reads_into_a_typed_state_and_writes_back_byte_for_byte(tmp_path, name):
    source = RESULTS / f"{name}.state.json"
    shutil.copy(source, tmp_path / STATE_FILE)
    state = read_state(tmp_path)
    assert isinstance(state, LoopState)
    file = json.loads(source.read_text(encoding="utf-8"))
    rows = state.generations
    assert [r.generation for r in rows] == list(range(state.finished + 1))
    assert [r.to_json() for r in rows] == file["generations"]
    # the state the loop writes is the record's JSON: the whole file is the same, byte for byte,
    # its keys in the file's order
    out = tmp_path / "again"
    write_state(out, state)
    assert (out / STATE_FILE).read_bytes() == source.read_bytes()
    assert list(state.to_json()) == list(file)
    # the fields read as attributes are the file's
    assert (state.config, state.adapter, state.rehearsal, state.base_model, state.suite_base) == (
        file["config"], file["adapter"], file["rehearsal"], file["base_model"], file["suite_base"])
    assert state.seconds_this_session == file["seconds_this_session"] and state.controller is None
    assert state.loop_config.loop.seed == file["config"]["loop"]["seed"]
    last, raw = rows[-1], file["generations"][-1]
    assert last.evaluation.context.success == raw["context"]["success"]
    assert last.evaluation.no_context.calls_per_solved == raw["no_context"]["model_calls_per_solved"]
    assert isinstance(last.act, Acted) and last.act.score.n == raw["act"]["n"]
    assert last.train_steps == raw["train"]["steps"] and rows[0].act is None and rows[0].train_steps is None


def test_the_experience_keys_read_as_attributes():
    state = json.loads((RESULTS / "levels-s0.state.json").read_text(encoding="utf-8"))
    row = check_state(Path("levels-s0.state.json"), state).generations[1]
    raw = state["generations"][1]
    assert isinstance(row.act, Acted) and row.act.reflection is not None and row.act.reflection.retry is not None
    assert row.act.reflection.retry.with_reflection.success == raw["act"]["reflection"]["retry"]["with_reflection"]["success"]
    assert row.act.replay is not None and row.act.replay.refused == raw["act"]["replay"]["refused"]
    assert row.evaluation.replay is not None and row.evaluation.replay.counts.replayed == raw["replay"]["replayed"]
    assert row.act.shown == raw["act"]["shown"]  # what the context showed: passed through as it is


def test_a_resumed_generation_keeps_its_own_key_order():
    act = {"resumed": True, "n": 6, "success": 0.5, "credit": 0.75,
           "reflection": {"n": 2, "fallback": 0, "cut": 1, "model_calls": 2, "tokens": 20}}
    parsed = ResumedAct.from_json(act)
    assert parsed.resumed and parsed.reflection is not None and parsed.reflection.retry is None
    assert json.dumps(parsed.to_json()) == json.dumps(act)
    row = {"generation": 1, "adapter": "0123456789abcdef", "act": act, "no_context": {"success": 0.0, "credit": 0.0},
           "context": {"success": 0.0, "credit": 0.0}, "validation": {"success": 0.0, "credit": 0.0},
           "suite": {"leakage": None}, "retention": None}
    typed = GenerationRow.from_json(row)
    assert isinstance(typed.act, ResumedAct) and json.dumps(typed.to_json()) == json.dumps(row)
    assert not Acted(score=Score(success=0.0, credit=0.0)).resumed


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        (lambda g: g[1]["act"]["reflection"]["retry"].update(n="12"),
         r"state.json: generations\[1\]\.act\.reflection\.retry\.n: expected an integer, got '12'"),
        (lambda g: g[0]["eval_tokens_per_second"].update(context="fast"),
         r"state.json: generations\[0\]\.eval_tokens_per_second\.context: expected a number, got 'fast'"),
        (lambda g: g[1]["replay"]["refused"].update(unbound=None),
         r"state.json: generations\[1\]\.replay\.refused\.unbound: expected an integer, got None"),
        (lambda g: g[0]["examples"][0].update(success="yes"),
         r"state.json: generations\[0\]\.examples\[0\]\.success: expected true or false, got 'yes'"),
    ],
)
def test_a_key_of_the_wrong_type_is_refused_naming_the_file_and_the_key(tmp_path, edit, match):
    state = json.loads((RESULTS / "levels-s0.state.json").read_text(encoding="utf-8"))
    edit(state["generations"])
    (tmp_path / STATE_FILE).write_text(json.dumps(state), encoding="utf-8")
    with pytest.raises(StateError, match=match + ".*delete the run folder to start over"):
        read_state(tmp_path)


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        (lambda s: s.update(note="mine"), r"field 'note' is not a loop state field"),
        (lambda s: s["generations"][1]["act"].update(note="mine"), r"field 'generations\[1\]\.act\.note' is not one a loop "
                                                                   r"state writes back"),
        (lambda s: s["generations"][0].update(lineage=None), r"field 'generations\[0\]\.lineage' is not one"),
        (lambda s: s.update(controller=[1]), r"field 'controller' is a list, expected an object"),
    ],
)
def test_a_key_the_typed_state_would_not_write_back_is_refused(tmp_path, edit, match):
    state = json.loads((RESULTS / "raw-s0.state.json").read_text(encoding="utf-8"))
    edit(state)
    (tmp_path / STATE_FILE).write_text(json.dumps(state), encoding="utf-8")
    with pytest.raises(StateError, match=match + ".*delete the run folder to start over"):
        read_state(tmp_path)


def test_a_state_records_each_finished_generation():
    state = check_state(Path("raw-s0.state.json"),
                        json.loads((RESULTS / "raw-s0.state.json").read_text(encoding="utf-8")))
    first = LoopState(config=state.config).add(state.generations[0])
    assert (first.finished, first.adapter, len(first.generations)) == (0, "base", 1)
    second = first.add(state.generations[1])
    assert (second.finished, second.adapter) == (1, state.generations[1].adapter) and first.finished == 0
    assert list(second.to_json()) == ["schema", "config", "finished", "adapter", "generations"]


def test_the_benchmark_summary_reads_the_typed_rows_to_the_published_figures():
    import importlib.util

    spec = importlib.util.spec_from_file_location("loop_levels", RESULTS.parents[1] / "loop_levels.py")
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    published = json.loads((RESULTS / "loop_levels.json").read_text(encoding="utf-8"))["runs"]
    for name, want in published.items():
        path = RESULTS / f"{name}.state.json"
        rows = check_state(path, json.loads(path.read_text(encoding="utf-8"))).generations
        assert [bench.summary_row(r) for r in rows] == want


def test_the_seed_table_averages_each_arm_over_its_seeds_at_one_generation():
    import importlib.util

    spec = importlib.util.spec_from_file_location("loop_levels", RESULTS.parents[1] / "loop_levels.py")
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)

    def row(gen, exact, replay, calls, retention):
        return {"generation": gen, "no_context": exact, "context": 0.5, "replay": replay, "retention": retention,
                "calls_per_solved": {"context": calls, "replay": None if replay is None else 0.2}}

    runs = {"raw-s0": [row(4, 0.0, None, 9.0, 0.0), row(5, 0.5, None, 2.0, 0.9)],
            "levels-budget-s0": [row(5, 0.7, 0.8, 1.0, 0.8)],
            "raw-s1": [row(5, 0.7, None, 3.0, 0.95)]}
    raw, levels = bench.seed_table(runs, 5)
    assert (raw["arm"], raw["seeds"], levels["arm"]) == ("raw", ["raw-s0", "raw-s1"], "levels-budget")
    exact = raw["held-out exact without context %"]
    assert abs(exact["mean"] - 0.6) < 1e-9 and abs(exact["std"] - 0.1414213562) < 1e-8
    context_calls, replay_calls = raw["model calls per solved task, context / replay"]
    assert context_calls["values"] == [2.0, 3.0] and replay_calls["mean"] is None
    assert raw["replay arm %"]["values"] == [None, None] and levels["replay arm %"]["mean"] == 0.8
    assert levels["retention %"]["std"] is None  # one seed
