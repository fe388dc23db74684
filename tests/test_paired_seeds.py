"""benchmarks/paired_seeds.py pairs two arms seed by seed over several runs' metrics.json."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("paired_seeds", ROOT / "benchmarks" / "paired_seeds.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _metrics(seeds: list[int], arms: dict[str, list[float]]) -> dict:
    return {"seeds": seeds, "arms": {a: {"summary": {"domain_exact_match": {"values": v}}} for a, v in arms.items()}}


def test_seeds_are_paired_over_runs_and_the_first_run_wins_a_repeated_seed(tmp_path: Path) -> None:
    ps = _script()
    one, two = tmp_path / "one.json", tmp_path / "two.json"
    one.write_text(json.dumps(_metrics([0, 1], {"a": [0.5, 0.6], "b": [0.4, 0.7]})))
    two.write_text(json.dumps(_metrics([1, 2, 3], {"a": [0.0, 0.9, 0.8], "b": [0.0, 0.5]  + [0.8]})))
    a, b = ps.gather([one, two], "a"), ps.gather([one, two], "b")
    assert sorted(a) == [0, 1, 2, 3] and a[1]["domain_exact_match"] == 0.6  # seed 1 from the first file
    gaps = [a[s]["domain_exact_match"] - b[s]["domain_exact_match"] for s in sorted(set(a) & set(b))]
    assert [round(g, 6) for g in gaps] == [0.1, -0.1, 0.4, 0.0]
    mean, low, high = ps.bootstrap_mean(gaps)
    assert round(mean, 6) == 0.1 and low <= mean <= high and low >= -0.1 and high <= 0.4


def test_a_run_without_the_arm_adds_no_seed(tmp_path: Path) -> None:
    ps = _script()
    path = tmp_path / "m.json"
    path.write_text(json.dumps(_metrics([5], {"a": [0.5]})))
    assert ps.gather([path], "b") == {}


def _figures(exact: float, families: list[float]) -> dict[str, float]:
    names = ["retention_arithmetic", "retention_code", "retention_conversation", "retention_instruction", "retention_open"]
    return {"domain_exact_match": exact, **dict(zip(names, families))}


def test_the_least_family_is_paired_seed_by_seed() -> None:
    ps = _script()
    mine = {0: _figures(0.5, [0.9, 1.0, 0.95, 0.97, 1.0]), 1: _figures(0.6, [1.0, 0.96, 1.0, 1.0, 1.0])}
    theirs = {0: _figures(0.6, [0.5, 0.9, 0.9, 0.9, 0.7]), 1: _figures(0.6, [0.2, 1.0, 1.0, 1.0, 1.0]), 2: _figures(0.1, [0.0] * 5)}
    found = ps.pair(mine, theirs, "routed", "peer")
    assert found["seeds"] == [0, 1]  # seed 2 has only the peer
    assert [round(g, 6) for g in found["min_family_gap"]["per_seed"]] == [0.4, 0.76]
    assert round(found["min_family_gap"]["mean"], 6) == 0.58
    assert [round(m, 6) for m in found["min_family_per_seed"]] == [0.9, 0.96]
    assert round(found["gap"]["mean"], 6) == -0.05
