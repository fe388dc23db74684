"""Reflection on failure, retrieval by level and group self-consistency, with a scripted agent.

The agent (:mod:`.scripted`) answers qx requests by a policy and reflection prompts with a
lesson, so the tests pin what is stored, what the next prompt shows, the token budget of a
reflection, what each level of retrieval returns, and what the vote picks and costs."""

from __future__ import annotations

import json
import re

import pytest

from replaybank.episodic import EpisodeStore, Task, Verdict
from replaybank.episodic.env import QxEnvironment
from replaybank.episodic.experience import Arg, CallTemplate, Insight, Slot, StoredInsight, Workflow
from replaybank.episodic.turns import demonstrate
from replaybank.llm.config import ConfigError
from replaybank.llm.config.loop import LoopConfig
from replaybank.llm.loop.act import SYSTEM, attempt, build_prompts, to_episode
from replaybank.llm.loop.context import (
    LESSONS_HEAD,
    WORKFLOWS_HEAD,
    LevelRetriever,
    Recall,
    add_lessons,
    render,
)
from replaybank.llm.loop.reflect import (
    REFLECT_SYSTEM,
    failed_episodes,
    fallback_lesson,
    reflect,
    retry_pass,
    store_reflections,
    unreflected,
)
from replaybank.llm.loop.vote import majority, split_groups, vote_attempts

from .scripted import Scripted, request_and_turn, seeded  # type: ignore[import-not-found]

LESSON = "Write qty as the number the request gives, no more."


def reflecting(agent, lesson=LESSON):
    """``agent`` for qx requests; ``lesson`` for a reflection prompt (a callable gets the feedback)."""

    def policy(conv, seed):
        if conv and conv[0] == ("system", REFLECT_SYSTEM):
            return lesson(conv[1][1]) if callable(lesson) else lesson
        return agent(conv, seed)

    return policy


def listens(conv, seed):
    """Adds one too many items, unless a lesson in its system message says to copy the number."""
    out = seeded(conv, 1)  # seed 1: qty is one too many
    if conv and conv[0][0] == "system" and "Write qty as the number" in conv[0][1]:
        out = seeded(conv, 0)
    return out


@pytest.fixture(scope="module")
def carts() -> list[Task]:
    tasks = [t for t in QxEnvironment(levels=(1, 2)).tasks(60, seed=4) if t.family == "cart.add"]
    assert len(tasks) >= 3
    return tasks[:3]


def acted(tok, tasks, policy, store, *, seed=1):
    env = QxEnvironment()
    attempts, _ = attempt(None, tok, env, tasks, build_prompts(tasks, None, 0, system=SYSTEM), max_new_tokens=40,
                          batch_size=8, seed=seed, generate_fn=Scripted(policy))
    ids = store.add_many([to_episode(a, generation=1, adapter="x", seed=seed, started_at=0.0) for a in attempts])
    return attempts, ids


def test_a_failure_becomes_an_insight_linked_to_its_episode(smol_tok, carts, tmp_path):
    with EpisodeStore(tmp_path / "ep.db") as store:
        attempts, ids = acted(smol_tok, carts, listens, store)
        assert not any(a.verdict.success for a in attempts)
        failed = failed_episodes(attempts + attempts[:1], ids + ids[:1])  # a repeated failure is reflected on once
        assert [eid for eid, _ in failed] == ids
        gen = Scripted(reflecting(listens))
        stored, counts = store_reflections(
            None, smol_tok, store, [(eid, a.task, a.output, a.verdict, a.steps) for eid, a in failed], generation=1,
            max_tokens=32, batch_size=8, generate_fn=gen)
        assert counts.n == 3 and counts.fallback == counts.cut == 0 and counts.model_calls == 3
        for eid, ins in zip(ids, stored, strict=True):
            (back,) = store.insights(episode=eid)
            assert back.id == ins.id and back.insight.episodes == (eid,) and back.insight.generation == 1
            assert back.insight.outcome == "failure" and back.insight.content == LESSON
            assert back.insight.title == "cart.add failure: cart.add.qty"
        # the reflection prompt carries the checker's feedback, never the expected call
        prompt = gen.calls[0]["texts"][0]
        assert "wrong arguments: cart.add.qty" in prompt and carts[0].expected[0] not in prompt
        assert unreflected(store, 1) == []


def test_reflections_a_kill_left_out_are_found(smol_tok, carts, tmp_path):
    with EpisodeStore(tmp_path / "ep.db") as store:
        attempts, ids = acted(smol_tok, carts, listens, store)
        assert [r.id for r in unreflected(store, 1)] == ids
        failed = failed_episodes(attempts, ids)[:1]
        store_reflections(None, smol_tok, store, [(eid, a.task, a.output, a.verdict, a.steps) for eid, a in failed],
                          generation=1, max_tokens=32, batch_size=8, generate_fn=Scripted(reflecting(listens)))
        assert [r.id for r in unreflected(store, 1)] == ids[1:]


