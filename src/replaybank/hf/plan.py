"""The order of a mixed stream: global batches of (source, row) pairs, split into per-rank parts.

Pure numpy. Every exact-quota decision is :class:`replaybank.mixing.Mixer`'s (the project's one
mixing rule); this module adds only three things around it:

* **global batches**: the mixer runs with ``batch_size * world_size`` rows per batch, so the quota
  holds for the batch all ranks take one optimizer step on together;
* **a per-rank split** of each global batch: the rehearsal rows are spread over the ranks with the
  same largest-remainder rule (:func:`replaybank.mixing.next_quota` over equal shares, credit
  carried), so no rank systematically gets more of them; rank ``r``'s part is the rows
  ``[r * batch_size, (r + 1) * batch_size)`` of the global batch (rank-major blocks, which is how
  accelerate's batch dispatcher and ``IterableDatasetShard`` cut a stream);
* **per-epoch rehearsal slices** (the virtual epochs of the rehearsal-corpus method,
  docs/llm.md): with ``rows_per_epoch`` set,
  epoch ``e`` draws its rehearsal rows from the main job's seeded slice
  :func:`replaybank.llm.train.epoch_slice` of the pool.

Every epoch's final global batch is complete: the epoch's last few domain rows that cannot fill
one more batch (fewer than one batch's domain quota) are left out of that epoch (``drop_last``),
so that a stream running over several epochs never shifts the batch boundaries. The quota credit
carries over epochs (the share over any number of epochs is the ratio within one row).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from replaybank.checks import state_array
from replaybank.errors import ReplayBankError
from replaybank.mixing import Mixer, Shares, check_mixer_state, next_quota

PLAN_SCHEMA_VERSION = 1
_PLAN_KEYS = ("schema_version", "ratio", "batch_size", "world_size", "rows_per_epoch", "n_rehearsal", "mixer",
              "rank_credit")
DOMAIN, REHEARSAL = 0, 1
MixBy = Literal["rows", "tokens"]


class MixError(ReplayBankError):
    """Bad input to the mixed datasets of :mod:`replaybank.hf` (also a ``ValueError``)."""


def _check_int(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise MixError(f"{name} must be an int, got {value!r} ({type(value).__name__})")
    if value < minimum:
        raise MixError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def check_ratio(ratio: Any) -> float:
    """The rehearsal share of every batch, checked: a number in ``[0, 1)``.

    Raises:
        MixError: when ``ratio`` is not a finite number in ``[0, 1)``.

    Example:
        >>> check_ratio(0.1)
        0.1
        >>> check_ratio(1.0)
        Traceback (most recent call last):
        ...
        replaybank.hf.plan.MixError: ratio must be in [0, 1) (the rehearsal share of every batch; 1 would leave no domain rows), got 1.0
    """
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float, np.floating, np.integer)):
        raise MixError(f"ratio must be a number in [0, 1), got {ratio!r}")
    r = float(ratio)
    if not np.isfinite(r) or not 0.0 <= r < 1.0:
        raise MixError(
            "ratio must be in [0, 1) (the rehearsal share of every batch; 1 would leave no "
            f"domain rows), got {ratio!r}"
        )
    return r


def check_mix_by(mix_by: Any) -> MixBy:
    """``mix_by``, checked: ``"rows"`` or ``"tokens"``.

    Raises:
        MixError: for anything else.
    """
    if mix_by in ("rows", "tokens"):
        return mix_by  # type: ignore[no-any-return]
    raise MixError(f'mix_by must be "rows" or "tokens", got {mix_by!r}')


def row_ratio(ratio: float, mix_by: MixBy, tokens_per_row: Any = None) -> float:
    """The rehearsal share of *rows* that every batch's quota is cut by.

    ``mix_by="rows"``: ``ratio`` itself. ``mix_by="tokens"``: ``ratio`` is the rehearsal share of
    the labelled tokens (the tokens of the loss), turned into a row share by the main job's rule,
    :func:`replaybank.mixing.row_shares`: ``r = (ratio / t_reh) / ((1 - ratio) / t_dom +
    ratio / t_reh)`` with ``t`` each source's mean labelled tokens per row. Every batch then holds
    the exact largest-remainder quota of ``r`` rows, and the rehearsal rows' share of the labelled
    tokens is ``ratio`` in expectation (exactly, for rows of equal length within each source).

    Args:
        ratio: checked rehearsal share in ``[0, 1)``.
        mix_by: ``"rows"`` or ``"tokens"``.
        tokens_per_row: ``(t_domain, t_rehearsal)``, needed for ``"tokens"``.

    Raises:
        MixError: on a bad ``mix_by``, or missing / non-positive ``tokens_per_row`` for tokens.

    Example:
        >>> round(row_ratio(0.1, "tokens", (20.0, 80.0)), 4)
        0.027
    """
    from replaybank.mixing import row_shares

    check_mix_by(mix_by)
    if mix_by == "rows" or ratio == 0:
        return ratio
    if tokens_per_row is None:
        raise MixError(
            'mix_by="tokens" needs tokens_per_row=(mean labelled tokens per domain row, per '
            "rehearsal row)"
        )
    try:
        t = [float(x) for x in tokens_per_row]
    except (TypeError, ValueError):
        raise MixError(f"tokens_per_row must be two numbers, got {tokens_per_row!r}") from None
    if len(t) != 2 or not all(np.isfinite(x) and x > 0 for x in t):
        raise MixError(
            "tokens_per_row must be two finite numbers > 0 (mean labelled tokens per domain row, "
            f"per rehearsal row), got {tokens_per_row!r}"
        )
    return float(row_shares([1.0 - ratio, ratio], "tokens", t)[1])


def resolve_world(
    world_size: int | Literal["auto"] = "auto", rank: int | Literal["auto"] = "auto"
) -> tuple[int, int]:
    """``(world_size, rank)``: explicit values, else torch.distributed, else ``WORLD_SIZE``/``RANK``.

    torch.distributed is asked only when it is initialised (and torch is already imported); the
    environment variables are those ``torchrun`` and ``accelerate launch`` set. Without either,
    a single process: ``(1, 0)``.

    Raises:
        MixError: on a world size < 1, a rank outside ``[0, world_size)`` or unreadable variables.

    Example:
        >>> resolve_world(4, 1)
        (4, 1)
    """
    auto_world, auto_rank = 1, 0
    if world_size == "auto" or rank == "auto":
        dist = sys.modules.get("torch.distributed")
        if dist is not None and dist.is_available() and dist.is_initialized():
            auto_world, auto_rank = int(dist.get_world_size()), int(dist.get_rank())
        else:
            for var in ("WORLD_SIZE", "RANK"):
                text = os.environ.get(var)
                if text is not None and not text.strip().isdigit():
                    raise MixError(f"environment variable {var}={text!r} is not an integer")
            auto_world = int(os.environ.get("WORLD_SIZE", "1"))
            auto_rank = int(os.environ.get("RANK", "0"))
    world = auto_world if world_size == "auto" else _check_int("world_size", world_size, 1)
    r = auto_rank if rank == "auto" else _check_int("rank", rank, 0)
    if world < 1:
        raise MixError(f"world size must be >= 1, got {world}")
    if not 0 <= r < world:
        raise MixError(f"rank {r} is outside [0, {world}) for world size {world}")
    return world, r


def per_rank_batch(
    batch_size: int | None, global_batch_size: int | None, world_size: int
) -> int:
    """Rows each rank takes per step, from exactly one of the two batch sizes.

    Raises:
        MixError: when both or neither are given, either is < 1, or the world size does not
            divide ``global_batch_size``.

    Example:
        >>> per_rank_batch(None, 16, world_size=4)
        4
    """
    if (batch_size is None) == (global_batch_size is None):
        raise MixError(
            "give exactly one of batch_size (rows per rank per step, the Trainer's "
            "per_device_train_batch_size) and global_batch_size (rows per step over all ranks)"
        )
    if batch_size is not None:
        return _check_int("batch_size", batch_size, 1)
    g = _check_int("global_batch_size", global_batch_size, 1)
    if g % world_size:
        raise MixError(
            f"world size {world_size} does not divide global_batch_size={g}: every rank must "
            f"take the same number of rows; use a multiple of {world_size} (e.g. "
            f"{max(world_size, g - g % world_size)})"
        )
    return g // world_size


@dataclass(frozen=True)
class GlobalBatch:
    """One global batch, rank-major: rows ``[r * batch_size, (r + 1) * batch_size)`` are rank r's.

    Attributes:
        source: int64, 0 for a domain row, 1 for a rehearsal row.
        index: int64, the row's index in its source (rehearsal indices already mapped through
            the epoch's slice, so they index the whole pool).
        epoch: the epoch of the batch.
        step: the batch number inside the epoch.
    """

    source: np.ndarray
    index: np.ndarray
    epoch: int
    step: int

    def part(self, rank: int, batch_size: int) -> tuple[np.ndarray, np.ndarray]:
        """``(source, index)`` of rank ``rank``'s rows."""
        lo = rank * batch_size
        return self.source[lo : lo + batch_size], self.index[lo : lo + batch_size]


