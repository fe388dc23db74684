"""What every replay controller shares: the limits a mixture obeys, the statistics it reads, the
protocol it implements, and the pure functions between them (numpy only).

A mixture is a vector over ``1 + n`` sources: entry 0 is the **current domain** (the data being
learnt now), entries ``1..n`` the **rehearsal sources** (each guards an earlier domain). It is a
distribution (non-negative, sums to 1) with:

* ``mixture[i] == 0`` for a rehearsal source that is not available (the mask);
* ``mixture[i] >= floors[i - 1]`` for every available rehearsal source;
* ``mixture[1:].sum() <= max_share`` (so the current domain keeps at least ``1 - max_share``).

:func:`constrain` maps any non-negative vector onto that set; :func:`summarize` turns a history
of held-out losses into the :class:`SourceStats` a controller reads.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

from replaybank.errors import InvalidArgumentError, InvalidStateError

CONTROLLER_SCHEMA_VERSION = 1


class ControllerError(InvalidArgumentError):
    """Bad input to a replay controller: an unknown name or parameter, limits that admit no
    mixture, statistics that are negative or not finite (also a ``ValueError``)."""


@dataclass(frozen=True)
class MixLimits:
    """The sources a controller mixes and the bounds on every mixture it returns.

    Args:
        sources: names of the rehearsal sources, in mixture order (entries ``1..n``); a saved
            controller state only loads into a controller over the same names.
        floor: the least share of every batch each available rehearsal source gets: one number
            for all, or one per source.
        max_share: the most rehearsal (all sources together) of every batch, in ``[0, 1)``.

    Raises:
        ControllerError: on no source or repeated names, a floor outside ``[0, 1]``, a
            ``max_share`` outside ``[0, 1)``, or floors that sum above ``max_share``.

    Example:
        >>> MixLimits(("tools", "agenda"), floor=0.02, max_share=0.4).floors.tolist()
        [0.02, 0.02]
    """

    sources: tuple[str, ...]
    floor: float | Sequence[float] = 0.0
    max_share: float = 0.5
    floors: np.ndarray = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        names = tuple(self.sources) if isinstance(self.sources, (list, tuple)) else ()
        if not names or not all(isinstance(s, str) and s for s in names):
            raise ControllerError(f"MixLimits(sources={self.sources!r}): expected a non-empty list of names")
        if len(set(names)) != len(names):
            raise ControllerError(f"MixLimits(sources={list(names)}): names repeat")
        object.__setattr__(self, "sources", names)
        if isinstance(self.max_share, bool) or not isinstance(self.max_share, (int, float)) or not (
            0.0 <= float(self.max_share) < 1.0
        ):
            raise ControllerError(f"MixLimits(max_share={self.max_share!r}): expected a number in [0, 1)")
        floors = _numbers(self.floor, "floor", len(names))
        bad = np.flatnonzero(~((floors >= 0) & (floors <= 1)))
        if bad.size:
            raise ControllerError(f"MixLimits(floor={self.floor!r}): floor of {names[bad[0]]!r} must lie in [0, 1]")
        if floors.sum() > self.max_share + 1e-12:
            raise ControllerError(
                f"MixLimits(floor={self.floor!r}): the floors sum to {floors.sum():.4g}, above "
                f"max_share={self.max_share}; no mixture could hold them"
            )
        object.__setattr__(self, "floors", floors)

    @property
    def n(self) -> int:
        """Number of rehearsal sources."""
        return len(self.sources)

    def config(self) -> dict[str, Any]:
        """JSON-ready description, compared on resume."""
        return {"sources": list(self.sources), "floors": self.floors.tolist(), "max_share": float(self.max_share)}


def number_array(value: Any, what: str) -> np.ndarray:
    """``value`` as a float64 array when it holds only numbers: a string, a bool, ``None`` or a
    ragged list anywhere in it is refused (numpy would read ``"0.1"`` as 0.1 and ``True`` as 1),
    naming ``what``."""
    if isinstance(value, (str, bytes)):
        raise ControllerError(f"{what} = {value!r}: expected numbers, got a string")
    stray = _not_number(value)
    if stray is not None:  # inside a list numpy casts a bool or a numeric string silently
        raise ControllerError(f"{what} = {value!r}: expected numbers, got {stray[1]} {stray[0]!r}")
    try:
        arr = np.asarray(value)
    except (TypeError, ValueError):
        raise ControllerError(f"{what} = {value!r}: expected numbers in a regular (not ragged) shape") from None
    if arr.dtype.kind not in "iuf":
        kind = {"b": "bools", "U": "strings", "S": "strings", "O": "values that are not numbers"}.get(
            arr.dtype.kind, f"dtype {arr.dtype}"
        )
        raise ControllerError(f"{what} = {value!r}: expected numbers, got {kind}")
    return arr.astype(np.float64)


def _not_number(value: Any, depth: int = 0) -> tuple[Any, str] | None:
    """The first string, bool or ``None`` inside nested lists and tuples, with its kind."""
    if isinstance(value, (list, tuple)) and depth < 4:
        for item in value:
            if isinstance(item, (bool, np.bool_)):
                return item, "a bool"
            if isinstance(item, (str, bytes)):
                return item, "a string"
            if item is None:
                return item, "None"
            found = _not_number(item, depth + 1)
            if found is not None:
                return found
    return None


def _numbers(value: float | Sequence[float], key: str, n: int) -> np.ndarray:
    arr = number_array(value, f"MixLimits({key})")
    if arr.ndim == 0:
        arr = np.full(n, float(arr))
    if arr.shape != (n,) or not np.isfinite(arr).all():
        raise ControllerError(f"MixLimits({key}={value!r}): expected one finite number or {n}, one per source")
    return arr


@dataclass(frozen=True)
class SourceStats:
    """What a controller reads after an evaluation, per source (entry 0: the current domain).

    Attributes:
        loss: held-out loss divided by its value when the current domain began (1.0 at the start;
            above 1 for a source being forgotten, below 1 for the domain being learnt).
        trend: change of ``loss`` per evaluation over the last few (least-squares slope).

    A source that is not available may have NaN in both; everything else must be finite, and no
    ``loss`` may be negative. :func:`summarize` builds one from raw losses.
    """

    loss: np.ndarray
    trend: np.ndarray


def check_available(available: Sequence[bool] | np.ndarray, limits: MixLimits) -> np.ndarray:
    """The mask over the rehearsal sources (``n`` bools, True where a source can be drawn) as a bool
    array of ``1 + n`` entries, the current domain first and always available."""
    arr = np.asarray(available)
    if arr.shape != (limits.n,) or arr.dtype != np.bool_:
        raise ControllerError(
            f"available={available!r}: expected {limits.n} bools, one per source {list(limits.sources)}"
        )
    return np.concatenate([[True], arr])


def check_stats(stats: SourceStats, mask: np.ndarray, limits: MixLimits) -> SourceStats:
    """``stats`` as float64 arrays of ``1 + n`` entries; raises :class:`ControllerError` naming the
    field and source of a negative loss, or a NaN / infinite entry of an available source."""
    names = ("current domain", *limits.sources)
    out = {}
    for key in ("loss", "trend"):
        arr = number_array(getattr(stats, key), f"SourceStats.{key}")
        if arr.shape != (len(names),):
            raise ControllerError(f"SourceStats.{key}: expected {len(names)} numbers ({names}), got shape {arr.shape}")
        bad = np.flatnonzero(mask & ~np.isfinite(arr))
        if bad.size:
            i = int(bad[0])
            raise ControllerError(f"SourceStats.{key}[{i}] = {arr[i]} ({names[i]}): expected a finite number")
        if key == "loss" and (arr < 0).any():
            i = int(np.flatnonzero(arr < 0)[0])
            raise ControllerError(f"SourceStats.loss[{i}] = {arr[i]} ({names[i]}): a loss is never negative")
        out[key] = arr
    return SourceStats(out["loss"], out["trend"])


def summarize(history: Sequence[Sequence[float]] | np.ndarray, k: int = 3) -> SourceStats:
    """Per-source statistics from raw held-out losses, one row per evaluation.

    Each column is divided by its first finite value (the loss when watching began); ``trend`` is
    the least-squares slope of the last ``k`` finite normalised values per evaluation (0 with
    fewer than two). NaN marks a source not measured yet.

    Raises:
        ControllerError: on a negative or infinite loss, a first loss of 0, ``k < 2``, or rows
            that are ragged or hold strings, bools or ``None`` (NaN, not ``None``, marks a source
            not measured).

    Example:
        >>> s = summarize([[2.0, 1.0], [1.5, 1.1], [1.0, 1.2]], k=3)
        >>> s.loss.round(3).tolist(), s.trend.round(3).tolist()
        ([0.5, 1.2], [-0.25, 0.1])
    """
    if isinstance(k, bool) or not isinstance(k, int) or k < 2:
        raise ControllerError(f"summarize(k={k!r}): expected an int >= 2 (a trend needs two points)")
    h = number_array(history, "summarize(history)")
    if h.ndim != 2 or h.shape[0] == 0:
        raise ControllerError(f"summarize(history): expected rows of losses (evaluations x sources), got shape {h.shape}")
    bad = np.argwhere(np.isinf(h) | (h < 0))
    if bad.size:
        r, c = (int(x) for x in bad[0])
        raise ControllerError(f"summarize(history)[{r}][{c}] = {h[r, c]}: a loss is finite and >= 0")
    loss = np.full(h.shape[1], np.nan)
    trend = np.full(h.shape[1], np.nan)
    for c in range(h.shape[1]):
        col = h[np.isfinite(h[:, c]), c]
        if col.size == 0:
            continue
        if col[0] == 0:
            raise ControllerError(f"summarize(history): source {c} starts at loss 0; nothing to normalise by")
        norm = col / col[0]
        loss[c] = norm[-1] if math.isfinite(h[-1, c]) else np.nan
        trend[c] = _slope(norm[-k:])
    return SourceStats(loss, trend)


def _slope(y: np.ndarray) -> float:
    """Least-squares slope of ``y`` against ``0, 1, ...`` (0 for fewer than two points)."""
    if y.size < 2:
        return 0.0
    x = np.arange(y.size) - (y.size - 1) / 2.0
    return float(x @ (y - y.mean()) / (x @ x))


def constrain(desired: np.ndarray, limits: MixLimits, mask: np.ndarray) -> np.ndarray:
    """The mixture nearest in proportions to ``desired`` that obeys ``limits`` and ``mask``.

    The rehearsal total is ``desired[1:]`` summed over available sources, clipped to
    ``[sum of their floors, max_share]``; it is split in proportion to ``desired`` with every
    source lifted to its floor (water-filling: ``max(floor_i, lam * desired_i)``); the current
    domain gets the rest. A ``desired`` that already obeys the limits is returned as it is
    (normalised).

    Example:
        >>> lim = MixLimits(("a", "b"), floor=0.05, max_share=0.3)
        >>> constrain(np.array([0.2, 0.7, 0.1]), lim, np.array([True, True, True])).round(3).tolist()
        [0.7, 0.25, 0.05]
    """
    d = np.where(mask, np.clip(np.nan_to_num(desired, nan=0.0), 0.0, None), 0.0)
    total = d.sum()
    d = d / total if total > 0 else np.where(mask, 1.0, 0.0) / mask.sum()
    avail = mask[1:]
    floors = np.where(avail, limits.floors, 0.0)
    want = d[1:]
    target = float(np.clip(want.sum(), floors.sum(), limits.max_share))
    out = floors.copy()
    free = avail & (want > 0)
    for _ in range(limits.n + 1):  # each pass fixes at least one more source at its floor
        room = target - floors[~free].sum()
        mass = want[free].sum()
        if mass <= 0 or room <= 0:
            break
        lam = room / mass
        low = free & (lam * want < floors)
        if not low.any():
            out[free] = lam * want[free]
            break
        free &= ~low
    return np.concatenate([[1.0 - out.sum()], out])


@runtime_checkable
class Controller(Protocol):
    """A replay controller: statistics in, the next mixture out.

    ``mixture(available)`` is the mixture now (no statistics read, nothing changed);
    ``update(stats, available)`` reads one evaluation's statistics and returns the next mixture.
    Both return ``1 + n`` shares that :func:`constrain` leaves as they are. ``state_dict`` /
    ``load_state_dict`` carry everything a resumed run needs (``load_state_dict`` checks the whole
    state, configuration included, before setting any of it).
    """

    name: str
    limits: MixLimits

    def mixture(self, available: Sequence[bool] | np.ndarray) -> np.ndarray: ...

    def update(self, stats: SourceStats, available: Sequence[bool] | np.ndarray) -> np.ndarray: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None: ...


def check_header(state: Any, name: str, config: dict[str, Any], keys: tuple[str, ...]) -> None:
    """``state`` must be a mapping with exactly ``keys``, this schema version, this controller's
    name and ``config`` (a state of another configuration or sequence is refused, naming the key)."""
    if not isinstance(state, Mapping):
        raise InvalidStateError(f"{name} controller state: expected a mapping, got {type(state).__name__}")
    if state.get("schema_version") != CONTROLLER_SCHEMA_VERSION:
        raise InvalidStateError(
            f"{name} controller state has schema_version {state.get('schema_version')!r}, expected {CONTROLLER_SCHEMA_VERSION}"
        )
    if state.get("name") != name:
        raise InvalidStateError(f"controller state is of {state.get('name')!r}, this controller is {name!r}")
    missing = [k for k in keys if k not in state]
    unknown = sorted(str(k) for k in state if k not in keys)
    if missing or unknown:
        what = f"missing key {missing[0]!r}" if missing else f"unknown key {unknown[0]!r}"
        raise InvalidStateError(f"{name} controller state: {what} (expected {list(keys)})")
    saved = state["config"]
    if not isinstance(saved, Mapping):
        raise InvalidStateError(f"{name} controller state['config']: expected a mapping")
    for key in sorted(set(config) | {str(k) for k in saved}):
        if saved.get(key) != config.get(key):
            raise InvalidStateError(
                f"{name} controller state has config[{key!r}]={saved.get(key)!r}, this controller has "
                f"{config.get(key)!r} (a state of another configuration or sequence)"
            )
