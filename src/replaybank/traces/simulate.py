"""Replay a trace against per-layer expert caches: counts per policy, and how far each is from optimal.

Each traced layer has its own cache of ``capacity`` experts (an int for every layer, or one per
layer); layers are replayed independently. Under ``semantics="step"`` a step is one atomic event
needing the union of its tokens' experts; a step whose union exceeds the capacity cannot run
without splitting it, so it is an error naming the layer, the request and the step (never split
silently). ``semantics="token"`` replays token by token (the biased semantics, for matched pairs).

Counted per layer: ``needs`` (expert needs = hits + misses), ``hits``, ``misses``, ``loads``
(compulsory admission: every miss is loaded), ``bytes_moved`` (loads x ``expert_bytes``),
``evictions``, ``optimal_victims`` (evictions whose victim the offline optimum would also pick from
that cache), ``stalls`` (events that waited for at least one load).

>>> from replaybank.traces import Trace
>>> t = Trace.build(request=[0] * 6, kind=[0, 1, 1, 1, 1, 1], start=[0, 2, 3, 4, 5, 6],
...                 tokens=[2, 1, 1, 1, 1, 1], num_experts=[5],
...                 experts=[[[0, 2], [1, 2], [0, 1], [0, 2], [1, 4], [0, 3], [0, 1]]])
>>> c = compare(t, capacity=3)
>>> [(p, r.total.misses) for p, r in c.results.items()]
[('lru', 7), ('lfu', 5), ('lfru', 5), ('random', 6), ('pred', 5), ('opt', 5)]
>>> c.gap_recovered("lfu"), c.results["lru"].total.victim_rate
(1.0, 0.5)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any, Literal

import numpy as np

from ..errors import ReplayBankError
from .events import Events, Semantics, Steps, layer_events
from .kernel import COUNTERS, POLICY_CODES, get_kernel
from .prefetch import predict_prefetch
from .trace import Trace, seed_generator

Policy = Literal["lru", "lfu", "lfru", "random", "pred", "opt"]
POLICIES: tuple[Policy, ...] = ("lru", "lfu", "lfru", "random", "pred", "opt")
DEFAULT_HALF_LIFE = 32.0


@dataclass(frozen=True)
class Counts:
    """What one layer's cache (or all of them, summed) did over the replay."""

    events: int = 0
    needs: int = 0
    hits: int = 0
    misses: int = 0
    loads: int = 0
    evictions: int = 0
    optimal_victims: int = 0
    stalls: int = 0
    prefetch_loads: int = 0
    useful_prefetches: int = 0
    bytes_moved: int = 0

    def __add__(self, other: Counts) -> Counts:
        return Counts(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))

    @property
    def miss_rate(self) -> float:
        return self.misses / self.needs if self.needs else math.nan

    @property
    def victim_rate(self) -> float:
        """Share of evictions that chose an optimal victim (``nan`` without evictions)."""
        return self.optimal_victims / self.evictions if self.evictions else math.nan

    @property
    def prefetch_accuracy(self) -> float:
        """Share of prefetch loads that the event they were loaded for needed."""
        return self.useful_prefetches / self.prefetch_loads if self.prefetch_loads else math.nan

    def to_dict(self) -> dict[str, float]:
        return {
            **asdict(self),
            "miss_rate": self.miss_rate,
            "victim_rate": self.victim_rate,
            "prefetch_accuracy": self.prefetch_accuracy,
        }


@dataclass(frozen=True)
class Result:
    """One policy replayed over a trace: ``layers[l]`` is traced layer ``l``'s counts."""

    policy: Policy
    semantics: Semantics
    capacities: tuple[int, ...]
    num_experts: tuple[int, ...]
    layers: tuple[Counts, ...]
    steps: Steps = "all"
    prefetch: int = 0

    @property
    def total(self) -> Counts:
        return sum(self.layers, Counts())

    def to_dict(self) -> dict[str, Any]:
        return {
            "policy": self.policy,
            "semantics": self.semantics,
            "steps": self.steps,
            "prefetch": self.prefetch,
            "capacity_ratio": [c / e for c, e in zip(self.capacities, self.num_experts)],
            "capacities": list(self.capacities),
            "total": self.total.to_dict(),
            "layers": [c.to_dict() for c in self.layers],
        }


def gap_recovered(lru: int, policy: int, opt: int) -> float | None:
    """Share of LRU's excess misses over the optimum that ``policy`` removes: 1 is optimal, 0 is
    LRU, negative is worse than LRU; ``None`` when LRU is already optimal (no gap).

    >>> gap_recovered(lru=120, policy=110, opt=100)
    0.5
    """
    return None if lru == opt else (lru - policy) / (lru - opt)


