"""Deterministic checkers for generated answers.

A checker spec is a JSON object with a ``type`` and its parameters; :func:`check` returns a score
in ``[0, 1]`` (every checker scores 0 or 1). Words are runs of letters and digits. The types:

- ``one_word``: the answer is one word (punctuation ignored).
- ``max_words`` (``n``): between 1 and ``n`` words.
- ``numbered_list`` (``min_items``, default 2): lines ``1.`` ``2.`` ... in order, at least ``min_items``.
- ``bullet_list`` (``min_items``): at least ``min_items`` lines starting with ``-``, ``*`` or ``•``.
- ``list`` (``min_items``): either of the two (small models number lists asked for as bullets).
- ``json_keys`` (``keys``): the first JSON object in the answer (bare or fenced) has every key.
- ``all_caps``: letters present, none lowercase.
- ``contains`` (``any``): the answer contains one of the strings, case-insensitively.
- ``agreement`` (``threshold``, default 0.5): bag-of-words F1 with the base model's own greedy
  answer (SQuAD-style token F1) is at least ``threshold``.
- ``number`` (``value``): the first number in the answer that does not occur in the prompt equals
  ``value`` ("17 + 25 = 42" passes, "17 + 25 = 32" fails, a truncated tail after it is ignored).
- ``code`` (``test``, ``timeout`` default 5 s): the first fenced code block (a ``python`` one
  preferred; the whole answer when there is no fence) parses with ``ast.parse``; with ``test``,
  code + test must exit 0.

Instruction constraints (:mod:`replaybank.llm.eval.constraints`):

- ``starts_with`` (``word``): the answer's first word is ``word``.
- ``includes_word`` (``word``): ``word`` occurs as a whole word ("cat" is not in "category").
- ``n_items`` (``n``): the answer's list has exactly ``n`` items (numbered, one per line or inline,
  else bulleted).
- ``repeat`` (``sentence``): the answer contains ``sentence``, case, whitespace and its final
  punctuation aside.
- ``number_only`` (``value`` optional): the answer is a number and nothing else (equal to ``value``).
- ``no_tool_call``: the answer says something and holds nothing shaped like a tool call.
- ``all_of`` (``checks``): every spec in the list passes (details joined with ``; ``).

Code is never executed in this process: :func:`run_python` writes it to a temporary folder and
runs ``python -I`` there with a time limit (and, on POSIX, a memory limit).
"""

from __future__ import annotations

import ast
import functools
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from typing import Any

from replaybank.errors import ReplayBankError
from replaybank.llm.eval import constraints as con
from replaybank.llm.eval.text import (
    degenerate,
    extract_code,
    extract_json,
    looks_like_tool_call,
    numbers,
    token_f1,
    words,
)

__all__ = [
    "AGREEMENT_THRESHOLD", "CHECK_TYPES", "CheckError", "check", "degenerate", "extract_code", "extract_json",
    "looks_like_tool_call", "numbers", "run_python", "token_f1", "validate_spec", "words",
]

CHECK_TYPES = (
    "one_word", "max_words", "numbered_list", "bullet_list", "list", "json_keys", "all_caps", "contains",
    "agreement", "number", "code", "starts_with", "includes_word", "n_items", "repeat", "number_only",
    "no_tool_call", "all_of",
)
AGREEMENT_THRESHOLD = 0.5

# Fields each type needs (required) or may have (optional), and the kind of value they hold.
_REQUIRED: dict[str, dict[str, str]] = {
    "max_words": {"n": "count"}, "json_keys": {"keys": "strings"}, "contains": {"any": "strings"},
    "number": {"value": "number"}, "starts_with": {"word": "text"}, "includes_word": {"word": "text"},
    "n_items": {"n": "count"}, "repeat": {"sentence": "text"}, "all_of": {"checks": "specs"},
}
_OPTIONAL: dict[str, str] = {"min_items": "count", "threshold": "share", "timeout": "seconds", "test": "text"}
_KINDS = {
    "count": "a positive integer", "strings": "a non-empty list of non-empty strings", "number": "a number",
    "text": "a string with a word in it", "specs": "a non-empty list of check specs", "share": "a number in [0, 1]",
    "seconds": "a positive number",
}

class CheckError(ReplayBankError):
    """A checker spec is malformed."""


