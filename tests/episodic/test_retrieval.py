from __future__ import annotations

import numpy as np
import pytest

from replaybank.episodic import Episode, EpisodeStore, Step, Task, Verdict, demonstration
from replaybank.episodic.env import QxEnvironment
from replaybank.episodic.retrieval import BM25, Retriever, format_examples


def add(store, tid, text, out, ok=True, gen=1):
    t = Task(tid, text)
    return store.add(Episode(t, (Step(text, out),), Verdict(ok, float(ok)), generation=gen))


@pytest.fixture
def store(tmp_path):
    with EpisodeStore(tmp_path / "ep.db") as s:
        yield s


def test_bm25_matches_a_hand_computation():
    docs = ["red apples", "green pears", "red red cars"]
    idf = np.log(1 + (3 - 2 + 0.5) / (2 + 0.5))
    avg = 7 / 3
    expect0 = idf * 1 * 2.5 / (1 + 1.5 * (0.25 + 0.75 * 2 / avg))
    expect2 = idf * 2 * 2.5 / (2 + 1.5 * (0.25 + 0.75 * 3 / avg))
    assert BM25(docs).scores("red").tolist() == pytest.approx([expect0, 0.0, expect2])
    assert BM25([]).scores("red").size == 0


def test_the_obviously_similar_task_ranks_first(store):
    env = QxEnvironment(levels=(2,))
    for t in env.tasks(40, seed=0):
        store.add(demonstration(t, list(t.expected)))
    r = Retriever.from_store(store)
    hits = 0
    queries = env.tasks(40, split="heldout", seed=0)
    for q in queries:
        top = r.retrieve(q.text, k=1)[0]
        hits += top.episode.task.family == q.family
    # lexical similarity finds a task of the same tool (the phrasings of a tool share words)
    assert hits / len(queries) >= 0.95  # 40/40 at the time of writing


def test_only_successes_one_per_task_and_deterministic_ties(store):
    a = add(store, "a", "forecast for oslo", "A")
    add(store, "b", "forecast for oslo", "B-wrong", ok=False)
    c = add(store, "c", "forecast for oslo", "C")  # same text as a: a tie, broken by id
    add(store, "a", "forecast for oslo", "A2")  # a second success of task a, seen once
    add(store, "a", "forecast for oslo", "A2", gen=2)  # ... now seen twice: it represents task a
    add(store, "d", "add eggs to the list", "D")
    r = Retriever.from_store(store)
    assert len(r) == 3
    got = r.retrieve("forecast for oslo please", k=5, min_score=0.0)
    assert [g.episode.task.id for g in got] == ["c", "a"]  # d shares no token: not returned
    # equal scores: the lower episode id first; task a is represented by "A2" (added after c)
    assert got[0].id == c and got[1].episode.output == "A2" and a < c < got[1].id
    assert [g.episode.task.id for g in r.retrieve("forecast for oslo", k=5, exclude_task_ids=["a"])] == ["c", "d"]
    assert [g.episode.task.id for g in r.retrieve("forecast", k=3)] == ["c", "a", "d"]  # filled up to k
    assert r.retrieve("forecast", k=0) == [] and r.retrieve("zebra", k=3, min_score=0.0) == []
    assert [x.id for x in r.retrieve("forecast oslo", 2)] == [x.id for x in r.retrieve("forecast oslo", 2)]


def test_generations_filter_and_context_messages(store):
    add(store, "a", "send money to anna", "<<A>>", gen=1)
    b = add(store, "b", "send money to bob", "<<B>>", gen=2)
    r = Retriever.from_store(store, generations=[2])
    msgs, ids = r.context(Task("q", "send money to carl"), k=3, system="Use qx.")
    assert ids == (b,)
    assert msgs == [
        {"role": "system", "content": "Use qx."},
        {"role": "user", "content": "send money to bob"},
        {"role": "assistant", "content": "<<B>>"},
        {"role": "user", "content": "send money to carl"},
    ]
    # its own earlier answer is kept out of a task's context unless asked for
    assert Retriever.from_store(store).context(Task("b", "send money to bob"), k=1)[1] != (b,)
    assert Retriever.from_store(store).context(Task("b", "send money to bob"), k=1, exclude_same_task=False)[1] == (b,)
    assert format_examples([], "hi") == [{"role": "user", "content": "hi"}]


def test_a_replayed_multi_turn_episode_shows_its_tool_turns(tmp_path):
    from replaybank.episodic.turns import demonstrate

    env = QxEnvironment(levels=(4,))
    chain = env.tasks(1, seed=1)[0]
    with EpisodeStore(tmp_path / "ep.db") as store:
        store.add(demonstrate(QxEnvironment(), chain))
        messages, ids = Retriever.from_store(store).context(Task("q", "Add 2 tea to my list. Then send Jun the total."), k=1)
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant", "user"]
    assert messages[2]["content"].startswith("ok cart.add") and "total=" in messages[2]["content"]
