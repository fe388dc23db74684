"""Multi-turn acting: one call per turn, executed, its result fed back as a tool turn.

The agent is scripted (:mod:`.scripted`) so the protocol is tested deterministically: every step
recorded, tool turns masked in the exported rows, the turn bound, refused calls never executed,
turns batched across episodes with each row still stopped at its call's ``>>``; and single-call
tasks acted exactly as before (one generation, same prompt, seed and stop rule), also with the
real tiny Llama."""

from __future__ import annotations

import numpy as np
import pytest

from replaybank.episodic import EpisodeStore, Step, Task, Verdict
from replaybank.episodic.env import CheckerError, QxEnvironment, run_check
from replaybank.episodic.export import training_rows
from replaybank.episodic.qx import make_step
from replaybank.episodic.turns import demonstrate
from replaybank.llm.config import ConfigError
from replaybank.llm.config.loop import LoopConfig
from replaybank.llm.data.rows import render_chat
from replaybank.llm.loop.act import (
    SYSTEM,
    attempt,
    build_prompts,
    call_end,
    to_episode,
    turn_seed,
)
from replaybank.llm.loop.consolidate import domain_rows

from .scripted import JUNK, Scripted, oracle, request_and_turn, seeded, turns  # type: ignore[import-not-found]


def act(tok, env, tasks, policy, *, max_turns=4, seed=5, prompts=None, max_calls=1):
    gen = Scripted(policy)
    prompts = prompts or build_prompts(tasks, None, 0, system=SYSTEM)
    attempts, stats = attempt(None, tok, env, tasks, prompts, max_new_tokens=40, batch_size=8, seed=seed,
                              max_turns=max_turns, max_calls=max_calls, generate_fn=gen)
    return attempts, stats, gen


@pytest.fixture(scope="module")
def mixed() -> list[Task]:
    """Two tasks of each of levels 1 (one call), 3 (two calls) and 4 (a chain), train split."""
    return QxEnvironment(levels=(1, 3, 4)).tasks(6, seed=2)


def test_episodes_are_acted_turn_by_turn_and_every_step_is_recorded(smol_tok, mixed, tmp_path):
    env = QxEnvironment()
    attempts, stats, gen = act(smol_tok, env, mixed, oracle({t.text: t.expected for t in mixed}))
    assert [t.difficulty for t in mixed] == [1, 3, 4, 1, 3, 4]
    assert all(a.verdict.success and a.verdict.reward == 1.0 for a in attempts)
    # turn 1: all six episodes in one batch; turn 2: only the four two-call ones, with their own seed
    assert [len(c["texts"]) for c in gen.calls] == [6, 4]
    assert [c["seed"] for c in gen.calls] == [5, turn_seed(5, 1)]
    assert stats.turns == 10 / 6

    chain = attempts[2]
    cart, pay = chain.task.expected
    cart_total = env.execute(chain.task, cart)[1]  # type: ignore[index]
    assert cart_total.startswith("ok cart.add") and "total=" in cart_total
    assert chain.steps == (
        Step(chain.task.text, cart, cart, cart_total),  # the junk after the call was cut at its ">>"
        Step(cart_total, pay, pay, env.execute(chain.task, pay)[1]),  # type: ignore[index]
    )
    assert chain.output == f"{cart}\n{pay}"
    second = gen.calls[1]["texts"][1]  # what the agent saw at its second turn
    assert second.endswith(f"<|im_start|>assistant\n{cart}<|im_end|>\n<|im_start|>tool\n{cart_total}<|im_end|>\n"
                           "<|im_start|>assistant\n")
    assert [r for r, _ in turns(second)] == ["system", "user", "assistant", "tool"]
    single = attempts[0]
    assert single.steps == (make_step(single.task.text, single.task.expected[0]),)
    # each row stopped at its call's ">>": the junk the agent would have written next was never generated
    call_tokens = len(smol_tok(single.task.expected[0], add_special_tokens=False)["input_ids"])
    assert single.n_tokens == call_tokens and chain.n_tokens < 2 * call_tokens + len(smol_tok(JUNK)["input_ids"])

    with EpisodeStore(tmp_path / "ep.db") as store:
        store.add_many([to_episode(a, generation=1, adapter="x", seed=5, started_at=0.0) for a in attempts])
        back = {r.episode.task.id: r.episode for r in store.episodes()}
    assert [back[a.task.id].steps for a in attempts] == [a.steps for a in attempts]
    assert [m["role"] for m in back[chain.task.id].messages()] == ["user", "assistant", "tool", "assistant"]
    assert back[chain.task.id].context == ({"role": "system", "content": SYSTEM},)


