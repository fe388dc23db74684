"""``replaybank loop`` with a steered recipe: the consolidation's rehearsal share is
set by the recipe's replay controller, measured on held-out rows, recorded per generation, and the
controller's state survives between generations, so a resumed run steers as an uninterrupted one."""

from __future__ import annotations

import json

import pytest

from replaybank.llm.config.loop import LoopConfig
from replaybank.llm.loop.state import StateError
from replaybank.llm.recipes.loop import run_loop


def _cfg(tiny_cfg, generations: int, **recipe):
    data = tiny_cfg(generations=generations)
    source = data["loop"].pop("rehearsal")
    data["loop"].pop("rehearsal_ratio")
    data["loop"]["recipe"] = "steered"
    data["recipes"] = {"steered": {"source": source, "ratio": "auto", "max_share": 0.5, "floor": 0.1,
                                   "controller_params": {"lr": 3.0}, **recipe}}
    return LoopConfig.from_dict(data)


def test_steered_loop_records_its_mixture_and_resumes_like_an_uninterrupted_run(tiny_cfg, tmp_path):
    whole = run_loop(_cfg(tiny_cfg, 3), tmp_path / "whole", log=lambda m: None)
    for g in (1, 2, 3):
        traj = (whole.generations[g].train or {})["mixture"]
        assert isinstance(traj, list)
        assert traj[0]["step"] == 0 and traj[-1]["step"] == whole.generations[g].train_steps and len(traj) >= 2
        assert all(0.1 - 1e-6 <= sum(v for k, v in e["shares"].items() if k != "domain") <= 0.5 + 1e-6 for e in traj)
    controller = whole.controller or {}
    assert controller["name"] == "bandit" and isinstance(controller["t"], int) and controller["t"] > 3  # it learnt

    part = tmp_path / "part"
    run_loop(_cfg(tiny_cfg, 2), part, log=lambda m: None)
    resumed = run_loop(_cfg(tiny_cfg, 3), part, log=lambda m: None)
    assert (resumed.generations[3].train or {})["mixture"] == (whole.generations[3].train or {})["mixture"]
    assert resumed.controller == whole.controller

    # a saved controller of another configuration is refused, naming the field
    state = json.loads((part / "state.json").read_text())
    state["controller"]["config"]["max_share"] = 0.4
    (part / "state.json").write_text(json.dumps(state))
    with pytest.raises(StateError, match=r"field 'controller': .*max_share"):
        run_loop(_cfg(tiny_cfg, 4), part, log=lambda m: None)
