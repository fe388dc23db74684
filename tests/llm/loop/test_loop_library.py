"""``[loop] library`` registers every finished generation in an adapter library, also
the generations of a run that finished before the key was set, and nothing twice."""

from __future__ import annotations

import pytest

from replaybank.llm.adapters import AdapterLibrary, Router
from replaybank.llm.config.loop import LoopConfig
from replaybank.llm.recipes.loop import run_loop

torch = pytest.importorskip("torch")


def test_the_loop_registers_its_generations(tiny_cfg, tmp_path):
    from replaybank.llm.model import load_model

    out, lib_path = tmp_path / "run", tmp_path / "lib"
    run_loop(LoopConfig.from_dict(tiny_cfg(generations=2)), out, log=lambda m: None)
    assert not lib_path.exists()
    lines: list[str] = []
    state = run_loop(LoopConfig.from_dict(tiny_cfg(generations=2, library=str(lib_path))), out, log=lines.append)
    lib = AdapterLibrary(lib_path)
    assert lib.names() == ["run-gen1", "run-gen2"] and any("registered run-gen1, run-gen2" in line for line in lines)
    m = lib.verify("run-gen2")
    row = state.generations[2]
    assert m.figures["retention"] == row.evaluation.retention and m.figures["domain"] == row.evaluation.no_context.success
    assert m.sha256[:16] == row.adapter and m.data["lineage"] == row.lineage and m.recipe["name"] == LoopConfig.from_dict(tiny_cfg()).loop.recipe and m.recipe["ratio"] == 0.25
    assert len(m.examples) >= 4 and m.source == str(out / "adapters" / "gen2")
    # extending the run registers only the new generation
    run_loop(LoopConfig.from_dict(tiny_cfg(generations=3, library=str(lib_path))), out, log=lambda m: None)
    assert lib.names() == ["run-gen1", "run-gen2", "run-gen3"] and lib.verify("run-gen2").created == m.created
    base, _ = load_model(tiny_cfg()["training"]["base_model"], "cpu", log=lambda m: None)
    model = lib.load("run-gen3", base)
    assert model.active_adapter == "run-gen3"
    assert Router.from_library(lib, threshold=0.0).route(m.examples[0]).adapter in lib.names()
