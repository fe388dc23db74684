"""Replay at act time: the most similar successful episodes, as in-context examples.

Similarity is **lexical: Okapi BM25** (``k1=1.5``, ``b=0.75``, idf ``log(1 + (N - df + 0.5) /
(df + 0.5))``) over the task text, tokens = lower-cased runs of letters and digits. Pure numpy,
no embedding model. Only successful episodes are candidates, one per task (the most often
produced output, then the lowest id). Ranking is by score, ties broken by episode id ascending,
so retrieval is deterministic. Examples are put in context most similar first.

Example:
    >>> import tempfile, os
    >>> from replaybank.episodic import EpisodeStore, Task, demonstration
    >>> store = EpisodeStore(os.path.join(tempfile.mkdtemp(), "ep.db"))
    >>> _ = store.add(demonstration(Task("a", "Add 3 eggs to my list."), ["<<qx cart.add; sku=eggs; qty=3>>"]))
    >>> _ = store.add(demonstration(Task("b", "Forecast for Oslo today."), ["<<qx sky.cast; at=OSLO; day=+0>>"]))
    >>> r = Retriever.from_store(store)
    >>> [rec.episode.task.id for rec in r.retrieve("Forecast for Lima tomorrow", k=1)]
    ['b']
    >>> messages, ids = r.context(Task("q", "Forecast for Lima tomorrow"), k=1)
    >>> [m["role"] for m in messages], ids
    (['user', 'assistant', 'user'], (2,))
    >>> store.close()
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence

import numpy as np

from .episode import Message, StoredEpisode, Task
from .store import EpisodeStore

_WORD = re.compile(r"[a-z0-9]+")


def tokenize(text: str) -> list[str]:
    """Lower-cased runs of letters and digits.

    Example:
        >>> tokenize("Set a 5-minute timer, tag TEA!")
        ['set', 'a', '5', 'minute', 'timer', 'tag', 'tea']
    """
    return _WORD.findall(text.lower())


class BM25:
    """Okapi BM25 over a fixed list of documents.

    Example:
        >>> BM25(["red apples", "green pears", "red red cars"]).scores("red car").round(3).tolist()
        [0.502, 0.0, 0.615]
    """

    def __init__(self, docs: Sequence[str], k1: float = 1.5, b: float = 0.75) -> None:
        self.k1, self.b = float(k1), float(b)
        self.n = len(docs)
        tokens = [tokenize(d) for d in docs]
        self.doc_len = np.array([len(t) for t in tokens], dtype=np.float64)
        self.avg_len = float(self.doc_len.mean()) if self.n and self.doc_len.sum() else 1.0
        postings: dict[str, tuple[list[int], list[int]]] = {}
        for i, toks in enumerate(tokens):
            for term, tf in Counter(toks).items():
                docs_, tfs = postings.setdefault(term, ([], []))
                docs_.append(i)
                tfs.append(tf)
        self._postings = {
            t: (np.array(d, dtype=np.int64), np.array(f, dtype=np.float64)) for t, (d, f) in postings.items()
        }

    def idf(self, term: str) -> float:
        df = self._postings[term][0].size if term in self._postings else 0
        return math.log(1.0 + (self.n - df + 0.5) / (df + 0.5))

    def scores(self, query: str) -> np.ndarray:
        """The BM25 score of every document for ``query`` (float64, one per document)."""
        out = np.zeros(self.n, dtype=np.float64)
        norm = self.k1 * (1.0 - self.b + self.b * self.doc_len / self.avg_len)
        for term, qtf in Counter(tokenize(query)).items():
            if term not in self._postings:
                continue
            docs, tf = self._postings[term]
            out[docs] += qtf * self.idf(term) * tf * (self.k1 + 1.0) / (tf + norm[docs])
        return out

    def best(
        self, query: str, k: int, ids: np.ndarray | None = None, keep: np.ndarray | None = None,
        min_score: float | None = None,
    ) -> list[int]:
        """The positions of the ``k`` best-scoring documents for ``query``: score descending,
        ties by ``ids`` ascending (by position without ``ids``), only where ``keep`` (all without)
        and, with ``min_score``, only those scoring above it.

        Example:
            >>> BM25(["red apples", "green pears", "red red cars"]).best("red car", 2)
            [2, 0]
        """
        scores = self.scores(query)
        ids = np.arange(self.n) if ids is None else ids
        mask = np.ones(self.n, dtype=bool) if keep is None else keep.copy()
        if min_score is not None:
            mask &= scores > min_score
        cand = np.flatnonzero(mask)
        order = cand[np.lexsort((ids[cand], -scores[cand]))]  # score desc, then id asc
        return [int(i) for i in order[:k]]


class Retriever:
    """Retrieves similar successful episodes for a new task.

    Args:
        episodes: candidate episodes; failures are dropped, and all but one per task id.
        k1, b: BM25 parameters.
    """

    def __init__(self, episodes: Sequence[StoredEpisode], k1: float = 1.5, b: float = 0.75) -> None:
        best: dict[str, StoredEpisode] = {}
        for rec in sorted(episodes, key=lambda r: (-r.count, r.id)):
            if rec.episode.verdict.success:
                best.setdefault(rec.episode.task.id, rec)
        self.episodes = sorted(best.values(), key=lambda r: r.id)
        self._ids = np.array([r.id for r in self.episodes], dtype=np.int64)
        self.index = BM25([r.episode.task.text for r in self.episodes], k1, b)

    @classmethod
    def from_store(cls, store: EpisodeStore, generations: Sequence[int] | None = None) -> Retriever:
        """A retriever over the store's successes (optionally only those of ``generations``)."""
        return cls(store.episodes(success=True, generation=generations))

    def __len__(self) -> int:
        return len(self.episodes)

    def retrieve(
        self, text: str, k: int, *, exclude_task_ids: Sequence[str] = (), min_score: float | None = None
    ) -> list[StoredEpisode]:
        """The ``k`` best-scoring episodes for ``text``, ties (zero scores too) by id ascending.

        Args:
            text: the new request.
            k: how many at most (fewer only if the store holds fewer candidates).
            exclude_task_ids: tasks never returned (e.g. the request's own task).
            min_score: return only episodes scoring above it; ``0.0`` requires a shared token.
                None (default) fills up to ``k`` even with unrelated tasks, which still show
                the answer format.
        """
        if k <= 0 or not self.episodes:
            return []
        keep = None
        if exclude_task_ids:
            excluded = set(exclude_task_ids)
            keep = np.array([r.episode.task.id not in excluded for r in self.episodes])
        return [self.episodes[i] for i in self.index.best(text, k, self._ids, keep, min_score)]

    def context(
        self, task: Task, k: int, *, system: str | None = None, exclude_same_task: bool = True
    ) -> tuple[list[Message], tuple[int, ...]]:
        """Chat messages for acting on ``task`` with up to ``k`` replayed examples, and their ids.

        The messages are the optional system prompt, each example's turns (user request,
        assistant output, ...), then the task as the last user turn. ``exclude_same_task`` keeps
        an earlier answer to this very task out of its context (no leak when evaluating).
        """
        exclude = (task.id,) if exclude_same_task else ()
        found = self.retrieve(task.text, k, exclude_task_ids=exclude)
        return format_examples(found, task.text, system=system), tuple(r.id for r in found)


def format_examples(
    examples: Sequence[StoredEpisode], text: str, *, system: str | None = None
) -> list[Message]:
    """``[system?] + turns of each example + [user: text]`` as chat messages.

    Example:
        >>> format_examples([], "2+2?", system="Answer briefly.")
        [{'role': 'system', 'content': 'Answer briefly.'}, {'role': 'user', 'content': '2+2?'}]
    """
    messages: list[Message] = [{"role": "system", "content": system}] if system else []
    for rec in examples:
        messages += rec.episode.messages()
    messages.append({"role": "user", "content": text})
    return messages
