"""Turning text into training rows: prompt wrapping, chat template, completion-only labels.

A row is a pair of equal-length int64 arrays ``(input_ids, labels)`` where ``labels`` is
``-100`` on every token the loss must ignore (the prompt, the chat scaffolding before the answer)
and equal to ``input_ids`` elsewhere. The model shifts labels itself, as Hugging Face causal LMs
do.

Formatting uses the tokenizer's chat template when it has one. Without one, the documented default
is::

    ### User:
    {prompt}

    ### Assistant:
    {completion}<eos>

Rows are stored in :class:`TokenRows`, backed by the core's ``RaggedStorage`` inside a
``ReplayBuffer`` when that is available (see :func:`token_rows`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from replaybank.errors import ReplayBankError

IGNORE_INDEX = -100
DEFAULT_USER_HEADER = "### User:\n"
DEFAULT_ASSISTANT_HEADER = "\n\n### Assistant:\n"
DEFAULT_TOOL_HEADER = "\n\n### Tool:\n"
TOOL_FALLBACK_PREFIX = "Tool result: "
_TOOL_ROLE_OK: dict[tuple[type, str], bool] = {}


class Tokenizer(Protocol):
    """The part of a Hugging Face tokenizer that rows need."""

    chat_template: Any
    eos_token: Any

    def __call__(self, text: str, add_special_tokens: bool = ...) -> Any: ...

    def apply_chat_template(self, conversation: Any, **kwargs: Any) -> Any: ...


class FormatError(ReplayBankError):
    """A conversation cannot be rendered into labelled tokens."""


def rehearsal_prompt(text: str, prompt: str, prompt_chars: int) -> str:
    """The user prompt of a rehearsal row: ``prompt`` over the passage's first characters.

    Example:
        >>> rehearsal_prompt("Lists are mutable sequences.", "Continue the following passage", 9)
        'Continue the following passage:\\n\\nLists are'
    """
    excerpt = text[:prompt_chars].rstrip()
    return f"{prompt}:\n\n{excerpt}" if excerpt else f"{prompt}."


def _ids(tokenizer: Tokenizer, text: str) -> list[int]:
    if not text:
        return []
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def tool_role_supported(tokenizer: Tokenizer) -> bool:
    """Whether the tokenizer's chat template renders a ``tool`` message (with its content) after
    an assistant turn; cached per tokenizer class and template. ChatML templates (SmolLM2) do;
    some templates raise on roles other than user/assistant, some drop them silently."""
    template = getattr(tokenizer, "chat_template", None)
    if not template:
        return True
    key = (type(tokenizer), str(template))
    if key not in _TOOL_ROLE_OK:
        probe = [{"role": "user", "content": "u"}, {"role": "assistant", "content": "a"},
                 {"role": "tool", "content": "tool-probe-7f3a"}]
        try:
            text = str(tokenizer.apply_chat_template(probe, tokenize=False, add_generation_prompt=True))
            _TOOL_ROLE_OK[key] = "tool-probe-7f3a" in text
        except Exception:  # a template that refuses the role
            _TOOL_ROLE_OK[key] = False
    return _TOOL_ROLE_OK[key]


def render_chat(tokenizer: Tokenizer, messages: list[dict[str, str]], add_generation_prompt: bool) -> str:
    """The conversation as text. A ``tool`` message (a call's result) is a ``tool`` turn when the
    chat template renders one (:func:`tool_role_supported`), else a user turn starting
    ``Tool result: ``; without a template it follows ``### Tool:``."""
    if getattr(tokenizer, "chat_template", None):
        if any(m["role"] == "tool" for m in messages) and not tool_role_supported(tokenizer):
            messages = [{"role": "user", "content": TOOL_FALLBACK_PREFIX + m["content"]} if m["role"] == "tool" else m
                        for m in messages]
        out = tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=add_generation_prompt
        )
        return str(out)
    eos = tokenizer.eos_token or ""
    parts = []
    for m in messages:
        if m["role"] == "assistant":
            parts.append(f"{DEFAULT_ASSISTANT_HEADER}{m['content']}{eos}")
        elif m["role"] == "system":
            parts.append(f"{m['content']}\n\n")
        elif m["role"] == "tool":
            parts.append(f"{DEFAULT_TOOL_HEADER}{m['content']}")
        else:
            parts.append(f"{DEFAULT_USER_HEADER}{m['content']}")
    if add_generation_prompt:
        parts.append(DEFAULT_ASSISTANT_HEADER)
    return "".join(parts)


