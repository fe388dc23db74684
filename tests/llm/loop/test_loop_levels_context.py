"""benchmarks/loop_levels_context.py: a finished run's adapter and store measured under each
retrieval setting; the settings the run itself measured come out as the run recorded them."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from replaybank.llm.config.loop import LoopConfig

from .test_loop_replay import _run  # type: ignore[import-not-found]

ROOT = Path(__file__).resolve().parents[3]


def _script():
    spec = importlib.util.spec_from_file_location("loop_levels_context", ROOT / "benchmarks" / "loop_levels_context.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_each_setting_is_measured_and_the_runs_own_settings_match_what_it_recorded(tiny_cfg, tmp_path, monkeypatch, capsys):
    data = tiny_cfg(generations=1, levels=[4], max_new_tokens=40, tasks_per_generation=6, eval_tasks=6,
                    replay_workflows=True, retrieve=["episodes", "insights", "workflows"])
    folder = tmp_path / "levels-s0"
    state, _ = _run(LoopConfig.from_dict(data), folder, monkeypatch)
    recorded = state.generations[1].evaluation
    script = _script()

    import replaybank.llm.eval.decode as decode

    from .scripted import Scripted, seeded  # type: ignore[import-not-found]

    real = decode.generate_detailed
    monkeypatch.setattr(decode, "generate_detailed", Scripted(seeded, fallback=real))
    try:
        out = script.measure_run(folder, generation=1, groups=2, threads=1)
        only = script.measure_run(folder, generation=1, groups=2, threads=1, settings=("episodes",))
    finally:
        monkeypatch.setattr(decode, "generate_detailed", real)
        for module in list(sys.modules.values()):
            if isinstance(getattr(module, "generate_detailed", None), Scripted):
                module.generate_detailed = real

    settings = out["settings"]
    assert list(settings) == [*script.SETTINGS, "replay", "vote"]
    assert list(only["settings"]) == ["none", "episodes"]  # none always: the items are counted against it
    assert only["settings"]["none"] == settings["none"]
    assert all(s["n"] == 6 for s in settings.values())
    assert settings["none"]["exact"] == recorded.no_context.success
    assert settings["all"]["exact"] == recorded.context.success
    assert settings["all"]["model_calls"] == recorded.context.model_calls
    assert recorded.replay is not None and settings["replay"]["exact"] == recorded.replay.score.success
    assert settings["replay"]["model_calls"] < settings["all"]["model_calls"]  # a replay spends no model call
    assert settings["vote"]["model_calls"] == 2 * settings["all"]["model_calls"]  # one answer per group
    assert out["adapter"] == state.generations[1].adapter
    assert out["matches_run"] is True  # the same tasks, adapter and prompts as the run's own evaluation

    results = tmp_path / "context.json"
    summary = {"generation": 1, "groups": 2, "runs": {"levels-s0": out, "levels-s1": out}}
    results.write_text(json.dumps(summary))
    monkeypatch.setattr(sys, "argv", ["loop_levels_context.py", "--table", "--results", str(results)])
    script.main()
    table = capsys.readouterr().out
    assert "| none | " in table and "| vote | " in table and "| 0 / 0 |" in table  # none against itself

    other = tmp_path / "other.json"  # another arm's run of seed 0 that solves one task more and none of these
    extra = {**out["settings"]["none"], "solved": ["a-task-only-the-other-solves"]}
    other.write_text(json.dumps({"generation": 1, "runs": {"raw-s0": {"settings": {"none": extra}}}}))
    monkeypatch.setattr(sys, "argv", ["loop_levels_context.py", "--table", "--results", str(results),
                                      "--versus", str(other), "--setting", "none"])
    script.main()
    versus = capsys.readouterr().out.split("against the other run")[1]
    assert f"| 0 | {len(settings['none']['solved'])} / 1 |" in versus


def test_a_generation_the_run_did_not_reach_is_refused(tiny_cfg, tmp_path, monkeypatch):
    folder = tmp_path / "run"
    _run(LoopConfig.from_dict(tiny_cfg(generations=1)), folder, monkeypatch)
    with pytest.raises(SystemExit, match="finished 1 generations"):
        _script().measure_run(folder, generation=2, groups=2, threads=1)
    with pytest.raises(SystemExit, match="no state.json"):
        _script().measure_run(tmp_path / "empty", generation=1, groups=2, threads=1)