class MixPlan:
    """Endless (or ``epochs``-long) sequence of exact-quota global batches; resumable.

    Args:
        n_domain: rows in the domain source (the epoch source).
        n_rehearsal: rows in the rehearsal pool (may be 0 only when ``ratio == 0``).
        ratio: rehearsal share of every global batch, in ``[0, 1)``.
        batch_size: rows per rank per step.
        seed: seed of every permutation and slice.
        world_size: number of ranks; a global batch has ``batch_size * world_size`` rows.
        rows_per_epoch: ``None`` cycles the whole pool (a fresh seeded permutation per pass);
            ``k`` gives epoch ``e`` the main job's seeded slice of ``k`` pool rows
            (:func:`replaybank.llm.train.epoch_slice`), cycled inside the epoch.
        epochs: stop after this many epochs; ``None`` never stops.

    Raises:
        MixError: on a bad ratio, batch size, world size, ``rows_per_epoch``, an empty domain,
            an empty rehearsal pool with ``ratio > 0``, or a domain too small for one batch.

    Example:
        >>> plan = MixPlan(10, 5, 0.25, batch_size=4, seed=0, epochs=1)
        >>> [int((b.source == 1).sum()) for b in plan]
        [1, 1, 1]
    """

    def __init__(
        self,
        n_domain: int,
        n_rehearsal: int,
        ratio: float,
        *,
        batch_size: int,
        seed: int,
        world_size: int = 1,
        rows_per_epoch: int | None = None,
        epochs: int | None = None,
    ) -> None:
        self.ratio = check_ratio(ratio)
        self.batch_size = _check_int("batch_size", batch_size, 1)
        self.world_size = _check_int("world_size", world_size, 1)
        self.seed = _check_int("seed", seed, 0)
        self.n_domain = _check_int("number of domain rows", n_domain, 1)
        self.n_rehearsal = _check_int("number of rehearsal rows", n_rehearsal, 0)
        self.epochs = None if epochs is None else _check_int("epochs", epochs, 1)
        if self.ratio > 0 and self.n_rehearsal == 0:
            raise MixError(
                f"the rehearsal source has no rows but ratio={self.ratio}; give a non-empty "
                "rehearsal source, or ratio=0 to train on the domain alone"
            )
        self.rows_per_epoch = (
            None if rows_per_epoch is None else _check_int("rows_per_epoch", rows_per_epoch, 1)
        )
        self.global_batch = self.batch_size * self.world_size
        slots = self.n_rehearsal if self.rows_per_epoch is None else self.rows_per_epoch
        shares = [1.0 - self.ratio, self.ratio]
        self._mixer = Mixer(
            [self.n_domain, slots if self.ratio > 0 else 0],
            shares,
            self.global_batch,
            seed=self.seed,
            drop_last=True,
            carry_credit=True,  # the long-run share is the ratio over any number of epochs
        )
        first = next_quota(self.global_batch, shares)[0]
        if first[DOMAIN] > self.n_domain:
            raise MixError(
                f"the domain source has {self.n_domain} rows, fewer than the {int(first[DOMAIN])} "
                f"domain rows of one global batch ({self.global_batch} rows at ratio "
                f"{self.ratio}); use a smaller batch or more domain rows"
            )
        self._rank_credit = np.zeros(self.world_size)
        self._slice: tuple[int, np.ndarray] | None = None

    def _pool_rows(self, slots: np.ndarray, epoch: int) -> np.ndarray:
        if self.rows_per_epoch is None:
            return slots
        if self._slice is None or self._slice[0] != epoch:
            from replaybank.llm.train import epoch_slice

            self._slice = (
                epoch,
                epoch_slice(self.n_rehearsal, self.rows_per_epoch, self.seed, epoch),
            )
        return self._slice[1][slots]

    def _arrange(self, source: np.ndarray, index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        # Rank-major layout: rank r gets counts[r] rehearsal rows (largest remainder over equal
        # shares, credit carried so the spare rows rotate over ranks) and domain rows for the rest.
        dom, reh = index[source == DOMAIN], index[source == REHEARSAL]
        counts = np.zeros(self.world_size, dtype=np.int64)
        if reh.size and self.world_size > 1:
            counts, self._rank_credit = next_quota(
                int(reh.size), np.ones(self.world_size), self._rank_credit
            )
        elif reh.size:
            counts[0] = reh.size
        out_s = np.empty(source.size, dtype=np.int64)
        out_i = np.empty(source.size, dtype=np.int64)
        d = r = 0
        for k, c in enumerate(counts.tolist()):
            lo, nd = k * self.batch_size, self.batch_size - c
            out_s[lo : lo + nd], out_i[lo : lo + nd] = DOMAIN, dom[d : d + nd]
            out_s[lo + nd : lo + self.batch_size] = REHEARSAL
            out_i[lo + nd : lo + self.batch_size] = reh[r : r + c]
            d, r = d + nd, r + c
        return out_s, out_i

    def set_shares(self, shares: Shares) -> None:
        """Steer the mixer: the share of each source (base, rehearsal) from the next batch on."""
        self._mixer.set_shares(shares)

    def epoch(self) -> int:
        """The epoch the next batch belongs to."""
        return int(self._mixer.state_dict()["epoch"])

    def batches_per_epoch(self) -> int:
        """Global batches in the first epoch (others may differ by one: see :meth:`total_batches`)."""
        return self._mixer.batches_per_epoch()

    def total_batches(self) -> int | None:
        """Global batches over all ``epochs`` (None for an endless plan)."""
        return None if self.epochs is None else self._mixer.batches_in(self.epochs)

    def __iter__(self) -> Iterator[GlobalBatch]:
        """Global batches from the current position on (resumes where the state says)."""
        while self.epochs is None or self.epoch() < self.epochs:
            for mb in self._mixer.epoch(self.epoch()):
                index = mb.index.copy()
                is_reh = mb.source == REHEARSAL
                index[is_reh] = self._pool_rows(mb.index[is_reh], mb.epoch)
                source, index = self._arrange(mb.source, index)
                yield GlobalBatch(source, index, mb.epoch, mb.step)

    def state_dict(self) -> dict[str, Any]:
        """Position after the last batch yielded; JSON-serialisable."""
        return {
            "schema_version": PLAN_SCHEMA_VERSION,
            "ratio": self.ratio,
            "batch_size": self.batch_size,
            "world_size": self.world_size,
            "rows_per_epoch": self.rows_per_epoch,
            "n_rehearsal": self.n_rehearsal,
            "mixer": self._mixer.state_dict(),
            "rank_credit": self._rank_credit.tolist(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from a position saved by :meth:`state_dict` of an identically built plan.

        Raises:
            MixError: on another schema version, or a state of a plan built differently.
        """
        if not isinstance(state, dict) or state.get("schema_version") != PLAN_SCHEMA_VERSION:
            got = state.get("schema_version") if isinstance(state, dict) else type(state).__name__
            raise MixError(f"mix state has schema_version {got!r}, expected {PLAN_SCHEMA_VERSION}")
        for key in ("ratio", "batch_size", "world_size", "rows_per_epoch", "n_rehearsal"):
            if state.get(key) != getattr(self, key):
                raise MixError(
                    f"mix state was saved with {key}={state.get(key)!r}, this stream has "
                    f"{key}={getattr(self, key)!r}; resume with the same arguments"
                )
        unknown = sorted(str(k) for k in state if k not in _PLAN_KEYS)
        if unknown or "mixer" not in state or "rank_credit" not in state:
            raise MixError(f"mix state has keys {sorted(map(str, state))}, expected {sorted(_PLAN_KEYS)}")
        # everything is checked before anything is set: a refused state leaves the stream as it was
        try:
            check_mixer_state(state["mixer"], self._mixer)
            credit = state_array(state, "rank_credit", "mix", shape=(self.world_size,), low=-2.0, high=2.0)
        except ValueError as exc:
            raise MixError(f"mix state does not fit this stream: {exc}") from None
        self._mixer.load_state_dict(state["mixer"])
        self._rank_credit = credit
