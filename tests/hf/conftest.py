"""A tiny random causal LM with a character tokenizer, for the Trainer / TRL tests of replaybank.hf."""

from __future__ import annotations

import pytest

CHARS = "abcdefghijklmnopqrstuvwxyz0123456789 +=?#\n"


@pytest.fixture(scope="session")
def tiny_lm(tmp_path_factory):
    """``(model_dir, tokenizer)``: a 2-layer random Llama (hidden 32) saved to disk."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    tokenizers = pytest.importorskip("tokenizers")
    root = tmp_path_factory.mktemp("tiny-lm")
    vocab = {"<pad>": 0, "<eos>": 1, "<unk>": 2, **{c: 3 + i for i, c in enumerate(CHARS)}}
    tk = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="<unk>"))
    tk.pre_tokenizer = tokenizers.pre_tokenizers.Split(tokenizers.Regex("."), behavior="isolated")
    tok = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tk, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>"
    )
    tok.chat_template = (
        "{% for m in messages %}{{ m['role'][0] }}: {{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}a: {% endif %}"
    )
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=len(vocab), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
        pad_token_id=0, eos_token_id=1, bos_token_id=None,
    )  # fmt: skip
    transformers.LlamaForCausalLM(config).save_pretrained(root)
    tok.save_pretrained(root)
    return root, tok
