"""A rehearsal pool that tokenizes a row when it is drawn, and drops rows that fail a check.

The eager pool (:func:`replaybank.llm.data.rows.token_rows`) tokenizes every passage before the
first step: about 15 minutes for two million rows. :class:`LazyPool` holds the passages as text
(a Python list, or an Arrow column with the pool's positions in it) and tokenizes the rows the
LoRA loop asks for - each virtual epoch's seeded slice, a micro-batch at a time - keeping the
last ``cache_rows`` of them. Its row ``i`` is the same passage, tokenized the same way, as row
``i`` of the eager pool over the same passages, so the seeded slices draw the same rows.

Checks (``empty``, a held-out text, a suite prompt: :meth:`LazyPool.add_check`) run on a row the
first time it is drawn. A row that fails is dropped and counted (:attr:`LazyPool.stats`); the
next row of the pool that passes takes its place, so every virtual epoch keeps its
``rehearsal_rows_per_epoch`` rows.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np

from replaybank.llm.data.columns import TextColumn
from replaybank.llm.data.corpus import CorpusError, normalise
from replaybank.llm.data.rows import IGNORE_INDEX, TokenRows

Row = tuple[np.ndarray, np.ndarray]
Check = Callable[[str], bool]
"""A check on a passage as it is trained on (normalised, cut to ``max_chars``): ``True`` drops the row."""

_UNSEEN, _KEPT, _DROPPED = 0, 1, 2


class PoolTexts(Protocol):
    """The passages of a pool, fetched by position."""

    def __len__(self) -> int: ...

    def take(self, rows: np.ndarray) -> list[str]:
        """The passages at ``rows``, whitespace-normalised."""
        ...


class ListTexts:
    """Passages already in memory (and already normalised)."""

    def __init__(self, texts: Sequence[str]) -> None:
        self.texts = texts

    def __len__(self) -> int:
        return len(self.texts)

    def take(self, rows: np.ndarray) -> list[str]:
        return [self.texts[int(i)] for i in rows]


class ColumnTexts:
    """Rows ``positions`` of an Arrow text column; a null reads as an empty passage."""

    def __init__(self, column: TextColumn, positions: np.ndarray) -> None:
        self.column = column
        self.positions = positions

    def __len__(self) -> int:
        return int(self.positions.size)

    def take(self, rows: np.ndarray) -> list[str]:
        return [normalise(v) if isinstance(v, str) else "" for v in self.column.raw(self.positions[rows])]


class LazyPool(TokenRows):
    """Rehearsal rows tokenized when drawn (the interface of :class:`TokenRows`).

    Args:
        texts: the pool's passages.
        encode: turns a passage (already cut to ``max_chars``) into ``(input_ids, labels)``.
        max_chars: passages are cut to this many characters before encoding.
        cache_rows: tokenized rows kept (least recently drawn dropped first).
        label_sample: rows tokenized to estimate :meth:`label_tokens` (all rows when fewer).
        seed: seeds that sample.

    Example:
        >>> enc = lambda text: (np.arange(len(text)), np.arange(len(text)))
        >>> pool = LazyPool(ListTexts(["ab", "", "cde", "xyz"]), enc, max_chars=10)
        >>> pool.add_check("suite", lambda text: "y" in text)
        >>> pool.stand_ins([0, 1, 3]).tolist()  # 1 is empty, 3 fails the check: the next rows serve
        [0, 2, 0]
        >>> [len(ids) for ids, _ in pool.rows([0, 1, 3])]
        [2, 3, 2]
        >>> pool.stats["dropped"], pool.stats["tokenized"]
        ({'empty': 1, 'suite': 1}, 2)
    """

    def __init__(
        self, texts: PoolTexts, encode: Callable[[str], Row], max_chars: int, *,
        cache_rows: int = 4096, label_sample: int = 2048, seed: int = 0,
    ) -> None:
        self.texts = texts
        self._encode = encode
        self._max_chars = max_chars
        self._cache_rows = max(1, cache_rows)
        self._label_sample = label_sample
        self._seed = seed
        self._checks: list[tuple[str, Check]] = [("empty", lambda text: not text)]
        self._verdict = np.zeros(len(texts), dtype=np.int8)
        self._instead: dict[int, int] = {}
        self._cache: OrderedDict[int, Row] = OrderedDict()
        self._estimate: int | None = None
        self.stats: dict[str, Any] = {"rows": len(texts), "lazy": True, "checked": 0, "dropped": {}, "tokenized": 0}
        """Live counts: ``checked`` rows, ``dropped`` rows by reason, ``tokenized`` rows (with repeats
        after a row left the cache). A manifest holding this dict reports the counts when written."""

    def __len__(self) -> int:
        return int(self._verdict.size)

    def add_check(self, reason: str, check: Check) -> None:
        """Drop, from now on, every row whose passage ``check`` flags, counted under ``reason``.

        Rows kept so far are checked again when next drawn.
        """
        self._checks.append((reason, check))
        self._verdict[self._verdict == _KEPT] = _UNSEEN
        self.stats["checked"] = int(np.count_nonzero(self._verdict))
        self._instead.clear()
        self._estimate = None

    def stand_ins(self, indices: Sequence[int] | np.ndarray) -> np.ndarray:
        """The rows that serve ``indices``: each index itself when it passes every check, else the
        next row (wrapping around) that does. Checks every row not checked yet.

        Raises:
            CorpusError: when every row of the pool is dropped.
        """
        idx = np.asarray(indices, dtype=np.int64)
        if idx.size and (idx.min() < 0 or idx.max() >= len(self)):
            raise IndexError(f"row indices must be in [0, {len(self)}), got {idx.min()}..{idx.max()}")
        self._check(np.unique(idx[self._verdict[idx] == _UNSEEN]))
        return np.asarray([self._stand_in(int(i)) for i in idx], dtype=np.int64)

    def rows(self, indices: Sequence[int] | np.ndarray) -> list[Row]:
        """The ``(input_ids, labels)`` pairs at ``indices`` (their stand-ins), tokenizing the rows
        not in the cache."""
        rows = self.stand_ins(indices)
        missing = [r for r in dict.fromkeys(rows.tolist()) if r not in self._cache]
        if missing:
            for r, text in zip(missing, self.texts.take(np.asarray(missing, dtype=np.int64))):
                self._cache[r] = self._encode(text[: self._max_chars])
            self.stats["tokenized"] += len(missing)
        out = []
        for r in rows.tolist():
            self._cache.move_to_end(r)
            out.append(self._cache[r])
        while len(self._cache) > self._cache_rows:
            self._cache.popitem(last=False)
        return out

    def label_tokens(self) -> int:
        """Labelled tokens of the whole pool, estimated from ``label_sample`` seeded rows (exact
        when the pool has no more rows than that)."""
        if self._estimate is None:
            n = len(self)
            sample = np.random.default_rng(self._seed).choice(n, size=min(n, self._label_sample), replace=False)
            labelled = sum(int(np.count_nonzero(labels != IGNORE_INDEX)) for _, labels in self.rows(np.sort(sample)))
            self._estimate = round(labelled * n / max(sample.size, 1))
        return self._estimate

    def lengths(self) -> np.ndarray:
        raise NotImplementedError("a lazy pool knows a row's length only once the row is drawn")

    def _check(self, rows: np.ndarray) -> None:
        if rows.size == 0:
            return
        for r, text in zip(rows.tolist(), self.texts.take(rows)):
            text = text[: self._max_chars]
            reason = next((name for name, check in self._checks if check(text)), None)
            self._verdict[r] = _KEPT if reason is None else _DROPPED
            if reason is not None:
                self.stats["dropped"][reason] = self.stats["dropped"].get(reason, 0) + 1
        self.stats["checked"] += int(rows.size)

    def _stand_in(self, i: int) -> int:
        if self._verdict[i] == _KEPT:
            return i
        if i not in self._instead:
            j = (i + 1) % len(self)
            while j != i:
                if self._verdict[j] == _UNSEEN:
                    self._check(np.asarray([j]))
                if self._verdict[j] == _KEPT:
                    break
                j = (j + 1) % len(self)
            else:
                raise CorpusError(f"every one of the rehearsal pool's {len(self)} rows was dropped: {self.stats['dropped']}")
            self._instead[i] = j
        return self._instead[i]