def test_the_retry_prompt_holds_the_reflection_and_the_retry_is_measured_both_ways(smol_tok, carts, tmp_path):
    with EpisodeStore(tmp_path / "ep.db") as store:
        attempts, ids = acted(smol_tok, carts, listens, store)
        failed = failed_episodes(attempts, ids)
        lessons, _ = store_reflections(
            None, smol_tok, store, [(eid, a.task, a.output, a.verdict, a.steps) for eid, a in failed], generation=1,
            max_tokens=32, batch_size=8, generate_fn=Scripted(reflecting(listens)))
    gen = Scripted(listens)
    retry, tried = retry_pass(None, smol_tok, QxEnvironment(), [a for _, a in failed], lessons, seed=7,
                              generate_fn=gen, max_new_tokens=40, batch_size=8)
    (call,) = gen.calls
    assert call["seed"] == 7 and len(call["texts"]) == 6
    without, with_ = call["texts"][:3], call["texts"][3:]
    assert all(LESSON not in t and LESSONS_HEAD not in t for t in without)
    assert all(f"{LESSONS_HEAD}\n- {lessons[i].insight.title}: {LESSON}" in t for i, t in enumerate(with_))
    assert retry.n == 3 and retry.without.success == 0.0 and retry.with_reflection.success == 1.0
    assert retry.model_calls == 6 and [a.task.id for a in tried] == [t.id for t in carts] * 2


def test_a_reflection_is_bounded_by_its_token_budget(smol_tok, carts):
    task = carts[0]
    verdict = Verdict(False, 0.5, {"cart.add.sku": 1.0, "cart.add.qty": 0.0})
    failure = (task, "<<qx cart.add; sku=tea; qty=9>>", verdict, ())
    long = " ".join(["Always read the quantity in the request twice before writing it"] * 20)
    (r,), counts = reflect(None, smol_tok, [failure], max_tokens=12, batch_size=4,
                           generate_fn=Scripted(reflecting(seeded, long)))
    assert r.status == "cut" and counts.cut == 1 and r.tokens <= 12
    assert len(smol_tok(r.content, add_special_tokens=False)["input_ids"]) <= 12 and long.startswith(r.content)
    # an empty (or letterless) answer gets the deterministic fallback, itself within the budget
    for empty in ("", "  ...  "):
        (r,), counts = reflect(None, smol_tok, [failure], max_tokens=64, batch_size=4,
                               generate_fn=Scripted(reflecting(seeded, empty)))
        assert r.status == "fallback" and counts.fallback == 1 and r.content == fallback_lesson(verdict, ())
    (r,), _ = reflect(None, smol_tok, [failure], max_tokens=5, batch_size=4, generate_fn=Scripted(reflecting(seeded, "")))
    assert r.status == "cut" and r.tokens <= 5
    # only the first line is the lesson: a second line is never generated (the stop rule) nor kept
    (r,), counts = reflect(None, smol_tok, [failure], max_tokens=64, batch_size=4,
                           generate_fn=Scripted(reflecting(seeded, "Lesson: copy qty.\nAnd then some more text")))
    assert r.content == "copy qty." and r.status == "model" and counts.tokens < 12


def _store_with_levels(path):
    env = QxEnvironment()
    tasks = env.tasks(12, seed=3)
    store = EpisodeStore(path)
    ids = store.add_many([demonstrate(env, t) for t in tasks])
    timer = next(i for i, t in zip(ids, tasks, strict=True) if t.family == "timer.arm")
    cart = next(i for i, t in zip(ids, tasks, strict=True) if t.family == "cart.add")
    store.add_insight(Insight("timer.arm failure: tag", "Set a timer tagged tea -> wrong tag", "Tags are one word.",
                              "failure", (timer,), 1))
    store.add_insight(Insight("cart.add failure: qty", "Add eggs to my shopping list -> wrong qty",
                              "Copy the quantity of the shopping list.", "failure", (cart,), 1))
    store.add_workflow(Workflow(("Add ", " ", " to my shopping list."),
                                (Slot("s0", "int", "text", form="verbatim"), Slot("s1", "sku", "text", form="verbatim")),
                                (CallTemplate("cart.add", (Arg("sku", slot="s1"), Arg("qty", slot="s0"))),),
                                family="cart.add", episodes=(cart,)))
    return store, tasks