def encode_messages(
    tokenizer: Tokenizer, messages: Sequence[dict[str, str]], max_seq_length: int
) -> tuple[np.ndarray, np.ndarray]:
    """Tokenize a conversation with labels only on the assistant turns' content and end marker.

    System, user and ``tool`` turns (a call's result, see :func:`render_chat`) are never labelled.

    The conversation is rendered one turn at a time; each new piece of text is tokenized on its
    own and appended, so label boundaries are exact. An assistant turn's header (the text the
    template adds for ``add_generation_prompt``) is not labelled.

    Args:
        tokenizer: a Hugging Face tokenizer.
        messages: ``[{"role": ..., "content": ...}, ...]`` with roles system, user, assistant
            or tool; at least one assistant turn.
        max_seq_length: rows longer than this are cut to it.

    Returns:
        ``(input_ids, labels)`` as int64 arrays of equal length.

    Raises:
        FormatError: no assistant turn, an unknown role, or a chat template whose rendering of a
            longer conversation does not start with the shorter one.
    """
    msgs = [dict(m) for m in messages]
    if not any(m.get("role") == "assistant" for m in msgs):
        raise FormatError("conversation has no assistant turn to learn from")
    for i, m in enumerate(msgs):
        if m.get("role") not in ("system", "user", "assistant", "tool"):
            raise FormatError(f"message {i}: role {m.get('role')!r} is not system/user/assistant/tool")
        if not isinstance(m.get("content"), str):
            raise FormatError(f"message {i}: content must be a string")
    ids: list[int] = []
    labels: list[int] = []
    rendered = ""
    for i, m in enumerate(msgs):
        if m["role"] == "assistant":
            header_text = render_chat(tokenizer, msgs[:i], add_generation_prompt=True)
            _check_prefix(rendered, header_text, i)
            piece = _ids(tokenizer, header_text[len(rendered):])
            ids += piece
            labels += [IGNORE_INDEX] * len(piece)
            rendered = header_text
        text = render_chat(tokenizer, msgs[: i + 1], add_generation_prompt=False)
        _check_prefix(rendered, text, i)
        piece = _ids(tokenizer, text[len(rendered):])
        ids += piece
        labels += piece if m["role"] == "assistant" else [IGNORE_INDEX] * len(piece)
        rendered = text
    ids, labels = ids[:max_seq_length], labels[:max_seq_length]
    return np.asarray(ids, dtype=np.int64), np.asarray(labels, dtype=np.int64)


def _check_prefix(prefix: str, text: str, turn: int) -> None:
    if not text.startswith(prefix):
        raise FormatError(
            f"chat template is not prefix-stable at message {turn}: rendering more turns changes "
            "earlier text, so completion-only labels cannot be placed exactly"
        )


