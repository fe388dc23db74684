"""Batched greedy generation: end-of-turn stopping, truncation, order, left padding."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from replaybank.llm.eval.decode import (
    GenerationError,
    base_model_context,
    generate,
    generate_detailed,
    model_fingerprint,
    stop_token_ids,
)

torch = pytest.importorskip("torch")


class ScriptedCache:
    """Per-row script and step; supports dropping finished rows like a transformers Cache."""

    def __init__(self, rows: list[list[int]]) -> None:
        self.rows, self.step, self.batch_sizes = rows, 0, [len(rows)]

    def batch_select_indices(self, indices: Any) -> None:
        self.rows = [self.rows[int(i)] for i in indices]


class ScriptedLM(torch.nn.Module):  # type: ignore[misc]
    """A causal-LM stand-in that emits a fixed token script per row (chosen by prompt length)."""

    def __init__(self, vocab: int, scripts: dict[int, list[int]]) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(1))
        self.vocab, self.scripts, self.calls = vocab, scripts, 0

    def forward(self, input_ids: Any, attention_mask: Any, position_ids: Any, cache: Any, use_cache: bool, logits_to_keep: int) -> Any:
        self.calls += 1
        if cache is None:  # prefill: pick each row's script by its real (unpadded) length
            cache = ScriptedCache([self.scripts[int(n)] for n in attention_mask.sum(-1)])
        else:
            cache.step += 1
            cache.batch_sizes.append(input_ids.shape[0])
        assert input_ids.shape[0] == len(cache.rows) == attention_mask.shape[0] == position_ids.shape[0]
        self.cache = cache
        logits = torch.zeros(input_ids.shape[0], 1, self.vocab)
        for r, script in enumerate(cache.rows):
            logits[r, 0, script[min(cache.step, len(script) - 1)]] = 1.0
        return SimpleNamespace(logits=logits, cache=cache)


def token(tok: Any, text: str) -> int:
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert len(ids) == 1, text
    return int(ids[0])


def prompt_len(tok: Any, prompt: str) -> int:
    from replaybank.llm.eval.decode import render_prompt

    return len(tok(render_prompt(tok, prompt), add_special_tokens=False)["input_ids"])


def test_stops_each_row_at_end_of_turn_and_flags_truncation(smol_tok: Any) -> None:
    end = stop_token_ids(smol_tok)[0]
    assert smol_tok.convert_ids_to_tokens(end) == "<|im_end|>"
    short, long_ = "Hi", "Tell me something about the weather in Oslo today."
    hello, world, paris = token(smol_tok, "Hello"), token(smol_tok, " world"), token(smol_tok, " Paris")
    model = ScriptedLM(len(smol_tok), {
        prompt_len(smol_tok, short): [hello, world, end, hello],  # stops after two tokens
        prompt_len(smol_tok, long_): [paris],  # never stops
    })
    out = generate_detailed(model, smol_tok, [long_, short], max_new_tokens=5, batch_size=4)
    assert [g.text for g in out] == ["Paris Paris Paris Paris Paris", "Hello world"]  # input order kept
    assert [g.truncated for g in out] == [True, False]
    assert [g.n_tokens for g in out] == [5, 3]
    assert model.calls == 5
    assert model.cache.batch_sizes == [2, 2, 2, 1, 1]  # the stopped row left the batch


def test_batch_ends_when_every_row_stopped(smol_tok: Any) -> None:
    end = stop_token_ids(smol_tok)[0]
    hello = token(smol_tok, "Hello")
    prompts = ["a", "a b c d e f"]
    model = ScriptedLM(len(smol_tok), {prompt_len(smol_tok, p): [hello, end] for p in prompts})
    assert generate(model, smol_tok, prompts, max_new_tokens=50) == ["Hello", "Hello"]
    assert model.calls == 2  # not 50


def test_tiny_llama_batched_equals_one_by_one(tiny_model_dir: Any, small_tok: Any) -> None:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    prompts = ["Hi", "What is the capital of France?", "Write a Python function that adds two numbers.", "Ok"]
    batched = generate_detailed(model, small_tok, prompts, max_new_tokens=6, batch_size=4)
    single = [generate_detailed(model, small_tok, [p], max_new_tokens=6, batch_size=1)[0] for p in prompts]
    assert batched == single
    assert all(g.n_tokens <= 6 for g in batched)
    model.train()
    generate(model, small_tok, ["Hi"], max_new_tokens=2)
    assert model.training  # generation puts the model back in the mode it found it in


def test_argument_errors_and_empty_input(small_tok: Any) -> None:
    model = ScriptedLM(len(small_tok), {})
    assert generate(model, small_tok, [], max_new_tokens=3) == []
    with pytest.raises(GenerationError, match="max_new_tokens must be >= 1, got 0"):
        generate(model, small_tok, ["x"], max_new_tokens=0)
    with pytest.raises(GenerationError, match="batch_size must be >= 1"):
        generate(model, small_tok, ["x"], batch_size=0)


def test_fingerprint_tracks_weights_and_base_context(tiny_model_dir: Any) -> None:
    from transformers import AutoModelForCausalLM

    a = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    b = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    assert model_fingerprint(a) == model_fingerprint(b)
    with torch.no_grad():
        next(b.parameters()).add_(1.0)
    assert model_fingerprint(a) != model_fingerprint(b)
    with base_model_context(a):  # a plain model: nothing to disable
        pass


def test_peft_model_generates_with_adapter_and_base_context_turns_it_off(tiny_model_dir: Any, small_tok: Any) -> None:
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    prompts = ["Hi", "What is the capital of France?"]
    plain = generate_detailed(base, small_tok, prompts, max_new_tokens=5)
    peft = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_model_dir),
                          LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "o_proj"], init_lora_weights=False))
    with torch.no_grad():  # a strong adapter, so its answers differ from the base's
        for name, p in peft.named_parameters():
            if "lora_" in name:
                p.mul_(30.0)
    tuned = generate_detailed(peft, small_tok, prompts, max_new_tokens=5)
    with base_model_context(peft):
        off = generate_detailed(peft, small_tok, prompts, max_new_tokens=5)
    assert off == plain
    assert tuned != plain
    assert model_fingerprint(peft) == model_fingerprint(base)  # the fingerprint is of the base weights


def test_sampling_is_seeded_and_user_turn_prefix(tiny_model_dir: Any, small_tok: Any) -> None:
    from transformers import AutoModelForCausalLM

    from replaybank.llm.eval.decode import user_turn_prefix

    prefix = user_turn_prefix(small_tok)
    assert prefix.endswith("<|im_start|>user\n") and "<|im_start|>assistant" not in prefix
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    a = generate_detailed(model, small_tok, [prefix] * 4, max_new_tokens=8, rendered=True, temperature=1.0, seed=3)
    b = generate_detailed(model, small_tok, [prefix] * 4, max_new_tokens=8, rendered=True, temperature=1.0, seed=3)
    c = generate_detailed(model, small_tok, [prefix] * 4, max_new_tokens=8, rendered=True, temperature=1.0, seed=4)
    assert a == b and a != c
    assert len({g.text for g in a}) > 1  # rows of one batch draw independently
    greedy = generate_detailed(model, small_tok, [prefix] * 2, max_new_tokens=8, rendered=True)
    assert greedy[0] == greedy[1]
    with pytest.raises(GenerationError, match="temperature must be >= 0"):
        generate(model, small_tok, ["x"], max_new_tokens=2, temperature=-1.0)


def test_precision_bf16_runs_the_matmuls_in_bfloat16_and_fp32_does_not(tiny_model_dir: Any, small_tok: Any) -> None:
    from transformers import AutoModelForCausalLM

    from replaybank.llm.eval.decode import resolve_precision

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    seen: list[Any] = []
    linear = next(m for m in model.modules() if isinstance(m, torch.nn.Linear))
    linear.register_forward_hook(lambda _m, _i, out: seen.append(out.dtype))
    generate_detailed(model, small_tok, ["Hi"], max_new_tokens=2, precision="fp32")
    assert set(seen) == {torch.float32}
    seen.clear()
    gens = generate_detailed(model, small_tok, ["Hi", "What is 2 + 2?"], max_new_tokens=3, precision="bf16")
    assert set(seen) == {torch.bfloat16} and len(gens) == 2
    assert next(model.parameters()).dtype == torch.float32  # autocast: the weights stay as they were
    assert resolve_precision("auto", "cuda") == "fp32" and resolve_precision("auto", "cpu") in ("fp32", "bf16")
    with pytest.raises(GenerationError, match="precision 'fp16': expected one of auto, fp32, bf16"):
        generate_detailed(model, small_tok, ["Hi"], precision="fp16")  # type: ignore[arg-type]
