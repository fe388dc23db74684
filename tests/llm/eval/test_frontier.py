"""The frontier and its chooser on constructed frontiers (no torch)."""

from __future__ import annotations

import numpy as np
import pytest

from replaybank.llm.eval.frontier import choose, keeps_floor, pareto, point, spearman


def _random_frontier(rng: np.random.Generator, n: int):
    families = ["conversation", "code", "open"]
    return [point(float(rng.choice([0.25, 0.5, 0.75, 1.0, 1.5])), float(rng.integers(0, 6)) / 5,
                  {f: float(rng.integers(5, 11)) / 10 for f in families},
                  profile=str(rng.choice(["uniform", "depth"]))) for _ in range(n)]


@pytest.mark.parametrize("seed", range(40))
def test_the_chooser_never_picks_below_the_floor_and_picks_the_best_domain_above(seed):
    rng = np.random.default_rng(seed)
    pts = _random_frontier(rng, int(rng.integers(1, 9)))
    floor = float(rng.choice([0.6, 0.8, 0.9, 1.0]))
    choice = choose(pts, floor)
    above = [p for p in pts if min(v for v in p.retention.values() if v is not None) >= floor]
    if not above:
        assert choice.index is None and "keeps the floor" in choice.reason
        return
    chosen = pts[choice.index]
    assert chosen.min_retention is not None and chosen.min_retention >= floor
    assert chosen.domain_exact_match == max(p.domain_exact_match for p in above)
    ties = [p for p in above if p.domain_exact_match == chosen.domain_exact_match]
    assert chosen.min_retention == max(p.min_retention for p in ties)
    assert chosen.change == min(p.change for p in ties if p.min_retention == chosen.min_retention)


def test_ties_go_to_higher_retention_then_to_the_smaller_change():
    pts = [point(1.0, 0.6, {"code": 0.91}), point(0.75, 0.6, {"code": 0.95}), point(0.5, 0.6, {"code": 0.95})]
    assert choose(pts, 0.9).index == 2
    assert choose([point(1.0, 0.6, {"code": 0.95}), point(0.5, 0.6, {"code": 0.95})], 0.9).index == 1


def test_none_when_no_point_keeps_the_floor_and_per_family_floors():
    pts = [point(1.0, 0.9, {"code": 0.5, "open": 0.99}), point(0.5, 0.4, {"code": 0.85, "open": 0.7})]
    none = choose(pts, 0.9)
    assert none.index is None and "0.700" in none.reason
    assert choose(pts, {"code": 0.8, "open": 0.6}).index == 1  # per-family floors
    assert choose(pts, {"code": 0.4}).index == 0  # a family the table leaves out is not held to one
    assert choose([], 0.9).index is None
    assert not keeps_floor(point(1.0, 1.0, {"code": None}), 0.0)  # no retention at all keeps nothing


def test_pareto_keeps_exactly_the_undominated_points():
    pts = [point(1.0, 0.9, {"c": 0.5}), point(0.75, 0.9, {"c": 0.4}), point(0.5, 0.6, {"c": 0.8}),
           point(0.25, 0.5, {"c": 0.8}), point(0.1, 0.1, {"c": 1.0}), point(0.3, 0.2, {"c": None})]
    assert pareto(pts) == [0, 2, 4]
    rng = np.random.default_rng(0)
    for _ in range(20):
        pts = _random_frontier(rng, 7)
        front = pareto(pts)
        for i, p in enumerate(pts):
            dominated = any(q.domain_exact_match >= p.domain_exact_match and q.min_retention >= p.min_retention
                            and (q.domain_exact_match, q.min_retention) != (p.domain_exact_match, p.min_retention)
                            for q in pts)
            assert (i in front) == (not dominated)
        assert choose(pts, 0.0).index in front  # the best domain point keeping floor 0 is on the front


def test_spearman_matches_the_textbook_values():
    assert spearman([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    assert spearman([1, 2, 3, 4, 5], [2, 1, 4, 3, 5]) == pytest.approx(0.8)
    assert spearman([1, 1, 2], [1, 2, 3]) == pytest.approx(0.8660254)  # ties: mean ranks, then Pearson
    assert spearman([1.0], [2.0]) is None and spearman([1, 2], [3, 3]) is None
    with pytest.raises(ValueError, match="3 values against 2"):
        spearman([1, 2, 3], [1, 2])
