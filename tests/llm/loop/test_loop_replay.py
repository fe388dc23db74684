"""Record-and-replay in the loop: workflows learned from successes, replayed without the model when
every check passes, recorded as ``replayed`` and checked; bad experiences refused and counted; model
calls counted per arm; and nothing of it when ``replay_workflows`` is off."""

from __future__ import annotations

import dataclasses
import sqlite3
import sys

import pytest

from replaybank.episodic import EpisodeStore, Task
from replaybank.episodic.env import QxEnvironment
from replaybank.episodic.experience import Arg, CallTemplate
from replaybank.episodic.turns import demonstrate
from replaybank.llm.config.loop import LoopConfig
from replaybank.llm.loop.act import SYSTEM, attempt, build_prompts, summarise, to_episode
from replaybank.llm.loop.replay import learn_workflows, replay_tasks
from replaybank.llm.loop.report import write_report

from .scripted import Scripted, chain, oracle, seeded  # type: ignore[import-not-found]

ENV = QxEnvironment(levels=(4,))
DEMO = chain(3, "eggs", "Anna", 96)
NEW = [chain(2, "olive oil", "Kemi", 2198), chain(5, "tea", "Lars", 2295)]
OTHER = Task("o", "Set a timer for 5 minutes for the tea.", "timer.arm", 2, ("<<qx timer.arm; dur=300s; tag=tea>>",))


@pytest.fixture
def store(tmp_path):
    with EpisodeStore(tmp_path / "ep.db") as s:
        s.add(demonstrate(ENV, DEMO))
        yield s


def test_workflows_are_learned_from_demonstrations_with_provenance(store):
    learned = learn_workflows(store, generation=None)
    assert learned.stored == 1 and learned.not_abstracted == 0
    [wf] = store.workflows()
    assert wf.workflow.episodes == (store.episodes(source="demo")[0].id,)
    assert learn_workflows(store, generation=None).stored == 1 and len(store.workflows()) == 1  # idempotent


def test_a_task_a_workflow_serves_is_replayed_and_checked_the_others_go_to_the_model(store):
    learn_workflows(store, generation=None)
    replays = replay_tasks(ENV, store, [*NEW, OTHER, NEW[0]])
    assert set(replays.attempts) == {t.id for t in NEW}
    for t in NEW:
        a = replays.attempts[t.id]
        assert a.source == "replayed" and a.model_calls == 0 and a.n_tokens == 0
        assert a.verdict.success and a.output.splitlines() == list(t.expected)
        assert a.steps[1].prompt == a.steps[0].result  # the chain read the total from the first result
    assert replays.counts().to_json() == {"tasks": 3, "replayed": 2, "replayed_success": 2, "no_candidate": 1, "fell_back": 0,
                                 "refused": {"malformed": 0, "unknown_tool": 0, "unbound": 0, "bad_type": 0}}
    episodes = [to_episode(a, generation=1, adapter="a", seed=0, started_at=0.0) for a in replays.attempts.values()]
    ids = store.add_many(episodes)
    back = store.episodes(source="replayed")
    assert [r.id for r in back] == ids and all(r.episode.verdict.success for r in back)
    assert all(r.episode.replayed == store.workflows()[0].workflow.episodes for r in back)  # provenance
    store.verify()
    assert learn_workflows(store, generation=1).stored == 0  # a replay is not learned from again


def test_bad_experiences_in_the_store_are_refused_counted_and_fall_back(store):
    learn_workflows(store, generation=None)
    good = store.workflows()[0].workflow
    demo_id = good.episodes[0]
    pay = good.calls[1]
    total = next(s for s in good.slots if s.source == "result")
    bad = [
        dataclasses.replace(good, calls=(good.calls[0], CallTemplate("timer.arm", pay.args))),  # wrong tool
        dataclasses.replace(good, calls=(good.calls[0], CallTemplate("purse.pay", pay.args))),  # not in the API
        dataclasses.replace(good, calls=(good.calls[0], CallTemplate("purse.send", (pay.args[0], Arg("cents", value="96")))),
                            slots=tuple(s for s in good.slots if s is not total)),  # a value of another task
    ]
    for wf in bad:
        store.add_workflow(dataclasses.replace(wf, episodes=(demo_id,)))
    con = sqlite3.connect(store.path)  # the good one removed: every candidate is a bad one
    con.execute("DELETE FROM experiences WHERE fingerprint = ?", (good.fingerprint,))
    con.commit()
    con.close()
    assert len(store.workflows()) == 3
    replays = replay_tasks(ENV, store, NEW)
    assert replays.attempts == {}
    assert replays.fell_back == 2 and replays.no_candidate == 0
    assert replays.refused == {"malformed": 0, "unknown_tool": 2, "unbound": 2, "bad_type": 2}


