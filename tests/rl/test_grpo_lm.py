"""GRPO on a chat LM, on a tiny random Llama with a small SmolLM2-like tokenizer: sampling, log-prob
alignment, the loss, both arms, async mode and the command."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from replaybank.errors import ReplayBankError
from replaybank.rl.grpo_task import ArithmeticTask, last_integer, reward

torch = pytest.importorskip("torch")
pytest.importorskip("peft")


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: Any, small_tok: Any) -> Path:
    """A randomly initialised 2-layer Llama with the small tokenizer (SmolLM2's special tokens and
    chat template over a 2k vocabulary, from tests/conftest.py), as a local model folder."""
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = small_tok
    config = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                         tie_word_embeddings=True, pad_token_id=tok.eos_token_id, eos_token_id=tok.eos_token_id)
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = LlamaForCausalLM(config)
    folder = tmp_path_factory.mktemp("tiny-llama")
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def base(tiny_dir: Path) -> tuple[Any, Any]:
    from replaybank.rl.grpo_trainer import GrpoLmArgs, load_base

    return load_base(GrpoLmArgs(model=str(tiny_dir)))


def tiny_args(tiny_dir: Path, **kw: Any) -> Any:
    from replaybank.rl.grpo_trainer import GrpoLmArgs

    defaults = {"model": str(tiny_dir), "n_heldout": 4, "max_updates": 4, "eval_every": 2, "seeds": 1,
                "lora_layers": 0, "eval_samples": 1, "max_new_tokens": 6}
    return GrpoLmArgs(**{**defaults, **kw})


def test_task_split_and_reward() -> None:
    task = ArithmeticTask(digits=2, ops="+-", n_heldout=100, seed=3)
    assert len(task.heldout_ids) == 100 and len(task.train_ids) == 2 * 90 * 90 - 100
    assert not set(task.heldout_ids.tolist()) & set(task.train_ids.tolist())
    problems = [task.problem(p) for p in range(2 * 90 * 90)]
    assert len({(p.a, p.op, p.b) for p in problems}) == 2 * 90 * 90  # ids are a bijection
    assert all(10 <= p.a <= 99 and 10 <= p.b <= 99 for p in problems)
    assert reward("45 - 53 = -8", -8) == 1.0 and reward("-8 or 8", -8) == 0.0
    assert last_integer("1,024 tokens") == 1024
    with pytest.raises(ReplayBankError, match="ops must be"):
        ArithmeticTask(ops="*")


def test_behaviour_logprobs_match_the_learner_and_stops_are_kept(base: tuple[Any, Any]) -> None:
    from replaybank.rl.grpo_lm import token_logprobs
    from replaybank.rl.sampling import sample

    model, tok = base
    task = ArithmeticTask(digits=1, n_heldout=4)
    prompts = [task.prompt_tokens(tok, int(p)) for p in task.train_ids[:6]]  # ragged lengths -> left padding
    gen = torch.Generator().manual_seed(0)
    out = sample(model, prompts, max_new_tokens=12, stop_ids=[tok.eos_token_id], pad_id=tok.pad_token_id,
                 temperature=0.7, generator=gen)
    assert out.generated == sum(len(t) for t in out.tokens) > 0
    for toks, trunc in zip(out.tokens, out.truncated):
        assert (len(toks) == 12) if trunc else (toks[-1] == tok.eos_token_id)
        assert (toks[:-1] != tok.eos_token_id).all()
    with torch.no_grad():
        learner = token_logprobs(model, prompts, out.tokens, tok.pad_token_id, temperature=0.7).numpy()
    np.testing.assert_allclose(learner, np.concatenate(out.logprobs), atol=2e-4)  # ratio 1 on-policy
    # the same generator seed gives the same completions; greedy ignores it
    again = sample(model, prompts, max_new_tokens=12, stop_ids=[tok.eos_token_id], pad_id=tok.pad_token_id,
                   temperature=0.7, generator=torch.Generator().manual_seed(0))
    assert all((a == b).all() for a, b in zip(out.tokens, again.tokens))


def test_nucleus_keeps_the_top_mass() -> None:
    from replaybank.rl.sampling import nucleus

    lp = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    kept = torch.isfinite(nucleus(lp, 0.7))[0].tolist()
    assert kept == [True, True, False, False]
    assert torch.isfinite(nucleus(lp, 0.01))[0].tolist() == [True, False, False, False]


def test_both_arms_train_and_replay_generates_less(tiny_dir: Path, base: tuple[Any, Any]) -> None:
    from replaybank.rl.grpo_trainer import train_arm

    model, _ = base
    before = {n: p.clone() for n, p in model.named_parameters()}
    args = tiny_args(tiny_dir, kl_coef=0.1)
    runs = {arm: train_arm(args, arm, 0, base) for arm in ("no_replay", "replay")}
    # no replay: 4 fresh groups every update; replay: 3 (fresh_groups) per update after a batch is stored
    assert runs["replay"]["tokens_generated"] < runs["no_replay"]["tokens_generated"]
    assert runs["no_replay"]["mean_staleness"] == 0.0 and runs["no_replay"]["evicted"]["reuse"] == 4 * 4 * 4
    assert 0 < runs["replay"]["mean_staleness"] <= args.max_staleness
    for r in runs.values():
        assert r["updates"] == 4 and [c["update"] for c in r["curve"]] == [0, 2, 4]
        assert 0 < r["generation_seconds"] < r["wall_seconds"]
    # the adapter was removed after each run, the base weights untouched
    assert all(torch.equal(p, before[n]) for n, p in model.named_parameters())


def test_async_mode_overlaps_generation_and_keeps_staleness_bounded(tiny_dir: Path, base: tuple[Any, Any]) -> None:
    from replaybank.rl.grpo_trainer import train_arm

    args = tiny_args(tiny_dir, async_mode=True, max_staleness=1)
    r = train_arm(args, "no_replay", 0, base)
    # every batch after the first is one version old (generated while the previous update learned)
    assert r["mean_staleness"] == pytest.approx(3 / 4)
    assert r["tokens_generated"] > 0 and r["evicted"]["stale"] == 0
    with pytest.raises(ReplayBankError, match="max_staleness must be >= 1"):
        from replaybank.rl.grpo_trainer import check_args

        check_args(tiny_args(tiny_dir, async_mode=True, max_staleness=0))


def test_grpo_command_writes_the_summary(tiny_dir: Path, tmp_path: Path) -> None:
    from replaybank.cli import main

    assert main(["rl", "grpo", "--model", str(tiny_dir), "--n-heldout", "4", "--max-updates", "2",
                 "--eval-every", "2", "--seeds", "1", "--lora-layers", "1", "--eval-samples", "1",
                 "--max-new-tokens", "4", "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "grpo_lm.json").read_text())
    assert {r["arm"] for r in result["runs"]} == {"no_replay", "replay"}
    assert set(result["summary"]["replay_vs_no_replay"]) == {"median_tokens_to_target", "median_seconds_to_target"}
    assert main(["rl", "grpo", "--arms", "replay,fancy", "--out", str(tmp_path)]) == 2


def _policy_and_two_rollouts(base: tuple[Any, Any]) -> tuple[Any, list[int], Any]:
    """A fresh LoRA policy on the tiny model and two sampled completions of one arithmetic prompt."""
    from replaybank.rl.grpo_lm import add_lora
    from replaybank.rl.sampling import sample

    model, tok = base
    policy = add_lora(model, rank=4, alpha=8, targets=["q_proj", "v_proj"], last_layers=0, seed=0)
    prompt = ArithmeticTask(digits=1, n_heldout=4).prompt_tokens(tok, 7)
    out = sample(policy, [prompt, prompt], max_new_tokens=5, stop_ids=[tok.eos_token_id],
                 pad_id=tok.pad_token_id, temperature=1.0, generator=torch.Generator().manual_seed(1))
    return policy, prompt, out


def test_loss_moves_probability_towards_the_better_rollout_and_kl_starts_at_zero(base: tuple[Any, Any]) -> None:
    from replaybank.rl.grpo_lm import grpo_loss, lora_parameters, token_logprobs
    from replaybank.rl.rollouts import RolloutBuffer

    tok = base[1]
    policy, prompt, out = _policy_and_two_rollouts(base)
    try:
        buf = RolloutBuffer(16, max_staleness=0, max_reuse=1, seed=0)
        buf.add_group(7, out.tokens, [1.0, 0.0], out.logprobs, version=0)
        batch = buf.sample(2)
        loss, stats = grpo_loss(policy, batch, [prompt, prompt], tok.pad_token_id, 1.0, clip=0.2, kl_coef=0.5)
        assert stats["ratio_mean"] == pytest.approx(1.0, abs=1e-4) and stats["clip_frac"] == 0.0
        assert stats["kl"] == pytest.approx(0.0, abs=1e-6)  # a fresh adapter is the identity (B = 0)
        opt = torch.optim.SGD([p for _, p in lora_parameters(policy)], lr=0.5)
        loss.backward()
        opt.step()
        with torch.no_grad():
            after = token_logprobs(policy, [prompt, prompt], [batch.tokens[0], batch.tokens[1]], tok.pad_token_id, 1.0)
        before = torch.as_tensor(batch.logprobs.values)
        split = int(batch.tokens.lengths[0])
        rewarded = 0 if batch.reward[0] == 1.0 else 1  # rows come back in id order
        rows = [(after - before)[:split].sum(), (after - before)[split:].sum()]
        assert rows[rewarded] > 0 > rows[1 - rewarded]
        _, stats = grpo_loss(policy, batch, [prompt, prompt], tok.pad_token_id, 1.0, clip=0.2, kl_coef=0.5)
        assert stats["kl"] > 0
    finally:
        policy.unload()


def test_replayed_ratio_is_against_the_stored_behaviour_logprobs_and_clips_per_token(base: tuple[Any, Any]) -> None:
    """A replayed rollout's ratio divides by the log-probs recorded when it was sampled (not by
    the learner's current ones), and the clip acts token by token: a token whose ratio is already
    past ``1 + clip`` with a positive advantage adds no gradient, one at ``0.5`` still does."""
    from replaybank.rl.grpo_lm import grpo_loss, lora_parameters, token_logprobs
    from replaybank.rl.rollouts import RolloutBuffer

    tok = base[1]
    policy, prompt, out = _policy_and_two_rollouts(base)
    try:
        params = [p for _, p in lora_parameters(policy)]

        def loss_and_grads(shift: Any, advantages: list[float]) -> tuple[dict[str, float], list[Any]]:
            """Row 0's behaviour log-probs lowered by ``shift`` (ratio ``exp(shift)`` on its tokens,
            as if an older policy had sampled it), row 1's exact."""
            buf = RolloutBuffer(16, max_staleness=0, max_reuse=1, seed=0)
            buf.add_group(7, out.tokens, [1.0, 0.0], [out.logprobs[0] - shift, out.logprobs[1]], version=0,
                          advantages=advantages)
            loss, stats = grpo_loss(policy, buf.sample(2), [prompt, prompt], tok.pad_token_id, 1.0, clip=0.2)
            grads = torch.autograd.grad(loss, params)
            return stats, [g.clone() for g in grads]

        n0, n = len(out.tokens[0]), len(out.tokens[0]) + len(out.tokens[1])
        stats, clipped = loss_and_grads(np.log(2.0), [1.0, -1.0])
        assert stats["ratio_mean"] == pytest.approx((2.0 * n0 + (n - n0)) / n, rel=1e-3)
        assert stats["clip_frac"] == pytest.approx(n0 / n)
        _, row1_only = loss_and_grads(0.0, [0.0, -1.0])  # row 0 contributes nothing by construction
        assert any(g.abs().max() > 0 for g in row1_only)
        for a, b in zip(clipped, row1_only):
            torch.testing.assert_close(a, b, atol=1e-7, rtol=1e-4)
        stats, below = loss_and_grads(-np.log(2.0), [1.0, -1.0])  # ratio 0.5: outside the clip, not clipped
        assert stats["clip_frac"] == pytest.approx(n0 / n)
        assert any((a - b).abs().max() > 1e-6 for a, b in zip(below, row1_only))
        # only row 0's first token past the clip: the rest of row 0 still counts (token, not sequence, level)
        assert n0 >= 2
        first_only = np.zeros(n0, dtype=np.float32)
        first_only[0] = np.log(2.0)
        stats, token_level = loss_and_grads(first_only, [1.0, -1.0])
        assert stats["clip_frac"] == pytest.approx(1 / n)
        current = token_logprobs(policy, [prompt, prompt], out.tokens, tok.pad_token_id, 1.0)
        behaviour = torch.as_tensor(np.concatenate([out.logprobs[0] - first_only, out.logprobs[1]]))
        rho = (current - behaviour).exp()
        adv = torch.tensor([1.0] * n0 + [-1.0] * (n - n0))
        # ratios of the exact tokens are 1 +- numerical noise, inside the clip: the plain surrogate
        expected = -(rho * adv)[1:].sum() / n
        for a, b in zip(token_level, torch.autograd.grad(expected, params)):
            torch.testing.assert_close(a, b, atol=1e-7, rtol=1e-4)
    finally:
        policy.unload()
