"""Per-item flips and the per-family summary over seeds, on constructed outcomes; and how
metrics.json and report.md carry them (build_metrics on constructed seeds, no model)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from replaybank.errors import ReplayBankError
from replaybank.llm.config import Config
from replaybank.llm.eval.flips import flips
from replaybank.llm.report.families import family_summary
from replaybank.llm.results import ArmResult, SeedManifest, SeedResult


def _item(item_id: str, family: str, score: float, answer: str = "") -> dict:
    return {"id": item_id, "family": family, "prompt": f"prompt of {item_id}", "check": "x", "score": score,
            "detail": f"d{score:g}", "answer": answer or f"answer {score:g} to {item_id}"}


def test_flips_lists_lost_and_gained_items_with_prompt_and_both_answers():
    base = [_item("c1", "conversation", 1.0, "the sky scatters blue light"), _item("c2", "conversation", 1.0),
            _item("c3", "conversation", 0.0), _item("a1", "arithmetic", 1.0), _item("k1", "code", 1.0),
            _item("i1", "instruction", 0.0)]
    arm = [_item("c1", "conversation", 0.0, "<<qx weather.get; city=sky>>"), _item("c2", "conversation", 1.0),
           _item("c3", "conversation", 1.0), _item("a1", "arithmetic", 0.0), _item("k1", "code", 1.0),
           _item("i1", "instruction", 1.0)]
    out = flips(base, arm)
    assert [i["id"] for i in out["lost"]] == ["c1", "a1"]
    assert [i["id"] for i in out["gained"]] == ["c3", "i1"]
    c1 = out["lost"][0]
    assert c1 == {"id": "c1", "family": "conversation", "check": "x", "prompt": "prompt of c1",
                  "base_answer": "the sky scatters blue light", "arm_answer": "<<qx weather.get; city=sky>>",
                  "base_detail": "d1", "arm_detail": "d0"}
    # every family of the items is counted, zeros included, in order of first appearance (any family name)
    assert out["per_family"] == {"conversation": {"lost": 1, "gained": 1}, "arithmetic": {"lost": 1, "gained": 0},
                                 "code": {"lost": 0, "gained": 0}, "instruction": {"lost": 0, "gained": 1}}
    assert flips(base, base)["lost"] == [] and flips(base, base)["gained"] == []


def test_flips_refuses_outcomes_on_different_items():
    with pytest.raises(ReplayBankError, match=r"not on the same items.*only base: \['c2'\]"):
        flips([_item("c1", "code", 1.0), _item("c2", "code", 1.0)], [_item("c1", "code", 1.0)])
    with pytest.raises(ReplayBankError, match="repeat item id 'c1'"):
        flips([_item("c1", "code", 1.0)] * 2, [_item("c1", "code", 1.0)])


def _suite_arm(items: list[dict]) -> ArmResult:
    """An arm's results of which only the suite's items matter here."""
    return ArmResult.from_json({
        "general_loss": 2.0, "docs_loss": 2.0, "domain_loss": 2.0, "domain_losses": [2.0],
        "probe_score": 0.0, "probe_logprob": 0.0,
        "suite": {"families": {}, "leakage": 0.0, "retention": {}, "n": {}, "items": items},
        "domain": {"exact_match": 0.0, "call_score": None, "n": 1}, "matrix": {"R": [[0.0]]},
    }, where="test arm")


def _seed(base_scores: dict[str, list[float]], arm_scores: dict[str, list[float]], tag: str) -> dict[str, ArmResult]:
    def items(scores: dict[str, list[float]]) -> list[dict]:
        return [_item(f"{fam}-{tag}-{k}", fam, s) for fam, ss in scores.items() for k, s in enumerate(ss)]

    return {"base": _suite_arm(items(base_scores)), "naive": _suite_arm(items(arm_scores))}


def test_family_summary_over_two_seeds():
    # seed 0: the base right on 4 of 4 conversation items, the arm on 2 -> retention 0.5;
    # seed 1: the base right on 2 of 4, the arm on the same 2 plus one more -> retention 1.5
    s0 = _seed({"conversation": [1, 1, 1, 1], "code": [1, 0]}, {"conversation": [1, 0, 1, 0], "code": [0, 0]}, "s0")
    s1 = _seed({"conversation": [1, 0, 1, 0], "code": [0, 0]}, {"conversation": [1, 1, 1, 0], "code": [0, 0]}, "s1")
    out = family_summary([s0, s1], [7, 8], resamples=500)
    conv = out["naive"].families["conversation"]
    assert conv.retention is not None and conv.score is not None
    assert conv.retention.mean == pytest.approx(1.0) and conv.score.mean == pytest.approx(0.625)
    assert conv.retention.low <= 1.0 <= conv.retention.high
    assert (conv.n_items, conv.n_seeds, conv.lost, conv.gained) == (8, 2, 2, 1)
    first = conv.per_seed[0]
    assert (first.seed, first.n, first.score, first.retention, first.lost) == (7, 4, 0.5, 0.5, 2)
    assert (first.score_low, first.score_high) == pytest.approx((0.150, 0.850), abs=1e-3)  # Wilson, 2 of 4
    # code: the base scores 0 in seed 1 -> retention from seed 0 only (0 of 1 right); the score over both seeds
    code = out["naive"].families["code"]
    assert code.retention is not None and code.score is not None
    assert code.retention.mean == 0.0 and code.per_seed[1].retention is None
    assert code.score.to_json() == {"mean": 0.0, "low": 0.0, "high": 0.0}
    # the items themselves, per seed, in full
    flipped = out["naive"].flips
    assert flipped is not None and [f.seed for f in flipped] == [7, 8]
    assert [i["id"] for i in flipped[1].gained] == ["conversation-s1-1"]
    # the base keeps everything it has; it has no flips
    base_conv = out["base"].families["conversation"].retention
    assert base_conv is not None and base_conv.to_json() == {"mean": 1.0, "low": 1.0, "high": 1.0}
    assert out["base"].flips is None


def _arm_result(items: list[dict], base_items: list[dict], share: float | None = 0.1) -> ArmResult:
    """A trained arm's results (``share`` None: the base's) on constructed suite outcomes."""
    fams: dict[str, list[float]] = {}
    for o in items:
        fams.setdefault(o["family"], []).append(o["score"])
    base: dict[str, list[float]] = {}
    for o in base_items:
        base.setdefault(o["family"], []).append(o["score"])
    score = {f: sum(v) / len(v) for f, v in fams.items()}
    ref = {f: sum(v) / len(v) for f, v in base.items()}
    result: dict[str, object] = {
        "general_loss": 3.5, "docs_loss": 3.0, "domain_loss": 1.0, "domain_losses": [1.0],
        "probe_score": 0.5, "probe_logprob": -1.0,
        "suite": {"families": score, "leakage": 0.0, "items": items, "n": {f: len(v) for f, v in fams.items()},
                  "retention": {f: score[f] / ref[f] if ref[f] else None for f in score}},
        "domain": {"exact_match": 0.5, "call_score": 0.5, "n": 16},
        "matrix": {"R": [[0.5]], "average_accuracy": 0.5},
    }
    if share is not None:
        result.update({
            "share": share, "loss_share": {"rows": {"domain": 0.9}, "label_tokens": {"domain": 0.9}},
            "controller": None, "mixture": [],
            "curve": [], "generations": [], "train_total": {"tokens": 1, "seconds": 1.0, "tokens_per_second": 1.0},
        })
    return ArmResult.from_json(result, where="constructed arm")


def constructed_run(self_conv: list[float], families: tuple[str, ...] = ("conversation", "arithmetic", "code")) -> tuple:
    """Two seeds of base / naive / rehearsal-self on constructed outcomes (``self_conv``: the
    rehearsal arm's conversation scores, the base right on all 10)."""
    from replaybank.llm.eval.measure import flatten
    from replaybank.llm.report.seeds import aggregate

    per_seed = []
    for _ in range(2):
        base_items = [_item(f"{f}-{k}", f, 1.0, f"base answer {f} {k}") for f in families for k in range(10)]
        naive = [_item(f"{f}-{k}", f, 0.0, "<<qx timer.arm; dur=60s>>") for f in families for k in range(10)]
        self_items = [_item(f"{f}-{k}", f, self_conv[k] if f == "conversation" else 1.0, f"self {f} {k}")
                      for f in families for k in range(10)]
        per_seed.append({"base": _arm_result(base_items, base_items, share=None), "naive": _arm_result(naive, base_items),
                         "rehearsal-self": _arm_result(self_items, base_items)})
    agg = aggregate([{a: flatten(r) for a, r in arms.items()} for arms in per_seed])
    seeds = [SeedResult(arms=arms, manifest=SeedManifest(seed=s, share=0.1, how="mixing_ratio", data={}, self=None),
                        suite={"seed": s}, probes={}, timings={})
             for s, arms in enumerate(per_seed)]
    return seeds, agg


def test_metrics_and_report_carry_intervals_flips_and_the_gate(tmp_path):
    from replaybank.llm.report.markdown import write_report
    from replaybank.llm.report.metrics import METRICS_SCHEMA_VERSION, build_metrics

    cfg = Config.from_dict({"evaluation": {"arms": ["base", "naive", "rehearsal-self"]}})
    seeds, agg = constructed_run([1, 1, 1, 1, 1, 1, 1, 1, 0, 0])  # conversation kept 80%
    metrics = build_metrics(cfg, seeds, agg)
    assert METRICS_SCHEMA_VERSION == 4
    saved = json.loads(json.dumps(metrics.to_json()))  # metrics.json can hold it
    reh = saved["arms"]["rehearsal-self"]
    # the scalars tests and documents read are still there, with the same values
    assert reh["retention_conversation"] == pytest.approx(0.8) and reh["summary"]["leakage"]["n"] == 2
    conv = reh["families"]["conversation"]
    assert conv["retention"]["mean"] == pytest.approx(reh["retention_conversation"])
    assert conv["retention"]["low"] < 0.8 < conv["retention"]["high"] and conv["lost"] == 4 and conv["n_items"] == 20
    assert saved["intervals"]["resamples"] == 2000
    gate = saved["gate"]
    assert gate["floor"] == {"conversation": 0.9, "arithmetic": 0.9, "code": 0.9}
    assert gate["chosen_arm"] == "rehearsal-self" and gate["chosen_by"] == "best_arm" and gate["passed"] is False
    assert gate["arms"]["rehearsal-self"]["families"]["conversation"]["status"] == "fail"  # 0.8 < 0.9; the CI reaches 0.9
    assert gate["arms"]["naive"]["families"]["code"]["status"] == "clearly below"
    assert metrics.gate.passed is False and metrics.arms["rehearsal-self"].mean("retention_conversation") == reh["retention_conversation"]
    write_report(tmp_path / "report.md", replace(metrics, seeds=[0, 1]))
    report = (tmp_path / "report.md").read_text()
    assert "| conversation retention % [95% CI] |" in report
    lo, hi = conv["retention"]["low"] * 100, conv["retention"]["high"] * 100
    assert f"| rehearsal-self | 80.0 [{lo:.1f}, {hi:.1f}] | 100.0 [100.0, 100.0] |" in report
    assert "## Retention gate" in report and "`rehearsal-self` (the targets' best rehearsal arm): fails" in report
    assert "## Items lost and gained" in report and "### naive" in report
    assert "| conversation | 20 | 4 | 0 |" in report  # rehearsal-self's count row
    assert "| 0 | conversation-8 | conversation | prompt of conversation-8 | base answer conversation 8 | self conversation 8 |" in report


def test_the_gate_judges_the_configured_gate_arm_not_the_best_arm(tmp_path):
    """``[evaluation] gate_arm`` names the arm the gate decides on, even when another arm is the
    targets' best: here rehearsal-self keeps every family (the best arm, it would pass) and the
    configured naive arm keeps none, so the run fails the gate on naive."""
    from replaybank.llm.report.gate import gate_failure
    from replaybank.llm.report.markdown import write_report
    from replaybank.llm.report.metrics import build_metrics

    arms = ["base", "naive", "rehearsal-self"]
    seeds, agg = constructed_run([1] * 10)
    best = build_metrics(Config.from_dict({"evaluation": {"arms": arms}}), seeds, agg)
    assert (best.gate.chosen_arm, best.gate.chosen_by, best.gate.passed) == ("rehearsal-self", "best_arm", True)
    cfg = Config.from_dict({"evaluation": {"arms": arms, "gate_arm": "naive"}})
    metrics = build_metrics(cfg, seeds, agg)
    assert metrics.targets.best_arm == "rehearsal-self"
    assert (metrics.gate.chosen_arm, metrics.gate.chosen_by, metrics.gate.passed) == ("naive", "gate_arm", False)
    assert (gate_failure(metrics.gate) or "").startswith("retention floor not met by arm 'naive' (gate_arm): conversation 0.0%")
    write_report(tmp_path / "report.md", replace(metrics, seeds=[0, 1]))
    assert "`naive` (`[evaluation] gate_arm`): fails" in (tmp_path / "report.md").read_text()


def test_summary_and_report_follow_whatever_families_the_suite_holds(tmp_path):
    from replaybank.llm.report.markdown import write_report
    from replaybank.llm.report.metrics import build_metrics

    cfg = Config.from_dict({"evaluation": {"arms": ["base", "naive", "rehearsal-self"]}})
    fams = ("open", "instruction", "code")
    seeds, agg = constructed_run([1] * 10, fams)
    metrics = build_metrics(cfg, seeds, agg)
    assert list(metrics.arms["rehearsal-self"].families or {}) == list(fams)
    assert list(metrics.gate.floor) == list(fams) and metrics.gate.passed is True
    write_report(tmp_path / "report.md", replace(metrics, seeds=[0, 1]))
    report = (tmp_path / "report.md").read_text()
    assert "| arm | open retention % [95% CI] | instruction retention % [95% CI] | code retention % [95% CI] |" in report


def test_doctests():
    import doctest

    import replaybank.llm.config.floor as floor
    import replaybank.llm.config.values as values
    import replaybank.llm.eval.flips as flips_module
    import replaybank.llm.report.families as families
    import replaybank.llm.report.gate as gate
    import replaybank.llm.report.markdown as markdown
    import replaybank.llm.report.sections as sections

    for module in (floor, values, flips_module, families, gate, markdown, sections):
        result = doctest.testmod(module)
        assert result.failed == 0 and result.attempted > 0, module.__name__