def test_model_calls_are_the_generation_turns_spent(smol_tok):
    tasks = [*NEW, OTHER]
    gen = Scripted(oracle({t.text: t.expected for t in tasks}))
    attempts, _ = attempt(None, smol_tok, ENV, tasks, build_prompts(tasks, None, 0, system=SYSTEM),
                          max_new_tokens=40, batch_size=8, max_turns=4, generate_fn=gen)
    assert [a.model_calls for a in attempts] == [2, 2, 1]  # a chain: two turns; a timer: one
    assert sum(len(c["texts"]) for c in gen.calls) == 5  # every counted call was a generation
    s = summarise(attempts)
    assert s.model_calls == 5 and s.model_calls_per_solved == 5 / 3
    failed = attempt(None, smol_tok, ENV, [OTHER], build_prompts([OTHER], None, 0, system=SYSTEM),
                     max_new_tokens=40, batch_size=8, generate_fn=Scripted(lambda conv, seed: "no"))[0]
    assert summarise(failed).model_calls == 1 and summarise(failed).model_calls_per_solved is None


def _run(cfg, out, monkeypatch):
    import replaybank.llm.eval.decode as decode
    from replaybank.llm.recipes.loop import run_loop

    real = decode.generate_detailed
    scripted = Scripted(seeded, fallback=real)
    monkeypatch.setattr(decode, "generate_detailed", scripted)
    try:
        return run_loop(cfg, out, log=lambda _: None), scripted
    finally:
        monkeypatch.setattr(decode, "generate_detailed", real)
        for module in list(sys.modules.values()):
            if getattr(module, "generate_detailed", None) is scripted:
                module.generate_detailed = real


def test_the_loop_replays_records_and_counts_model_calls(tiny_cfg, tmp_path, monkeypatch):
    data = tiny_cfg(generations=2, levels=[4], max_new_tokens=40, tasks_per_generation=6, eval_tasks=6,
                    replay_workflows=True)
    state, _ = _run(LoopConfig.from_dict(data), tmp_path / "on", monkeypatch)
    with EpisodeStore(tmp_path / "on" / "store.db", readonly=True) as s:
        s.verify()
        replayed = s.episodes(source="replayed")
        assert replayed, "no task was replayed"
        for r in replayed:  # each one re-checked by the environment's checker, as recorded
            assert r.episode.verdict == ENV.check(r.episode.task, r.episode.output)
            assert r.episode.replayed and all(s.get(e) for e in r.episode.replayed)  # drawn from stored episodes
        workflows = s.workflows()
        assert workflows and all(w.workflow.episodes for w in workflows)
        agent_successes = {r.id for r in s.episodes(source="agent", success=True)}
        assert agent_successes & {e for w in workflows for e in w.workflow.episodes}  # learned from the agent too
    for row in (r.to_json() for r in state.generations[1:]):  # the rows as state.json holds them
        act = row["act"]
        assert act["replay"]["replayed"] >= 1 and set(act["replay"]["refused"]) == {
            "malformed", "unknown_tool", "unbound", "bad_type"}
        solved = act["success"] * act["n"]
        assert isinstance(act["model_calls"], int)
        assert act["model_calls_per_solved"] is None or act["model_calls_per_solved"] == act["model_calls"] / solved
        for arm in ("no_context", "context", "validation", "replay"):
            assert "model_calls_per_solved" in row[arm]
        assert row["replay"]["model_calls"] < row["context"]["model_calls"]  # replays spent no model call
    report = write_report(tmp_path)
    assert "Model calls (generation turns) per solved task" in report.read_text()
    assert "acted tasks replayed" in report.read_text()


def test_with_replay_off_the_loop_learns_and_replays_nothing(tiny_cfg, tmp_path, monkeypatch):
    data = tiny_cfg(generations=1, levels=[4], max_new_tokens=40, tasks_per_generation=6, eval_tasks=6)
    state, scripted = _run(LoopConfig.from_dict(data), tmp_path / "off", monkeypatch)
    with EpisodeStore(tmp_path / "off" / "store.db", readonly=True) as s:
        assert s.workflows() == [] and s.episodes(source="replayed") == []
    row = state.generations[1].to_json()
    assert "replay" not in row and "replay" not in row["act"]
    assert row["act"]["model_calls"] == sum(len(c["texts"]) for c in scripted.calls if c["desc"].startswith("gen 1 act"))
