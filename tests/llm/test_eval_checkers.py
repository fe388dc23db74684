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
