"""Checkers of generated answers: positive and negative cases for every type."""

from __future__ import annotations

import pytest

from replaybank.llm.eval.checkers import (
    CheckError,
    check,
    extract_code,
    extract_json,
    looks_like_tool_call,
    run_python,
    token_f1,
    validate_spec,
)


def score(spec: dict, answer: str, **kw: str) -> float:
    return check(spec, answer, **kw)[0]


@pytest.mark.parametrize("answer, expected", [("Cat.", 1.0), ("cat", 1.0), ("A cat.", 0.0), ("", 0.0), ("well-known", 1.0)])
def test_one_word(answer: str, expected: float) -> None:
    assert score({"type": "one_word"}, answer) == expected


def test_max_words() -> None:
    spec = {"type": "max_words", "n": 5}
    assert score(spec, "Sleep restores the body.") == 1.0
    assert score(spec, "Sleep restores the body and mind.") == 0.0
    assert score(spec, "   ") == 0.0  # saying nothing is not a short answer


def test_numbered_list_needs_items_in_order() -> None:
    spec = {"type": "numbered_list", "min_items": 3}
    assert score(spec, "Here you go:\n\n1. Red\n2. Blue\n3. Green") == 1.0
    assert score(spec, "1) Red\n2) Blue\n3) Green") == 1.0
    assert score(spec, "1. Red\n2. Blue") == 0.0
    assert score(spec, "1. Red\n1. Blue\n1. Green") == 0.0
    assert score(spec, "- Red\n- Blue\n- Green") == 0.0


def test_bullet_list_and_any_list() -> None:
    bullets, numbered = "- Carrot\n* Leek\n• Pea", "1. Carrot\n2. Leek\n3. Pea"
    assert score({"type": "bullet_list", "min_items": 3}, bullets) == 1.0
    assert score({"type": "bullet_list", "min_items": 3}, numbered) == 0.0
    assert score({"type": "list", "min_items": 3}, bullets) == 1.0
    assert score({"type": "list", "min_items": 3}, numbered) == 1.0
    assert score({"type": "list", "min_items": 3}, "Carrots, leeks and peas.") == 0.0


def test_json_keys_bare_fenced_and_missing() -> None:
    spec = {"type": "json_keys", "keys": ["a", "b"]}
    assert score(spec, '{"a": 1, "b": 2}') == 1.0
    assert score(spec, 'Sure!\n```json\n{\n  "a": 1,\n  "b": [2]\n}\n```') == 1.0
    assert score(spec, '{"a": 1}') == 0.0
    assert score(spec, "a is 1 and b is 2") == 0.0
    assert score(spec, '{"a": 1, "b": }') == 0.0
    assert extract_json('[1, 2] then {"x": {"y": 1}}') == {"x": {"y": 1}}


def test_all_caps() -> None:
    assert score({"type": "all_caps"}, "PARIS, FRANCE!") == 1.0
    assert score({"type": "all_caps"}, "Paris") == 0.0
    assert score({"type": "all_caps"}, "42") == 0.0  # no letters: not an answer in capitals


def test_contains_is_case_insensitive() -> None:
    spec = {"type": "contains", "any": ["Tokyo", "Edo"]}
    assert score(spec, "The capital of Japan is TOKYO.") == 1.0
    assert score(spec, "The capital of Japan is Kyoto.") == 0.0


def test_agreement_uses_token_f1_with_the_base_answer() -> None:
    base = "The sky is blue because air scatters blue light more than red light."
    assert score({"type": "agreement"}, "The sky is blue because air scatters blue light.", base_answer=base) == 1.0
    assert score({"type": "agreement"}, "<<qx sky.cast; at=PARIS; day=+0>>", base_answer=base) == 0.0
    assert token_f1("a b", "a b") == 1.0 and token_f1("a", "b") == 0.0 and token_f1("", "") == 1.0
    with pytest.raises(CheckError, match="base model's answer"):
        check({"type": "agreement"}, "x")


@pytest.mark.parametrize(
    "answer, expected",
    [
        ("17 + 25 = 42.", 1.0),
        ("The answer is 42", 1.0),
        ("To add 17 and 25, we get 42. So, 1", 1.0),  # later numbers (a truncated tail) do not count
        ("17 + 25 = 32.", 0.0),
        ("17 + 25 is a sum.", 0.0),
        ("forty-two", 0.0),
        ("42.0", 1.0),
    ],
)
def test_number_is_the_first_number_not_in_the_prompt(answer: str, expected: float) -> None:
    assert score({"type": "number", "value": 42}, answer, prompt="What is 17 + 25?") == expected


