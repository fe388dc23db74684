from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from replaybank.cl.cli import add_subcommands
from replaybank.errors import ReplayBankError


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="replaybank")
    add_subcommands(parser.add_subparsers(required=True))
    return parser


def _run(*argv: str) -> int:
    args = _parser().parse_args(list(argv))
    return int(args.func(args))


def test_cl_writes_the_documented_files(tmp_path: Path) -> None:
    out = tmp_path / "report"
    code = _run(
        "cl", "--stream", "split-digits", "--strategies", "naive,joint,er,derpp,pseudo",
        "--buffer", "50", "--seeds", "2", "--tasks", "2", "--out", str(out),
    )
    assert code == 0
    for name in ("report.md", "metrics.json", "accuracy_matrices.png", "accuracy_over_time.png"):
        assert (out / name).stat().st_size > 0, name
    payload = json.loads((out / "metrics.json").read_text())
    assert payload["schema_version"] == 1
    assert payload["seeds"] == [0, 1]
    assert payload["config"]["buffer_size"] == 50
    er = payload["strategies"]["er"]
    for metric in ("average_accuracy", "forgetting", "backward_transfer"):
        assert set(er[metric]) >= {"mean", "std", "values"}
        assert len(er[metric]["values"]) == 2
    assert len(er["accuracy_matrices"]) == 2
    assert len(er["accuracy_matrices"][0]) == 2
    assert "er" in payload["gap_closed"] and "derpp" in payload["vs_er"]
    report = (out / "report.md").read_text()
    assert "| er |" in report and "accuracy_matrices.png" in report


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--stream", "split-cifar"], "valid streams: permuted-digits"),
        (["--strategies", "naive,ewc"], "valid strategies: naive, joint"),
        (["--buffer", "0"], "--buffer must be a positive"),
        (["--buffer", "-3"], "--buffer must be a positive"),
        (["--tasks", "11"], "need 11 classes, but y_train has 10"),
        (["--protocol", "der", "--epochs", "3"], "der protocol fixes"),
    ],
)
def test_bad_input_raises_clear_errors(argv: list[str], message: str, tmp_path: Path) -> None:
    with pytest.raises(ReplayBankError, match=message):
        _run("cl", "--strategies", "naive", "--seeds", "1", "--out", str(tmp_path), *argv)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--lr", "inf"], r"argument --lr: 'inf': expected a finite number > 0"),
        (["--lr", "nan"], r"argument --lr: 'nan': expected a finite number > 0"),
        (["--lr", "0"], r"argument --lr: '0': expected a finite number > 0"),
        (["--lr", "-0.1"], r"argument --lr: '-0.1': expected a finite number > 0"),
        (["--batch-size", "0"], r"argument --batch-size: 0 is below 1"),
        (["--batch-size", "1.5"], r"argument --batch-size: '1.5' is not an integer"),
        (["--replay-batch-size", "-1"], r"argument --replay-batch-size: -1 is below 1"),
        (["--epochs", "0"], r"argument --epochs: 0 is below 1"),
        (["--tasks", "0"], r"argument --tasks: 0 is below 1"),
    ],
)
def test_bad_numbers_are_refused_at_argument_parsing_naming_the_option(
    argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from replaybank.cli import main

    with pytest.raises(SystemExit) as info:
        main(["cl", "--protocol", "online", "--strategies", "naive", "--seeds", "1", "--out", str(tmp_path / "o"), *argv])
    assert info.value.code == 2
    assert re.search(message, capsys.readouterr().err)
    assert not (tmp_path / "o").exists()


def test_a_batch_larger_than_a_task_is_refused_before_training(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from replaybank.cli import main

    argv = ["cl", "--protocol", "online", "--strategies", "naive", "--seeds", "1", "--tasks", "2",
            "--batch-size", "100000", "--out", str(tmp_path / "o")]
    assert main(argv) == 2
    assert re.search(r"--batch-size 100000 is larger than task \d of stream 'split-digits', which has \d+ training rows; "
                     r"give a batch size of at most \d+", capsys.readouterr().err)
    assert not (tmp_path / "o").exists()


def test_train_config_refuses_a_non_finite_lr_and_bool_sizes() -> None:
    from replaybank.cl.config import TrainConfig

    for lr in (float("inf"), float("nan"), 0.0, True):
        with pytest.raises(ReplayBankError, match=r"lr must be a finite number > 0"):
            TrainConfig(lr=lr)
    with pytest.raises(ReplayBankError, match=r"buffer size must be a positive integer, got True"):
        TrainConfig(buffer_size=True)


def test_cli_module_does_not_import_torch() -> None:
    code = "import sys, replaybank.cl.cli; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_replaybank_command_runs_cl(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from replaybank.cli import main

    out = tmp_path / "r"
    argv = ["cl", "--strategies", "naive,er", "--seeds", "1", "--tasks", "2", "--out", str(out)]
    assert main(argv) == 0
    assert (out / "metrics.json").exists()
    assert main(["cl", "--strategies", "sgd", "--out", str(out)]) == 2
    assert "valid strategies" in capsys.readouterr().err


def test_out_naming_a_file_is_refused_before_any_training(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from replaybank.cli import main

    target = tmp_path / "results.txt"
    target.write_text("keep me")
    # a file as --out trained fully, then crashed while writing the report
    assert main(["cl", "--strategies", "naive", "--seeds", "1", "--tasks", "2", "--out", str(target)]) == 2
    assert "exists and is not a folder" in capsys.readouterr().err
    assert target.read_text() == "keep me"
