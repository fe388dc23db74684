"""benchmarks/mutations.py's machinery on a tiny package of its own: a change its test catches, one
no test reads (survives), one whose old text is gone (stale), the baseline, the exit status and the
JSON record. The real list is not run here (that is the benchmark's job)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _module():
    spec = importlib.util.spec_from_file_location("mutations_bench", ROOT / "benchmarks" / "mutations.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["mutations_bench"] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


def _tiny(root: Path) -> None:
    (root / "src" / "tinypkg").mkdir(parents=True)
    (root / "src" / "tinypkg" / "__init__.py").write_text(
        "def add(a, b):\n    return a + b\n\n\ndef untested(a):\n    return a * 2\n"
    )
    (root / "tests").mkdir()
    (root / "tests" / "test_tiny.py").write_text(
        "from tinypkg import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"
    )
    (root / "README.md").write_text("a file the copy links to\n")


def test_caught_survived_and_stale_mutations_are_told_apart(tmp_path):
    bench = _module()
    _tiny(tmp_path)
    test = ("tests/test_tiny.py::test_add",)
    caught = bench.Mutation("minus", "src/tinypkg/__init__.py", "a + b", "a - b", test, "add subtracts")
    survives = bench.Mutation("triple", "src/tinypkg/__init__.py", "a * 2", "a * 3", test, "untested triples")
    stale = bench.Mutation("gone", "src/tinypkg/__init__.py", "a / b", "a // b", test, "text not there")
    twice = bench.Mutation("twice", "src/tinypkg/__init__.py", "return a", "return -a", test, "text twice")

    got = {m.name: bench.run_mutation(tmp_path, m, timeout=120) for m in (caught, survives, stale, twice)}
    assert {k: o.outcome for k, o in got.items()} == {
        "minus": "caught", "triple": "survived", "gone": "stale", "twice": "stale"}  # fmt: skip
    assert "occurs 0 times" in got["gone"].detail and "occurs 2 times" in got["twice"].detail
    assert got["minus"].change == "add subtracts: `a + b` -> `a - b`"
    # the repository itself is never changed: the copy is
    assert "a + b" in (tmp_path / "src" / "tinypkg" / "__init__.py").read_text()
    baseline = bench.run_baseline(tmp_path, [caught, survives], timeout=120)
    assert baseline.outcome == "passed" and baseline.tests == test
    assert [o.name for o in bench.failing([baseline, *got.values()])] == ["triple", "gone", "twice"]



def test_main_writes_the_record_and_fails_on_a_survivor_or_a_stale_mutation(tmp_path, monkeypatch):
    bench = _module()
    test = ("tests/test_tiny.py::test_add",)
    caught = bench.Mutation("minus", "src/x.py", "a + b", "a - b", test, "add subtracts")
    survives = bench.Mutation("triple", "src/x.py", "a * 2", "a * 3", test, "untested triples")
    outcomes = {"minus": "caught", "triple": "survived"}

    def run_mutation(root, m, timeout=600.0):  # the pytest runs are the test above's
        return bench.Outcome(m.name, m.file, bench.change_line(m), m.tests, outcomes[m.name], 1.0, "")

    def run_baseline(root, mutations, timeout=1200.0):
        return bench.Outcome("baseline", "-", "no change", test, "passed", 1.0, "")

    monkeypatch.setattr(bench, "run_mutation", run_mutation)
    monkeypatch.setattr(bench, "run_baseline", run_baseline)
    monkeypatch.setattr(bench, "MUTATIONS", (caught, survives))
    out = tmp_path / "out.json"
    assert bench.main(["--out", str(out)]) == 1
    record = json.loads(out.read_text())
    assert [(m["name"], m["outcome"]) for m in record["mutations"]] == [
        ("baseline", "passed"), ("minus", "caught"), ("triple", "survived")]  # fmt: skip
    assert record["mutations"][1]["change"] == "add subtracts: `a + b` -> `a - b`"
    assert set(record) >= {"commit", "date", "mutations"}
    assert bench.main(["--out", str(out), "--only", "minus"]) == 0
    outcomes["minus"] = "stale"
    assert bench.main(["--out", str(out), "--only", "minus"]) == 1


def test_the_real_list_has_unique_names_and_existing_files_and_tests():
    bench = _module()
    names = [m.name for m in bench.MUTATIONS]
    assert len(names) == len(set(names))
    for m in bench.MUTATIONS:
        assert (ROOT / m.file).is_file(), m.name
        assert m.tests and all((ROOT / t.split("::")[0]).is_file() for t in m.tests), m.name
        assert (ROOT / m.file).read_text().count(m.old) == 1, f"{m.name}: stale"