def test_retrieval_by_level_returns_and_formats_each_level(tmp_path):
    store, _ = _store_with_levels(tmp_path / "ep.db")
    task = Task("new", "Add 4 eggs to my shopping list.")
    with store:
        retriever = LevelRetriever.from_store(store, ["insights", "workflows", "episodes"])
        assert retriever.pool() == {"episodes": 12, "insights": 2, "workflows": 1}
        recall = retriever.recall(task, 2)
        assert len(recall.episodes) == 2 and len(recall.insights) == 2 and len(recall.workflows) == 1
        assert recall.insights[0].insight.title == "cart.add failure: qty"  # the most similar first
        messages, shown = render(recall, task.text, system=SYSTEM, budget=0, levels=retriever.levels)
        head = messages[0]["content"]
        assert head.startswith(SYSTEM) and f"{LESSONS_HEAD}\n- cart.add failure: qty: Copy the quantity" in head
        assert f'{WORKFLOWS_HEAD}\n- "Add <s0:int> <s1:sku> to my shopping list." -> <<qx cart.add; sku=<s1>; qty=<s0>>>' in head
        assert [m["role"] for m in messages[1:]] == ["user", "assistant"] * 2 + ["user"]
        assert shown.replayed == tuple(r.id for r in recall.episodes) and (shown.insights, shown.workflows) == (2, 1)
        # a level not asked for is not retrieved
        only = LevelRetriever.from_store(store, ["insights"])
        assert only.recall(task, 2).episodes == () and only.pool()["episodes"] == 0
        # the default (episodes only, no budget) is exactly the episode retriever's context
        plain = LevelRetriever.from_store(store, ["episodes"])
        assert render(plain.recall(task, 3), task.text, system=SYSTEM, budget=0, levels=["episodes"])[0] == \
            build_prompts([task], plain.episodes, 3, system=SYSTEM)[0][0]


def test_the_budget_bounds_everything_retrieved_and_counts_what_it_left_out(tmp_path):
    store, _ = _store_with_levels(tmp_path / "ep.db")
    task = Task("new", "Add 4 eggs to my shopping list.")
    with store:
        retriever = LevelRetriever.from_store(store, ["insights", "episodes"])
        recall = retriever.recall(task, 3)
        full, all_shown = render(recall, task.text, system=SYSTEM, budget=0, levels=retriever.levels)
        lesson = len(f"- {recall.insights[0].insight.title}: {recall.insights[0].insight.content}")
        messages, shown = render(recall, task.text, system=SYSTEM, budget=lesson + 5, levels=retriever.levels)
    assert all_shown.dropped == 0 and all_shown.episodes == 3 and all_shown.insights == 2
    assert shown.insights == 1 and shown.episodes == 0 and shown.dropped == 4 and shown.chars <= lesson + 5
    assert shown.replayed == () and [m["role"] for m in messages] == ["system", "user"]
    body = sum(len(m["content"]) for m in messages) - len(SYSTEM) - len(task.text)
    assert body <= lesson + 5 + len(f"\n\n{LESSONS_HEAD}\n")


def test_lessons_join_an_existing_lessons_list():
    msgs = render(Recall(insights=(StoredInsight(1, Insight("a", "b", "c", "failure", (1,))),)), "x", system="S",
                  budget=0)[0]
    out = add_lessons(msgs, ["- new: first"])
    assert out[0]["content"] == f"S\n\n{LESSONS_HEAD}\n- new: first\n- a: c" and msgs[0]["content"].count("- ") == 1
    assert add_lessons([{"role": "user", "content": "x"}], ["- l"])[0] == {"role": "system", "content": f"{LESSONS_HEAD}\n- l"}


def test_majority_vote_and_its_ties():
    a, b = "<<qx cart.add; sku=tea; qty=1>>", "<<qx cart.add; sku=tea; qty=2>>"
    v = majority([b, a, f"Sure. {a} end", a.replace("; ", ";")])
    assert (v.answer, v.group, v.votes, v.groups) == (a, 1, 3, 4)
    assert majority([b, a]).answer == b and majority([a, b]).answer == a  # ties: the earlier group
    assert majority(["no call", b, "nothing"]).answer == ""  # two answers without a call outvote one call
    assert split_groups([1, 2, 3], 4) == [[1], [2], [3], []]