@dataclass(frozen=True)
class Comparison:
    """Several policies over the same trace, capacities and semantics."""

    results: dict[str, Result]

    def gap_recovered(self, policy: str) -> float | None:
        r = self.results
        if "lru" not in r or "opt" not in r:
            raise ReplayBankError("gap_recovered needs both 'lru' and 'opt' in the comparison")
        return gap_recovered(r["lru"].total.misses, r[policy].total.misses, r["opt"].total.misses)

    def to_dict(self) -> dict[str, Any]:
        out = {name: res.to_dict() for name, res in self.results.items()}
        if "lru" in self.results and "opt" in self.results:
            for name in out:
                out[name]["gap_recovered"] = self.gap_recovered(name)
        return out

    def table(self) -> str:
        """A plain-text table, one row per policy (totals over layers)."""
        head = f"{'policy':<8}{'misses':>10}{'miss rate':>11}{'loads':>10}{'GiB moved':>11}"
        head += f"{'stalls':>9}{'victim rate':>13}{'gap recovered':>15}"
        if any(r.prefetch for r in self.results.values()):
            head += f"{'prefetch':>10}{'useful':>9}"
        rows = [head]
        for name, res in self.results.items():
            t = res.total
            gap = self.gap_recovered(name) if {"lru", "opt"} <= set(self.results) else None
            rows.append(
                f"{name:<8}{t.misses:>10,}{t.miss_rate:>11.4f}{t.loads:>10,}"
                f"{t.bytes_moved / 2**30:>11.2f}{t.stalls:>9,}{t.victim_rate:>13.3f}"
                + (f"{gap:>15.3f}" if gap is not None else f"{'-':>15}")
                + (f"{t.prefetch_loads:>10,}{t.prefetch_accuracy:>9.3f}" if res.prefetch else "")
            )
        return "\n".join(rows)


def capacities(trace: Trace, capacity: int | Sequence[int]) -> tuple[int, ...]:
    """One capacity per traced layer, each in ``[1, num_experts]`` of its layer."""
    if isinstance(capacity, Sequence) or isinstance(capacity, np.ndarray):
        caps = list(capacity)
    else:
        caps = [capacity] * trace.num_layers
    if len(caps) != trace.num_layers:
        raise ReplayBankError(f"capacity: {len(caps)} values for {trace.num_layers} traced layers")
    for layer, (c, e) in enumerate(zip(caps, trace.num_experts)):
        if isinstance(c, bool) or not isinstance(c, (int, np.integer)) or not 1 <= c <= e:
            raise ReplayBankError(
                f"capacity = {c!r} for layer {layer} (model layer {trace.layers[layer]}): expected "
                f"an integer in [1, {e}] (the layer's expert count)"
            )
    return tuple(int(c) for c in caps)


def capacity_for_ratio(trace: Trace, ratio: float) -> tuple[int, ...]:
    """Per-layer capacities ``round(ratio * num_experts)`` (at least 1), ``ratio`` in (0, 1]."""
    if not 0 < ratio <= 1:
        raise ReplayBankError(f"ratio = {ratio!r}: expected a number in (0, 1]")
    return tuple(max(1, round(ratio * e)) for e in trace.num_experts)


def _check_fits(trace: Trace, events: Events, layer: int, capacity: int, semantics: str) -> None:
    sizes = events.sizes()
    if sizes.max() <= capacity:
        return
    i = int(np.argmax(sizes > capacity))
    unit = "step union" if semantics == "step" else "token's top-k"
    raise ReplayBankError(
        f"capacity {capacity} of layer {layer} (model layer {trace.layers[layer]}) is smaller than "
        f"a {unit}: {trace.describe_step(int(events.step[i]))} needs {int(sizes[i])} experts at "
        f"once (the largest {unit} of this layer is {int(sizes.max())}); a step is atomic and is "
        "never split: raise the capacity, or replay only decode steps (steps='decode', --steps decode)"
    )


@dataclass(frozen=True)
class Mode:
    """How a trace is replayed: everything but the policy and the capacities."""

    semantics: Semantics = "step"
    steps: Steps = "all"
    expert_bytes: int = 0
    half_life: float = DEFAULT_HALF_LIFE
    prefetch: int = 0


def _replay(
    trace: Trace,
    events: Sequence[Events],
    plan: Sequence[tuple[np.ndarray, ...]],
    policy: Policy,
    caps: tuple[int, ...],
    mode: Mode,
    rng: np.random.Generator,
    log: list[np.ndarray] | None = None,
) -> Result:
    if policy not in POLICY_CODES:
        raise ReplayBankError(f"policy = {policy!r}: expected one of {list(POLICY_CODES)}")
    kernel = get_kernel()
    layers = []
    for layer, (ev, (pf_ptr, pf_ids, pf_next), cap) in enumerate(zip(events, plan, caps)):
        _check_fits(trace, ev, layer, cap, mode.semantics)
        room = len(ev.ids) + len(pf_ids)  # evictions are at most the loads
        draws = rng.random(room) if policy == "random" else np.zeros(0)
        victims = np.full(room if log is not None else 0, -1, dtype=np.int64)
        out = np.zeros(len(COUNTERS), dtype=np.int64)
        kernel(
            ev.ptr, ev.ids, ev.next_use, ev.num_experts, cap, POLICY_CODES[policy],
            float(mode.half_life), draws, out, pf_ptr, pf_ids, pf_next, victims,
        )  # fmt: skip
        c = dict(zip(COUNTERS, (int(v) for v in out)))
        if log is not None:
            log.append(victims[: c["evictions"]])
        layers.append(
            Counts(
                events=ev.count, needs=len(ev.ids), bytes_moved=c["loads"] * mode.expert_bytes, **c
            )
        )
    return Result(
        policy, mode.semantics, caps, trace.num_experts, tuple(layers), mode.steps, mode.prefetch
    )


