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

Code is never executed in this process: :func:`run_python` writes it to a temporary folder and
runs ``python -I`` there with a time limit (and, on POSIX, a memory limit).
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Mapping
from typing import Any

from replaybank.errors import ReplayBankError

CHECK_TYPES = (
    "one_word", "max_words", "numbered_list", "bullet_list", "list", "json_keys", "all_caps", "contains",
    "agreement", "number", "code",
)
AGREEMENT_THRESHOLD = 0.5

_TOOL_CALL = re.compile(
    r"<<\s*qx\b"  # the qx runtime's call marker
    r"|<<\s*[A-Za-z_][\w.]*(?:\s+[A-Za-z_][\w.]*)?\s*;[^<>]*>>"  # <<name[ method]; args>>
    r"|\bqx\s+[a-z_]+\.[a-z_]+\s*;"  # a bare "qx cart.add;" without the brackets
)
_WORD = re.compile(r"[A-Za-z0-9]+(?:['’-][A-Za-z0-9]+)*")
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")
_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\n(.*?)(?:```|\Z)", re.S)


class CheckError(ReplayBankError):
    """A checker spec is malformed."""


def looks_like_tool_call(text: str) -> bool:
    """Whether ``text`` contains something shaped like a tool call (``<<qx ...>>`` or ``<<name; ...>>``).

    Example:
        >>> looks_like_tool_call("<<qx timer.arm; dur=60s; tag=tea>>")
        True
        >>> looks_like_tool_call("x = (1 << 4) >> 2")
        False
    """
    return _TOOL_CALL.search(text) is not None


def words(text: str) -> list[str]:
    """Lower-cased word tokens (letters and digits, inner apostrophes and hyphens kept).

    Example:
        >>> words("It's a well-known fact: 42!")
        ["it's", 'a', 'well-known', 'fact', '42']
    """
    return [w.lower() for w in _WORD.findall(text)]


def token_f1(answer: str, reference: str) -> float:
    """Bag-of-words F1 between two texts (SQuAD-style); 1.0 when both have no words.

    Example:
        >>> round(token_f1("The capital is Paris.", "Paris is the capital of France."), 3)
        0.8
    """
    a, b = Counter(words(answer)), Counter(words(reference))
    if not a and not b:
        return 1.0
    common = sum((a & b).values())
    if common == 0:
        return 0.0
    precision, recall = common / sum(a.values()), common / sum(b.values())
    return 2 * precision * recall / (precision + recall)


def numbers(text: str) -> list[float]:
    """The numbers written in ``text`` (thousands commas allowed).

    Example:
        >>> numbers("17 + 25 = 42, not 1,000.5")
        [17.0, 25.0, 42.0, 1000.5]
    """
    out = []
    for m in _NUMBER.findall(text):
        try:
            out.append(float(m.replace(",", "")))
        except ValueError:
            continue
    return out


def degenerate(text: str) -> bool:
    """Whether ``text`` repeats itself: a line 3+ times (list markers ignored), a word 4-gram 3+
    times, or under half distinct word 3-grams (numbers ignored, so "1. x 2. x 3. x" repeats).

    Example:
        >>> degenerate("1. Beach towel 2. Beach towel and blanket 3. Beach towel and blanket 4. Beach towel and blanket")
        True
        >>> degenerate("Bread needs flour, water, salt and yeast; a long cool rise gives it flavour.")
        False
    """
    lines = Counter(
        " ".join(words(ln)) for ln in (re.sub(r"^\s*(?:\d+[.)]|[-*•])\s*", "", x) for x in text.splitlines())
    )
    lines.pop("", None)
    if lines and max(lines.values()) >= 3:
        return True
    w = [x for x in words(text) if not x.isdigit()]
    fours = Counter(tuple(w[i : i + 4]) for i in range(len(w) - 3))
    if fours and max(fours.values()) >= 3:
        return True
    if len(w) >= 12:
        threes = [tuple(w[i : i + 3]) for i in range(len(w) - 2)]
        return len(set(threes)) < 0.5 * len(threes)
    return False


def extract_code(text: str) -> str:
    """The first fenced code block (a Python one preferred), else the whole text."""
    blocks = _FENCE.findall(text)
    for lang, body in blocks:
        if lang.lower() in ("python", "py", "python3"):
            return str(body)
    if blocks:
        return str(blocks[0][1])
    return text


def extract_json(text: str) -> Any:
    """The first JSON object in ``text`` (fenced or bare), or None when there is none."""
    candidates = [body for _, body in _FENCE.findall(text)] + [text]
    decoder = json.JSONDecoder()
    for cand in candidates:
        for start in (m.start() for m in re.finditer(r"\{", cand)):
            try:
                obj, _ = decoder.raw_decode(cand, start)
            except json.JSONDecodeError:
                continue
            if isinstance(obj, dict):
                return obj
    return None


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
    """Raise :class:`CheckError` naming ``where`` when ``spec`` is not a known checker spec."""
    if not isinstance(spec, Mapping) or spec.get("type") not in CHECK_TYPES:
        got = spec.get("type") if isinstance(spec, Mapping) else spec
        raise CheckError(f"{where}: unknown check type {got!r}; expected one of {', '.join(CHECK_TYPES)}")
    need = {"max_words": ("n",), "json_keys": ("keys",), "contains": ("any",), "number": ("value",)}
    for key in need.get(spec["type"], ()):
        if key not in spec:
            raise CheckError(f"{where}: check {spec['type']!r} needs {key!r}")


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
        n = _list_items(text, numbered=True) if kind != "bullet_list" else 0
        if kind != "numbered_list":
            n = max(n, _list_items(text, numbered=False))
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
    raise CheckError(f"unknown check type {kind!r}; expected one of {', '.join(CHECK_TYPES)}")


def _list_items(text: str, numbered: bool) -> int:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if not numbered:
        return sum(1 for ln in lines if re.match(r"[-*•]\s+\S", ln))
    expected = 1
    for ln in lines:
        m = re.match(r"(\d+)[.)]\s+\S", ln)
        if m and int(m.group(1)) == expected:
            expected += 1
    return expected - 1


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
    passed, reason = run_python(f"{code}\n\n{test}\n", timeout=float(spec.get("timeout", 5.0)))
    return float(passed), "test passed" if passed else f"test failed: {reason}"
