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


# The seed-0 frontier of self-distill on SmolLM2 (docs/llm.md), validation figures: floor 0.7
# is kept only by uniform 0.5, whose domain exact match is 4% against 71% as trained.
_SKILL = [point(0.5, 0.04, {"open": 0.72, "code": 1.0}), point(0.75, 0.50, {"open": 0.67, "code": 1.0}),
          point(1.0, 0.71, {"open": 0.61, "code": 0.9})]


def test_a_point_keeping_the_floor_only_without_the_skill_is_refused_at_half_and_chosen_at_zero():
    refused = choose(_SKILL, 0.7, keep_skill=0.5)
    assert refused.index is None
    assert refused.reason == ("1 of 3 points keep the floor, but only by losing the skill (best such: 4% validation "
                              "domain exact match vs 71% as trained; keep_skill = 0.5 asks for at least 36%); the arm "
                              "runs as trained")
    assert choose(_SKILL, 0.7, keep_skill=0.0).index == 0
    assert choose(_SKILL, 0.7, keep_skill=0.05).index == 0  # 4% is kept by 0.05 x 71% = 3.55%
    # the rule's reference may be given (a frontier without its uniform-1 point)
    assert choose(_SKILL[:2], 0.7, keep_skill=0.5, trained=0.71).index is None
    assert choose(_SKILL[:2], 0.65, keep_skill=0.5, trained=0.71).index == 1


def test_the_skill_rule_keeps_the_best_point_that_keeps_both_and_says_so():
    choice = choose(_SKILL, 0.65, keep_skill=0.5)
    assert choice.index == 1  # uniform 0.5 keeps more retention but not the skill; 0.75 keeps both
    assert choice.reason == ("best validation domain exact match (0.500) among the 1 of 3 points whose validation "
                             "retention keeps the floor and that keep 0.5 of the trained validation domain exact "
                             "match (0.710)")
    assert choose(_SKILL, 0.65, keep_skill=0.5).index == choose(_SKILL, 0.65, keep_skill=0.7).index
    assert choose(_SKILL, 0.65, keep_skill=0.75).index is None  # 50% < 0.75 x 71%


def test_no_point_keeping_the_floor_is_told_apart_from_points_losing_the_skill():
    none = choose(_SKILL, 0.8, keep_skill=0.5)
    assert none.index is None and none.reason.startswith("no point's validation retention keeps the floor")
    with pytest.raises(ValueError, match="needs the adapter as trained"):
        choose(_SKILL[:2], 0.7, keep_skill=0.5)
    with pytest.raises(ValueError, match="outside"):
        choose(_SKILL, 0.7, keep_skill=1.5)


@pytest.mark.parametrize("seed", range(20))
def test_the_chooser_never_picks_a_point_below_the_skill_share(seed):
    rng = np.random.default_rng(100 + seed)
    pts = [*_random_frontier(rng, int(rng.integers(1, 8))), point(1.0, float(rng.integers(1, 6)) / 5, {"code": 0.9})]
    keep = float(rng.choice([0.0, 0.25, 0.5, 0.9]))
    choice = choose(pts, 0.6, keep_skill=keep)
    trained = next(p for p in pts if p.lo == p.hi == 1.0).domain_exact_match
    eligible = [p for p in pts if keeps_floor(p, 0.6) and p.domain_exact_match >= keep * trained]
    if not eligible:
        assert choice.index is None
        return
    assert pts[choice.index].domain_exact_match == max(p.domain_exact_match for p in eligible)
    assert pts[choice.index].domain_exact_match >= keep * trained
