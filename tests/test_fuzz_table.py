"""benchmarks/fuzz_table.py: outcome counts read back from hypothesis's statistics, failures
classed, the committed run covering every fuzz test, and the script run on one file."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULT = ROOT / "benchmarks" / "results" / "fuzz_table.json"

STATS = """tests/test_ratelimit_fuzz.py::test_limiter_parameters_and_state:

  - during generate phase (0.70 seconds):
    - Typical runtimes: ~ 0-5 ms, of which ~ 0-4 ms in data generation
    - 300 passing, 0 failing, and 21 invalid test cases
    - Events:
      * 33.02%, construct: accepted
      * 30.53%, construct: InvalidArgumentError
      * 0.93%, Retried draw from text(characters(codec='utf-8'), max_size=3).filter(not_yet_in_unique_list) to satisfy filter

  - Stopped because settings.max_examples=300
"""


def _module():
    spec = importlib.util.spec_from_file_location("fuzz_table", ROOT / "benchmarks" / "fuzz_table.py")
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules["fuzz_table"] = mod  # dataclasses look their module up while the class is built
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


def test_event_shares_turn_back_into_counts_without_the_generator_events() -> None:
    passing, failing, invalid, outcomes, exact, stopped = _module()._generate_phase(STATS, "node")
    assert (passing, failing, invalid, exact) == (300, 0, 21, True)
    assert outcomes == {"construct: accepted": 106, "construct: InvalidArgumentError": 98}  # of 321 cases
    assert stopped == "settings.max_examples=300"


def test_a_failure_is_a_hang_a_failed_check_or_a_crash() -> None:
    kind = _module()._failure_kind
    assert kind("AssertionError: a call ran past its 2.0 s bound (2.1 s CPU, 2.2 s wall)").startswith("hang: ")
    assert kind("AssertionError: a refused state changed the mixer\nassert ...") == (
        "check: AssertionError: a refused state changed the mixer")
    assert kind("KeyError: 'shard_idx'") == "crash: KeyError: 'shard_idx'"


def test_the_committed_run_covers_every_fuzz_test_and_passed() -> None:
    files = _module().FILES
    table = json.loads(RESULT.read_text())
    assert [f["file"] for f in table["files"]] == list(files)
    for run in table["files"]:
        assert run["returncode"] == 0 and run["failed"] == 0
        assert sorted(s["test"].split("::")[-1] for s in run["surfaces"]) == sorted(files[run["file"]])
        for s in run["surfaces"]:
            assert s["passed"] and s["examples"] == table["examples"] and s["counts_exact"]
            assert s["outcomes"] and max(s["outcomes"].values()) <= s["examples"]


def test_the_script_runs_one_file_and_prints_its_row(tmp_path: Path) -> None:
    out = tmp_path / "fuzz.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "fuzz_table.py"), "--examples", "10",
                           "--only", "tests/test_ratelimit_fuzz.py", "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300, check=True)
    table = json.loads(out.read_text())
    (run,) = table["files"]
    (surface,) = run["surfaces"]
    assert (table["examples"], table["seed"], surface["examples"], surface["passed"]) == (10, 29, 10, True)
    assert sum(k for event, k in surface["outcomes"].items() if event.startswith("construct: ")) == 10
    assert "| rate limiters: random arguments and states (`tests/test_ratelimit_fuzz.py`) | 10 | passed |" in proc.stdout
