"""Fixtures for the LLM tests: a character tokenizer with a toy chat template, and a tiny random
Llama on the small tokenizer (``smol_tok`` and ``small_tok`` are in tests/conftest.py)."""

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


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: Any, small_tok: Any) -> Any:
    """A randomly initialised 2-layer Llama with the small tokenizer (SmolLM2's special tokens and
    chat template over a 1k vocabulary), saved as a local model folder."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(small_tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
        tie_word_embeddings=True, pad_token_id=small_tok.pad_token_id, eos_token_id=small_tok.eos_token_id,
    )
    folder = tmp_path_factory.mktemp("tiny-llama")
    LlamaForCausalLM(config).save_pretrained(folder)
    small_tok.save_pretrained(folder)
    return folder
