"""Successful episodes as training rows: what consolidation trains on.

A row is the episode's turns without its context (no system prompt, no replayed examples): the
point of consolidation is that the skill works *without* the examples in context. Rows come as
``{"prompt", "response", "messages", "episode_id", "count"}`` dicts: ``prompt``/``response`` is
the request and everything the agent wrote (the format of the core's domain rows), ``messages``
keeps the turns (for multi-turn episodes, tool results are user turns). :func:`encode_rows`
tokenizes ``messages`` completion-only with the tokenizer's chat template, through
:func:`replaybank.llm.data.rows.encode_messages`, into the core's ragged storage
(:func:`replaybank.llm.data.rows.token_rows`).

Example:
    >>> import tempfile, os
    >>> from replaybank.episodic import EpisodeStore, Task, demonstration
    >>> store = EpisodeStore(os.path.join(tempfile.mkdtemp(), "ep.db"))
    >>> _ = store.add(demonstration(Task("t", "Add 3 eggs."), ["<<qx cart.add; sku=eggs; qty=3>>"]))
    >>> rows = training_rows(store)
    >>> rows[0]["prompt"], rows[0]["response"]
    ('Add 3 eggs.', '<<qx cart.add; sku=eggs; qty=3>>')
    >>> store.close()
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .episode import StoredEpisode
from .store import EpisodeStore


def training_rows(
    store: EpisodeStore,
    *,
    generations: Sequence[int] | None = None,
    include_demos: bool = True,
    include_replayed: bool = True,
) -> list[dict[str, Any]]:
    """One row per successful episode, by id (each distinct task + output once, however often seen).

    Args:
        store: the episodic store.
        generations: only episodes attempted in these generations (None: all).
        include_demos: add the demonstrations (source ``demo``) even when ``generations`` leaves
            generation 0 out.
        include_replayed: keep the episodes of stored workflows run without the model (source
            ``replayed``); False leaves them out, so the rows are what the model itself produced
            (and the demonstrations).
    """
    found: dict[int, StoredEpisode] = {}
    for rec in store.episodes(success=True, generation=generations):
        if include_replayed or rec.episode.source != "replayed":
            found[rec.id] = rec
    if include_demos:
        for rec in store.episodes(success=True, source="demo"):
            found[rec.id] = rec
    else:
        found = {i: r for i, r in found.items() if r.episode.source != "demo"}
    return [_row(found[i]) for i in sorted(found)]


def _row(rec: StoredEpisode) -> dict[str, Any]:
    ep = rec.episode
    return {
        "prompt": ep.steps[0].prompt,
        "response": ep.output,
        "messages": ep.messages(),
        "episode_id": rec.id,
        "count": rec.count,
    }


def encode_rows(tokenizer: Any, rows: Sequence[dict[str, Any]], max_seq_length: int) -> Any:
    """Tokenize rows completion-only (loss on the assistant turns) into a ``TokenRows``.

    Args:
        tokenizer: a Hugging Face tokenizer (its chat template is used when it has one).
        rows: rows from :func:`training_rows`.
        max_seq_length: longer rows are cut.

    Returns:
        :class:`replaybank.llm.data.rows.TokenRows`, backed by a ``ReplayBuffer`` with ``RaggedStorage``.

    Raises:
        replaybank.llm.data.rows.FormatError: a row the chat template cannot label exactly.
    """
    from replaybank.llm.data.rows import encode_messages, token_rows

    return token_rows([encode_messages(tokenizer, r["messages"], max_seq_length) for r in rows])