def test_the_chain_needs_the_result_shown_at_the_tool_turn(smol_tok, mixed):
    class Mute(QxEnvironment):
        """Runs the calls but shows only 'ok': the total never reaches the agent."""

        def execute(self, task, output, steps=()):
            ran = super().execute(task, output)
            return None if ran is None else (ran[0], "ok")

    attempts, _, _ = act(smol_tok, Mute(), mixed, oracle({t.text: t.expected for t in mixed}))
    chains = [a for a in attempts if a.task.difficulty == 4]
    assert chains and not any(a.verdict.success for a in chains)
    assert all(a.verdict.credit["1.purse.send.cents"] == 0.0 and a.verdict.credit["1.purse.send.to"] == 1.0
               for a in chains)
    assert all(a.verdict.success for a in attempts if a.task.difficulty != 4)


def test_exported_rows_learn_the_calls_and_mask_the_tool_turns(smol_tok, mixed, tmp_path):
    env = QxEnvironment()
    attempts, _, _ = act(smol_tok, env, mixed, oracle({t.text: t.expected for t in mixed}))
    chain = attempts[2]
    cart, pay = chain.task.expected
    result = chain.steps[0].result
    with EpisodeStore(tmp_path / "ep.db") as store:
        store.add_many([to_episode(a, generation=1, adapter="x", seed=5, started_at=0.0) for a in attempts])
        rows = training_rows(store, generations=[1])
        encoded, n = domain_rows(store, smol_tok, [1], 256, SYSTEM)  # the loop's export path
    assert n == 6 and len(encoded) == 6
    k = next(i for i, r in enumerate(rows) if r["prompt"] == chain.task.text)
    ids, labels = encoded.row(k)
    text = smol_tok.decode(ids)
    assert f"<|im_start|>tool\n{result}<|im_end|>" in text
    assert smol_tok.decode(ids[labels != -100]) == f"{cart}<|im_end|>\n{pay}<|im_end|>\n"
    # every token of the tool turn (and of the request and system prompt) is masked
    assert result is not None and result in smol_tok.decode(ids[labels == -100])
    assert np.all((labels == -100) | (labels == ids))


def test_turns_are_bounded_by_max_turns_and_by_the_expected_calls(smol_tok, mixed):
    open_task = Task("open", "Keep adding eggs until I say stop.")  # no expected calls: only max_turns bounds it
    attempts, stats, gen = act(smol_tok, QxEnvironment(), [open_task, mixed[2]], seeded, max_turns=3)
    assert [len(a.steps) for a in attempts] == [3, 2]  # the chain stops after its two expected calls
    assert [len(c["texts"]) for c in gen.calls] == [2, 2, 1]
    assert all(s.call is not None for s in attempts[0].steps)

    attempts, _, gen = act(smol_tok, QxEnvironment(), [mixed[2]], oracle({mixed[2].text: mixed[2].expected}),
                           max_turns=1)
    assert len(attempts[0].steps) == 1 and len(gen.calls) == 1
    v = attempts[0].verdict  # the cart call right, the payment never made
    assert not v.success and v.reward == 0.5 and "no executed purse.send call" in v.detail

    # an episode ends at the first turn without a call
    attempts, _, gen = act(smol_tok, QxEnvironment(), [open_task], lambda conv, seed: "I cannot help.")
    assert len(attempts[0].steps) == 1 and attempts[0].steps[0].call is None and len(gen.calls) == 1


def test_max_turns_is_a_validated_config_key():
    assert LoopConfig().loop.max_turns == 4
    assert LoopConfig.from_dict({"loop": {"max_turns": 2}}).loop.max_turns == 2
    with pytest.raises(ConfigError, match=r"\[loop\] max_turns = 0: expected a value >= 1 and <= 64"):
        LoopConfig.from_dict({"loop": {"max_turns": 0}})
    with pytest.raises(ConfigError, match=r"max_turns"):
        LoopConfig.from_dict({"loop": {"max_turns": "two"}})
    assert "max_turns = 4  # most turns of an episode" in LoopConfig().to_toml()
    assert LoopConfig.from_dict({"loop": {"levels": [3, 4]}}).loop.levels == [3, 4]


