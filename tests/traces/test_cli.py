"""``replaybank traces synth | inspect | simulate`` run end to end on a small synthetic trace."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from replaybank.cli import main


def test_help_names_traces_and_explains_simulate(capsys: pytest.CaptureFixture[str]) -> None:
    main([])
    assert "traces" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["traces", "simulate", "--help"])
    text = capsys.readouterr().out
    for words in ("atomic event", "never", "split", "Belady", "Gap recovered", "compulsory admission"):
        assert words in text


def test_help_stays_numpy_only() -> None:
    code = (
        "import sys; from replaybank.cli import main\n"
        "try:\n    main(['traces', 'simulate', '--help'])\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in ('torch', 'transformers', 'numba') if m in sys.modules), file=sys.stderr)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stderr.strip() == "[]"


def test_synth_inspect_simulate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "t"
    args = ["--requests", "6", "--prompt-tokens", "4", "--decode-tokens", "20", "--layers", "2", "--experts", "8"]
    assert main(["traces", "synth", str(trace), *args]) == 0
    assert "wrote" in capsys.readouterr().out
    assert main(["traces", "inspect", str(trace)]) == 0
    out = capsys.readouterr().out
    assert "6 requests, 126 steps (6 prefill, 120 decode), 144 tokens, 2 layers" in out
    report = tmp_path / "r.json"
    code = main(["traces", "simulate", str(trace), "--capacity", "8", "--semantics", "both",
                 "--expert-bytes", str(2**30), "--json", str(report)])
    assert code == 0
    out = capsys.readouterr().out
    assert "semantics = step (atomic per-step unions)" in out and "semantics = token (biased)" in out
    data = json.loads(report.read_text())
    assert data["capacity_ratio"] == [1.0, 1.0] and len(data["unions"]) == 2
    for semantics in ("step", "token"):
        opt = data[semantics]["opt"]["total"]
        lru = data[semantics]["lru"]["total"]
        # the cache holds every expert: only compulsory misses, the same for every policy
        assert opt["misses"] == lru["misses"] == 16 and opt["bytes_moved"] == 16 * 2**30
        assert data[semantics]["lfu"]["gap_recovered"] is None


def test_simulate_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "t"
    assert main(["traces", "synth", str(trace), "--prompt-tokens", "16", "--experts", "8", "--layers", "1"]) == 0
    capsys.readouterr()
    assert main(["traces", "simulate", str(trace), "--capacity", "2"]) == 2
    err = capsys.readouterr().err
    assert "capacity 2 of layer 0 (model layer 0) is smaller than a step union: request 0, step 0" in err
    assert main(["traces", "simulate", str(trace), "--capacity", "2", "--steps", "decode"]) == 0
    capsys.readouterr()
    assert main(["traces", "simulate", str(trace), "--ratio", "0.5", "--policies", "lru,fifo"]) == 2
    assert "--policies: ['fifo'] unknown" in capsys.readouterr().err
    assert main(["traces", "simulate", str(tmp_path), "--capacity", "2"]) == 2
    assert "is not a saved trace" in capsys.readouterr().err


def test_compare_writes_report_metrics_and_plots(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for name, seed in (("prose", 0), ("code", 1)):
        assert main(["traces", "synth", str(tmp_path / name), "--requests", "8", "--prompt-tokens", "2",
                     "--decode-tokens", "12", "--layers", "2", "--experts", "8", "--seed", str(seed)]) == 0
    out = tmp_path / "report"
    assert main(["traces", "compare", str(tmp_path / "prose"), str(tmp_path / "code"), "--out", str(out),
                 "--seeds", "0,1", "--requests", "4", "--concurrent", "2", "--sweep", "0.5,0.75"]) == 0
    assert "## Each factor's effect on the ranking" in capsys.readouterr().out
    assert {p.name for p in out.iterdir()} == {"report.md", "metrics.json", "miss_rate_vs_capacity.png",
                                               "gap_recovered.png"}
    m = json.loads((out / "metrics.json").read_text())
    assert m["capacity_ratio"] == {"prose": [0.5, 0.5], "code": [0.5, 0.5]}
    assert [u["max"] for u in m["per_step_union"]["prose"]] and len(m["study"]["baseline"]) == 4
    assert set(m["study"]["factors"]) == {"semantics", "mixing", "prefetch", "capacity"}
    assert [r["ratio"] for r in m["sweeps"][0]["rows"]] == [0.5, 0.75]
    assert main(["traces", "compare", str(tmp_path / "prose"), "--out", str(out), "--seeds", ","]) == 2
    assert "--seeds = ',': expected at least one seed" in capsys.readouterr().err


def test_record_trains_caches_and_records(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("transformers")
    args = ["traces", "record", str(tmp_path / "t"), "--workload", "code", "--requests", "2",
            "--prompt-tokens", "8", "--decode-tokens", "3", "--cache", str(tmp_path / "cache"),
            "--train-seconds", "0.5"]
    assert main(args) == 0
    assert "wrote" in capsys.readouterr().out
    assert main(["traces", "inspect", str(tmp_path / "t")]) == 0
    assert "workload: code" in capsys.readouterr().out