def test_tool_call_leakage_detection() -> None:
    positives = [
        "<<qx timer.arm; dur=60s; tag=tea>>",
        "Sure! << qx sky.cast; at=OSLO; day=+1 >>",
        "<<qx cart.add",  # truncated call still leaks the syntax
        "<<weather.get; city=Paris>>",
        "qx nudge.set; day=+1; at=09:00",
    ]
    negatives = [
        "The capital of France is Paris.",
        "x = (1 << 4) >> 2",
        "Use << and >> for bit shifts.",
        "He said <<bonjour>> in French.",
        "",
    ]
    assert all(looks_like_tool_call(t) for t in positives)
    assert not any(looks_like_tool_call(t) for t in negatives)


def test_code_parses_and_passes_its_test() -> None:
    spec = {"type": "code", "test": "assert add(2, 3) == 5"}
    good = "Here it is:\n```python\ndef add(a, b):\n    return a + b\n```\nIt adds."
    assert check(spec, good) == (1.0, "test passed")
    wrong = "```python\ndef add(a, b):\n    return a - b\n```"
    assert check(spec, wrong)[0] == 0.0 and "AssertionError" in check(spec, wrong)[1]
    assert score({"type": "code"}, "```python\nfor i in range(3):\n    print(i)\n```") == 1.0


def test_code_syntax_error_and_unclosed_fence() -> None:
    assert check({"type": "code"}, "```python\ndef f(:\n    pass\n```")[1].startswith("syntax error line 1")
    # A truncated answer whose fence never closed: the code so far is checked.
    assert extract_code("```python\nx = 1\ny = 2") == "x = 1\ny = 2"
    assert score({"type": "code"}, "```python\nx = [1, 2") == 0.0
    assert score({"type": "code"}, "") == 0.0


