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
[('lru', 7), ('lfu', 5), ('lfru', 5), ('random', 6), ('opt', 5)]
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
from .trace import Trace

Policy = Literal["lru", "lfu", "lfru", "random", "opt"]
POLICIES: tuple[Policy, ...] = ("lru", "lfu", "lfru", "random", "opt")
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

    def to_dict(self) -> dict[str, float]:
        return {**asdict(self), "miss_rate": self.miss_rate, "victim_rate": self.victim_rate}


@dataclass(frozen=True)
class Result:
    """One policy replayed over a trace: ``layers[l]`` is traced layer ``l``'s counts."""

    policy: Policy
    semantics: Semantics
    capacities: tuple[int, ...]
    num_experts: tuple[int, ...]
    layers: tuple[Counts, ...]
    steps: Steps = "all"

    @property
    def total(self) -> Counts:
        return sum(self.layers, Counts())

    def to_dict(self) -> dict[str, Any]:
        return {
            "policy": self.policy,
            "semantics": self.semantics,
            "steps": self.steps,
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
        rows = [head]
        for name, res in self.results.items():
            t = res.total
            gap = self.gap_recovered(name) if {"lru", "opt"} <= set(self.results) else None
            rows.append(
                f"{name:<8}{t.misses:>10,}{t.miss_rate:>11.4f}{t.loads:>10,}"
                f"{t.bytes_moved / 2**30:>11.2f}{t.stalls:>9,}{t.victim_rate:>13.3f}"
                + (f"{gap:>15.3f}" if gap is not None else f"{'-':>15}")
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


def _replay(
    trace: Trace,
    events: Sequence[Events],
    policy: Policy,
    caps: tuple[int, ...],
    mode: tuple[Semantics, Steps],
    expert_bytes: int,
    rng: np.random.Generator,
    half_life: float,
) -> Result:
    semantics, steps = mode
    if policy not in POLICY_CODES:
        raise ReplayBankError(f"policy = {policy!r}: expected one of {list(POLICY_CODES)}")
    kernel = get_kernel()
    layers = []
    for layer, (ev, cap) in enumerate(zip(events, caps)):
        _check_fits(trace, ev, layer, cap, semantics)
        draws = rng.random(len(ev.ids)) if policy == "random" else np.zeros(0)
        out = np.zeros(len(COUNTERS), dtype=np.int64)
        kernel(
            ev.ptr,
            ev.ids,
            ev.next_use,
            ev.num_experts,
            cap,
            POLICY_CODES[policy],
            half_life,
            draws,
            out,
        )
        c = dict(zip(COUNTERS, (int(v) for v in out)))
        layers.append(
            Counts(events=ev.count, needs=len(ev.ids), bytes_moved=c["loads"] * expert_bytes, **c)
        )
    return Result(policy, semantics, caps, trace.num_experts, tuple(layers), steps)


def _setup(
    trace: Trace,
    capacity: int | Sequence[int],
    semantics: Semantics,
    steps: Steps,
    expert_bytes: int,
    half_life: float,
) -> tuple[tuple[int, ...], list[Events]]:
    if (
        isinstance(expert_bytes, bool)
        or not isinstance(expert_bytes, (int, np.integer))
        or expert_bytes < 0
    ):
        raise ReplayBankError(f"expert_bytes = {expert_bytes!r}: expected an integer >= 0")
    if not (isinstance(half_life, (int, float)) and math.isfinite(half_life) and half_life > 0):
        raise ReplayBankError(f"half_life = {half_life!r}: expected a finite number > 0")
    caps = capacities(trace, capacity)
    return caps, [layer_events(trace, layer, semantics, steps) for layer in range(trace.num_layers)]


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
) -> Result:
    """Replay ``trace`` with one ``policy`` (see ``kernel.py`` for what each evicts).

    Args:
        capacity: experts each layer's cache holds: one int, or one per traced layer.
        semantics: ``"step"`` (atomic per-step unions) or ``"token"`` (the biased per-token replay).
        steps: ``"all"``, or only the ``"decode"`` (or ``"prefill"``) steps.
        expert_bytes: size of one expert's weights, for ``bytes_moved``.
        seed: for ``random``'s draws (an int or a ``numpy.random.Generator``).
        half_life: ``lfru``'s half-life of a use, in events.

    Raises:
        ReplayBankError: a capacity outside ``[1, num_experts]``, or a step union (or top-k)
            larger than its layer's capacity (the message names layer, request and step).
    """
    caps, events = _setup(trace, capacity, semantics, steps, expert_bytes, half_life)
    rng = np.random.default_rng(seed)
    return _replay(trace, events, policy, caps, (semantics, steps), expert_bytes, rng, half_life)


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
) -> Comparison:
    """``simulate`` for each of ``policies`` on the same events (built once); arguments as there.
    With ``lru`` and ``opt`` among them, ``Comparison.gap_recovered`` gives each policy's share of
    the LRU-to-optimal gap."""
    caps, events = _setup(trace, capacity, semantics, steps, expert_bytes, half_life)
    rng = np.random.default_rng(seed)
    return Comparison(
        {
            p: _replay(trace, events, p, caps, (semantics, steps), expert_bytes, rng, half_life)
            for p in policies
        }
    )
