"""A multi-turn loop (levels 3 and 4, scripted agent, tiny Llama trained) killed during a store
write and during consolidation, then resumed, ends with exactly the store, adapters and
evaluations of the same loop run without interruption."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from replaybank.episodic import EpisodeStore

from .conftest import kill_at, to_toml  # type: ignore[import-not-found]
from .scripted import Scripted, seeded  # type: ignore[import-not-found]

SCRIPT = Path(__file__).with_name("scripted.py")


def _record(run: Path) -> dict[str, Any]:
    with EpisodeStore(run / "store.db", readonly=True) as store:
        store.verify()
        episodes = [(r.id, r.count, r.generations, r.episode.output, r.episode.steps, r.episode.verdict,
                     r.episode.context, r.episode.replayed, r.episode.adapter, r.episode.seed) for r in store.episodes()]
        attempts = store.query("SELECT episode_id, generation, adapter, seed, replayed FROM attempts ORDER BY rowid")
    state = json.loads((run / "state.json").read_text())
    evals = [{k: g[k] for k in ("adapter", "no_context", "context", "validation")} for g in state["generations"]]
    return {"episodes": episodes, "attempts": sorted(map(tuple, attempts)), "evals": evals}


def test_a_killed_multi_turn_loop_resumes_to_exactly_the_uninterrupted_run(tiny_cfg, tmp_path, isolated_cache,
                                                                           monkeypatch):
    import replaybank.llm.eval.decode as decode
    from replaybank.cli import main

    data = tiny_cfg(generations=3, levels=[3, 4], max_new_tokens=40)
    config = tmp_path / "loop.toml"
    config.write_text(to_toml(data), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3] / "src"),
           "REPLAYBANK_CACHE": str(isolated_cache), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}

    def cmd(out: Path) -> list[str]:
        return [sys.executable, str(SCRIPT), "loop", str(config), "--out", str(out)]

    real = decode.generate_detailed

    def in_process(out: Path) -> None:  # what ``cmd(out)`` runs, without starting an interpreter
        scripted = Scripted(seeded, fallback=real)
        monkeypatch.setattr(decode, "generate_detailed", scripted)
        try:
            assert main(["loop", str(config), "--out", str(out)]) == 0
        finally:  # a module first imported during the run bound the scripted agent by name: unbind it
            monkeypatch.setattr(decode, "generate_detailed", real)
            for module in list(sys.modules.values()):
                if getattr(module, "generate_detailed", None) is scripted:
                    module.generate_detailed = real

    # the kills need processes of their own; the uninterrupted run and the last resume run here
    in_process(tmp_path / "straight")
    kill_at(cmd(tmp_path / "killed"), "gen 2: recording", env)
    kill_at(cmd(tmp_path / "killed"), "gen 2: consolidating", env)
    in_process(tmp_path / "killed")

    straight = _record(tmp_path / "straight" / "window-rehearsal-s0")
    resumed = _record(tmp_path / "killed" / "window-rehearsal-s0")
    assert resumed == straight
    agent = [e for e in straight["episodes"] if e[2] != (0,)]
    assert len({g for e in agent for g in e[2]}) == 3 and all(len(e[4]) == 2 for e in agent)  # every episode: two turns
    assert all(e[4][1].prompt == e[4][0].result for e in agent)  # turn 2 was shown turn 1's result
    assert any(e[5].success for e in agent)  # some multi-turn successes were there to consolidate
    # evaluation runs the same protocol: the held-out chains are solved only because turn 2 saw turn 1's total
    last = resumed["evals"][-1]
    assert last["no_context"]["levels"]["4"]["success"] == last["context"]["levels"]["4"]["success"] == 1.0
    assert last["no_context"]["levels"]["3"]["success"] == 0.0
