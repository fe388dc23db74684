"""Seeds aggregation (mean and sample std) and the targets, on constructed metrics."""

from __future__ import annotations

import numpy as np
import pytest

from replaybank.llm.eval.measure import flatten
from replaybank.llm.report.seeds import aggregate, check_targets
from replaybank.llm.results import ArmResult, Stat


def _arm(**given: object) -> ArmResult:
    """An arm's results read from ``given`` over a neutral arm (every required key present)."""
    neutral: dict[str, object] = {
        "general_loss": 2.0, "docs_loss": 1.5, "domain_loss": 3.0, "domain_losses": [3.0],
        "probe_score": 0.0, "probe_logprob": -1.0,
        "suite": {"families": {}, "leakage": 0.0, "retention": {}, "n": {}, "items": []},
        "domain": {"exact_match": 0.0, "call_score": None, "n": 1},
        "matrix": {"R": [[0.0]]},
    }
    return ArmResult.from_json({**neutral, **given}, where="test arm")


def _seed(leak_naive: float, leak_self: float, dom: float) -> dict[str, dict[str, float]]:
    return {
        "base": {"leakage": 0.0, "retention_conversation": 1.0},
        "naive": {"leakage": leak_naive, "retention_conversation": 0.4, "domain_exact_match": dom},
        "rehearsal-self": {"leakage": leak_self, "retention_conversation": 0.95, "retention_arithmetic": 0.92,
                           "retention_code": 1.0, "domain_exact_match": dom - 0.02},
    }


def test_mean_and_sample_std_over_seeds():
    seeds = [_seed(0.6, 0.00, 0.90), _seed(0.8, 0.04, 0.80), _seed(1.0, 0.02, 0.70)]
    agg = aggregate(seeds)
    leak = agg["naive"]["leakage"]
    assert leak.mean == pytest.approx(0.8)
    assert leak.std == pytest.approx(np.std([0.6, 0.8, 1.0], ddof=1)) == pytest.approx(0.2)
    assert leak.values == [0.6, 0.8, 1.0] and leak.n == 3
    assert agg["rehearsal-self"]["leakage"].mean == pytest.approx(0.02)
    assert agg["base"]["retention_conversation"].std == 0.0


def test_one_seed_has_no_spread_and_missing_scalars_use_the_seeds_that_have_them():
    agg = aggregate([{"a": {"x": 2.0}}])
    assert agg["a"]["x"] == Stat(mean=2.0, std=None, n=1, values=[2.0])
    assert agg["a"]["x"].to_json() == {"mean": 2.0, "std": None, "n": 1, "values": [2.0]}
    agg = aggregate([{"a": {"x": 1.0, "y": 5.0}}, {"a": {"x": 3.0}}])
    assert agg["a"]["y"].n == 1 and agg["a"]["x"].mean == 2.0
    with pytest.raises(ValueError, match="no seeds"):
        aggregate([])


def test_targets_on_the_means():
    agg = aggregate([_seed(0.6, 0.00, 0.90), _seed(0.8, 0.04, 0.80)])
    t = check_targets(agg, ["rehearsal-self"])
    assert t.naive_loses_behaviour is True
    assert t.arms["rehearsal-self"].met is True and t.best_arm == "rehearsal-self"
    # a rehearsal arm that leaks 10% and loses 8 points of domain accuracy misses two targets
    worse = aggregate([{**_seed(0.6, 0.10, 0.90), "rehearsal-self": {**_seed(0.6, 0.10, 0.90)["rehearsal-self"],
                                                                    "domain_exact_match": 0.82}}])
    checks = check_targets(worse, ["rehearsal-self"]).arms["rehearsal-self"].checks
    assert checks["leakage_at_most_2pct"] is False and checks["domain_within_5_points_of_naive"] is False
    assert checks["retention_code_at_least_90pct"] is True and checks["retention_above_naive"] is True


