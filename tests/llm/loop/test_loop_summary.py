"""The loop report's typed ``metrics.json`` (:mod:`replaybank.llm.loop.summary`): the report of the
committed loop_levels states is the committed ``metrics.json`` and ``report.md``, byte for byte, and
the file reads back into the records and writes back the same."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from replaybank.llm.loop.report import write_report
from replaybank.llm.loop.summary import GAP_KEY, LoopArm, LoopMetrics, RetentionGap
from replaybank.llm.records import ResultsError

RESULTS = Path(__file__).resolve().parents[3] / "benchmarks" / "results" / "loop_levels"
RUNS = tuple(sorted(p.name.removesuffix(".state.json") for p in RESULTS.glob("*.state.json")))


def test_the_report_of_the_committed_states_is_the_committed_report_byte_for_byte(tmp_path):
    for name in RUNS:
        (tmp_path / name).mkdir()
        shutil.copy(RESULTS / f"{name}.state.json", tmp_path / name / "state.json")
    write_report(tmp_path)
    assert (tmp_path / "metrics.json").read_bytes() == (RESULTS / "metrics.json").read_bytes()
    # the runs' store.db files are not committed: their summaries in the committed report.md read
    # "(no store)" here, and every other byte is the same
    committed = (RESULTS / "report.md").read_text(encoding="utf-8")
    without_stores, n = re.subn(r"```\n[\w-]+/store\.db: [^`]*?\n```", "```\n(no store)\n```", committed)
    assert n == len(RUNS)
    assert (tmp_path / "report.md").read_text(encoding="utf-8") == without_stores


def test_the_committed_metrics_read_into_records_and_write_back_byte_for_byte():
    raw = (RESULTS / "metrics.json").read_bytes()
    metrics = LoopMetrics.from_json(json.loads(raw))
    assert json.dumps(metrics.to_json(), indent=1).encode("utf-8") == raw
    assert sorted(r for a in metrics.arms.values() for r in a.runs) == list(RUNS) and metrics.paired_retention_gap == {}
    arm = next(a for a in metrics.arms.values() if "levels-s0" in a.runs)
    assert isinstance(arm, LoopArm) and [g.generation for g in arm.generations] == list(range(6))
    assert arm.generations[5].of("exact") == arm.generations[5].exact and arm.generations[5].exact[0] == 0.725


def test_the_gaps_are_written_beside_the_arms_only_when_there_are_some():
    gap = RetentionGap(seeds=[0], generations=[[0.0], [None]])
    empty = LoopMetrics(arms={}, paired_retention_gap={})
    assert empty.to_json() == {}
    both = LoopMetrics(arms={}, paired_retention_gap={"window (K=3), rehearsal self 50%": gap})
    assert both.to_json() == {GAP_KEY: {"window (K=3), rehearsal self 50%": {"seeds": [0], "generations": [[0.0], [None]]}}}
    assert LoopMetrics.from_json(both.to_json()) == both


def test_a_bad_key_is_refused_with_the_arm_and_key_named():
    data = json.loads((RESULTS / "metrics.json").read_text(encoding="utf-8"))
    key = next(iter(data))
    data[key]["generations"][2]["exact"] = ["0.5"]
    with pytest.raises(ResultsError, match=re.escape(f"metrics.json: {key}.generations[2].exact[0]: expected a number")):
        LoopMetrics.from_json(data)
    with pytest.raises(ResultsError, match=f"metrics.json: {GAP_KEY}: expected a JSON object"):
        LoopMetrics.from_json({GAP_KEY: []})
