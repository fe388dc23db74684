"""Quota mixing of several data sources into fixed-size batches (pure numpy).

Every batch holds a fixed quota of rows from each source (largest remainder, fractional credit
carried from batch to batch; the arithmetic is :mod:`replaybank.quotas`, re-exported here): with
``shares=[0.9, 0.1]`` and ``batch_size=10`` every batch holds exactly 9 rows of source 0 and 1 row
of source 1.

:class:`Mixer` turns the quotas into batches of row indices. One source (``epoch_source``, by
default 0) defines the epoch: an epoch ends only when every row of that source has been used once.
Every other source is cycled, each pass with a fresh seeded permutation, so a small source is
repeated rather than ending the epoch early or silently disappearing from the batches.

:meth:`Mixer.set_shares` changes the shares between batches (a controller of
:mod:`replaybank.controllers` steering the mixture); every later batch holds the new quotas exactly.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from replaybank.mixing_state import MIXER_SCHEMA_VERSION, check_mixer_state, checked_shares
from replaybank.quotas import (
    MixBy,
    Shares,
    batch_quotas,
    check_batch_size,
    check_shares,
    largest_remainder,
    next_quota,
    row_shares,
)

__all__ = [
    "MIXER_SCHEMA_VERSION", "MixBy", "MixedBatch", "Mixer", "Shares", "batch_quotas",
    "check_mixer_state", "largest_remainder", "next_quota", "row_shares",
]


@dataclass(frozen=True)
class MixedBatch:
    """One batch from :class:`Mixer`.

    Attributes:
        source: int64 array, the source of each row.
        index: int64 array, the row's index inside its source.
        epoch: epoch the batch belongs to.
        step: batch number inside the epoch (0-based).
    """

    source: np.ndarray
    index: np.ndarray
    epoch: int
    step: int

    def rows_of(self, source: int) -> np.ndarray:
        """Indices of the rows drawn from ``source`` in this batch."""
        return self.index[self.source == source]


class Mixer:
    """Yield batches of row indices with a fixed quota per source in every batch.

    Args:
        sizes: number of rows in each source (every size >= 1 for a source with a share > 0).
        shares: share of each batch per source; normalised to sum to 1.
        batch_size: rows per batch.
        seed: seed of every permutation (epoch ``e`` of the epoch source uses ``(seed, e)``; pass
            ``k`` of a cycled source ``s`` uses ``(seed, s, k)``).
        epoch_source: the source whose exhaustion ends an epoch.
        drop_last: drop the last, partial batch of an epoch instead of yielding it smaller.
        carry_credit: carry the quotas' fractional credit from one epoch into the next, so the
            share over any number of epochs is the shares (within one row per source); without
            it every epoch starts afresh and holds the same quotas (with ``drop_last`` and a
            domain that is not a whole number of quota cycles, the long-run share then falls
            short: 64 rows, 0.1 of batches of 8 gives 9.375%). With it, an epoch may hold one
            batch more or fewer than another (:meth:`batches_in`), and epochs are taken in order.

    The last batch of an epoch holds the epoch source's remaining rows and, for each other source,
    its share of a batch scaled to that size (largest remainder), so the ratio holds there too.

    Raises:
        ValueError: on sizes/shares of different lengths, an empty source with a positive share,
            an epoch source with share 0, or a bad batch size.

    Example:
        >>> m = Mixer([6, 2], [0.5, 0.5], batch_size=4, seed=0)
        >>> [(b.rows_of(0).size, b.rows_of(1).size) for b in m.epoch(0)]
        [(2, 2), (2, 2), (2, 2)]
        >>> m.batches_per_epoch()
        3
    """

    def __init__(
        self,
        sizes: Sequence[int],
        shares: Shares,
        batch_size: int,
        seed: int = 0,
        epoch_source: int = 0,
        drop_last: bool = False,
        carry_credit: bool = False,
    ) -> None:
        self.batch_size = check_batch_size(batch_size)
        self.shares = check_shares(shares)
        self.sizes = np.asarray(sizes, dtype=np.int64)
        if self.sizes.shape != self.shares.shape:
            raise ValueError(
                f"sizes ({len(self.sizes)}) and shares ({len(self.shares)}) differ in length"
            )
        if not 0 <= epoch_source < self.sizes.size:
            raise ValueError(f"epoch_source {epoch_source} out of range 0..{self.sizes.size - 1}")
        for s, (n, p) in enumerate(zip(self.sizes, self.shares, strict=True)):
            if p > 0 and n < 1:
                raise ValueError(f"source {s} has share {p:.3g} but no rows")
        if self.shares[epoch_source] <= 0:
            raise ValueError(f"epoch_source {epoch_source} has share 0; no epoch would end")
        self.seed = int(seed)
        self.epoch_source = int(epoch_source)
        self.drop_last = bool(drop_last)
        self.carry_credit = bool(carry_credit)
        self.base_shares = self.shares  # the constructor's: an unsteered state must match them
        self._credit = np.zeros_like(self.shares)
        self._epoch_credit = np.zeros_like(self.shares)  # the credit the current epoch began with
        # where the current shares took effect in this epoch: (step, taken, credit) there
        self._steered = False
        self._segment: tuple[int, int, np.ndarray] = (0, 0, self._epoch_credit.copy())
        self._cursor = np.zeros(self.sizes.size, dtype=np.int64)  # rows used per cycled source
        self._epoch = 0
        self._step = 0
        self._taken = 0  # rows of the epoch source used in the current epoch

    # -- permutations -------------------------------------------------------------------------
    def _epoch_perm(self, epoch: int) -> np.ndarray:
        n = int(self.sizes[self.epoch_source])
        return np.random.default_rng([self.seed, epoch]).permutation(n)

    def _cycle_take(self, source: int, count: int) -> np.ndarray:
        n = int(self.sizes[source])
        out = np.empty(count, dtype=np.int64)
        pos = int(self._cursor[source])
        for k in range(count):
            pas, off = divmod(pos + k, n)
            # One permutation per pass; cached per call since count is small.
            out[k] = self._pass_perm(source, pas)[off]
        self._cursor[source] = pos + count
        return out

    def _pass_perm(self, source: int, pas: int) -> np.ndarray:
        key = (source, pas)
        cached = getattr(self, "_perm_cache", None)
        if cached is not None and cached[0] == key:
            return cached[1]
        perm = np.random.default_rng([self.seed, 1 + source, pas]).permutation(
            int(self.sizes[source])
        )
        self._perm_cache = (key, perm)
        return perm

    # -- iteration ----------------------------------------------------------------------------
    def batches_per_epoch(self) -> int:
        """Number of batches in one epoch: every epoch's, or with ``carry_credit`` the first's."""
        return sum(1 for _ in self._quotas_of_epoch(np.zeros_like(self.shares)))

    def batches_in(self, epochs: int) -> int:
        """Number of batches in the first ``epochs`` epochs.

        >>> Mixer([64, 5], [0.9, 0.1], 8, drop_last=True, carry_credit=True).batches_in(20)
        167
        """
        if not self.carry_credit:
            return epochs * self.batches_per_epoch()
        start, total = np.zeros_like(self.shares), 0
        for _ in range(epochs):
            schedule = list(self._quotas_of_epoch(start, with_credit=True))
            total += len(schedule)
            start = schedule[-1][1]  # the credit after the epoch's last batch
        return total

    def _quotas_of_epoch(self, credit: np.ndarray, with_credit: bool = False) -> Iterator[Any]:
        # Replays the quota schedule of one epoch from ``credit``, without touching rows.
        left = int(self.sizes[self.epoch_source])
        while left > 0:
            quota, credit = next_quota(self.batch_size, self.shares, credit)
            if quota[self.epoch_source] > left:
                if self.drop_last:
                    return
                quota = self._partial_quota(left)
            left -= int(quota[self.epoch_source])
            yield (quota, credit) if with_credit else quota

    def _partial_quota(self, left: int, shares: np.ndarray | None = None) -> np.ndarray:
        shares = self.shares if shares is None else shares
        scale = left / shares[self.epoch_source]
        total = max(left, int(round(scale)))
        others = shares.copy()
        others[self.epoch_source] = 0.0
        quota = np.zeros_like(self.sizes)
        if others.sum() > 0 and total > left:
            quota = largest_remainder(total - left, others)
        quota[self.epoch_source] = left
        return quota

    def replay(
        self, step: int, start: np.ndarray, taken: int = 0, shares: np.ndarray | None = None
    ) -> tuple[int | None, np.ndarray]:
        """``(taken, credit)`` after ``step`` batches at ``shares`` from a position with credit
        ``start`` and ``taken`` epoch rows used (``taken`` None past the epoch's end), by the rule
        of :meth:`epoch` without touching rows."""
        shares = self.shares if shares is None else shares
        credit = start.copy()
        n_epoch = int(self.sizes[self.epoch_source])
        for _ in range(step):
            if taken >= n_epoch:
                return None, credit
            quota, new_credit = next_quota(self.batch_size, shares, credit)
            if quota[self.epoch_source] > n_epoch - taken:
                if self.drop_last:
                    return None, credit
                quota = self._partial_quota(n_epoch - taken, shares)
            credit = new_credit
            taken += int(quota[self.epoch_source])
        return taken, credit

    def __iter__(self) -> Iterator[MixedBatch]:
        """Batches of the current epoch from the current position (resumes mid-epoch)."""
        return self.epoch(self._epoch)

    def epoch(self, epoch: int) -> Iterator[MixedBatch]:
        """Yield the batches of ``epoch``; starting a new epoch resets the in-epoch position."""
        if epoch != self._epoch:
            self._epoch, self._step, self._taken = int(epoch), 0, 0
            self._new_epoch()
        perm = self._epoch_perm(self._epoch)
        n_epoch = perm.size
        while self._taken < n_epoch:
            quota, credit = next_quota(self.batch_size, self.shares, self._credit)
            left = n_epoch - self._taken
            if quota[self.epoch_source] > left:
                if self.drop_last:
                    self._taken = n_epoch
                    break
                quota = self._partial_quota(left)
            self._credit = credit
            sources, indices = [], []
            for s, q in enumerate(quota.tolist()):
                if q == 0:
                    continue
                if s == self.epoch_source:
                    idx = perm[self._taken : self._taken + q]
                    self._taken += q
                else:
                    idx = self._cycle_take(s, q)
                sources.append(np.full(q, s, dtype=np.int64))
                indices.append(idx.astype(np.int64))
            batch = MixedBatch(
                np.concatenate(sources), np.concatenate(indices), self._epoch, self._step
            )
            self._step += 1
            yield batch
        # Epoch done: the next iteration starts the following epoch.
        self._epoch, self._step, self._taken = self._epoch + 1, 0, 0
        self._new_epoch()

    def _new_epoch(self) -> None:
        if not self.carry_credit:
            self._credit = np.zeros_like(self.shares)
        self._epoch_credit = self._credit.copy()
        self._segment = (0, 0, self._epoch_credit.copy())

    # -- steering -----------------------------------------------------------------------------
    def set_shares(self, shares: Shares) -> None:
        """Use ``shares`` from the next batch on (between batches, also inside a running epoch).

        Every later batch holds ``floor`` or ``ceil`` of ``batch_size * share`` rows of each
        source, as with fixed shares. The fractional credit restarts at zero when the shares
        change (a source whose share fell to 0 must not win a leftover row), so each stretch of
        constant shares is exact on its own: within one row per source over the stretch. Equal
        shares change nothing (a fixed controller leaves the batches as they were). The epoch
        still ends when the epoch source's rows are used up; :meth:`batches_per_epoch` and
        :meth:`batches_in` count batches at the current shares.

        Raises:
            InvalidArgumentError: (a ``ValueError``) on shares of another length, not finite,
                negative or all zero, a positive share for a source with no rows, or share 0 for
                the epoch source.

        Example:
            >>> m = Mixer([8, 8], [0.5, 0.5], batch_size=4, seed=0)
            >>> it = iter(m)
            >>> next(it).rows_of(1).size
            2
            >>> m.set_shares([0.75, 0.25])
            >>> next(it).rows_of(1).size
            1
        """
        new = checked_shares(shares, self, "set_shares(shares)")
        if np.array_equal(new, self.shares):
            return
        self.shares = new
        self._credit = np.zeros_like(new)
        self._segment = (self._step, self._taken, self._credit.copy())
        self._steered = True

    # -- state --------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Position in the stream; with the constructor arguments it fixes every later batch
        (``epoch_credit``, the credit the epoch began with, only with ``carry_credit``; after
        :meth:`set_shares`, ``segment``: the step, epoch rows taken and credit where the current
        ``shares`` took effect)."""
        extra: dict[str, Any] = {"epoch_credit": self._epoch_credit.tolist()} if self.carry_credit else {}
        if self._steered:  # only a steered mixer writes it: other states stay as they were
            step, taken, credit = self._segment
            extra["segment"] = {"step": step, "taken": taken, "credit": credit.tolist()}
        return {
            **extra,
            "schema_version": MIXER_SCHEMA_VERSION,
            "seed": self.seed,
            "sizes": self.sizes.tolist(),
            "shares": self.shares.tolist(),
            "batch_size": self.batch_size,
            "epoch": self._epoch,
            "step": self._step,
            "taken": self._taken,
            "cursor": self._cursor.tolist(),
            "credit": self._credit.tolist(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a position saved by :meth:`state_dict`; every entry is checked before any is
        set (all or nothing).

        Raises:
            InvalidStateError: (a ``ValueError``) on another schema version, a state from a
                differently built mixer, a missing or unknown key, or a position this mixer
                cannot be at: ``epoch``/``step`` not integers in ``[0, 2**53]``, ``taken`` outside
                ``[0, rows of the epoch source]``, a ``cursor`` of the wrong length or below 0, a
                ``credit`` of the wrong length, not finite or outside the largest-remainder range;
                shares other than the constructor's without a ``segment`` (a steered state's
                shares are taken, after the checks of :meth:`set_shares`).
        """
        checked = check_mixer_state(state, self)
        self._epoch, self._step, self._taken = checked["epoch"], checked["step"], checked["taken"]
        self._cursor, self._credit = checked["cursor"], checked["credit"]
        self._epoch_credit = checked["epoch_credit"]
        self.shares, self._segment = checked["shares"], checked["segment"]
        self._steered = "segment" in state