def test_the_vote_answers_once_per_group_picks_the_majority_and_counts_calls(smol_tok, tmp_path):
    store, tasks = _store_with_levels(tmp_path / "ep.db")
    carts = [t for t in tasks if t.family == "cart.add"]
    demo_texts = {t.text for t in tasks}
    expected = {t.text: t.expected[0] for t in tasks}

    def by_group(conv, seed):
        """The right call, unless the group's first example is the most similar one (group 0)."""
        request, _ = request_and_turn(conv)
        examples = [c for r, c in conv if r == "user" and c in demo_texts and c != request]
        right = expected[request]
        return right.replace("qty=", "qty=9") if examples and examples[0] == first[request] else right

    with store:
        retriever = LevelRetriever.from_store(store, ["episodes"])
        first = {t.text: retriever.recall(t, 3).episodes[0].episode.task.text for t in carts}
        gen = Scripted(by_group)
        chosen, votes, counts = vote_attempts(None, smol_tok, QxEnvironment(), carts, retriever, 3, 3, system=SYSTEM,
                                              budget=0, generate_fn=gen, max_new_tokens=40, batch_size=16)
    assert len(gen.calls) == 1 and len(gen.calls[0]["texts"]) == 3 * len(carts)
    assert counts.model_calls == 3 * len(carts) and counts.groups == 3 and counts.unanimous == 0.0
    assert all(v.votes == 2 and v.group == 1 for v in votes)
    assert all(a.verdict.success for a in chosen)
    # each group saw one of the three retrieved examples
    assert all(sum(r == "user" for r, _ in re.findall(r"<\|im_start\|>(\w+)\n(.*?)<\|im_end\|>", t, re.S)) == 2
               for t in gen.calls[0]["texts"])


def test_the_new_keys_are_validated_and_off_by_default():
    lp = LoopConfig().loop
    assert (lp.reflect, lp.retrieve, lp.vote_groups, lp.context_chars) == (False, ["episodes"], 0, 0)
    cfg = LoopConfig.from_dict({"loop": {"retrieve": ["insights", "episodes"], "reflect": True, "vote_groups": 3}})
    assert cfg.loop.retrieve == ["insights", "episodes"] and LoopConfig.from_dict(cfg.to_dict()).to_dict() == cfg.to_dict()
    with pytest.raises(ConfigError, match=r"\[loop\] retrieve = \['memes'\]: expected some of episodes, insights, workflows"):
        LoopConfig.from_dict({"loop": {"retrieve": ["memes"]}})
    with pytest.raises(ConfigError, match=r"each at most once"):
        LoopConfig.from_dict({"loop": {"retrieve": ["episodes", "episodes"]}})
    with pytest.raises(ConfigError, match=r"vote_groups = 1 votes on one answer"):
        LoopConfig.from_dict({"loop": {"vote_groups": 1}})
    with pytest.raises(ConfigError, match=r"reflection_max_tokens = 2: expected a value >= 4"):
        LoopConfig.from_dict({"loop": {"reflection_max_tokens": 2}})
    assert "reflect = false  # after acting" in LoopConfig().to_toml()


def test_the_loop_reflects_retries_and_votes(tiny_cfg, tmp_path, monkeypatch):
    import replaybank.llm.eval.decode as decode
    from replaybank.llm.loop.report import write_report
    from replaybank.llm.recipes.loop import run_loop

    monkeypatch.setattr(decode, "generate_detailed", Scripted(reflecting(listens), fallback=decode.generate_detailed))
    cfg = LoopConfig.from_dict(tiny_cfg(generations=2, reflect=True, retrieve=["insights", "episodes"], vote_groups=2,
                                        levels=[2], temperature=0.0))
    state = run_loop(cfg, tmp_path / "run", log=lambda m: None)
    act = state.generations[1].to_json()["act"]
    refl = act["reflection"]
    assert refl["n"] >= 1 and refl["model_calls"] == refl["n"]
    assert refl["retry"]["n"] == refl["n"] and set(refl["retry"]) == {"n", "without", "with_reflection", "model_calls"}
    assert act["shown"]["pool"]["insights"] == 0  # the first generation had no insights yet
    vote = state.generations[1].to_json()["vote"]
    assert vote["groups"] == 2 and vote["model_calls"] == 2 * vote["context_model_calls"] and vote["n"] == 3
    with EpisodeStore(tmp_path / "run" / "store.db", readonly=True) as store:
        failures = store.episodes(generation=[1], success=False)
        linked = {e for r in store.insights(outcome="failure") for e in r.insight.episodes}
        assert failures and {r.id for r in failures} <= linked
        # the next generation retrieves those lessons (BM25 over the task text) into its prompts
        later = state.generations[2].to_json()["act"]["shown"]
        assert later["pool"]["insights"] >= 1 and later["insights"] >= 1
        gen2 = store.episodes(generation=[2])
        assert all(f"{LESSONS_HEAD}\n- " in r.episode.context[0]["content"] for r in gen2)
        assert any(LESSON in r.episode.context[0]["content"] for r in gen2)
    assert state.to_json() == json.loads((tmp_path / "run" / "state.json").read_text())  # plain JSON, as written
    report = write_report(tmp_path).read_text()
    assert "| gen | reflections (fallback, cut) | retried | retry exact without | with reflection |" in report
    assert f"| 1 | {refl['n']} ({refl['fallback']}, {refl['cut']}) | {refl['retry']['n']} |" in report
