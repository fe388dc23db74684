"""The pieces together: qx tasks -> agent outputs -> checked steps -> store -> replay context -> rows."""

from __future__ import annotations

from replaybank.episodic import Episode, EpisodeStore, demonstration
from replaybank.episodic.env import QxEnvironment, run_check
from replaybank.episodic.export import training_rows
from replaybank.episodic.qx import make_step
from replaybank.episodic.retrieval import Retriever


def test_a_generation_recorded_replayed_and_exported(tmp_path):
    env = QxEnvironment(levels=(1, 2))
    tasks = env.tasks(24, seed=0)
    with EpisodeStore(tmp_path / "ep.db") as store:
        store.add_many([demonstration(t, list(t.expected)) for t in tasks[:4]])
        retriever = Retriever.from_store(store)
        episodes = []
        for i, task in enumerate(tasks[4:]):
            context, replayed = retriever.context(task, k=2, system="Answer with one qx call.")
            assert len(replayed) == 2 and context[-1]["content"] == task.text
            # a stand-in agent: right on even tasks, the right tool with a wrong argument on odd ones
            output = task.expected[0] if i % 2 == 0 else task.expected[0].replace("=", "=x", 1)
            step = make_step(task.text, output)
            verdict = run_check(env, task, output)
            episodes.append(Episode(task, (step,), verdict, generation=1, adapter="base", seed=0,
                                    context=tuple(context), replayed=replayed))
        store.add_many(episodes)
        wins = store.episodes(generation=1, success=True)
        losses = store.episodes(generation=1, success=False)
        assert len(wins) == len(losses) == 10
        assert all(0.0 <= r.episode.verdict.reward < 1.0 for r in losses)
        assert all(r.episode.steps[0].result.startswith("ok ") for r in wins)
        assert all(r.episode.replayed and r.episode.context[0]["role"] == "system" for r in wins)
        rows = training_rows(store)
        assert len(rows) == 14 and all(r["response"] in {"\n".join(t.expected) for t in tasks} for r in rows)
        assert len(Retriever.from_store(store)) == 14
