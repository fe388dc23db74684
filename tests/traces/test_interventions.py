"""Serving orders and matched pairs: the rank statistics, the schedules, and one small study."""

from __future__ import annotations

import json

import numpy as np
import pytest

from replaybank.errors import ReplayBankError
from replaybank.traces import Trace, compare, synthetic_trace
from replaybank.traces.interventions import (
    Design,
    kendall_tau,
    rank,
    replay,
    run_study,
    unit_traces,
)
from replaybank.traces.schedule import concat, interleave, requests_of, select


def workload(seed: int, name: str, zipf: float) -> Trace:
    t = synthetic_trace(requests=10, prompt_tokens=2, decode_tokens=20, layers=2, experts=12, top_k=2,
                        zipf=zipf, stickiness=0.4, seed=seed)
    return Trace.build(
        request=t.request, kind=t.kind, start=t.start, tokens=t.tokens, experts=t.experts,
        num_experts=t.num_experts, meta={"workload": name})


def test_kendall_tau_and_ranks() -> None:
    assert kendall_tau([1, 2, 3], [1, 2, 3]) == 1.0 and kendall_tau([1, 2, 3], [3, 2, 1]) == -1.0
    # tau-b with a tie: 2 concordant pairs, the tied pair counts in one denominator only
    assert kendall_tau([1, 2, 3], [1, 1, 2]) == pytest.approx(2 / np.sqrt(3 * 2))
    assert np.isnan(kendall_tau([1, 1], [1, 2]))
    assert rank({"a": 5, "b": 1, "c": 5, "d": 9}) == {"a": 2.5, "b": 1.0, "c": 2.5, "d": 4.0}


def test_interleave_keeps_every_request_in_order() -> None:
    t = workload(0, "w", 1.0)
    s = interleave(t, concurrent=3, seed=7)
    assert s.num_steps == t.num_steps and sorted(requests_of(s)) == list(range(10))
    for r in range(10):  # each request's steps, rows and routing unchanged, only interleaved
        a, b = np.flatnonzero(t.request == r), np.flatnonzero(s.request == r)
        assert s.start[b].tolist() == t.start[a].tolist()
        rows_t = np.concatenate([np.arange(t.offsets[i], t.offsets[i + 1]) for i in a])
        rows_s = np.concatenate([np.arange(s.offsets[i], s.offsets[i + 1]) for i in b])
        assert np.array_equal(t.experts[:, rows_t], s.experts[:, rows_s])
    # at most 3 requests in flight: between a request's first and last step, at most 2 others start
    assert max(len(set(s.request[i : i + 3].tolist())) for i in range(s.num_steps - 2)) <= 3
    assert requests_of(select(t, [3, 1])) == [1, 3]
    with pytest.raises(ReplayBankError, match=r"requests \[99\]"):
        select(t, [99])


def test_concat_renumbers_and_refuses_other_shapes() -> None:
    a, b = workload(0, "prose", 1.0), workload(1, "code", 0.5)
    both = concat([a, b])
    assert requests_of(both) == list(range(20)) and both.meta["workload"] == "prose+code"
    assert both.meta["workloads"].split(",") == ["prose"] * 10 + ["code"] * 10
    other = synthetic_trace(requests=2, prompt_tokens=1, decode_tokens=1, layers=2, experts=8, top_k=2)
    with pytest.raises(ReplayBankError, match="concat: trace 1 has layers"):
        concat([a, other])


def test_mixed_and_separate_replays_need_the_same_experts() -> None:
    design = Design(seeds=(0,), requests=6, concurrent=2)
    units = unit_traces({"prose": workload(0, "prose", 1.0), "code": workload(1, "code", 0.5)}, design, 0)
    separate = replay(list(units.values()), design.baseline(), design, 0)
    mixed = replay(list(units.values()), design.changed("mixing"), design, 0)
    for p in separate:
        assert separate[p]["counts"].needs == mixed[p]["counts"].needs
        assert separate[p]["counts"].events == mixed[p]["counts"].events
    # the separate counts are the sums of each unit's own replay
    own = sum(compare(u, 6, seed=0).results["lru"].total.misses for u in units.values())
    assert separate["lru"]["counts"].misses == own


def test_study_pairs_change_one_factor(tmp_path) -> None:  # type: ignore[no-untyped-def]
    design = Design(seeds=(0, 1), requests=6, concurrent=2)
    study = run_study({"prose": workload(0, "prose", 1.0), "code": workload(1, "code", 0.5)}, design)
    f = study["factors"]
    assert [len(f[k]["pairs"]) for k in ("semantics", "mixing", "prefetch", "capacity")] == [4, 2, 4, 4]
    for pair in f["capacity"]["pairs"]:  # more room never costs the optimum misses
        assert pair["miss_rate"]["opt"][1] <= pair["miss_rate"]["opt"][0]
    for pair in f["semantics"]["pairs"]:
        assert -1 <= pair["tau"] <= 1 and 0 <= pair["rank_changes"] <= 5
    json.dumps(study, default=float)  # plain data
    with pytest.raises(ReplayBankError, match="10 requests, the design draws 50"):
        run_study({"prose": workload(0, "prose", 1.0)}, Design(requests=50))


