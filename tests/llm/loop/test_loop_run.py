"""The loop end to end on a tiny random Llama: two generations write the store, adapters, state and
report; bad inputs (a checker that raises, a malformed task file, a bad store, another config)
stop it with clear errors."""

from __future__ import annotations

import json
import sqlite3

import pytest

from replaybank.episodic import EpisodeStore, Task, Verdict
from replaybank.episodic.env import CheckerError, QxEnvironment, TaskFileError
from replaybank.episodic.store import CorruptStoreError, SchemaVersionError
from replaybank.llm.config.loop import LoopConfig
from replaybank.llm.loop.consolidate import AdapterError
from replaybank.llm.loop.report import write_report
from replaybank.llm.loop.results import Acted
from replaybank.llm.loop.state import StateError
from replaybank.llm.recipes.loop import run_loop


def test_two_generations_write_store_adapters_state_and_report(tiny_cfg, tmp_path):
    cfg = LoopConfig.from_dict(tiny_cfg())
    out = tmp_path / "run"
    lines: list[str] = []
    state = run_loop(cfg, out, log=lines.append)

    assert state.finished == 2 and [r.generation for r in state.generations] == [0, 1, 2]
    assert state.to_json() == json.loads((out / "state.json").read_text())  # what it returns is what it wrote
    assert sum(line.startswith("gen ") and "held-out exact" in line for line in lines) == 3  # one line per generation
    with EpisodeStore(out / "store.db", readonly=True) as store:
        assert store.generations() == [0, 1, 2]
        demos = store.episodes(source="demo")
        assert len(demos) == 4 and all(d.episode.verdict.success for d in demos)
        assert store.attempt_count() == 4 + 2 * 3 * 2  # demos + generations x tasks x samples
        gen2 = store.episodes(generation=[2])
        # generation 2 acted with generation 1's adapter, with the replayed examples in its context
        assert {r.episode.adapter for r in gen2} == {state.generations[1].adapter}
        assert {r.episode.seed for r in gen2} == {2}
        first = gen2[0].episode
        assert first.context[0]["role"] == "system" and len(first.replayed) == 2
        assert first.context[1]["content"] in {d.episode.task.text for d in demos} | {
            r.episode.task.text for r in store.episodes(success=True)}
    for g in (1, 2):
        meta = json.loads((out / "adapters" / f"gen{g}" / "replaybank.json").read_text())
        assert meta["sha256"][:16] == state.generations[g].adapter and meta["lineage"] == [1, 2][:g]
    row = state.generations[2]
    assert row.lineage == [1, 2] and (row.train_steps or 0) > 0 and (row.train or {})["rehearsal_rows"] > 0
    assert set(row.to_json()["no_context"]) >= {"success", "credit", "n"} and row.evaluation.no_context.n == 3
    assert row.evaluation.validation.n == 2

    report = write_report(tmp_path)
    text = report.read_text()
    assert "## window (K=3), rehearsal" in text and "| 2 |" in text and "store.db" in text
    assert (tmp_path / "loop.png").stat().st_size > 1000
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    (group,) = metrics.values()
    assert [g["generation"] for g in group["generations"]] == [0, 1, 2]

    # a finished run asked for more generations continues from its store and adapter
    more = run_loop(LoopConfig.from_dict(tiny_cfg(generations=3)), out, log=lines.append)
    last = more.generations[3].act
    assert more.finished == 3 and isinstance(last, Acted) and last.score.n == 6
    assert any("resuming after generation 2" in line for line in lines)


def test_a_checker_that_raises_names_the_checker_and_task(tiny_cfg, tmp_path):
    class Broken(QxEnvironment):
        def check(self, task: Task, output: str) -> Verdict:
            raise KeyError("answer")

    with pytest.raises(CheckerError, match=r"checker Broken raised on task .*KeyError: 'answer'"):
        run_loop(LoopConfig.from_dict(tiny_cfg(generations=1)), tmp_path / "run", log=lambda m: None,
                 env=Broken(levels=(1, 2)))


def test_a_malformed_task_file_names_file_and_line(tiny_cfg, tmp_path):
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"text": "Add tea to the cart, qty 1.", "expected": ["<<qx cart.add; sku=tea; qty=1>>"]}\n'
                     '{"text": "Add milk", "split": "tomorrow"}\n', encoding="utf-8")
    with pytest.raises(TaskFileError, match=rf"{tasks}:2: 'split' must be one of"):
        run_loop(LoopConfig.from_dict(tiny_cfg(tasks=str(tasks))), tmp_path / "run", log=lambda m: None)


def test_a_bad_store_stops_the_loop_before_the_model_loads(tiny_cfg, tmp_path):
    cfg = LoopConfig.from_dict(tiny_cfg())
    corrupt = tmp_path / "corrupt"
    corrupt.mkdir()
    (corrupt / "store.db").write_bytes(b"SQLite format 3\x00" + b"\xff" * 4000)
    with pytest.raises(CorruptStoreError, match="store.db"):
        run_loop(cfg, corrupt, log=lambda m: None)
    newer = tmp_path / "newer"
    newer.mkdir()
    EpisodeStore(newer / "store.db").close()
    con = sqlite3.connect(newer / "store.db")
    con.execute("PRAGMA user_version = 9")
    con.commit()
    con.close()
    with pytest.raises(SchemaVersionError, match="schema version 9 is newer"):
        run_loop(cfg, newer, log=lambda m: None)


def test_resuming_with_another_config_is_refused(tiny_cfg, tmp_path):
    out = tmp_path / "run"
    run_loop(LoopConfig.from_dict(tiny_cfg(generations=1)), out, log=lambda m: None)
    with pytest.raises(StateError, match=r"\[loop\] lineage = 'window', not 'all'"):
        run_loop(LoopConfig.from_dict(tiny_cfg(generations=1, lineage="all")), out, log=lambda m: None)
    # Resuming checks the adapter it carries on against the hash recorded when it was saved: one
    # changed byte in the weights stops the resume, naming the file, before generation 2 trains.
    weights = out / "adapters" / "gen1" / "adapter_model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0x01
    weights.write_bytes(bytes(data))
    state_before = (out / "state.json").read_bytes()
    with pytest.raises(AdapterError, match=r"gen1/adapter_model.safetensors: sha256 \w+ does not match replaybank.json"):
        run_loop(LoopConfig.from_dict(tiny_cfg(generations=2)), out, log=lambda m: None)
    assert (out / "state.json").read_bytes() == state_before  # nothing recorded for generation 2
    assert not (out / "adapters" / "gen2").exists()
