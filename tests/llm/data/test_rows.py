from __future__ import annotations

import numpy as np
import pytest

from replaybank.llm.data.rows import (
    IGNORE_INDEX,
    FormatError,
    encode_messages,
    encode_pair,
    encode_rehearsal,
    encode_text,
    rehearsal_prompt,
    token_rows,
)


def _labelled(tok, ids, labels):
    return tok.decode(ids[labels != IGNORE_INDEX])


def test_pair_exact_labels(char_tok):
    ids, labels = encode_pair(char_tok, "hi", "yo", 64)
    assert char_tok.decode(ids) == "<u>hi|<a>yo|"
    # "<u>hi|<a>" is 9 characters of prompt and scaffolding: all -100; then y, o, | are labelled.
    assert labels.tolist() == [IGNORE_INDEX] * 9 + [ord("y"), ord("o"), ord("|")]


def test_multi_turn_labels_only_assistant(char_tok):
    msgs = [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "b"},
        {"role": "user", "content": "c"},
        {"role": "assistant", "content": "d"},
    ]
    ids, labels = encode_messages(char_tok, msgs, 100)
    assert char_tok.decode(ids) == "<s>S|<u>a|<a>b|<u>c|<a>d|"
    assert _labelled(char_tok, ids, labels) == "b|d|"


def test_truncation(char_tok):
    ids, labels = encode_pair(char_tok, "hi", "yo", 10)
    assert len(ids) == len(labels) == 10
    assert labels[-1] == ord("y")


def test_no_chat_template_uses_documented_default(char_tok):
    char_tok.chat_template = None
    ids, labels = encode_pair(char_tok, "hi", "yo", 200)
    assert char_tok.decode(ids) == "### User:\nhi\n\n### Assistant:\nyo$"
    assert _labelled(char_tok, ids, labels) == "yo$"


def test_format_errors(char_tok):
    with pytest.raises(FormatError, match="no assistant turn"):
        encode_messages(char_tok, [{"role": "user", "content": "x"}], 10)
    with pytest.raises(FormatError, match="role 'bot'"):
        encode_messages(char_tok, [{"role": "bot", "content": "x"}, {"role": "assistant", "content": "y"}], 10)


def test_rehearsal_row(char_tok):
    assert rehearsal_prompt("Lists are mutable.", "Continue", 9) == "Continue:\n\nLists are"
    assert rehearsal_prompt("x", "Continue", 0) == "Continue."
    ids, labels = encode_rehearsal(char_tok, "Lists are mutable.", "Continue", 9, 500)
    assert _labelled(char_tok, ids, labels) == "Lists are mutable.|"


def test_text_rows_label_everything(char_tok):
    ids, labels = encode_text(char_tok, "ab", 10)
    assert char_tok.decode(ids) == "ab$" and (ids == labels).all()


def test_token_rows_in_ragged_storage(char_tok):
    rows = [encode_pair(char_tok, "a", "b", 50), encode_pair(char_tok, "long prompt", "cd", 50)]
    tr = token_rows(rows)
    assert len(tr) == 2 and tr.lengths().tolist() == [len(rows[0][0]), len(rows[1][0])]
    assert type(tr.buffer.storage).__name__ == "RaggedStorage"
    got = tr.rows([1, 0])
    assert np.array_equal(got[0][0], rows[1][0]) and np.array_equal(got[1][1], rows[0][1])
    assert tr.label_tokens() == 2 + 3
    with pytest.raises(ValueError, match="row 0: 2 input ids but 1 labels"):
        token_rows([(np.array([1, 2]), np.array([1]))])


def test_smollm2_template_known_example(smol_tok):
    ids, labels = encode_pair(smol_tok, "What is the capital of France?", "Paris.", 128)
    text = smol_tok.decode(ids)
    assert text.startswith("<|im_start|>system\n") and text.endswith("<|im_start|>assistant\nParis.<|im_end|>\n")
    assert smol_tok.decode(ids[labels != IGNORE_INDEX]) == "Paris.<|im_end|>\n"
    n_prompt = len(smol_tok.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}], tokenize=False, add_generation_prompt=True
    ))
    assert (labels[: len(smol_tok(text[:n_prompt], add_special_tokens=False)["input_ids"])] == IGNORE_INDEX).all()


def test_open_end_row_has_no_end_of_turn(smol_tok):
    """A completion cut at a token budget is labelled as written, without the template's end marker."""
    closed_ids, closed_labels = encode_pair(smol_tok, "Tell me about rivers.", "Rivers carry water to", 128)
    ids, labels = encode_pair(smol_tok, "Tell me about rivers.", "Rivers carry water to", 128, open_end=True)
    assert smol_tok.decode(ids[labels != IGNORE_INDEX]) == "Rivers carry water to"
    assert smol_tok.decode(closed_ids[closed_labels != IGNORE_INDEX]) == "Rivers carry water to<|im_end|>\n"
    # Same prompt tokens; the open row is the closed row minus its end marker.
    n = len(ids)
    assert np.array_equal(closed_ids[:n], ids) and "<|im_end|>" not in smol_tok.decode(ids[-3:])
    short_ids, short_labels = encode_pair(smol_tok, "Tell me about rivers.", "Rivers carry water to", 10, open_end=True)
    assert len(short_ids) == len(short_labels) == 10
