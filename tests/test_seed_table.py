"""benchmarks/seed_table.py puts arms side by side over seeds gathered from several runs' metrics.json."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FAMILIES = ["arithmetic", "code", "conversation", "instruction", "open"]


def _metrics(seeds: list[int], arms: dict[str, list[list[float]]]) -> dict:
    """``arms``: per arm, per seed, the five families' retention then leakage then exact match."""
    summary = {}
    for arm, rows in arms.items():
        names = [f"retention_{f}" for f in FAMILIES] + ["leakage", "domain_exact_match"]
        summary[arm] = {"summary": {n: {"values": [r[i] for r in rows]} for i, n in enumerate(names)}}
    return {"seeds": seeds, "arms": summary}


def test_each_arm_keeps_its_own_seeds_and_its_least_family_per_seed(tmp_path: Path) -> None:
    one, two = tmp_path / "one.json", tmp_path / "two.json"
    one.write_text(json.dumps(_metrics([0, 1], {"a": [[0.5, 1, 1, 1, 0.9, 0, 0.6], [1, 0.8, 1, 1, 1, 0, 0.5]]})))
    two.write_text(json.dumps(_metrics([1, 2], {"a": [[0, 0, 0, 0, 0, 1, 0], [1, 1, 0.7, 1, 1, 0, 0.4]],
                                                "b": [[0, 0, 0, 0, 0.1, 1, 0.6], [0, 0, 0, 0, 0, 1, 0.6]]})))
    out = tmp_path / "table.json"
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "seed_table.py"), str(one), str(two),
                           "--arms", "a,b", "--json", str(out)], capture_output=True, text=True, check=True)
    table = json.loads(out.read_text())["arms"]
    assert table["a"]["seeds"] == [0, 1, 2] and table["b"]["seeds"] == [1, 2]
    # seed 1 of arm a comes from the first file (least family 0.8), not the second (0)
    assert table["a"]["least_family"]["values"] == [0.5, 0.8, 0.7]
    assert table["a"]["least_family"]["min"] == 0.5
    assert abs(table["a"]["domain_exact_match"]["mean"] - 0.5) < 1e-9
    assert table["b"]["least_family"]["values"] == [0.0, 0.0]
    assert "| a | 3 |" in done.stdout and "| b | 2 |" in done.stdout


def test_an_arm_no_run_holds_is_refused_by_name(tmp_path: Path) -> None:
    path = tmp_path / "m.json"
    path.write_text(json.dumps(_metrics([0], {"a": [[1, 1, 1, 1, 1, 0, 0.5]]})))
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "seed_table.py"), str(path), "--arms", "a,zz"],
                          capture_output=True, text=True)
    assert done.returncode != 0 and "'zz'" in done.stderr


def test_the_early_warning_is_pooled_over_runs_once_per_arm_and_seed(tmp_path: Path) -> None:
    def warning(points: list[tuple[str, int, float, float]]) -> dict:
        return {"points": [{"arm": a, "seed": s, "kl": kl, "retention_min": r, "retention_mean": r} for a, s, kl, r in points]}

    one, two = tmp_path / "one.json", tmp_path / "two.json"
    one.write_text(json.dumps({**_metrics([0], {"a": [[1, 1, 1, 1, 1, 0, 0.5]]}),
                               "early_warning": warning([("a", 0, 1.0, 0.9), ("skip", 0, 9.0, 0.9)])}))
    two.write_text(json.dumps({**_metrics([0, 1], {"b": [[0] * 5 + [1, 0.5]] * 2}),
                               "early_warning": warning([("a", 0, 5.0, 0.0), ("b", 0, 6.0, 0.1), ("b", 1, 2.0, 0.5)])}))
    out = tmp_path / "table.json"
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "seed_table.py"), str(one), str(two), "--arms", "a,b",
                    "--json", str(out)], capture_output=True, text=True, check=True)
    pooled = json.loads(out.read_text())["early_warning"]
    # arm a's seed 0 from the first file only; the unlisted arm left out
    assert [(p["arm"], p["seed"], p["kl"]) for p in pooled["points"]] == [("a", 0, 1.0), ("b", 0, 6.0), ("b", 1, 2.0)]
    assert pooled["n"] == 3 and abs(pooled["spearman_min"] + 1.0) < 1e-9