def test_retention_target_needs_the_mean_and_every_seed():
    seeds = [_seed(0.9, 0.0, 0.6) for _ in range(3)]
    seeds[0]["rehearsal-self"]["retention_arithmetic"] = 0.84  # mean 0.893: below 0.9
    checks = check_targets(aggregate(seeds), ["rehearsal-self"]).arms["rehearsal-self"].checks
    assert checks["retention_arithmetic_at_least_90pct"] is False
    seeds[1]["rehearsal-self"]["retention_arithmetic"] = seeds[2]["rehearsal-self"]["retention_arithmetic"] = 1.0
    agg = aggregate(seeds)  # mean 0.947, but one seed at 0.84 < 0.85
    assert agg["rehearsal-self"]["retention_arithmetic"].mean > 0.9
    t = check_targets(agg, ["rehearsal-self"])
    assert t.arms["rehearsal-self"].checks["retention_arithmetic_at_least_90pct"] is False
    assert t.naive_learns_skill is True  # naive's domain exact match 0.6 >= 0.5
    low = aggregate([_seed(0.9, 0.0, 0.45)])
    assert check_targets(low, ["rehearsal-self"]).naive_learns_skill is False


def test_flatten_reads_suite_domain_and_matrix():
    flat = flatten(_arm(
        general_loss=2.5, probe_score=0.5,
        suite={"families": {"conversation": 0.8, "arithmetic": 0.9}, "leakage": 0.1,
               "retention": {"conversation": 0.85, "arithmetic": None}, "n": {}, "items": []},
        domain={"exact_match": 0.7, "call_score": None, "n": 1},
        matrix={"R": [[0.7, 0.0], [0.3, 0.8]], "average_accuracy": 0.55, "backward_transfer": -0.4},
    ))
    assert flat == {"general_loss": 2.5, "docs_loss": 1.5, "domain_loss": 3.0, "probe_score": 0.5,
                    "probe_logprob": -1.0, "leakage": 0.1, "conversation": 0.8,
                    "retention_conversation": 0.85, "arithmetic": 0.9, "domain_exact_match": 0.7,
                    "average_accuracy": 0.55, "backward_transfer": -0.4}
    assert flatten(_arm(self_loss=0.25, domain={"exact_match": 0.7, "call_score": 0.5, "n": 1})) == {
        **flatten(_arm()), "self_loss": 0.25, "domain_exact_match": 0.7, "domain_call_score": 0.5}


def test_targets_cover_instruction_and_leave_open_out():
    arm = {"leakage": 0.0, "retention_conversation": 0.95, "retention_instruction": 0.95, "retention_arithmetic": 1.0,
           "retention_code": 1.0, "retention_open": 0.3, "domain_exact_match": 0.9}
    checks = check_targets(aggregate([{"r": arm}]), ["r"]).arms["r"]
    # agreement with the base's wording (open) is reported, not a target: 30% of it does not fail the arm
    assert checks.met is True and not any("open" in k for k in checks.checks)
    lost = check_targets(aggregate([{"r": {**arm, "retention_instruction": 0.8}}]), ["r"]).arms["r"]
    assert lost.met is False and lost.checks["retention_instruction_at_least_90pct"] is False


def test_flatten_and_suite_retention_report_open_apart():
    from replaybank.llm.eval.measure import suite_retention

    retention = {"conversation": 1.0, "instruction": 0.8, "arithmetic": 0.9, "code": 0.9, "open": 0.2}
    flat = flatten(_arm(suite={"families": retention, "leakage": 0.0, "retention": retention, "n": {}, "items": []}))
    assert flat["retention_instruction"] == 0.8 and flat["retention_open"] == 0.2 and flat["open"] == 0.2
    assert suite_retention(retention) == pytest.approx(0.9)  # the mean of the checked families only
    assert suite_retention({"open": 0.2, "code": None}) == 0.2  # a suite with no checked family left
