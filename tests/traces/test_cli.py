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


@pytest.mark.parametrize(
    "argv, message",
    [
        (["synth", "OUT", "--seed", "-1"], "argument --seed: -1 is below 0"),
        (["synth", "OUT", "--requests", "0"], "argument --requests: 0 is below 1"),
        (["simulate", "TRACE", "--capacity", "8", "--seed", "-3"], "argument --seed: -3 is below 0"),
        (["simulate", "TRACE", "--capacity", "8", "--half-life", "nan"], "argument --half-life: 'nan': expected a finite number > 0"),
        (["compare", "TRACE", "--out", "R", "--requests", "nan"], "argument --requests: 'nan' is not an integer"),
        (["compare", "TRACE", "--out", "R", "--requests", "inf"], "argument --requests: 'inf' is not an integer"),
        (["compare", "TRACE", "--out", "R", "--requests", "-2"], "argument --requests: -2 is below 1"),
    ],
)
def test_bad_numbers_are_refused_by_argparse(tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    argv = [str(tmp_path / a) if a in ("OUT", "TRACE", "R") else a for a in argv]
    with pytest.raises(SystemExit) as exit_:
        main(["traces", *argv])
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("seeds", ["nan", "inf", "-1", "1.5", "0,-2", ""])
def test_compare_refuses_seeds_that_are_not_integers_at_least_zero(tmp_path: Path, capsys: pytest.CaptureFixture[str], seeds: str) -> None:
    trace = tmp_path / "t"
    assert main(["traces", "synth", str(trace), "--requests", "4", "--decode-tokens", "2"]) == 0
    capsys.readouterr()
    assert main(["traces", "compare", str(trace), "--out", str(tmp_path / "r"), "--seeds", seeds]) == 2
    err = capsys.readouterr().err
    assert f"--seeds = {seeds!r}: " in err and "Traceback" not in err
    assert not (tmp_path / "r").exists()


def test_synth_overwrite_never_deletes_a_folder_that_is_not_a_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    user = tmp_path / "work"
    user.mkdir()
    for i in range(5):
        (user / f"f{i}.py").write_text("mine")
    assert main(["traces", "synth", str(user), "--overwrite"]) == 2
    assert f"{user}: not a trace folder" in capsys.readouterr().err
    assert sorted(p.name for p in user.iterdir()) == [f"f{i}.py" for i in range(5)]
    trace = tmp_path / "t"
    assert main(["traces", "synth", str(trace), "--requests", "2"]) == 0
    assert main(["traces", "synth", str(trace), "--requests", "3", "--overwrite"]) == 0
    assert "wrote" in capsys.readouterr().out


def test_simulate_json_refuses_a_fifo_at_once(tmp_path: Path, capsys: pytest.CaptureFixture[str], alarm: None) -> None:
    import os

    trace = tmp_path / "t"
    assert main(["traces", "synth", str(trace), "--requests", "2"]) == 0
    os.mkfifo(tmp_path / "pipe")
    assert main(["traces", "simulate", str(trace), "--capacity", "32", "--json", str(tmp_path / "pipe")]) == 2
    assert "pipe: is a FIFO (named pipe), not a regular file; name a --json file" in capsys.readouterr().err


def test_compare_never_overwrites_a_report_md_it_did_not_write(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "t"
    assert main(["traces", "synth", str(trace), "--requests", "4", "--decode-tokens", "2"]) == 0
    out = tmp_path / "r"
    out.mkdir()
    (out / "report.md").write_text("my notes")
    assert main(["traces", "compare", str(trace), "--out", str(out), "--seeds", "0", "--requests", "2"]) == 2
    assert "holds ['report.md'] but no earlier report" in capsys.readouterr().err
    assert (out / "report.md").read_text() == "my notes"
