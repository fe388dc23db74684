"""The mixed order for plain PyTorch loops: a torch ``IterableDataset`` and a batch ``Sampler``.

Both follow :class:`~replaybank.hf.plan.MixPlan` (the same order as :func:`replaybank.hf.mix`)
and, under ``torchrun`` / ``accelerate launch``, give each rank only its own part of every global
batch: ``batch_size`` rows per rank per step, the global batch of ``batch_size * world_size``
rows holding the exact rehearsal quota, every row read by exactly one rank. Rank and world size
come from the arguments, else torch.distributed (when initialised), else ``RANK``/``WORLD_SIZE``,
and are fixed when the object is built.

* :class:`MixedIterableDataset` yields row dicts with a ``source`` column (0 domain, 1 rehearsal);
  use it in ``DataLoader(ds, batch_size=batch_size, num_workers<=1)``.
* :class:`MixedBatchSampler` yields lists of indices into :class:`TaggedConcat` (domain rows
  first, then rehearsal rows) and works with any ``num_workers``.

Both have ``state_dict()`` / ``load_state_dict()`` (JSON-serialisable; the names torchdata's
``StatefulDataLoader`` calls) and resume O(1), at any row, in the order of an uninterrupted run.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Literal

import torch.utils.data

from replaybank.hf.plan import REHEARSAL, MixError, resolve_world
from replaybank.hf.sources import Source, check_columns, rehearsal_source, tokens_per_row
from replaybank.hf.spec import MixSpec


class MixedIterableDataset(torch.utils.data.IterableDataset):
    """This rank's rows of the mixed stream, one dict per row, with a ``source`` column.

    Args:
        domain, rehearsal, spec, columns, source_column: as in :func:`replaybank.hf.mix` (the
            same spec gives the same order).
        rank: this process's rank, or ``"auto"``.

    Iterating continues from the current position (an endless stream unless ``epochs`` is set).
    Use at most one ``DataLoader`` worker (the order is one sequence); for more workers use
    :class:`MixedBatchSampler`.

    Raises:
        MixError: on every bad input listed in :func:`replaybank.hf.mix`, at construction; on
            iteration in more than one DataLoader worker.

    Example:
        >>> dom = [{"x": i} for i in range(8)]
        >>> reh = [{"x": 100 + i} for i in range(4)]
        >>> spec = MixSpec(0.5, batch_size=2, seed=0, epochs=1, world_size=2)
        >>> ds = MixedIterableDataset(dom, reh, spec, rank=1)
        >>> [row["source"] for row in ds]
        [0, 1, 0, 1, 0, 1, 0, 1]
    """

    def __init__(
        self,
        domain: Any,
        rehearsal: Any,
        spec: MixSpec,
        *,
        rank: int | Literal["auto"] = "auto",
        columns: Sequence[str] | None = None,
        source_column: str = "source",
    ) -> None:
        self._domain = Source(domain, "domain")
        self._rehearsal = rehearsal_source(rehearsal)
        world, self.rank = resolve_world(spec.world_size, rank)
        ratio, mix_by = spec.share()
        tokens = tokens_per_row(self._domain, self._rehearsal, mix_by, ratio)
        n_reh = 0 if self._rehearsal is None else len(self._rehearsal)
        self._plan = spec.plan(len(self._domain), n_reh, world, tokens)
        self.columns = check_columns(self._domain, self._rehearsal, columns, source_column)
        self.source_column = source_column
        self.batch_size = self._plan.batch_size
        self.world_size = self._plan.world_size
        self._before = self._plan.state_dict()  # plan position before the batch in progress
        self._consumed = 0  # rows of that batch already yielded

    def __iter__(self) -> Iterator[dict[str, Any]]:
        info = torch.utils.data.get_worker_info()
        if info is not None and info.num_workers > 1:
            raise MixError(
                f"MixedIterableDataset is one ordered stream; it cannot be split over "
                f"{info.num_workers} DataLoader workers. Use num_workers<=1, or "
                "MixedBatchSampler with TaggedConcat for parallel loading"
            )
        self._plan.load_state_dict(self._before)
        skip = self._consumed
        for batch in self._plan:
            source, index = batch.part(self.rank, self.batch_size)
            rows = self._rows(source, index)
            for k in range(skip, len(rows)):
                self._consumed = k + 1
                yield rows[k]
            skip = 0
            self._before, self._consumed = self._plan.state_dict(), 0

    def _rows(self, source: Any, index: Any) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = [{self.source_column: int(s)} for s in source.tolist()]
        for s, src in enumerate((self._domain, self._rehearsal)):
            where = (source == s).nonzero()[0]
            if src is None or where.size == 0:
                continue
            got = src.take(index[where], self.columns)
            for c in self.columns:
                for p, v in zip(where.tolist(), got[c], strict=True):
                    out[p][c] = v
        return out

    def state_dict(self) -> dict[str, Any]:
        """Position after the last row yielded (JSON-serialisable)."""
        return {"plan": self._before, "consumed": self._consumed}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue, at the next ``iter()``, from a position saved by :meth:`state_dict`.

        Raises:
            MixError: when the state comes from a stream built with other arguments.
        """
        consumed = state.get("consumed") if isinstance(state, dict) else None
        if isinstance(consumed, bool) or not isinstance(consumed, int) or not 0 <= consumed <= self.batch_size:
            raise MixError(f"mixed dataset state has consumed={consumed!r}, expected 0..{self.batch_size}")
        self._plan.load_state_dict(state.get("plan"))  # type: ignore[arg-type]
        self._before, self._consumed = state["plan"], consumed