def run_python(source: str, timeout: float = 5.0) -> tuple[bool, str]:
    """Run ``source`` with ``python -I`` in a fresh temporary folder, never in this process.

    Returns:
        ``(passed, reason)``: passed when the process exits 0 within ``timeout`` seconds; reason is
        ``"ok"``, ``"timeout"`` or the last line of its stderr.
    """
    with tempfile.TemporaryDirectory(prefix="replaybank-check-") as tmp:
        path = os.path.join(tmp, "answer.py")
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(source)
        env = {"PATH": os.environ.get("PATH", ""), "PYTHONDONTWRITEBYTECODE": "1", "HOME": tmp}
        try:
            proc = subprocess.run(
                [sys.executable, "-I", "answer.py"], cwd=tmp, env=env, capture_output=True,
                text=True, timeout=timeout, stdin=subprocess.DEVNULL, preexec_fn=_limits if os.name == "posix" else None,
            )
        except subprocess.TimeoutExpired:
            return False, "timeout"
    if proc.returncode == 0:
        return True, "ok"
    tail = proc.stderr.strip().splitlines()
    return False, tail[-1] if tail else f"exit status {proc.returncode}"


def _limits() -> None:  # pragma: no cover - runs in the child
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
    resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))


def validate_spec(spec: Any, where: str) -> None:
    """Raise :class:`CheckError` naming ``where`` and the field when ``spec`` is not a valid checker spec.

    Example:
        >>> validate_spec({"type": "n_items", "n": 3}, "suite.jsonl:4")
        >>> validate_spec({"type": "n_items", "n": 0}, "suite.jsonl:5")
        Traceback (most recent call last):
        ...
        replaybank.llm.eval.checkers.CheckError: suite.jsonl:5: check 'n_items' field 'n' must be a positive integer, got 0
    """
    if not isinstance(spec, Mapping) or spec.get("type") not in CHECK_TYPES:
        got = spec.get("type") if isinstance(spec, Mapping) else spec
        raise CheckError(f"{where}: unknown check type {got!r}; expected one of {', '.join(CHECK_TYPES)}")
    kind = spec["type"]
    for key in _REQUIRED.get(kind, {}):
        if key not in spec:
            raise CheckError(f"{where}: check {kind!r} needs {key!r}")
    optional = {"value": "number"} if kind == "number_only" else _OPTIONAL
    for key, value_kind in {**optional, **_REQUIRED.get(kind, {})}.items():
        if key in spec and not _valid(spec[key], value_kind, f"{where}: check {kind!r} field {key!r}"):
            raise CheckError(f"{where}: check {kind!r} field {key!r} must be {_KINDS[value_kind]}, got {spec[key]!r}")


def _valid(value: Any, kind: str, where: str) -> bool:
    if kind == "specs":
        if not isinstance(value, list) or not value:
            return False
        for k, sub in enumerate(value):
            validate_spec(sub, f"{where}[{k}]")
        return True
    is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
    return {
        "count": isinstance(value, int) and not isinstance(value, bool) and value > 0,
        "strings": isinstance(value, list) and bool(value) and all(isinstance(v, str) and v for v in value),
        "number": is_number,
        "text": isinstance(value, str) and bool(words(value)),
        "share": is_number and 0 <= value <= 1,
        "seconds": is_number and value > 0,
    }[kind]


