"""metrics.json's pieces: the effect summary."""

from __future__ import annotations

import pytest

from replaybank.llm.report.metrics import effect


def test_effect_criteria():
    e = effect({"base": 2.0, "naive": 3.0, "rehearsal": 2.5}, {"base": 5.0, "naive": 0.2, "rehearsal": 0.25})
    assert e.ratio is not None and e.ratio.rise_ratio == pytest.approx(0.5)
    assert e.to_json()["rise_ratio"] == pytest.approx(0.5)
    assert e.criteria == {"naive_raises_general": True, "rise_at_most_a_third": False, "domain_loss_at_most_5pct_above_naive": False}