class MixedBatchSampler(torch.utils.data.Sampler[list[int]]):
    """This rank's part of every global batch, as indices into ``TaggedConcat(domain, rehearsal)``.

    Index ``i < n_domain`` is domain row ``i``; ``n_domain + j`` is rehearsal row ``j``.

    Args:
        n_domain: rows in the domain source.
        n_rehearsal: rows in the rehearsal pool.
        spec: as in :func:`replaybank.hf.mix` (the same spec gives the same order).
        rank: as in :class:`MixedIterableDataset`.
        tokens_per_row: ``(mean labelled tokens per domain row, per rehearsal row)``, needed
            with ``mix_by="tokens"`` (the sampler never sees the rows).

    Raises:
        MixError: on the bad inputs listed in :func:`replaybank.hf.mix`.

    Example:
        >>> s = MixedBatchSampler(6, 2, MixSpec(0.25, batch_size=4, seed=0, epochs=1, world_size=1))
        >>> [sum(i >= 6 for i in b) for b in s]
        [1, 1]
    """

    def __init__(
        self,
        n_domain: int,
        n_rehearsal: int,
        spec: MixSpec,
        *,
        rank: int | Literal["auto"] = "auto",
        tokens_per_row: tuple[float, float] | None = None,
    ) -> None:
        world, self.rank = resolve_world(spec.world_size, rank)
        self._plan = spec.plan(n_domain, n_rehearsal, world, tokens_per_row)
        self.n_domain = self._plan.n_domain
        self.batch_size = self._plan.batch_size

    def __iter__(self) -> Iterator[list[int]]:
        for batch in self._plan:
            source, index = batch.part(self.rank, self.batch_size)
            yield (index + (source == REHEARSAL) * self.n_domain).tolist()

    def __len__(self) -> int:
        if self._plan.epochs is None:
            raise TypeError("an endless MixedBatchSampler (epochs=None) has no length")
        return int(self._plan.total_batches() or 0)

    def state_dict(self) -> dict[str, Any]:
        """Position after the last batch yielded (JSON-serialisable)."""
        return self._plan.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from a position saved by :meth:`state_dict`.

        Raises:
            MixError: when the state comes from a sampler built with other arguments.
        """
        self._plan.load_state_dict(state)


class TaggedConcat(torch.utils.data.Dataset):
    """Domain rows then rehearsal rows, each row dict with a ``source`` column (0 / 1).

    Example:
        >>> ds = TaggedConcat([{"x": 1}], [{"x": 2}])
        >>> ds[1]
        {'x': 2, 'source': 1}
    """

    def __init__(self, domain: Any, rehearsal: Any, source_column: str = "source") -> None:
        self.domain, self.rehearsal = domain, rehearsal if rehearsal is not None else []
        self.source_column = source_column

    def __len__(self) -> int:
        return len(self.domain) + len(self.rehearsal)

    def __getitem__(self, i: int) -> dict[str, Any]:
        n = len(self.domain)
        row = self.domain[i] if i < n else self.rehearsal[i - n]
        return {**row, self.source_column: int(i >= n)}