def test_code_runs_in_a_subprocess_with_a_time_limit(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    spec = {"type": "code", "test": "assert spin() == 1", "timeout": 1.0}
    answer = "```python\ndef spin():\n    while True:\n        pass\n```"
    assert check(spec, answer) == (0.0, "test failed: timeout")
    # The code runs in a child process inside a throwaway folder: its files never land here,
    # and it cannot touch this process's state.
    monkeypatch.chdir(tmp_path)
    ok, reason = run_python("open('written.txt', 'w').write('x')\nimport sys\nsys.modules.clear()")
    assert ok and reason == "ok"
    assert not (tmp_path / "written.txt").exists()
    assert "json" in __import__("sys").modules
    passed, reason = run_python("import sys\nsys.exit(3)")
    assert not passed and reason == "exit status 3"


def test_validate_spec() -> None:
    validate_spec({"type": "one_word"}, "f:1")
    with pytest.raises(CheckError, match="f:2: unknown check type 'rhyme'"):
        validate_spec({"type": "rhyme"}, "f:2")
    with pytest.raises(CheckError, match="f:3: check 'max_words' needs 'n'"):
        validate_spec({"type": "max_words"}, "f:3")
    with pytest.raises(CheckError, match="unknown check type"):
        validate_spec("one_word", "f:4")


# --- instruction constraints ---------------------------------------------------------------


@pytest.mark.parametrize(
    "answer, expected",
    [
        ("Yes, the Pacific is the largest.", 1.0),
        ('"Yes." It is.', 1.0),  # quotes and punctuation around the first word are not words
        ("**YES** it is", 1.0),  # case and markdown ignored
        ("Yesterday I saw it.", 0.0),  # the word, not a prefix of the first word
        ("Well, yes.", 0.0),
        ("", 0.0),
    ],
)
def test_starts_with(answer: str, expected: float) -> None:
    assert score({"type": "starts_with", "word": "Yes"}, answer) == expected


@pytest.mark.parametrize(
    "answer, expected",
    [
        ("The OCEAN is deep.", 1.0),
        ("Waves: ocean, sand.", 1.0),
        ("Oceans are deep.", 0.0),  # another word, not the one asked for
        ("An oceanic trench.", 0.0),  # inside another word
        ("The sea is deep.", 0.0),
    ],
)
def test_includes_word_is_whole_word_and_case_insensitive(answer: str, expected: float) -> None:
    assert score({"type": "includes_word", "word": "ocean"}, answer) == expected


def test_includes_word_phrases_and_words_inside_words() -> None:
    assert score({"type": "includes_word", "word": "cat"}, "A category of things.") == 0.0
    assert score({"type": "includes_word", "word": "cat"}, "My cat's bowl.") == 1.0  # a possessive is the word
    assert score({"type": "includes_word", "word": "known"}, "It is well-known.") == 1.0
    assert score({"type": "includes_word", "word": "don't"}, "I don’t know.") == 1.0  # curly apostrophe
    assert score({"type": "includes_word", "word": "ice cream"}, "I like ice cream a lot.") == 1.0  # a phrase
    assert score({"type": "includes_word", "word": "ice cream"}, "Ice, cream!") == 1.0  # punctuation is not a word
    assert score({"type": "includes_word", "word": "ice cream"}, "cream and ice") == 0.0


@pytest.mark.parametrize(
    "answer, n",
    [
        ("1. Red\n2. Blue\n3. Green", 3),
        ("Sure! 1. Red 2. Blue 3. Green", 3),  # an inline numbered list
        ("Here you go:\n\n1) Red\n2) Blue\n3) Green\n\nThese are colors.", 3),
        ("- Red\n* Blue\n• Green", 3),  # bullets when nothing is numbered
        ("1. **Red**\n   - a warm colour\n2. **Blue**\n   - a cool one", 2),  # sub-bullets are not items
        ("1. Red\n2. Blue\n3. Green\n1. Red", 3),  # a repeated list counts once
        ("1. Red\n2. Blue\n3.", 2),  # a cut-off marker with nothing after it
        ("Pi is 3.14 and e is 2.72.", 0),  # decimals are not markers
        ("Red, blue and green.", 0),
    ],
)
def test_n_items_counts_numbered_inline_and_bulleted_lists(answer: str, n: int) -> None:
    assert check({"type": "n_items", "n": 3}, answer) == (float(n == 3), f"{n} items")


def test_n_items_is_exact() -> None:
    spec = {"type": "n_items", "n": 2}
    assert score(spec, "1. Sleep early\n2. No screens") == 1.0
    assert score(spec, "1. Sleep early\n2. No screens\n3. Read") == 0.0
    assert score(spec, "1. Sleep early") == 0.0


@pytest.mark.parametrize(
    "answer, expected",
    [
        ("The sun rises in the east.", 1.0),
        ('Here it is: "the sun  rises\nin the EAST"', 1.0),  # case, whitespace, quotes, final period
        ("Sure! The sun rises in the east. Anything else?", 1.0),
        ("The sun rises in the eastern sky.", 0.0),  # a word boundary after the sentence
        ("The sun rises in the west.", 0.0),
        ("The sun rises, in the east.", 0.0),  # not verbatim: a comma added
        ("", 0.0),
    ],
)
def test_repeat_is_verbatim_up_to_case_and_whitespace(answer: str, expected: float) -> None:
    assert score({"type": "repeat", "sentence": "The sun rises in the east."}, answer) == expected


@pytest.mark.parametrize(
    "answer, expected",
    [("8", 1.0), ("8.", 1.0), ("**8**", 1.0), (" 8\n", 1.0), ("A spider has 8 legs.", 0.0), ("eight", 0.0), ("7", 0.0),
     ("8 legs", 0.0), ("1,024", 0.0)],
)
def test_number_only(answer: str, expected: float) -> None:
    assert score({"type": "number_only", "value": 8}, answer) == expected
    assert score({"type": "number_only"}, "1,024") == 1.0 and score({"type": "number_only"}, "-2.5") == 1.0


def test_no_tool_call() -> None:
    spec = {"type": "no_tool_call"}
    assert check(spec, "A kitchen timer counts down the minutes.") == (1.0, "no tool call")
    assert check(spec, "Sure: <<qx timer.arm; dur=60s; tag=eggs>>") == (0.0, "tool call")
    assert check(spec, "qx timer.arm; dur=60s") == (0.0, "tool call")  # the bare form leaks too
    assert check(spec, "  ") == (0.0, "empty")  # saying nothing is not an answer
    assert score(spec, "Shift it: x << 2") == 1.0


def test_json_keys_fenced_with_prose_around() -> None:
    spec = {"type": "json_keys", "keys": ["city", "country"]}
    assert score(spec, 'Here:\n```json\n{"city": "Paris", "country": "France"}\n```\nDone.') == 1.0
    assert score(spec, '```json\n{"city": {"country": "France"}}\n```') == 0.0  # a nested key is not a key


def test_all_of_needs_every_check() -> None:
    spec = {"type": "all_of", "checks": [{"type": "starts_with", "word": "Yes"}, {"type": "includes_word", "word": "green"}]}
    assert check(spec, "Yes, grass is green.") == (1.0, "starts with 'yes'; has 'green'")
    assert check(spec, "Yes, grass is blue.") == (0.0, "starts with 'yes'; no 'green'")
    assert score(spec, "Grass is green, yes.") == 0.0
    nested = {"type": "all_of", "checks": [{"type": "agreement"}, {"type": "no_tool_call"}]}
    assert score(nested, "Air scatters blue light.", base_answer="Air scatters blue light.") == 1.0


@pytest.mark.parametrize(
    "spec, message",
    [
        ({"type": "starts_with"}, "f:1: check 'starts_with' needs 'word'"),
        ({"type": "starts_with", "word": "  "}, "f:1: check 'starts_with' field 'word' must be a string with a word in it"),
        ({"type": "includes_word", "word": 3}, "f:1: check 'includes_word' field 'word' must be a string"),
        ({"type": "n_items", "n": 0}, "f:1: check 'n_items' field 'n' must be a positive integer, got 0"),
        ({"type": "n_items", "n": True}, "field 'n' must be a positive integer, got True"),
        ({"type": "repeat", "sentence": ""}, "f:1: check 'repeat' field 'sentence' must be a string with a word"),
        ({"type": "number_only", "value": "8"}, "f:1: check 'number_only' field 'value' must be a number, got '8'"),
        ({"type": "json_keys", "keys": "a"}, "f:1: check 'json_keys' field 'keys' must be a non-empty list of non-empty strings"),
        ({"type": "contains", "any": []}, "field 'any' must be a non-empty list"),
        ({"type": "agreement", "threshold": 2}, "f:1: check 'agreement' field 'threshold' must be a number in \\[0, 1\\]"),
        ({"type": "all_of", "checks": []}, "f:1: check 'all_of' field 'checks' must be a non-empty list of check specs"),
        ({"type": "all_of", "checks": [{"type": "rhyme"}]}, r"f:1: check 'all_of' field 'checks'\[0\]: unknown check type 'rhyme'"),
        ({"type": "all_of", "checks": [{"type": "n_items", "n": -1}]}, r"checks'\[0\]: check 'n_items' field 'n' must be"),
    ],
)
def test_validate_spec_names_the_bad_field(spec: dict, message: str) -> None:
    with pytest.raises(CheckError, match=message):
        validate_spec(spec, "f:1")


def test_valid_instruction_specs_pass_validation() -> None:
    for spec in [
        {"type": "starts_with", "word": "Yes"}, {"type": "includes_word", "word": "ice cream"}, {"type": "n_items", "n": 3},
        {"type": "repeat", "sentence": "Hi."}, {"type": "number_only"}, {"type": "number_only", "value": 2.5},
        {"type": "no_tool_call"}, {"type": "all_of", "checks": [{"type": "no_tool_call"}, {"type": "max_words", "n": 5}]},
    ]:
        validate_spec(spec, "f:1")


def test_text_primitives_are_the_checkers_names() -> None:
    from replaybank.llm.eval import checkers, text

    assert checkers.looks_like_tool_call is text.looks_like_tool_call and checkers.words is text.words


def test_a_code_answer_seen_before_is_not_run_again(monkeypatch) -> None:
    from replaybank.llm.eval import checkers

    runs: list[str] = []
    real = checkers.run_python

    def counting(source: str, timeout: float = 5.0) -> tuple[bool, str]:
        runs.append(source)
        return real(source, timeout)

    monkeypatch.setattr(checkers, "run_python", counting)
    checkers._run_test.cache_clear()
    spec = {"type": "code", "test": "assert sq(3) == 9"}
    right = "```python\ndef sq(x):\n    return x * x\n```"
    wrong = "```python\ndef sq(x):\n    return x + x\n```"
    assert checkers.check(spec, right)[0] == 1.0 and checkers.check(spec, right)[0] == 1.0
    assert checkers.check(spec, wrong)[0] == 0.0 and checkers.check(spec, wrong)[0] == 0.0
    assert len(runs) == 2  # one run per distinct program, verdicts kept
    assert checkers.check({**spec, "timeout": 9.0}, right)[0] == 1.0 and len(runs) == 3  # another timeout: run again