def encode_pair(
    tokenizer: Tokenizer, prompt: str, completion: str, max_seq_length: int, *, open_end: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """One user prompt and one assistant completion; loss only on the completion.

    Example (SmolLM2's template; the labelled tokens are ``Paris.<|im_end|>\\n``)::

        ids, labels = encode_pair(tok, "Capital of France?", "Paris.", 64)
        tok.decode(ids[labels != -100])  # 'Paris.<|im_end|>\\n'

    With ``open_end`` the completion is the start of a longer answer (generation stopped at a
    token budget): the turn is left open, with no end marker, so training on it never teaches
    the model to stop where the budget cut it.
    """
    if open_end:
        msgs = [{"role": "user", "content": prompt}]
        header = render_chat(tokenizer, msgs, add_generation_prompt=True)
        head, body = _ids(tokenizer, header), _ids(tokenizer, completion)
        ids = (head + body)[:max_seq_length]
        labels = ([IGNORE_INDEX] * len(head) + body)[:max_seq_length]
        return np.asarray(ids, dtype=np.int64), np.asarray(labels, dtype=np.int64)
    return encode_messages(
        tokenizer,
        [{"role": "user", "content": prompt}, {"role": "assistant", "content": completion}],
        max_seq_length,
    )


def encode_text(tokenizer: Tokenizer, text: str, max_seq_length: int) -> tuple[np.ndarray, np.ndarray]:
    """Plain text for language modelling: every token labelled, followed by EOS when it has one."""
    eos = tokenizer.eos_token or ""
    ids = _ids(tokenizer, text + eos)[:max_seq_length]
    arr = np.asarray(ids, dtype=np.int64)
    return arr, arr.copy()


def encode_rehearsal(
    tokenizer: Tokenizer, text: str, prompt: str, prompt_chars: int, max_seq_length: int
) -> tuple[np.ndarray, np.ndarray]:
    """A rehearsal row: ``prompt`` over the first ``prompt_chars`` characters, completion = passage."""
    return encode_pair(tokenizer, rehearsal_prompt(text, prompt, prompt_chars), text, max_seq_length)


class TokenRows:
    """Tokenized rows kept in the core's ``ReplayBuffer`` with ``RaggedStorage``.

    Row ``i`` is the item with id ``item_ids[i]``; reading a batch of rows is one ``buffer.get``.
    Lengths and label counts are kept here so batching needs no read.
    """

    def __init__(self, buffer: Any, item_ids: np.ndarray, lengths: np.ndarray, n_label: int) -> None:
        self.buffer = buffer
        self.item_ids = item_ids
        self._lengths = lengths
        self._n_label = n_label

    def __len__(self) -> int:
        return int(self.item_ids.size)

    def rows(self, indices: Sequence[int] | np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
        """The ``(input_ids, labels)`` pairs at ``indices``, in that order."""
        idx = np.asarray(indices, dtype=np.int64)
        if idx.size == 0:
            return []
        got = self.buffer.get(self.item_ids[idx])
        ids, labels = got["input_ids"], got["labels"]
        return [(ids[k], labels[k]) for k in range(idx.size)]

    def row(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        return self.rows([i])[0]

    def lengths(self) -> np.ndarray:
        return self._lengths

    def label_tokens(self) -> int:
        return self._n_label


def token_rows(rows: Sequence[tuple[np.ndarray, np.ndarray]]) -> TokenRows:
    """File rows in a ``ReplayBuffer(len(rows), storage=RaggedStorage())``.

    Raises:
        ValueError: when a row's ids and labels differ in length, or a row is empty.
    """
    from replaybank import ReplayBuffer
    from replaybank.storage import RaggedStorage

    for i, (a, b) in enumerate(rows):
        if len(a) != len(b):
            raise ValueError(f"row {i}: {len(a)} input ids but {len(b)} labels")
        if len(a) == 0:
            raise ValueError(f"row {i}: no tokens")
    lengths = np.fromiter((len(a) for a, _ in rows), dtype=np.int64, count=len(rows))
    n_label = sum(int(np.count_nonzero(np.asarray(b) != IGNORE_INDEX)) for _, b in rows)
    buf = ReplayBuffer(max(1, len(rows)), storage=RaggedStorage(), seed=0)
    item_ids = buf.extend(
        {
            "input_ids": [np.asarray(a, dtype=np.int64) for a, _ in rows],
            "labels": [np.asarray(b, dtype=np.int64) for _, b in rows],
        }
    ) if rows else np.zeros(0, dtype=np.int64)
    return TokenRows(buf, item_ids, lengths, n_label)