def test_a_capacity_below_a_step_union_names_the_request_and_step() -> None:
    wide = synthetic_trace(requests=8, prompt_tokens=6, decode_tokens=4, layers=1, experts=12, top_k=2, seed=0)
    with pytest.raises(ReplayBankError, match=r"capacity 3 of layer 0 .* request \d+, step \d+: prefill"):
        run_study({"w": wide}, Design(seeds=(0,), requests=4, ratio=0.25))


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(seeds=(-1,)), r"seeds = \(-1,\): expected a non-empty tuple of integers >= 0"),
        (dict(seeds=()), "seeds = .*non-empty"),
        (dict(seeds=(1.5,)), "seeds = .*integers >= 0"),
        (dict(requests=0), "requests = 0: expected an integer >= 1"),
        (dict(concurrent=True), "concurrent = True: expected an integer >= 1"),
        (dict(prefetch=-1), "prefetch = -1: expected an integer >= 0"),
        (dict(ratio=float("nan")), r"ratio = nan: expected a capacity ratio in \(0, 1\]"),
        (dict(alt_ratio="0.5"), "alt_ratio = '0.5'"),
    ],
)
def test_a_design_refuses_bad_values(change: dict, message: str) -> None:
    with pytest.raises(ReplayBankError, match=message):
        Design(**change)


def cycling(requests: int, experts: list[int], decode: int = 6, layers: int = 2, num_experts: int = 8) -> Trace:
    """Requests that each open with a two-token prefill routed twice to one expert, then decode one
    token per step through ``experts`` in turn (top-1, every layer alike)."""
    req, kind, start, tokens, rows = [], [], [], [], []
    for r in range(requests):
        first = experts[r % len(experts)]
        req.append(r), kind.append(0), start.append(0), tokens.append(2)
        rows += [first, first]
        for t in range(decode):
            req.append(r), kind.append(1), start.append(2 + t), tokens.append(1)
            rows.append(experts[(r + t + 1) % len(experts)])
    return Trace.build(request=req, kind=kind, start=start, tokens=tokens, experts=[[[e] for e in rows]] * layers,
                       num_experts=[num_experts] * layers)


def test_each_intervention_moves_the_cache_the_way_its_factor_says() -> None:
    """On constructed traces whose outcome is known, every factor's intervention changes the replay
    against the baseline in its own direction (an intervention replayed as the baseline fails here)."""
    design = Design(seeds=(0,), requests=4, concurrent=2, ratio=0.5, alt_ratio=0.75, prefetch=2)
    # five experts cycled per layer: 4 slots (ratio 0.5 of 8) thrash, 6 slots (0.75) hold them all
    pairs = {f: v["pairs"][0] for f, v in run_study({"wide": cycling(6, [0, 1, 2, 3, 4])}, design)["factors"].items()}
    assert set(pairs) == {"semantics", "prefetch", "capacity"}
    for policy in ("lru", "opt"):
        # per token, the prefill's second token on the same expert counts as a need and a hit: same loads, lower miss rate
        sem = pairs["semantics"]
        assert sem["loads"][policy][0] == sem["loads"][policy][1] and sem["miss_rate"][policy][1] < sem["miss_rate"][policy][0]
        # prefetching loads experts ahead of layer 1's events; the baseline prefetches none
        pre = pairs["prefetch"]
        assert np.isnan(pre["prefetch_accuracy"][policy][0]) and 0 < pre["prefetch_accuracy"][policy][1] <= 1
        assert pre["miss_rate"][policy][1] < pre["miss_rate"][policy][0]
        # more room: only the cold loads are left (5 experts x 2 layers), fewer than at the baseline's capacity
        cap = pairs["capacity"]
        assert cap["loads"][policy][1] == 10 < cap["loads"][policy][0]
    # two workloads on disjoint experts (3 each, 4 slots): alone only cold loads (3 x 2 layers x 2 units);
    # served in one stream their 6 experts contend for the slots and reload
    design = Design(seeds=(0,), requests=4, concurrent=2, ratio=0.5)
    mixing = run_study({"a": cycling(6, [0, 1, 2]), "b": cycling(6, [4, 5, 6])}, design)["factors"]["mixing"]["pairs"][0]
    for policy in ("lru", "opt"):
        assert mixing["loads"][policy][0] == 12 < mixing["loads"][policy][1]
