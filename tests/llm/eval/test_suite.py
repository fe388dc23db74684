"""The general-capability suite: loading (and its errors), overlap checks, base caching, scoring."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from replaybank.errors import ReplayBankError
from replaybank.llm.eval import suite as suite_mod
from replaybank.llm.eval.decode import Generation
from replaybank.llm.eval.suite import (
    FAMILIES,
    SuiteError,
    SuiteItem,
    SuiteOverlapError,
    check_no_overlap,
    evaluate_suite,
    general_text_paragraphs,
    load_suite,
    prepare_suite,
)


def write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", "utf-8")
    return path


def item_line(**kw: Any) -> str:
    obj = {"id": "a1", "family": "arithmetic", "prompt": "What is 2 + 3?", "check": {"type": "number", "value": 5}}
    obj.update(kw)
    return json.dumps(obj)


def test_builtin_suite_is_large_covers_every_family_and_has_unique_prompts() -> None:
    items = load_suite()
    counts = Counter(i.family for i in items)
    assert len(items) >= 100
    assert set(counts) == set(FAMILIES)
    assert min(counts.values()) >= 20
    assert len({i.prompt for i in items}) == len(items)
    # agreement with the base's wording is its own family, and the only one scored that way
    assert {i.family for i in items if i.check["type"] == "agreement"} == {"open"} and counts["open"] >= 10
    assert all(i.check["type"] == "agreement" for i in items if i.family == "open")
    # the instruction-following family covers every constraint the issue names
    kinds = Counter(c["type"] for i in items if i.family == "instruction" for c in i.check.get("checks", [i.check]))
    assert counts["instruction"] >= 32
    assert {"starts_with", "includes_word", "n_items", "repeat", "json_keys", "number", "no_tool_call"} <= set(kinds)


def test_builtin_suite_does_not_overlap_any_rehearsal_pool() -> None:
    from replaybank.llm.data.selfsynth import load_prompt_pool

    items = load_suite()
    pool, path = load_prompt_pool()
    check_no_overlap(items, pool, str(path))
    check_no_overlap(items, general_text_paragraphs(), "general_text.txt")
    from replaybank.llm.data.corpus import PYTHON_DOCS, load_corpus

    check_no_overlap(items, load_corpus(PYTHON_DOCS).texts, PYTHON_DOCS)  # the corpus arm's pool


def test_user_suite_file_loads(tmp_path: Path) -> None:
    path = write(tmp_path / "s.jsonl", [item_line(), "", item_line(id="c1", family="code", prompt="Write code.", check={"type": "code"}, max_new_tokens=80)])
    items = load_suite(str(path))
    assert [i.id for i in items] == ["a1", "c1"]
    assert items[0].budget == suite_mod.FAMILY_MAX_NEW_TOKENS["arithmetic"] and items[1].budget == 80


def test_user_suite_with_instruction_and_open_items_loads(tmp_path: Path) -> None:
    lines = [
        item_line(id="i1", family="instruction", prompt="Start with the word Yes: is ice cold?",
                  check={"type": "all_of", "checks": [{"type": "starts_with", "word": "Yes"}, {"type": "no_tool_call"}]}),
        item_line(id="o1", family="open", prompt="Why do cats purr?", check={"type": "agreement"}),
    ]
    items = load_suite(str(write(tmp_path / "s.jsonl", lines)))
    assert [(i.family, i.budget) for i in items] == [("instruction", 48), ("open", 32)]
    assert set(suite_mod.CHECKED_FAMILIES) == set(FAMILIES) - {"open"}


@pytest.mark.parametrize(
    "line, message",
    [
        ('{"id": "a1", "family": ', r"s\.jsonl:2: malformed JSON"),
        ("[1, 2]", r"s\.jsonl:2: expected a JSON object"),
        (item_line(id="b", family="poetry"), r"s\.jsonl:2: unknown family 'poetry'"),
        (item_line(id="b", check={"type": "rhyme"}), r"s\.jsonl:2: unknown check type 'rhyme'"),
        (item_line(id="b", prompt=""), r"s\.jsonl:2: field 'prompt' must be a non-empty string"),
        (item_line(), r"s\.jsonl:2: duplicate id 'a1'"),
        (item_line(id="b", max_new_tokens=0), r"s\.jsonl:2: max_new_tokens must be a positive integer"),
        (item_line(id="b", family="conversation", check={"type": "agreement"}),
         r"s\.jsonl:2: an 'agreement' check .* belongs in family 'open' and only there; got 'agreement' in family 'conversation'"),
        (item_line(id="b", family="open"), r"s\.jsonl:2: an 'agreement' check .* got 'number' in family 'open'"),
        (item_line(id="b", family="instruction", check={"type": "n_items", "n": "3"}),
         r"s\.jsonl:2: check 'n_items' field 'n' must be a positive integer, got '3'"),
        (item_line(id="b", family="instruction", check={"type": "all_of", "checks": [{"type": "repeat"}]}),
         r"s\.jsonl:2: check 'all_of' field 'checks'\[0\]: check 'repeat' needs 'sentence'"),
    ],
)
def test_suite_file_errors_name_file_and_line(tmp_path: Path, line: str, message: str) -> None:
    path = write(tmp_path / "s.jsonl", [item_line(), line])
    with pytest.raises(SuiteError, match=message):
        load_suite(str(path))


def test_suite_file_empty_missing_and_not_utf8(tmp_path: Path) -> None:
    empty = write(tmp_path / "empty.jsonl", ["", "  "])
    with pytest.raises(SuiteError, match=r"empty\.jsonl: suite file has no items"):
        load_suite(str(empty))
    with pytest.raises(SuiteError, match=r"nope\.jsonl: file not found"):
        load_suite(str(tmp_path / "nope.jsonl"))
    bad = tmp_path / "latin1.jsonl"
    second = json.dumps({"id": "b", "family": "open", "prompt": "Caf\u00e9?", "check": {"type": "agreement"}}, ensure_ascii=False)
    bad.write_bytes((item_line() + "\n" + second + "\n").encode("latin-1"))
    with pytest.raises(SuiteError, match=r"latin1\.jsonl:2: not valid UTF-8"):
        load_suite(str(bad))
    assert issubclass(SuiteError, ReplayBankError)


def test_check_no_overlap_names_the_source_and_item() -> None:
    items = [SuiteItem("k9", "open", "Why is the sky blue?", {"type": "agreement"})]
    check_no_overlap(items, ["Why is the sea blue?", "The sky is blue."], "pool.txt")
    with pytest.raises(SuiteOverlapError, match=r"pool\.txt: text 1 overlaps evaluation-suite item k9"):
        check_no_overlap(items, ["unrelated", "Q:  WHY is the sky\nblue? A: light"], "pool.txt")
    arith = [SuiteItem("a3", "arithmetic", "What is 4 + 7? Answer with the number.", {"type": "number", "value": 11})]
    with pytest.raises(SuiteOverlapError, match="item a3"):  # a shortened copy of the item overlaps too
        check_no_overlap(arith, ["What is 4 + 7?"], "pool.txt")
    check_no_overlap(arith, ["What is 4 + 70?", "4 + 7", "What"], "pool.txt")  # short fragments do not


class FakeModel:
    """Stands in for a model: answers come from a dict (prompt -> text) via a patched generator."""

    def __init__(self, answers: dict[str, str]) -> None:
        self.answers = answers
        self.calls = 0


def fake_generate(model: FakeModel, tokenizer: Any, prompts: list[str], *, max_new_tokens: int, batch_size: int, desc: Any,
                  precision: str = "fp32") -> list[Generation]:
    model.calls += 1
    return [Generation(model.answers[p], False, 3) for p in prompts]


ITEMS = [
    SuiteItem("conv-1", "conversation", "List three fruits as a numbered list.", {"type": "numbered_list", "min_items": 3}),
    SuiteItem("conv-2", "open", "Why is the sky blue?", {"type": "agreement"}),
    SuiteItem("inst-1", "instruction", "Start with the word Yes: is ice cold?", {"type": "starts_with", "word": "Yes"}),
    SuiteItem("inst-2", "instruction", "Repeat exactly: Ice is cold.", {"type": "repeat", "sentence": "Ice is cold."}),
    SuiteItem("arit-1", "arithmetic", "What is 2 + 3?", {"type": "number", "value": 5}),
    SuiteItem("arit-2", "arithmetic", "What is 4 + 4?", {"type": "number", "value": 8}),
    SuiteItem("code-1", "code", "Write add(a, b).", {"type": "code"}),
]
BASE = {
    "List three fruits as a numbered list.": "1. Apple\n2. Pear\n3. Plum",
    "Why is the sky blue?": "Air scatters blue light more than red light.",
    "Start with the word Yes: is ice cold?": "Yes, ice is cold.",
    "Repeat exactly: Ice is cold.": "Ice is very cold.",  # the base fails it: dropped, like a wrong sum
    "What is 2 + 3?": "2 + 3 = 5",
    "What is 4 + 4?": "4 + 4 = 9",  # wrong: dropped from the suite
    "Write add(a, b).": "```python\ndef add(a, b):\n    return a + b\n```",
}


@pytest.fixture
def patched(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(suite_mod, "generate_detailed", fake_generate)
    monkeypatch.setattr(suite_mod, "model_fingerprint", lambda model: "fake-" + str(sorted(model.answers.items())))


def test_prepare_suite_drops_what_the_base_fails_and_caches_base_answers(tmp_path: Path, patched: None) -> None:
    base = FakeModel(BASE)
    suite = prepare_suite(base, None, ITEMS, cache_dir=tmp_path)
    assert [i.id for i in suite.items] == ["conv-1", "conv-2", "inst-1", "arit-1", "code-1"]
    # any family's item the base model fails is dropped (an instruction as well as a sum), and named
    assert suite.dropped == ["inst-2", "arit-2"] == suite.manifest["dropped_ids"]
    assert suite.base["families"] == {"conversation": 1.0, "instruction": 1.0, "arithmetic": 1.0, "code": 1.0,
                                      "open": 1.0}
    assert suite.base["leakage"] == 0.0
    calls = base.calls  # one generation call per token budget
    assert calls == len({i.budget for i in ITEMS}) and len(list(tmp_path.glob("suite-*.json"))) == 1
    again = prepare_suite(base, None, ITEMS, cache_dir=tmp_path)
    assert base.calls == calls  # read back from the cache, not generated again
    assert again.base_answers == suite.base_answers
    other = FakeModel({**BASE, "What is 4 + 4?": "8"})  # another model: its own cache entry
    assert [i.id for i in prepare_suite(other, None, ITEMS, cache_dir=tmp_path).items][-3:] == ["arit-1", "arit-2", "code-1"]
    assert len(list(tmp_path.glob("suite-*.json"))) == 2
    prepare_suite(base, None, ITEMS, cache_dir=tmp_path, precision="bf16")  # bf16 answers differ: own entry
    assert base.calls == 2 * calls and len(list(tmp_path.glob("suite-*.json"))) == 3
    prepare_suite(base, None, ITEMS, cache_dir=tmp_path, precision="fp32")  # fp32 = the key it always had
    assert base.calls == 2 * calls


def test_evaluate_suite_scores_retention_and_leakage(tmp_path: Path, patched: None) -> None:
    suite = prepare_suite(FakeModel(BASE), None, ITEMS, cache_dir=tmp_path)
    tuned = FakeModel({
        "List three fruits as a numbered list.": "<<qx cart.add; sku=apples; qty=3>>",
        "Why is the sky blue?": "Because air scatters blue light more than red light.",
        "Start with the word Yes: is ice cold?": "Ice is cold, yes.",
        "Repeat exactly: Ice is cold.": "Ice is cold.",
        "What is 2 + 3?": "5",
        "What is 4 + 4?": "8",
        "Write add(a, b).": "```python\ndef add(a, b)\n    return a + b\n```",
    })
    result = evaluate_suite(tuned, None, suite)
    # the family order is FAMILIES'; the dropped inst-2 is not scored even though the tuned model passes it
    assert list(result["families"]) == ["conversation", "instruction", "arithmetic", "code", "open"]
    assert result["families"] == {"conversation": 0.0, "instruction": 0.0, "arithmetic": 1.0, "code": 0.0, "open": 1.0}
    assert result["retention"] == result["families"]
    assert result["n"] == {"conversation": 1, "instruction": 1, "arithmetic": 1, "code": 1, "open": 1}
    assert result["leakage"] == pytest.approx(1 / 5)
    leaked = [o for o in result["items"] if o["leak"]]
    assert [o["id"] for o in leaked] == ["conv-1"]


def test_prepare_suite_with_nothing_left(tmp_path: Path, patched: None) -> None:
    only_wrong = [i for i in ITEMS if i.id in ("inst-2", "arit-2")]
    with pytest.raises(SuiteError, match="no suite item left: the base model fails all 2 items"):
        prepare_suite(FakeModel(BASE), None, only_wrong, cache_dir=tmp_path)
    with pytest.raises(SuiteError, match="no items"):
        prepare_suite(FakeModel(BASE), None, [], cache_dir=tmp_path)


def test_general_text_rows_are_plain_lm_rows(smol_tok: Any) -> None:
    from replaybank.llm.eval.suite import general_text_rows

    rows = general_text_rows(smol_tok, 64)
    assert len(rows) == len(general_text_paragraphs()) >= 15
    ids, labels = rows.row(0)
    assert len(ids) <= 64 and (ids == labels).all()
    assert not any("python" in p.lower() for p in general_text_paragraphs())



def test_tiny_model_end_to_end_base_agrees_with_itself(tmp_path: Path, tiny_model_dir: Any, small_tok: Any) -> None:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    items = load_suite()
    picked = [i for i in items if i.check["type"] in ("agreement", "numbered_list")][:6] + [
        i for i in items if i.family == "arithmetic"][:2]
    small = [SuiteItem(i.id, i.family, i.prompt, i.check, 6) for i in picked]  # 6 tokens each: fast
    suite = prepare_suite(model, small_tok, small, cache_dir=tmp_path, desc=None)
    assert set(suite.dropped) <= {i.id for i in small if i.check["type"] != "agreement"}
    again = evaluate_suite(model, small_tok, suite)
    # Greedy decoding is deterministic and independent of batch composition: the base model
    # evaluated against its own cached answers agrees everywhere and scores what it scored.
    assert again["families"] == suite.base["families"]
    assert all(o["score"] == 1.0 for o in again["items"] if o["check"] == "agreement")
    assert again["leakage"] == suite.base["leakage"] == 0.0