def test_a_call_that_fails_the_schema_check_is_not_executed(smol_tok, mixed):
    chain = mixed[2]
    bad = "<<qx cart.add; sku=Eggs; qty=three>>"

    def policy(conv, seed):
        _, after = request_and_turn(conv)
        return bad if not after else chain.expected[1]

    attempts, _, gen = act(smol_tok, QxEnvironment(), [chain], policy)
    first, second = attempts[0].steps
    assert first.call == bad and first.result is not None and first.result.startswith("error: cart.add: sku='Eggs'")
    assert "total=" not in first.result and not first.result.startswith("ok")  # refused: the runtime never ran it
    assert gen.calls[1]["texts"][0].endswith(f"<|im_start|>tool\n{first.result}<|im_end|>\n<|im_start|>assistant\n")
    v = attempts[0].verdict
    assert not v.success and "refused <<qx cart.add; sku=Eggs; qty=three>>" in v.detail
    assert v.credit["0.cart.add.sku"] == 0.0 and v.credit["1.purse.send.to"] == 1.0


def test_an_execute_that_raises_names_the_environment_and_task(smol_tok, mixed):
    class Broken(QxEnvironment):
        def execute(self, task, output, steps=()):
            raise KeyError("backend down")

    with pytest.raises(CheckerError, match=r"Broken.execute raised on task 'qx-.*KeyError: 'backend down'"):
        act(smol_tok, Broken(), mixed[:1], oracle({mixed[0].text: mixed[0].expected}))

    class Wrong(QxEnvironment):
        def execute(self, task, output, steps=()):
            return "ok"

    with pytest.raises(CheckerError, match=r"returned 'ok'.*expected None or a \(call, result\) pair"):
        act(smol_tok, Wrong(), mixed[:1], oracle({mixed[0].text: mixed[0].expected}))


def test_multi_turn_demonstrations_show_each_result_before_the_next_call():
    env = QxEnvironment()
    chain = QxEnvironment(levels=(4,)).tasks(1, seed=3)[0]
    demo = demonstrate(env, chain)
    assert [s.output for s in demo.steps] == list(chain.expected)
    assert demo.steps[1].prompt == demo.steps[0].result and "total=" in str(demo.steps[0].result)
    assert run_check(env, chain, demo.output).success
    single = QxEnvironment(levels=(2,)).tasks(1, seed=3)[0]
    assert demonstrate(env, single).steps == (make_step(single.text, single.expected[0]),)


def _one_answer_protocol(model, tok, env, tasks, prompts, *, generate, seed):
    """The protocol before multi-turn acting: one batched generation, cut at the first call, checked."""
    texts = [render_chat(tok, msgs, add_generation_prompt=True) for msgs, _ in prompts]

    def stop(ids):
        return bool(ids) and call_end(tok.decode(ids, skip_special_tokens=True), 1) is not None

    gens = generate(model, tok, texts, max_new_tokens=40, batch_size=8, rendered=True, temperature=1.0,
                    seed=seed, stop_when=stop)
    out = []
    for task, gen in zip(tasks, gens, strict=True):
        cut = call_end(gen.text, 1)
        text = gen.text[:cut] if cut is not None else gen.text
        out.append((text, run_check(env, task, text), gen.n_tokens, gen.truncated, (make_step(task.text, text),)))
    return out


def test_levels_1_and_2_are_acted_exactly_as_one_answer(small_tok, tmp_path):
    from replaybank.llm.eval.decode import generate_detailed

    env = QxEnvironment(levels=(1, 2))
    tasks = env.tasks(8, seed=4)
    with EpisodeStore(tmp_path / "ep.db") as store:
        store.add_many([demonstrate(env, t) for t in env.tasks(4, seed=9)])
        from replaybank.episodic.retrieval import Retriever

        prompts = build_prompts(tasks, Retriever.from_store(store), 2, system=SYSTEM)  # replayed context too
    model = _tiny_llama(small_tok)
    for generate in (generate_detailed, Scripted(oracle({t.text: t.expected for t in tasks}))):
        new, _ = attempt(model, small_tok, env, tasks, prompts, max_new_tokens=40, batch_size=8, temperature=1.0,
                         seed=11, max_turns=4, generate_fn=generate)
        old = _one_answer_protocol(model, small_tok, env, tasks, prompts, generate=generate, seed=11)
        assert [(a.output, a.verdict, a.n_tokens, a.truncated, a.steps) for a in new] == old
    assert all(a.verdict.success for a in new)  # the scripted run made (and executed) real calls
    assert len({a.output for a in new}) == 8


