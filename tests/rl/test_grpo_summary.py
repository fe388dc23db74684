"""``grpo_trainer.summarize`` / ``format_table`` on hand-made runs (no model): medians count an
unreached target as infinitely expensive, the ratio is replay over no replay, the last-3 mean is
over evaluations after update 0."""

from __future__ import annotations

from typing import Any

import pytest

from replaybank.rl.grpo_trainer import format_table, summarize


def _run(arm: str, seed: int, accs: list[float], tokens_per_eval: int) -> dict[str, Any]:
    curve = [{"update": 5 * i, "tokens_generated": tokens_per_eval * i, "seconds": 10.0 * i, "accuracy": a}
             for i, a in enumerate(accs)]
    hit = next((c for c in curve if c["accuracy"] >= 0.3), None)
    return {
        "arm": arm, "seed": seed, "updates": 5 * (len(accs) - 1), "tokens_generated": curve[-1]["tokens_generated"],
        "tokens_to_target": hit and hit["tokens_generated"], "seconds_to_target": hit and hit["seconds"],
        "final_accuracy": accs[-1], "wall_seconds": 10.0 * (len(accs) - 1), "generation_share": 0.4, "curve": curve,
    }


def test_summary_medians_ratio_and_tail_mean() -> None:
    runs = [
        _run("no_replay", 0, [0.1, 0.2, 0.3, 0.4], 100),   # target at 200 tokens
        _run("no_replay", 1, [0.1, 0.1, 0.2, 0.35], 100),  # at 300
        _run("no_replay", 2, [0.1, 0.1, 0.1, 0.1], 100),   # never
        _run("replay", 0, [0.1, 0.3, 0.3, 0.2], 50),       # at 50
        _run("replay", 1, [0.1, 0.2, 0.4, 0.5], 50),       # at 100
        _run("replay", 2, [0.1, 0.1, 0.1, 0.1], 50),       # never
    ]
    s = summarize(runs, 0.3)
    assert s["no_replay"]["tokens_to_target"] == [200, 300, None]
    assert s["no_replay"]["median_tokens_to_target"] == 300  # the unreached seed sorts last
    assert s["replay"]["median_tokens_to_target"] == 100
    assert s["replay_vs_no_replay"]["median_tokens_to_target"] == pytest.approx(1 / 3, abs=1e-3)
    assert s["replay"]["last3_accuracy"] == pytest.approx([0.8 / 3, 1.1 / 3, 0.1])  # update 0 excluded
    assert s["replay"]["best_accuracy"] == [0.3, 0.5, 0.1]
    assert s["no_replay"]["final_accuracy_mean"] == pytest.approx(0.85 / 3)
    assert s["no_replay"]["median_tokens_to"]["0.2"] == 200
    table = format_table(s)
    assert "| no_replay | 200, 300, not reached | 300 |" in table
    assert "replay / no replay, median tokens to target: 0.333" in table


def test_median_is_unreached_when_most_seeds_miss() -> None:
    runs = [_run("no_replay", k, [0.1, 0.35 if k == 0 else 0.1], 100) for k in range(3)]
    s = summarize(runs, 0.3)
    assert s["no_replay"]["reached"] == 1 and s["no_replay"]["median_tokens_to_target"] is None
    assert "not reached" in format_table(s)
