"""What a consolidation trains on and for how long: ``[loop] consolidate`` (every success, the
model's own with replayed episodes left out, or every success with the insights retrieved for its
task) and ``[loop] consolidation_steps`` (a fixed number of
optimizer steps whatever the rows); both refused when wrong, recorded in ``state.json`` only when
set, held fixed on resume and named in the report."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from replaybank.episodic import EpisodeStore, Task
from replaybank.episodic.env import QxEnvironment
from replaybank.episodic.experience import Insight
from replaybank.episodic.turns import demonstrate
from replaybank.llm.config import ConfigError, Training
from replaybank.llm.config.loop import TRAINING_DEFAULTS, LoopConfig
from replaybank.llm.loop.act import to_episode
from replaybank.llm.loop.consolidate import consolidate, domain_rows
from replaybank.llm.loop.context import LESSONS_HEAD, LevelRetriever, level_prompts
from replaybank.llm.loop.replay import learn_workflows, replay_tasks
from replaybank.llm.loop.report import group_key
from replaybank.llm.loop.state import StateError, check_same_run, new_state
from replaybank.llm.recipes.loop import run_loop

from .conftest import to_toml  # type: ignore[import-not-found]
from .scripted import chain  # type: ignore[import-not-found]

ENV = QxEnvironment(levels=(4,))
DEMO = chain(3, "eggs", "Anna", 96)
REPLAYED = chain(2, "olive oil", "Kemi", 2198)
OWN = Task("own", "Set a timer for 5 minutes for the tea.", "timer.arm", 2, ("<<qx timer.arm; dur=300s; tag=tea>>",))


def test_bad_values_are_refused_naming_the_file_line_and_key(tmp_path):
    path = tmp_path / "loop.toml"
    path.write_text('[loop]\ngenerations = 2\nconsolidate = "everything"\n', encoding="utf-8")
    with pytest.raises(ConfigError, match=rf"{path}:3: \[loop\] consolidate = 'everything': expected one of 'successes', 'own'"):
        LoopConfig.from_toml(path)
    path.write_text("[loop]\nconsolidation_steps = -1\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=rf"{path}:2: \[loop\] consolidation_steps = -1"):
        LoopConfig.from_toml(path)
    # a replay controller spaces its evaluation points over the epochs' steps: refused with a fixed budget
    path.write_text('[loop]\nrecipe = "steered"\nconsolidation_steps = 8\n\n'
                    '[recipes.steered]\nsource = ["self"]\nratio = 0.3\ncontroller = "bandit"\n', encoding="utf-8")
    with pytest.raises(ConfigError, match=rf"{path}:3: \[loop\] consolidation_steps = 8 with \[loop\] recipe = 'steered'"):
        LoopConfig.from_toml(path)
    path.write_text('[loop]\nreflect = true\nconsolidate = "insights"\n', encoding="utf-8")
    with pytest.raises(ConfigError, match=rf"{path}:3: \[loop\] consolidate = 'insights' .* \[loop\] retrieve = \['episodes'\] shows none"):
        LoopConfig.from_toml(path)
    assert LoopConfig.from_dict({"loop": {"consolidate": "insights", "retrieve": ["episodes", "insights"]}}).loop.consolidate == "insights"
    # "own" without replay is accepted: nothing is replayed, so it trains what "successes" trains
    assert LoopConfig.from_dict({"loop": {"consolidate": "own"}}).loop.consolidate == "own"


def test_the_keys_are_recorded_only_when_set_and_a_resume_with_another_value_is_refused(tmp_path):
    default = LoopConfig()
    assert "consolidate" not in default.saved_dict()["loop"] and "consolidation_steps" not in default.saved_dict()["loop"]
    assert {k: v for k, v in default.to_dict()["loop"].items() if k not in ("consolidate", "consolidation_steps")} \
        == default.saved_dict()["loop"]  # every other key as before
    own = LoopConfig.from_dict({"loop": {"consolidate": "own", "consolidation_steps": 12}})
    assert own.saved_dict()["loop"]["consolidate"] == "own" and own.saved_dict()["loop"]["consolidation_steps"] == 12
    assert "consolidation_steps = 12" in own.to_toml() and LoopConfig.from_dict(own.to_dict()).to_dict() == own.to_dict()

    check_same_run(tmp_path, new_state(own.saved_dict()), own)
    check_same_run(tmp_path, new_state(default.saved_dict()), default)
    with pytest.raises(StateError, match=r"\[loop\] consolidation_steps = 12, not 0"):
        check_same_run(tmp_path, new_state(own.saved_dict()), own.with_(consolidation_steps=0))
    with pytest.raises(StateError, match=r"\[loop\] consolidate = 'successes', not 'own'"):
        check_same_run(tmp_path, new_state(default.saved_dict()), default.with_(consolidate="own"))
    with pytest.raises(StateError, match=r"\[loop\] consolidation_steps = 0, not 5"):
        check_same_run(tmp_path, new_state(default.saved_dict()), default.with_(consolidation_steps=5))


@pytest.fixture
def store(tmp_path):
    """A store with a demonstration, the model's own success and a replayed workflow's success (generation 1)."""
    with EpisodeStore(tmp_path / "ep.db") as s:
        s.add(demonstrate(ENV, DEMO))
        learn_workflows(s, generation=None)
        replays = replay_tasks(ENV, s, [REPLAYED])
        s.add_many([to_episode(a, generation=1, adapter="a", seed=0, started_at=0.0) for a in replays.attempts.values()])
        own = s.add(dataclasses.replace(demonstrate(ENV, OWN), source="agent", generation=1))
        s.add_insight(Insight("timer.arm failure: dur", "Set a timer for the tea -> wrong dur",
                              "Write the timer duration in seconds.", "failure", (own,), generation=1))
        assert [r.episode.task.id for r in s.episodes(source="replayed")] == [REPLAYED.id]
        yield s


def _texts(rows, tok) -> list[str]:
    return [tok.decode(ids) for ids, _ in rows.rows(np.arange(len(rows)))]


def test_own_leaves_the_replayed_episodes_out_of_the_rows_and_successes_keeps_them(store, small_tok):
    every, n_every = domain_rows(store, small_tok, [1], 128, "Use qx.")
    own, n_own = domain_rows(store, small_tok, [1], 128, "Use qx.", consolidate="own")
    assert (n_every, n_own) == (3, 2) and (len(every), len(own)) == (3, 2)
    replayed_text = REPLAYED.expected[1]  # the replayed episode's second call
    assert sum(replayed_text in t for t in _texts(every, small_tok)) == 1
    assert not any(replayed_text in t or REPLAYED.text in t for t in _texts(own, small_tok))
    for text in (DEMO.text, OWN.text, OWN.expected[0]):  # the demonstration and the model's own success stay
        assert sum(text in t for t in _texts(own, small_tok)) == 1


def _tiny(model_dir):
    from replaybank.llm.data.rows import encode_pair, token_rows
    from replaybank.llm.model import load_model
    from replaybank.llm.train import add_lora

    cfg = dataclasses.replace(Training(**TRAINING_DEFAULTS), base_model=str(model_dir), lora_rank=2, lora_alpha=4,
                              batch_size=4, num_train_epochs=1, max_seq_length=48, learning_rate=1e-2, seed=3)
    base, tok = load_model(str(model_dir))
    model = add_lora(base, cfg)
    start = {k: v.detach().clone() for k, v in model.state_dict().items() if "lora_" in k}

    def rows(n: int):
        return token_rows([encode_pair(tok, f"Add {i} tea.", f"<<qx cart.add; sku=tea; qty={i}>>", 48) for i in range(n)])

    return model, tok, cfg, start, rows


def test_a_fixed_budget_trains_exactly_that_many_steps_whatever_the_rows(tiny_model_dir):
    import torch

    model, tok, cfg, start, rows = _tiny(tiny_model_dir)
    pad = tok.pad_token_id
    few, many = rows(2), rows(24)  # 1 and 6 batches of 4 per pass
    assert consolidate(model, pad, few, None, None, cfg, desc="t").steps == 1
    model.load_state_dict(start, strict=False)
    assert consolidate(model, pad, many, None, None, cfg, desc="t").steps == 6
    after_epochs = {k: v.detach().clone() for k, v in model.state_dict().items() if "lora_" in k}
    for domain in (few, many):
        model.load_state_dict(start, strict=False)
        log = consolidate(model, pad, domain, None, None, cfg, desc="t", steps=3)
        assert log.steps == 3 and log.rows == 3 * min(4, len(domain))
    # the passes draw the same batches in the same order: the epochs' own step count is the same training
    model.load_state_dict(start, strict=False)
    assert consolidate(model, pad, many, None, None, cfg, desc="t", steps=6).steps == 6
    again = {k: v.detach().clone() for k, v in model.state_dict().items() if "lora_" in k}
    assert all(torch.equal(after_epochs[k], again[k]) for k in again)


def test_the_loop_trains_the_fixed_steps_every_generation_records_them_and_names_them(tiny_cfg, tmp_path):
    data = tiny_cfg(generations=2, consolidation_steps=3, consolidate="own")
    out = tmp_path / "run"
    lines: list[str] = []
    state = run_loop(LoopConfig.from_dict(data), out, log=lines.append)
    trained = [r for r in state.generations if r.generation > 0]
    assert [r.train_steps for r in trained] == [3, 3]
    saved = json.loads((out / "state.json").read_text(encoding="utf-8"))
    assert saved["config"]["loop"]["consolidation_steps"] == 3 and saved["config"]["loop"]["consolidate"] == "own"
    assert [g["train"]["steps"] for g in saved["generations"][1:]] == [3, 3]
    assert any("consolidating" in line and "own successes" in line and "3 steps" in line for line in lines)
    assert group_key(state).endswith(", consolidate own, 3 steps per consolidation")
    (tmp_path / "cfg.toml").write_text(to_toml({**data, "loop": {**data["loop"], "consolidation_steps": 4}}), encoding="utf-8")
    with pytest.raises(StateError, match=r"\[loop\] consolidation_steps = 3, not 4"):
        run_loop(LoopConfig.from_toml(tmp_path / "cfg.toml"), out, log=lambda m: None)


def test_insights_puts_in_each_row_the_insights_its_acting_prompt_shows(store, small_tok):
    levels, system = ["episodes", "insights"], "Use qx."
    plain, _ = domain_rows(store, small_tok, [1], 256, system)
    rows, n = domain_rows(store, small_tok, [1], 256, system, consolidate="insights", levels=levels, k=2, budget=0)
    assert n == 3 and not any(LESSONS_HEAD in t for t in _texts(plain, small_tok))
    retriever = LevelRetriever.from_store(store, levels)
    heads = {t.text: level_prompts([t], retriever, 2, system=system, budget=0)[0][0][0][0]["content"]
             for t in (DEMO, REPLAYED, OWN)}  # the system message of each task's acting prompt
    assert all(h.startswith(system) for h in heads.values())
    assert "Write the timer duration in seconds." in heads[OWN.text]  # the acting prompt shows the lesson
    texts = _texts(rows, small_tok)
    for text, head in heads.items():
        [row] = [t for t in texts if text in t]
        assert f"system\n{head}<|im_end|>" in row  # the row's system message is the acting prompt's, whole
    # within the acting prompt's budget: an insight that does not fit is left out, as when acting
    tight, _ = domain_rows(store, small_tok, [1], 256, system, consolidate="insights", levels=["insights"], k=2, budget=10)
    assert _texts(tight, small_tok) == _texts(plain, small_tok)


def test_the_levels_benchmark_names_the_two_arms_that_separate_the_level_from_the_budget():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[3] / "benchmarks" / "loop_levels.py"
    spec = importlib.util.spec_from_file_location("loop_levels", path)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert list(bench.ARMS) == ["raw", "levels"]  # the default arms, as measured
    base = LoopConfig()
    own = base.with_(**bench.arm_keys("levels-own", 12)).loop
    budget = base.with_(**bench.arm_keys("levels-budget", 7)).loop
    levels = base.with_(**bench.arm_keys("levels", 7)).loop
    assert (own.consolidate, own.consolidation_steps, own.replay_workflows) == ("own", 0, True)
    assert (budget.consolidate, budget.consolidation_steps) == ("successes", 7)
    assert dataclasses.replace(own, consolidate="successes") == levels == dataclasses.replace(budget, consolidation_steps=0)
    with pytest.raises(SystemExit, match="unknown arm 'levels-x'"):
        bench.arm_keys("levels-x", 12)
