"""Quotas: how many rows of every batch each source gets (pure numpy, no rows involved).

The ratio semantics are *a fixed quota of every batch*: with ``shares=[0.9, 0.1]`` and
``batch_size=10`` every batch holds exactly 9 rows of source 0 and 1 row of source 1. When
``batch_size * share`` is not an integer, each batch gets the floor of it and the leftover slots
go, by largest remainder, to the sources with the most accumulated fractional credit. The credit
carries over from batch to batch, so leftovers rotate fairly and over many batches every source's
share converges to exactly ``share`` (the running count never drifts by a full row or more).

:class:`replaybank.mixing.Mixer` turns these quotas into batches of row indices; the names here
are re-exported from :mod:`replaybank.mixing`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np

Shares = Sequence[float] | np.ndarray


def check_shares(shares: Shares) -> np.ndarray:
    """``shares`` as float64 summing to 1; raises ``ValueError`` naming them when they are not
    a non-empty 1-D sequence of finite, non-negative numbers, not all zero."""
    arr = np.asarray(shares, dtype=np.float64)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"shares must be a non-empty 1-D sequence, got {shares!r}")
    if not np.all(np.isfinite(arr)) or np.any(arr < 0):
        raise ValueError(f"shares must be finite and >= 0, got {shares!r}")
    total = float(arr.sum())
    if total <= 0:
        raise ValueError(f"shares must not all be zero, got {shares!r}")
    return arr / total


def check_batch_size(batch_size: int) -> int:
    """``batch_size`` as an int >= 1; raises ``TypeError`` / ``ValueError`` otherwise."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)):
        raise TypeError(f"batch_size must be an int, got {type(batch_size).__name__}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    return int(batch_size)


def next_quota(
    batch_size: int, shares: Shares, credit: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Quota of one batch by largest remainder, with fractional credit carried between batches.

    Args:
        batch_size: rows in the batch.
        shares: non-negative weights per source; normalised to sum to 1.
        credit: fractional credit carried from earlier batches (zeros for the first batch).

    Returns:
        ``(quota, new_credit)``: ``quota`` is an int64 array summing to ``batch_size`` with every
        entry equal to ``floor(batch_size * share)`` or one more; ``new_credit`` goes to the next
        call.

    Raises:
        ValueError: on a bad batch size, bad shares, or a credit of the wrong shape.

    Example:
        >>> q, c = next_quota(10, [0.85, 0.15])
        >>> q.tolist()
        [9, 1]
        >>> next_quota(10, [0.85, 0.15], c)[0].tolist()
        [8, 2]
    """
    batch_size = check_batch_size(batch_size)
    p = check_shares(shares)
    credit = np.zeros_like(p) if credit is None else np.asarray(credit, dtype=np.float64)
    if credit.shape != p.shape:
        raise ValueError(f"credit has shape {credit.shape}, expected {p.shape}")
    exact = batch_size * p
    base = np.floor(exact + 1e-9).astype(np.int64)
    frac = np.clip(exact - base, 0.0, None)
    leftover = batch_size - int(base.sum())
    credit = credit + frac
    # Stable sort on -credit: ties go to the lower index, but only for this batch; the credit
    # then falls for the winner, so the next tie goes elsewhere.
    winners = np.argsort(-credit, kind="stable")[:leftover]
    quota = base.copy()
    quota[winners] += 1
    credit[winners] -= 1.0
    return quota, credit


def batch_quotas(batch_size: int, shares: Shares, num_batches: int | None = None) -> np.ndarray:
    """Per-source row counts for one batch, or a schedule of ``num_batches`` batches.

    Largest-remainder rounding; leftover slots rotate over batches by accumulated credit (see
    :func:`next_quota`), so over ``num_batches`` batches each source's total is within one row of
    ``num_batches * batch_size * share``.

    Args:
        batch_size: rows per batch.
        shares: non-negative weights per source; normalised to sum to 1.
        num_batches: ``None`` for the first batch only (1-D result), else the number of batches
            (2-D result of shape ``(num_batches, len(shares))``).

    Returns:
        int64 array of quotas; every row sums to ``batch_size``.

    Raises:
        ValueError: on a bad batch size, bad shares or a negative ``num_batches``.

    Example:
        >>> batch_quotas(10, [0.9, 0.1]).tolist()
        [9, 1]
        >>> batch_quotas(4, [0.5, 0.25, 0.25], num_batches=2).tolist()
        [[2, 1, 1], [2, 1, 1]]
        >>> batch_quotas(3, [0.5, 0.5], num_batches=4).sum(axis=0).tolist()
        [6, 6]
    """
    if num_batches is None:
        return next_quota(batch_size, shares)[0]
    if num_batches < 0:
        raise ValueError(f"num_batches must be >= 0, got {num_batches}")
    p = check_shares(shares)
    out = np.zeros((num_batches, p.size), dtype=np.int64)
    credit = np.zeros_like(p)
    for b in range(num_batches):
        out[b], credit = next_quota(batch_size, p, credit)
    return out


def largest_remainder(total: int, shares: Shares) -> np.ndarray:
    """Split ``total`` into integer parts proportional to ``shares`` (largest remainder, no carry).

    Example:
        >>> largest_remainder(7, [0.5, 0.5]).tolist()
        [4, 3]
    """
    if total < 0:
        raise ValueError(f"total must be >= 0, got {total}")
    if total == 0:
        return np.zeros(len(shares), dtype=np.int64)
    return next_quota(total, shares)[0]


MixBy = Literal["rows", "tokens"]


def row_shares(shares: Shares, mix_by: MixBy = "rows", tokens_per_row: Shares | None = None) -> np.ndarray:
    """Row shares that give each source ``shares`` of the rows, or of the labelled tokens.

    With ``mix_by="rows"`` the shares are returned normalised. With ``mix_by="tokens"`` a target
    share of *labelled tokens* (which is the share of the token-mean loss) becomes a share of rows
    by dividing by each source's mean labelled tokens per row: ``r_i = (s_i / t_i) / sum_j s_j / t_j``.
    Fed to :func:`next_quota` / :class:`Mixer`, whose quotas hold the row shares exactly (credit
    carried), the expected labelled-token share of every source is then its target.

    Args:
        shares: target share per source (non-negative, normalised to sum to 1).
        mix_by: ``"rows"`` or ``"tokens"``.
        tokens_per_row: mean labelled tokens per row of each source (needed for ``"tokens"``).

    Returns:
        float64 row shares summing to 1.

    Raises:
        ValueError: on bad shares, an unknown ``mix_by``, or missing / non-positive token counts
            for a source with a positive share.

    Example:
        >>> row_shares([0.9, 0.1], "tokens", tokens_per_row=[20.0, 80.0]).round(4).tolist()
        [0.973, 0.027]
        >>> row_shares([3, 1]).tolist()
        [0.75, 0.25]
    """
    p = check_shares(shares)
    if mix_by == "rows":
        return p
    if mix_by != "tokens":
        raise ValueError(f"mix_by must be 'rows' or 'tokens', got {mix_by!r}")
    if tokens_per_row is None:
        raise ValueError("mix_by='tokens' needs tokens_per_row (mean labelled tokens per row of each source)")
    t = np.asarray(tokens_per_row, dtype=np.float64)
    if t.shape != p.shape:
        raise ValueError(f"tokens_per_row has {t.size} entries for {p.size} sources")
    if np.any(~np.isfinite(t)) or np.any((p > 0) & (t <= 0)):
        raise ValueError(f"tokens_per_row must be finite and > 0 for every source with a share, got {t.tolist()}")
    w = np.where(p > 0, p / np.where(t > 0, t, 1.0), 0.0)
    return w / w.sum()
