"""Text primitives the checkers share: words, numbers, token F1, repetition, tool-call shapes, and
the first JSON object or code block of an answer.

Words are runs of letters and digits (inner apostrophes and hyphens kept), lower-cased.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any

_TOOL_CALL = re.compile(
    r"<<\s*qx\b"  # the qx runtime's call marker
    r"|<<\s*[A-Za-z_][\w.]*(?:\s+[A-Za-z_][\w.]*)?\s*;[^<>]*>>"  # <<name[ method]; args>>
    r"|\bqx\s+[a-z_]+\.[a-z_]+\s*;"  # a bare "qx cart.add;" without the brackets
)
_WORD = re.compile(r"[A-Za-z0-9]+(?:['’-][A-Za-z0-9]+)*")
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")
_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\n(.*?)(?:```|\Z)", re.S)



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
