"""A killed loop (SIGKILL during a store write, then during consolidation) resumes from its last
finished generation and loses nothing recorded: every generation ends with exactly its attempts in
the store, finished generations keep their adapters, and the resumed run reaches the end."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from replaybank.episodic import EpisodeStore
from replaybank.llm.config.loop import LoopConfig
from replaybank.llm.recipes.loop import run_loop

from .conftest import kill_at, to_toml  # type: ignore[import-not-found]


def _attempts_per_generation(db: Path) -> dict[int, int]:
    with EpisodeStore(db, readonly=True) as store:
        rows = store.query("SELECT generation, COUNT(*) FROM attempts GROUP BY generation")
    return {int(g): int(n) for g, n in rows}


def test_kill_during_store_write_and_during_consolidation_then_resume(tiny_cfg, tmp_path, isolated_cache):
    data = tiny_cfg(generations=3)
    config = tmp_path / "loop.toml"
    config.write_text(to_toml(data), encoding="utf-8")
    out = tmp_path / "out"
    run = out / "window-rehearsal-s0"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3] / "src"),
           "REPLAYBANK_CACHE": str(isolated_cache), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    cmd = [sys.executable, "-m", "replaybank.cli", "loop", str(config), "--out", str(out)]

    # 1. killed while generation 2's attempts are being written (the line is printed just before the write)
    kill_at(cmd, "gen 2: recording", env)
    state = json.loads((run / "state.json").read_text())
    assert state["finished"] == 1
    adapter1 = state["generations"][1]["adapter"]
    counts = _attempts_per_generation(run / "store.db")
    assert counts[1] == 6 and counts.get(2, 0) in (0, 6)  # one transaction: all of generation 2 or none

    # 2. resumed, and killed again while generation 2 consolidates (its attempts are recorded by then)
    seen = kill_at(cmd, "gen 2: consolidating", env)
    assert any("resuming after generation 1" in line for line in seen)
    assert _attempts_per_generation(run / "store.db") == {0: 4, 1: 6, 2: 6}
    with EpisodeStore(run / "store.db", readonly=True) as store:
        before = {(r.id, r.count) for r in store.episodes()}

    # 3. resumed to the end: generation 2 is not acted again, nothing recorded is lost or doubled
    lines: list[str] = []
    final = run_loop(LoopConfig.from_dict(data, source=str(config)), run, log=lines.append)
    assert any("gen 2: attempts already in the store" in line for line in lines)
    assert final.finished == 3 and [r.generation for r in final.generations] == [0, 1, 2, 3]
    assert final.generations[1].adapter == adapter1
    assert final.generations[2].act is not None and final.generations[2].act.resumed is True
    assert _attempts_per_generation(run / "store.db") == {0: 4, 1: 6, 2: 6, 3: 6}
    with EpisodeStore(run / "store.db", readonly=True) as store:
        store.verify()
        after = {r.id: r.count for r in store.episodes()}
    assert all(after[i] >= n for i, n in before)  # every episode recorded before the kills is still there
    for g in (1, 2, 3):
        assert (run / "adapters" / f"gen{g}" / "adapter_model.safetensors").is_file()