def check(spec: Mapping[str, Any], answer: str, *, prompt: str = "", base_answer: str | None = None) -> tuple[float, str]:
    """Score ``answer`` under ``spec``.

    Args:
        spec: the checker spec (see the module docstring).
        answer: the generated text.
        prompt: the request (``number`` ignores the numbers it contains).
        base_answer: the base model's answer, required by ``agreement``.

    Returns:
        ``(score, detail)`` with ``score`` in ``[0, 1]`` and a short human-readable ``detail``.

    Raises:
        CheckError: an unknown type, or ``agreement`` without ``base_answer``.

    Example:
        >>> check({"type": "number", "value": 42}, "17 + 25 = 42.", prompt="What is 17 + 25?")
        (1.0, 'answer 42.0')
        >>> check({"type": "max_words", "n": 3}, "Paris, of course.")
        (1.0, '3 words')
    """
    kind = spec.get("type")
    text = answer.strip()
    if kind == "one_word":
        n = len(words(text))
        return float(n == 1), f"{n} words"
    if kind == "max_words":
        n = len(words(text))
        return float(0 < n <= int(spec["n"])), f"{n} words"
    if kind in ("numbered_list", "bullet_list", "list"):
        n = con.list_items(text, numbered=True) if kind != "bullet_list" else 0
        if kind != "numbered_list":
            n = max(n, con.list_items(text, numbered=False))
        return float(n >= int(spec.get("min_items", 2))), f"{n} items"
    if kind == "json_keys":
        obj = extract_json(text)
        if obj is None:
            return 0.0, "no JSON object"
        missing = [k for k in spec["keys"] if k not in obj]
        return float(not missing), f"missing {missing}" if missing else "all keys"
    if kind == "all_caps":
        letters = [c for c in text if c.isalpha()]
        ok = bool(letters) and not any(c.islower() for c in letters)
        return float(ok), "all capitals" if ok else "has lowercase"
    if kind == "contains":
        low = text.lower()
        hit = next((s for s in spec["any"] if str(s).lower() in low), None)
        return float(hit is not None), f"found {hit!r}" if hit is not None else "not found"
    if kind == "agreement":
        if base_answer is None:
            raise CheckError("an 'agreement' check needs the base model's answer")
        f1 = token_f1(text, base_answer)
        threshold = float(spec.get("threshold", AGREEMENT_THRESHOLD))
        return float(f1 >= threshold), f"F1 {f1:.2f}"
    if kind == "number":
        given = set(numbers(prompt))
        found = next((x for x in numbers(text) if x not in given), None)
        ok = found is not None and abs(found - float(spec["value"])) < 1e-9
        return float(ok), f"answer {found}"
    if kind == "code":
        return _check_code(text, spec)
    if kind in _CONSTRAINTS:
        return _constraint(str(kind), text, spec)
    if kind == "all_of":
        results = [check(sub, answer, prompt=prompt, base_answer=base_answer) for sub in spec["checks"]]
        return min(r[0] for r in results), "; ".join(r[1] for r in results)
    raise CheckError(f"unknown check type {kind!r}; expected one of {', '.join(CHECK_TYPES)}")


def _constraint(kind: str, text: str, spec: Mapping[str, Any]) -> tuple[float, str]:
    """The instruction constraints (``starts_with`` ... ``no_tool_call``)."""
    if kind == "starts_with":
        ok = con.starts_with(text, spec["word"])
        return float(ok), f"starts with {(words(text) or [''])[0]!r}"
    if kind == "includes_word":
        ok = con.includes_word(text, spec["word"])
        return float(ok), f"{'has' if ok else 'no'} {spec['word']!r}"
    if kind == "n_items":
        n = con.count_items(text)
        return float(n == int(spec["n"])), f"{n} items"
    if kind == "repeat":
        ok = con.repeats(text, spec["sentence"])
        return float(ok), "repeated" if ok else "not repeated"
    if kind == "number_only":
        value = con.number_only(text)
        if value is None:
            return 0.0, "not a bare number"
        return float("value" not in spec or abs(value - float(spec["value"])) < 1e-9), f"answer {value}"
    ok = con.no_tool_call(text)
    return float(ok), "no tool call" if ok else "tool call" if looks_like_tool_call(text) else "empty"


_CONSTRAINTS = ("starts_with", "includes_word", "n_items", "repeat", "number_only", "no_tool_call")


def _check_code(text: str, spec: Mapping[str, Any]) -> tuple[float, str]:
    code = extract_code(text)
    if not code.strip():
        return 0.0, "no code"
    try:
        ast.parse(code)
    except SyntaxError as exc:
        return 0.0, f"syntax error line {exc.lineno}: {exc.msg}"
    test = spec.get("test")
    if not test:
        return 1.0, "parses"
    passed, reason = _run_test(f"{code}\n\n{test}\n", float(spec.get("timeout", 5.0)))
    return float(passed), "test passed" if passed else f"test failed: {reason}"


@functools.lru_cache(maxsize=4096)
def _run_test(source: str, timeout: float) -> tuple[bool, str]:
    # One run per distinct program and timeout in a process: an arm that kept the base model's
    # answer gets the base's verdict without starting Python again (about 0.16 s a run here).
    return run_python(source, timeout)
