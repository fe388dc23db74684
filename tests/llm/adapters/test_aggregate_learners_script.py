"""benchmarks/aggregate_learners.py's pure parts: the training-overlap check, the union of the seeds'
held-out requests and the table (the measurement itself needs a finished run: see its docstring)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "benchmarks" / "aggregate_learners.py"


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("aggregate_learners", SCRIPT)
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


def test_overlaps_finds_every_held_out_prompt_that_any_seed_trained_on(script):
    held = {0: ["a", "b"], 1: ["c", "d"], 2: ["e"]}
    train = {0: {"x", "d"}, 1: {"y"}, 2: {"b", "d"}}
    assert script.overlaps(held, train) == {"b": [(0, 2)], "d": [(1, 0), (1, 2)]}
    assert script.overlaps(held, {0: {"x"}, 1: {"y"}, 2: {"z"}}) == {}


def test_union_keeps_each_prompt_once_in_seed_order_and_leaves_out_the_dropped(script):
    rec = lambda p: {"prompt": p, "response": p.upper()}  # noqa: E731
    held = {0: [rec("a"), rec("b"), rec("c")], 1: [rec("b"), rec("d"), rec("e")], 2: [rec("f")]}
    records, of_seed, left = script.union(held, 2, {"d"})
    assert [r["prompt"] for r in records] == ["a", "b", "f"] and of_seed == [0, 0, 2]
    assert left == 2  # "b" again (seed 1) and "d" (dropped); "c" and "e" are past the first 2 rows
    records, of_seed, left = script.union(held, None)
    assert [r["prompt"] for r in records] == ["a", "b", "c", "d", "e", "f"] and left == 1


def test_the_table_shows_single_seeds_mean_and_std_beside_each_aggregate(script):
    results = {"toolapi": {"requests": 47, "single": {0: {"accuracy": 0.4}, 1: {"accuracy": 0.5}, 2: {"accuracy": 0.6}},
                           "aggregate": {"linear": {"accuracy": 0.25}, "cat": {"accuracy": 0.55}}}}
    lines = script.table(results, ["linear", "cat"]).splitlines()
    assert lines[0] == "| skill | requests | single seeds | single min-max | aggregate linear | aggregate cat |"
    assert lines[2] == "| toolapi | 47 | 50.0 ± 10.0 | 40.0-60.0 | 25.0 | 55.0 |"


def test_types_take_a_scale_and_refuse_what_is_not_a_type_or_a_positive_number(script):
    known = ["linear", "cat", "ties"]
    assert script.parse_types("linear, cat*1.3,cat*2", known) == [
        ("linear", "linear", 1.0), ("cat*1.3", "cat", 1.3), ("cat*2", "cat", 2.0)]
    for bad, says in [("cat*0", "positive"), ("cat*-1", "positive"), ("cat*nan", "positive"), ("cat*inf", "positive"),
                      ("cat*", "positive"), ("lienar", "'lienar' is not one of"), ("cat,cat", "given twice"), (",", "give one")]:
        with pytest.raises(ValueError, match=says):
            script.parse_types(bad, known)
