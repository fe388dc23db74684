"""Verifiable instruction constraints: pure functions on an answer's text.

The instruction-following family asks for a form the answer must take (start with a word, use a
word, give exactly N list items, repeat a sentence, answer with a number only, call no tool);
each function here decides one of them. :func:`replaybank.llm.eval.checkers.check` maps a
checker spec onto them.
"""

from __future__ import annotations

import re

from replaybank.llm.eval.text import looks_like_tool_call, words

_NUMBERED = re.compile(r"(?:^|(?<=\s))(\d+)[.)][ \t]+(?=\S)", re.M)
_NUMBER_ONLY = re.compile(r"-?\d{1,3}(?:,\d{3})+(?:\.\d+)?|-?\d+(?:\.\d+)?")
_QUOTES = str.maketrans({"‘": "'", "’": "'", "“": '"', "”": '"'})


def list_items(text: str, numbered: bool) -> int:
    """Items of a list written one per line: ``1.`` ``2.`` ... in order, or ``-``/``*``/``•`` bullets.

    Example:
        >>> list_items("Here:\\n1. Red\\n2. Blue\\n1. Again", numbered=True), list_items("- a\\n* b", numbered=False)
        (2, 2)
    """
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if not numbered:
        return sum(1 for ln in lines if re.match(r"[-*•]\s+\S", ln))
    expected = 1
    for ln in lines:
        m = re.match(r"(\d+)[.)]\s+\S", ln)
        if m and int(m.group(1)) == expected:
            expected += 1
    return expected - 1


def count_items(text: str) -> int:
    """Items of the answer's list: numbered markers ``1.`` ``2.`` ... in order (one per line or
    inline, "Sure! 1. a 2. b"), else bullet lines. A marker with nothing after it (a cut-off
    answer) and a number out of order ("1. a 2. b 1. a", a repeated list) do not count.

    Example:
        >>> count_items("Sure! 1. Apple 2. Pear 3. Plum"), count_items("- a\\n- b"), count_items("Pi is 3.14.")
        (3, 2, 0)
    """
    expected = 1
    for m in _NUMBERED.finditer(text):
        if int(m.group(1)) == expected:
            expected += 1
    return expected - 1 if expected > 1 else list_items(text, numbered=False)


def starts_with(text: str, word: str) -> bool:
    """Whether the answer's first word is ``word`` (case and punctuation ignored).

    Example:
        >>> starts_with('"Yes, of course."', "yes"), starts_with("Yesterday it rained.", "yes")
        (True, False)
    """
    first, want = words(text)[:1], words(word)
    return bool(want) and first == want[:1]


def includes_word(text: str, word: str) -> bool:
    """Whether ``word`` (or a phrase of several words) occurs as whole words, case-insensitively:
    no letter or digit may touch it ("cat" is in "my cat's bowl", not in "category"; between the
    words of a phrase any run of spaces or punctuation).

    Example:
        >>> includes_word("The OCEAN is deep.", "ocean"), includes_word("A category.", "cat")
        (True, False)
    """
    want = words(word)
    if not want:
        return False
    pattern = r"(?<![a-z0-9])" + r"[\W_]+".join(re.escape(w) for w in want) + r"(?![a-z0-9])"
    return re.search(pattern, text.translate(_QUOTES).lower()) is not None


def normalise_sentence(text: str) -> str:
    """Lower case, straight quotes, whitespace collapsed, final ``. ! ?`` dropped.

    Example:
        >>> normalise_sentence("  The  cat’s   MAT. ")
        "the cat's mat"
    """
    return " ".join(text.translate(_QUOTES).lower().split()).rstrip(".!?")


def repeats(text: str, sentence: str) -> bool:
    """Whether the answer contains ``sentence`` verbatim up to case, whitespace, quote style and
    its final punctuation, at word boundaries ("I like tea" is not in "I like teapots").

    Example:
        >>> repeats('Here it is: "The sun  rises in the EAST."', "The sun rises in the east.")
        True
        >>> repeats("The sun rises in the west.", "The sun rises in the east.")
        False
    """
    want = normalise_sentence(sentence)
    if not want:
        return False
    pattern = r"(?<![a-z0-9])" + re.escape(want) + r"(?![a-z0-9])"
    return re.search(pattern, " ".join(text.translate(_QUOTES).lower().split())) is not None


def number_only(text: str) -> float | None:
    """The answer's value when the answer is a number and nothing else (surrounding markdown bold,
    quotes and a final period allowed), else None.

    Example:
        >>> number_only("**1,024.**"), number_only("8"), number_only("A spider has 8 legs."), number_only("eight")
        (1024.0, 8.0, None, None)
    """
    core = text.strip().strip("*_`\"'").strip()
    core = core[:-1] if core.endswith(".") else core
    if not _NUMBER_ONLY.fullmatch(core):
        return None
    return float(core.replace(",", ""))


def no_tool_call(text: str) -> bool:
    """Whether the answer says something (a word at least) and holds nothing shaped like a tool call.

    Example:
        >>> no_tool_call("It is 3 pm in Tokyo."), no_tool_call("<<qx clock.now; at=TOKYO>>"), no_tool_call("")
        (True, False, False)
    """
    return bool(words(text)) and not looks_like_tool_call(text)
