"""Fixtures for the LLM tests: a character tokenizer with a toy chat template, a tiny random Llama
on the small tokenizer, and the same Llama on SmolLM2's full vocabulary for the few tests that
need it (``smol_tok`` and ``small_tok`` are in tests/conftest.py)."""

from __future__ import annotations

from typing import Any

import pytest


def pytest_configure(config: Any) -> None:
    config.addinivalue_line("markers", "llm_smoke: runs the real `replaybank run` CLI path on SmolLM2 with a tiny budget")


class CharTokenizer:
    """One token per character (id = code point); chat turns rendered as ``<role>text|``."""

    chat_template = "toy"
    eos_token = "$"
    pad_token_id = 0

    def __call__(self, text: str, add_special_tokens: bool = False) -> dict[str, list[int]]:
        return {"input_ids": [ord(c) for c in text]}

    def apply_chat_template(self, conversation: Any, tokenize: bool = False, add_generation_prompt: bool = False) -> str:
        text = "".join(f"<{m['role'][0]}>{m['content']}|" for m in conversation)
        return text + ("<a>" if add_generation_prompt else "")

    def decode(self, ids: Any) -> str:
        return "".join(chr(int(i)) for i in ids)


@pytest.fixture
def isolated_cache(tmp_path: Any, monkeypatch: Any) -> Any:
    """Point $REPLAYBANK_CACHE (suite answers, self-synthesized rows) at a fresh folder for one test."""
    folder = tmp_path / "cache"
    monkeypatch.setenv("REPLAYBANK_CACHE", str(folder))
    return folder


@pytest.fixture
def char_tok() -> CharTokenizer:
    return CharTokenizer()


def save_tiny_llama(folder: Any, tok: Any, *, tie: bool) -> Any:
    """A randomly initialised 2-layer Llama (hidden 32, seed 0) over ``tok``'s vocabulary, saved
    with ``tok`` as a local model folder; returns ``folder``. ``tie``: the output layer shares the
    input embeddings. Tied over a 2k vocabulary, the random model echoes its last input token
    (a token's own embedding outscores the best of 2k random ones), so its greedy answer to a
    chat prompt is newlines, empty once stripped; over 49k random embeddings some other token
    wins, and an untied output layer gives varied text at any vocabulary size."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
        tie_word_embeddings=tie, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id,
    )
    LlamaForCausalLM(config).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: Any, small_tok: Any) -> Any:
    """The tiny random Llama with the small tokenizer (SmolLM2's special tokens and chat template
    over a 2k vocabulary) and an untied output layer: what the tiny-model tests run on."""
    return save_tiny_llama(tmp_path_factory.mktemp("tiny-llama"), small_tok, tie=False)


@pytest.fixture(scope="session")
def full_vocab_model_dir(tmp_path_factory: Any, smol_tok: Any) -> Any:
    """The tiny random Llama with SmolLM2's own tokenizer and 49,152-token vocabulary, for the
    few tests whose figures were calibrated on it (each says why it needs it)."""
    return save_tiny_llama(tmp_path_factory.mktemp("tiny-llama-full-vocab"), smol_tok, tie=True)
