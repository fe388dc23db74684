"""The sections every LLM job shares are declared once (config/schema.py), and sharing them changed
no config's values.

``config_values_770bb88.json`` holds every shipped config resolved by commit 770bb88, before the
loop's ``[evaluation]`` and ``[data]`` keys moved out of ``[loop]``: the two jobs' defaults (the
loop's are the published tables' config), each ``examples/*.toml`` and
``benchmarks/results/loop_config.toml``, as ``{"section.key": value}`` plus the resolved
recipes. Each must resolve to the same values today, read through the keys' new sections.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest

import replaybank.hf
from replaybank.llm.config import Config, ConfigError
from replaybank.llm.config.loop import Loop, LoopConfig
from replaybank.llm.config.recipe import CONTROLLER_KEYS, TARGETED_KEYS, Recipe
from replaybank.llm.config.schema import Data, Evaluation, SharedData, SharedEvaluation, Training
from replaybank.llm.loop.state import StateError, check_same_run, new_state

ROOT = Path(__file__).resolve().parents[3]
BEFORE = json.loads((Path(__file__).parent / "config_values_770bb88.json").read_text(encoding="utf-8"))
# where the loop's keys are now (written out here, not taken from config/loop.py's table)
NOW_AT = {
    "loop.max_new_tokens": "evaluation.max_new_tokens",
    "loop.generation_batch_size": "evaluation.generation_batch_size",
    "loop.suite_per_family": "evaluation.suite_per_family",
    "loop.self_rows": "data.self_rows",
    "loop.self_open_rows": "data.self_open_rows",
}


def _flat(data: dict[str, Any]) -> dict[str, Any]:
    return {f"{section}.{key}": value for section, values in data.items() for key, value in values.items()}


def _resolved(name: str) -> tuple[str, dict[str, Any]]:
    """``("run" | "loop", {"section.key": value, ...})`` of a config as read today."""
    if name in ("<run defaults>", "<loop defaults>"):
        job, cfg = ("run", Config()) if name == "<run defaults>" else ("loop", LoopConfig())
    else:
        path = ROOT / name
        job = "loop" if name.endswith("loop_config.toml") else "run"
        cfg = LoopConfig.from_toml(path) if job == "loop" else Config.from_toml(path)
    out = _flat(cfg.to_dict())
    if isinstance(cfg, Config):  # the built-in peer arms came after the snapshot
        out.update({f"arm.{n}": _recipe(s) for n, s in cfg.arm_specs().items() if n not in ADDED_ARMS})
    else:
        out["recipe"] = _recipe(cfg.recipe) if cfg.recipe else None
    return job, out


def _recipe(spec: Recipe) -> dict[str, Any]:
    """Every value of a recipe; the replay controller's keys (added after the snapshot) only
    when it has one, and none of the shipped configs has; ``fresh_adapter`` (after the
    snapshot) only when set, and none of the shipped configs sets it; ``peer``, ``project`` and the
    keys of forgetting-targeted sampling and ``domain`` (after the snapshot) likewise."""
    out = dataclasses.asdict(spec)
    assert out["controller"] == "none" and out.pop("fresh_adapter") is False and out.pop("peer") == "none"
    assert out.pop("project") == "none" and out["sampling"] == "uniform" and out.pop("domain") is True
    return {k: v for k, v in out.items() if k not in CONTROLLER_KEYS and k not in TARGETED_KEYS}


#: examples written after the snapshot: they had no values to keep
ADDED_EXAMPLES = {"examples/peers.toml", "examples/choose.toml"}
#: built-in recipes and arms added after the snapshot (the peer methods, the routed arm,
#: forgetting-targeted rehearsal, A-GEM: docs/llm.md)
ADDED_ARMS = {"peer-osf", "peer-corda", "peer-intruder", "peer-attn-lowrank", "peer-sdft", "routed",
              "rehearsal-targeted", "rehearsal-agem", "control", "self-distill-onpolicy"}


def test_the_snapshot_covers_every_shipped_config():
    shipped = {f"examples/{p.name}" for p in (ROOT / "examples").glob("*.toml")} - ADDED_EXAMPLES
    assert shipped <= set(BEFORE), f"examples not in the snapshot: {sorted(shipped - set(BEFORE))}"
    assert {"<run defaults>", "<loop defaults>", "benchmarks/results/loop_config.toml"} <= set(BEFORE)


#: keys added after the snapshot, per job, at the default that keeps a config's behaviour as it was
ADDED_SINCE = {
    # register each loop generation in an adapter library (off); replay stored workflows (off);
    # seed the store with a person's demonstrations, private fields redacted (none); retrieve
    # episodes only, no character budget, no reflection, no voting; consolidate every success for
    # the steps the rows and epochs give
    "loop": {"loop.library": "", "loop.replay_workflows": False,
             "loop.demos_file": "", "loop.private_fields": [],
             "loop.retrieve": ["episodes"], "loop.context_chars": 0, "loop.reflect": False,
             "loop.reflection_max_tokens": 48, "loop.vote_groups": 0,
             "loop.consolidate": "successes", "loop.consolidation_steps": 0},
    # the suite's validation split, declared for choosers; no job reads it yet, so no run changes
    "run": {"data.validation_suite": "builtin:validation",
            # not "off": auto trains a seed's arms in one-thread processes, one per thread chosen;
            # each arm's figures are then those of one thread, whatever the machine's load
            "evaluation.arm_processes": 0},
}
#: values changed on purpose after the snapshot, per config, each with its reason
#: the interference probe inside `replaybank run` is opt-in: its figures have not predicted the
#: measured forgetting (docs/llm.md) and it sat on the main job's critical path
PROBE_OFF = {"evaluation.probe_sources": False}
CHANGED_SINCE = {
    # rehearsal-self and rehearsal-corpus are not default arms (the 15-minute budget; routed, the
    # arm that keeps 90% of every family over five seeds, took rehearsal-corpus's place); both run by name
    "<run defaults>": {"evaluation.arms": ["base", "naive", "self-distill", "routed"], **PROBE_OFF},
    "examples/reference_7b.toml": PROBE_OFF,
    "examples/sequence.toml": PROBE_OFF,
}


@pytest.mark.parametrize("name", sorted(BEFORE))
def test_every_shipped_config_resolves_to_the_values_it_had(name):
    job, now = _resolved(name)
    before = BEFORE[name]
    expected = {(NOW_AT.get(k, k) if job == "loop" else k): v for k, v in before.items()}
    expected |= ADDED_SINCE[job]
    expected |= CHANGED_SINCE.get(name, {})
    assert now == expected  # nothing lost, no value changed; added keys only at their "off" default


def test_the_loop_reads_the_main_jobs_sections_at_its_own_defaults():
    loop, run = LoopConfig(), Config()
    assert type(loop.evaluation) is SharedEvaluation and isinstance(run.evaluation, SharedEvaluation)
    assert type(loop.data) is SharedData and isinstance(run.data, SharedData)
    # the published loop defaults differ from the main job's for these, and only these
    ev = {f.name: (getattr(loop.evaluation, f.name), getattr(run.evaluation, f.name)) for f in fields(SharedEvaluation)}
    assert ev == {"max_new_tokens": (40, 48), "generation_batch_size": (32, 64), "suite_per_family": (16, 0)}
    assert dataclasses.asdict(loop.data) == {"self_rows": 96, "self_open_rows": True}


def test_no_key_is_declared_twice():
    # the [loop] section holds the loop's own keys only: none of a shared section's (the loop's seed
    # also seeds training: run_loop sets [training] seed from it)
    shared = {f.name for klass in (Training, SharedEvaluation, SharedData, Recipe) for f in fields(klass)}
    assert {f.name for f in fields(Loop)} & shared == {"seed"}
    # the run's sections extend the shared ones; none re-declares a shared key
    for run_section, base in ((Evaluation, SharedEvaluation), (Data, SharedData)):
        own = [f.name for f in fields(run_section)][len(fields(base)):]
        assert not set(own) & {f.name for f in fields(base)}
        assert [f.name for f in fields(run_section)][:len(fields(base))] == [f.name for f in fields(base)]


def test_the_old_loop_spelling_is_read_into_the_section(tmp_path):
    path = tmp_path / "loop.toml"
    path.write_text("[loop]\nseed = 2\nsuite_per_family = 8\nself_rows = 12\n", encoding="utf-8")
    cfg = LoopConfig.from_toml(path)
    assert (cfg.evaluation.suite_per_family, cfg.data.self_rows, cfg.loop.seed) == (8, 12, 2)
    assert cfg == LoopConfig.from_dict({"loop": {"seed": 2}, "evaluation": {"suite_per_family": 8},
                                        "data": {"self_rows": 12}}, source=str(path), text=path.read_text())
    # the CLI's and the grid's with_() take them too
    assert LoopConfig().with_(max_new_tokens=20).evaluation.max_new_tokens == 20


def test_the_loops_shared_sections_are_checked_where_the_key_is_written(tmp_path):
    path = tmp_path / "loop.toml"
    path.write_text("[loop]\nseed = 1\nsuite_per_family = 8\n\n[evaluation]\nsuite_per_family = 4\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"loop.toml:6: \[evaluation\] suite_per_family and \[loop\] suite_per_family \(line 3\) are one key"):
        LoopConfig.from_toml(path)
    path.write_text("[loop]\nseed = 1\nmax_new_tokens = 0\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"loop.toml:3: \[loop\] max_new_tokens = 0: expected a value >= 1 and <= 65536"):
        LoopConfig.from_toml(path)
    path.write_text("[evaluation]\ngeneration_batch_size = -1\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"loop.toml:2: \[evaluation\] generation_batch_size = -1: expected a value >= 1 and <= 65536"):
        LoopConfig.from_toml(path)
    path.write_text("[evaluation]\narms = [\"naive\"]\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"loop.toml:2: \[evaluation\] arms is a key of `replaybank run`; the loop's "
                                          r"\[evaluation\] reads max_new_tokens, generation_batch_size, suite_per_family"):
        LoopConfig.from_toml(path)
    path.write_text("[data]\nself_rowz = 3\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"unknown key \[data\] self_rowz; did you mean 'self_rows'"):
        LoopConfig.from_toml(path)


def test_the_printed_loop_config_writes_the_sections_and_reads_back(tmp_path):
    cfg = LoopConfig.from_dict({"loop": {"suite_per_family": 3, "self_open_rows": False}})
    text = cfg.to_toml()
    assert "\n[evaluation]\n" in text and "\n[data]\n" in text
    assert "suite_per_family" not in text.split("\n[recipes.")[0]  # not under [loop]
    path = tmp_path / "printed.toml"
    path.write_text(text, encoding="utf-8")
    again = LoopConfig.from_toml(path)
    assert again.to_dict() == cfg.to_dict() and again.evaluation.suite_per_family == 3


def test_a_run_folder_saved_with_the_old_spelling_resumes(tmp_path):
    # a state.json written before the sections were shared holds every key under [loop]
    saved = LoopConfig().to_dict()
    old = {"loop": {**saved["loop"], **saved.pop("evaluation"), **saved.pop("data")}, **{k: v for k, v in saved.items() if k != "loop"}}
    assert "evaluation" not in old and old["loop"]["suite_per_family"] == 16
    state = new_state(old)
    check_same_run(tmp_path, state, LoopConfig())  # the same run: resumes
    with pytest.raises(StateError, match=r"holds a loop run with \[evaluation\] suite_per_family = 16, not 8"):
        check_same_run(tmp_path, state, LoopConfig().with_(suite_per_family=8))
    with pytest.raises(StateError, match=r"holds a loop run with \[data\] self_rows = 96, not 5"):
        check_same_run(tmp_path, state, LoopConfig.from_dict({"data": {"self_rows": 5}}))


def test_hf_reads_a_recipe_from_either_jobs_config(tmp_path):
    table = '[recipes.mine]\nsource = "self"\nratio = 0.3\nkl_to_base = 2.0\nrehearsal_ce = false\n'
    run_toml = tmp_path / "run.toml"
    run_toml.write_text('[evaluation]\narms = ["base", "mine"]\n\n' + table, encoding="utf-8")
    loop_toml = tmp_path / "loop.toml"
    loop_toml.write_text('[loop]\nrecipe = "mine"\n\n' + table, encoding="utf-8")
    r = replaybank.hf.recipe("mine", run_toml)
    assert (r.source, r.ratio, r.kl_to_base, r.rehearsal_ce) == (["self"], 0.3, 2.0, False)
    assert r == Config.from_toml(run_toml).arm_specs()["mine"] == LoopConfig.from_toml(loop_toml).recipe
    assert replaybank.hf.recipe("mine", loop_toml) == r
