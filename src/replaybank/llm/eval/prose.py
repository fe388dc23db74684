"""The held-out general prose behind the "held-out general loss" (``general_text.txt``)."""

from __future__ import annotations

from importlib import resources
from typing import Any

from replaybank.llm.data.corpus import normalise


def general_text_paragraphs() -> list[str]:
    """The shipped held-out general prose: 18 short paragraphs on everyday topics."""
    text = resources.files("replaybank.llm.eval").joinpath("general_text.txt").read_text("utf-8")
    return [normalise(p) for p in text.split("\n\n") if p.strip()]


def general_text_rows(tokenizer: Any, max_seq_length: int) -> Any:
    """Held-out general text for the "held-out general loss", as plain-LM :class:`TokenRows`.

    Source: ``general_text.txt`` shipped next to this module, 18 paragraphs (about 1,200 words) of
    everyday prose (cooking, weather, travel, history, habits) written for replaybank and released
    with it, so it is offline, reproducible and shares nothing with the rehearsal pool (Python's
    documentation). Every token is labelled (no chat template), one row per paragraph, cut to
    ``max_seq_length`` tokens.
    """
    from replaybank.llm.data.rows import encode_text, token_rows

    return token_rows([encode_text(tokenizer, p, max_seq_length) for p in general_text_paragraphs()])