def _setup(
    trace: Trace, capacity: int | Sequence[int], mode: Mode
) -> tuple[tuple[int, ...], list[Events], list[tuple[np.ndarray, ...]]]:
    eb, half_life, pf = mode.expert_bytes, mode.half_life, mode.prefetch
    if isinstance(eb, bool) or not isinstance(eb, (int, np.integer)) or eb < 0:
        raise ReplayBankError(f"expert_bytes = {eb!r}: expected an integer >= 0")
    if not (isinstance(half_life, (int, float)) and math.isfinite(half_life) and half_life > 0):
        raise ReplayBankError(f"half_life = {half_life!r}: expected a finite number > 0")
    caps = capacities(trace, capacity)
    if isinstance(pf, bool) or not isinstance(pf, (int, np.integer)) or not 0 <= pf <= min(caps):
        raise ReplayBankError(
            f"prefetch = {pf!r}: expected an integer in [0, {min(caps)}] (experts prefetched per "
            "event, at most the smallest capacity; 0 = off)"
        )
    events = [
        layer_events(trace, layer, mode.semantics, mode.steps) for layer in range(trace.num_layers)
    ]
    none = (np.zeros(0, dtype=np.int64),) * 3
    plan = [none] + [
        predict_prefetch(events[layer - 1], events[layer], pf) if pf else none
        for layer in range(1, trace.num_layers)
    ]
    return caps, events, plan


def simulate(
    trace: Trace,
    policy: Policy,
    capacity: int | Sequence[int],
    *,
    semantics: Semantics = "step",
    steps: Steps = "all",
    expert_bytes: int = 0,
    seed: int | np.random.Generator = 0,
    half_life: float = DEFAULT_HALF_LIFE,
    prefetch: int = 0,
) -> Result:
    """Replay ``trace`` with one ``policy`` (see ``kernel.py`` for what each evicts).

    Args:
        capacity: experts each layer's cache holds: one int, or one per traced layer.
        semantics: ``"step"`` (atomic per-step unions) or ``"token"`` (the biased per-token replay).
        steps: ``"all"``, or only the ``"decode"`` (or ``"prefill"``) steps.
        expert_bytes: size of one expert's weights, for ``bytes_moved``.
        seed: for ``random``'s draws (an int or a ``numpy.random.Generator``).
        half_life: ``lfru``'s half-life of a use, in events.
        prefetch: experts of layer ``l + 1`` prefetched per event, predicted from layer ``l``
            (``prefetch.py``); 0 = off.

    Raises:
        ReplayBankError: a capacity outside ``[1, num_experts]``, a step union (or top-k) larger
            than its layer's capacity (the message names layer, request and step), or a prefetch
            count above a capacity.
    """
    mode = Mode(semantics, steps, expert_bytes, half_life, prefetch)
    caps, events, plan = _setup(trace, capacity, mode)
    return _replay(trace, events, plan, policy, caps, mode, seed_generator(seed))


def evictions(
    trace: Trace,
    policy: Policy,
    capacity: int | Sequence[int],
    *,
    semantics: Semantics = "step",
    steps: Steps = "all",
    seed: int | np.random.Generator = 0,
    half_life: float = DEFAULT_HALF_LIFE,
    prefetch: int = 0,
) -> list[np.ndarray]:
    """Per traced layer, every eviction ``simulate`` (same arguments) makes, in order, as
    ``event * num_experts + victim``: the decisions, for tests of what a policy saw."""
    mode = Mode(semantics, steps, 0, half_life, prefetch)
    caps, events, plan = _setup(trace, capacity, mode)
    log: list[np.ndarray] = []
    _replay(trace, events, plan, policy, caps, mode, seed_generator(seed), log)
    return log


def compare(
    trace: Trace,
    capacity: int | Sequence[int],
    policies: Sequence[Policy] = POLICIES,
    *,
    semantics: Semantics = "step",
    steps: Steps = "all",
    expert_bytes: int = 0,
    seed: int | np.random.Generator = 0,
    half_life: float = DEFAULT_HALF_LIFE,
    prefetch: int = 0,
) -> Comparison:
    """``simulate`` for each of ``policies`` on the same events (built once); arguments as there.
    With ``lru`` and ``opt`` among them, ``Comparison.gap_recovered`` gives each policy's share of
    the LRU-to-optimal gap."""
    mode = Mode(semantics, steps, expert_bytes, half_life, prefetch)
    caps, events, plan = _setup(trace, capacity, mode)
    rng = seed_generator(seed)
    return Comparison({p: _replay(trace, events, plan, p, caps, mode, rng) for p in policies})
