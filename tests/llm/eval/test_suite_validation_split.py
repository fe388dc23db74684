"""The suite's validation split: loaded by name, the same families and check types as the test
split, other requests (no shared id, prompt or near-duplicate prompt), none in a rehearsal pool."""

from __future__ import annotations

from collections import Counter

import pytest

from replaybank.llm.eval.suite import (
    BUILTIN_VALIDATION,
    FAMILIES,
    MAX_NGRAM_OVERLAP,
    SuiteError,
    SuiteItem,
    SuiteOverlapError,
    builtin_suite_path,
    check_disjoint,
    check_no_overlap,
    general_text_paragraphs,
    load_suite,
    ngram_overlap,
    overlap_key,
)


def _kinds(item: SuiteItem) -> set[str]:
    return {c["type"] for c in item.check.get("checks", [item.check])} | {item.check["type"]}


MIN_PER_FAMILY = {"arithmetic": 24, "conversation": 20, "instruction": 30, "code": 16, "open": 12}
"""The fewest items of each family the curated validation split holds (about two thirds of the test
split's), so a retention chosen on it rests on more than a handful of items."""


def test_validation_split_loads_by_name_with_the_test_splits_families_and_check_types() -> None:
    test, val = load_suite(), load_suite(BUILTIN_VALIDATION)
    assert builtin_suite_path(BUILTIN_VALIDATION).name == "validation.jsonl"
    assert all(i.id.startswith("val-") for i in val)
    assert set(Counter(i.family for i in val)) == set(Counter(i.family for i in test)) == set(FAMILIES)
    for family in FAMILIES:  # every check type a family uses is one its test items use
        used = set().union(*(_kinds(i) for i in val if i.family == family))
        assert used <= set().union(*(_kinds(i) for i in test if i.family == family)), family
    instruction = set().union(*(_kinds(i) for i in val if i.family == "instruction"))
    assert {"starts_with", "includes_word", "n_items", "repeat", "number", "json_keys", "no_tool_call"} <= instruction
    assert {i.budget for i in val} <= {i.budget for i in test}


def check_curated_split(test: list[SuiteItem], val: list[SuiteItem], minimum: dict[str, int]) -> None:
    """Raise unless ``val`` is disjoint from ``test`` and holds at least ``minimum`` items per family."""
    check_disjoint(test, val, "validation.jsonl")
    counts = Counter(i.family for i in val)
    short = {fam: counts[fam] for fam, n in minimum.items() if counts[fam] < n}
    if short:
        raise SuiteError(f"validation.jsonl: too few items in {short}; at least {minimum}")


def test_shipped_validation_split_is_disjoint_from_the_test_split_with_enough_items_per_family() -> None:
    test, val = load_suite(), load_suite(BUILTIN_VALIDATION)
    check_curated_split(test, val, MIN_PER_FAMILY)
    counts = Counter(i.family for i in val)
    assert all(counts[fam] >= n for fam, n in MIN_PER_FAMILY.items()), counts
    # the helper refuses a test prompt copied into the split and a family cut below its minimum
    copied = SuiteItem("val-conv-999", "conversation", test[30].prompt, dict(test[30].check))
    with pytest.raises(SuiteOverlapError, match=rf"val-conv-999 .* repeats test item {test[30].id}"):
        check_curated_split(test, [*val, copied], MIN_PER_FAMILY)
    fewer = [i for i in val if i.family != "arithmetic"] + [i for i in val if i.family == "arithmetic"][:23]
    with pytest.raises(SuiteError, match=r"too few items in \{'arithmetic': 23\}"):
        check_curated_split(test, fewer, MIN_PER_FAMILY)


def test_validation_split_shares_no_id_prompt_or_near_duplicate_with_the_test_split() -> None:
    test, val = load_suite(), load_suite(BUILTIN_VALIDATION)
    check_disjoint(test, val, "validation.jsonl")
    assert not {i.id for i in test} & {i.id for i in val}
    assert not {overlap_key(i.prompt) for i in test} & {overlap_key(i.prompt) for i in val}
    assert len({overlap_key(i.prompt) for i in val}) == len(val)
    worst = max(ngram_overlap(v.prompt, t.prompt) for v in val for t in test)
    assert worst <= MAX_NGRAM_OVERLAP


def test_validation_split_does_not_overlap_any_rehearsal_pool() -> None:
    from replaybank.llm.data.corpus import PYTHON_DOCS, load_corpus
    from replaybank.llm.data.selfsynth import load_prompt_pool

    val = load_suite(BUILTIN_VALIDATION)
    pool, path = load_prompt_pool()
    check_no_overlap(val, pool, str(path))
    check_no_overlap(val, general_text_paragraphs(), "general_text.txt")
    check_no_overlap(val, load_corpus(PYTHON_DOCS).texts, PYTHON_DOCS)


def _item(id: str, prompt: str) -> SuiteItem:
    return SuiteItem(id, "conversation", prompt, {"type": "list", "min_items": 3})


@pytest.mark.parametrize(
    "item, message",
    [
        (_item("t1", "Name three rivers."), r"val: item t1 has the id of a test item"),
        (_item("v1", "  give me a NUMBERED list of three hobbies. "), r"repeats test item t1 .*: the same prompt"),
        (_item("v1", "Now please give me a numbered list of three hobbies."), r"one prompt holds the other"),
        (_item("v1", "Give me a numbered list of three sports."), r"repeats test item t1 .*: 75% of its word 5-grams"),
    ],
)
def test_check_disjoint_refuses_a_shared_id_prompt_or_near_duplicate(item: SuiteItem, message: str) -> None:
    test = [_item("t1", "Give me a numbered list of three hobbies.")]
    check_disjoint(test, [_item("v1", "List three sports as a numbered list.")], "val")
    with pytest.raises(SuiteOverlapError, match=message):
        check_disjoint(test, [item], "val")


def test_ngram_overlap_of_short_prompts_and_unknown_builtin_split() -> None:
    assert ngram_overlap("What is gravity?", "What is gravity?") == 1.0
    assert ngram_overlap("What is gravity?", "What is friction?") == 0.0
    assert ngram_overlap("", "anything") == 0.0
    with pytest.raises(SuiteError, match=r"unknown builtin suite 'builtin:train'"):
        builtin_suite_path("builtin:train")