class Stock:
    """A user's environment (docs/episodic.md): add apples, then as many as the stock shows."""

    def tasks(self, n, *, split="train", seed=0):
        return [Task(f"stock-{i}", f"Add {i + 2} apples, then as many as you have.", "stock", 2,
                     (f"add {i + 2}", f"add {i + 2}")) for i in range(n)]

    def execute(self, task, output, steps=()):
        words = output.split()
        if words[:1] != ["add"]:
            return None
        if len(words) != 2 or not words[1].isdigit():
            return output, "error: write add <number>"
        before = sum(int(s.call.split()[1]) for s in steps if str(s.result).startswith("ok"))
        return f"add {words[1]}", f"ok, you have {before + int(words[1])} apples"

    def check(self, task, output):
        calls = output.splitlines()
        credit = {str(i): float(calls[i:i + 1] == [e]) for i, e in enumerate(task.expected)}
        return Verdict(calls == list(task.expected), sum(credit.values()) / max(len(credit), 1), credit)


def test_a_user_environment_executes_calls_with_the_episode_so_far(smol_tok):
    import re

    def policy(conv, seed):  # adds the number of the request, then the stock it was shown, then stops
        request, after = request_and_turn(conv)
        if not after:
            return "add " + re.findall(r"\d+", request)[0]
        shown = re.findall(r"you have (\d+)", after[-1][1])
        return f"add {shown[0]}" if shown else "done"

    env = Stock()
    attempts, _, gen = act(smol_tok, env, env.tasks(2), policy, max_turns=3)
    assert all(a.verdict.success for a in attempts) and [len(c["texts"]) for c in gen.calls] == [2, 2]
    assert [(s.call, s.result) for s in attempts[1].steps] == [("add 3", "ok, you have 3 apples"),
                                                              ("add 3", "ok, you have 6 apples")]
    # an open-ended run: the third turn sees the stock the first two built up, then the budget ends it
    open_task = Task("open", "Add 2 apples, then keep doubling.")
    (a,), _, _ = act(smol_tok, env, [open_task], policy, max_turns=3)
    assert [s.result for s in a.steps] == ["ok, you have 2 apples", "ok, you have 4 apples", "ok, you have 8 apples"]


def _tiny_llama(small_tok):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(  # the wide init of test_loop_units: each prompt gets its own tokens
        vocab_size=len(small_tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, tie_word_embeddings=True, initializer_range=1.0,
        pad_token_id=small_tok.pad_token_id, eos_token_id=small_tok.eos_token_id,
    )
    return LlamaForCausalLM(config)


def test_multi_turn_generation_with_a_real_model_is_the_same_batched_or_one_by_one(small_tok):
    class Echo(QxEnvironment):
        """Takes any answer as a call, so a random model's episodes go on to their second turn."""

        def execute(self, task, output, steps=()):
            return output, f"ok {len(steps) + 1}"

    model = _tiny_llama(small_tok)
    tasks = QxEnvironment(levels=(1, 3, 4)).tasks(6, seed=1)
    prompts = build_prompts(tasks, None, 0, system=SYSTEM)

    def run(batch_size):
        return attempt(model, small_tok, Echo(), tasks, prompts, max_new_tokens=6, batch_size=batch_size,
                       max_turns=4)[0]

    batched, single = run(8), run(1)
    assert [(a.output, a.steps, a.n_tokens, a.verdict) for a in batched] == [
        (a.output, a.steps, a.n_tokens, a.verdict) for a in single]
    assert [len(a.steps) for a in batched] == [1, 2, 2, 1, 2, 2]
    assert all(a.steps[1].prompt == "ok 1" for a in batched if len(a.steps) == 2)
