from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from replaybank.cl.config import protocol_config
from replaybank.cl.tune import format_table, select, tune_lr, write_tune
from replaybank.errors import ReplayBankError

CONFIG = protocol_config("online", batch_size=4, replay_batch_size=4, buffer_size=8)


def test_select_takes_the_best_mean_and_breaks_ties_towards_the_smaller_rate() -> None:
    assert select({0.03: [0.5], 0.1: [0.9, 0.7], 0.3: [0.85, 0.8]}) == 0.3
    assert select({0.3: [0.8], 0.1: [0.8]}) == 0.1
    with pytest.raises(ReplayBankError):
        select({})


def test_tune_runs_the_grid_on_the_validation_split(tiny_stream, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import replaybank.cl.runner as runner

    seen: list[tuple[str, str, float, int]] = []
    real_run = runner.run

    def spy(stream, name, config, seed):  # type: ignore[no-untyped-def]
        seen.append((stream.name, name, config.lr, seed))
        return real_run(stream, name, config, seed)

    monkeypatch.setattr(runner, "run", spy)
    payload = tune_lr(tiny_stream, ["naive", "joint"], CONFIG, [0.3, 0.01], [0, 1], fraction=0.25)
    assert {s[0] for s in seen} == {"tiny/validation"}  # never the stream with its test split
    assert sorted(seen[i][1:] for i in range(len(seen))) == sorted(
        (n, lr, s) for n in ("naive", "joint") for lr in (0.01, 0.3) for s in (0, 1)
    )
    assert list(payload["grid"]) == ["0.01", "0.3"]
    joint = {float(lr): row["joint"]["mean"] for lr, row in payload["grid"].items()}
    assert payload["selected_lr"] == max(joint, key=lambda lr: (joint[lr], -lr))
    assert payload["split"]["validation_rows"] == [6, 6]  # round(12 * 0.25) per class, 2 classes per task
    assert len(payload["grid"]["0.3"]["naive"]["values"]) == 2
    assert "lr" not in payload["config"]


def test_tune_is_deterministic(tiny_stream) -> None:  # type: ignore[no-untyped-def]
    a = tune_lr(tiny_stream, ["joint"], CONFIG, [0.1], [0])
    b = tune_lr(tiny_stream, ["joint"], CONFIG, [0.1], [0])
    assert a["grid"] == b["grid"]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"lrs": []}, "learning rates must be finite and > 0"),
        ({"lrs": [0.1, -1.0]}, "learning rates must be finite and > 0"),
        ({"lrs": [0.1, float("nan")]}, "learning rates must be finite and > 0"),
        ({"lrs": [0.1, 0.1]}, "listed twice"),
        ({"select_by": "er"}, "select_by 'er' is not among the strategies"),
    ],
)
def test_tune_refuses_bad_grids(tiny_stream, kwargs, match) -> None:  # type: ignore[no-untyped-def]
    args = {"lrs": [0.1], "select_by": "joint", **kwargs}
    with pytest.raises(ReplayBankError, match=match):
        tune_lr(tiny_stream, ["naive", "joint"], CONFIG, args.pop("lrs"), [0], **args)


def test_write_tune_and_table(tmp_path: Path) -> None:
    payload = {
        "stream": "s", "scenario": "class", "seeds": [0, 1], "select_by": "joint", "selected_lr": 0.1,
        "split": {"fraction": 0.2, "seed": 1}, "config": {"protocol": "der"},
        "grid": {"0.1": {"joint": {"mean": 0.9, "std": 0.01, "values": [0.89, 0.91]}},
                 "0.3": {"joint": {"mean": 0.8, "std": 0.02, "values": [0.78, 0.82]}}},
    }
    table = format_table(payload)
    assert table.splitlines()[2] == "| 0.1 (selected) | 90.0 ± 1.0 |"
    write_tune(tmp_path, payload)
    assert json.loads((tmp_path / "tune.json").read_text())["selected_lr"] == 0.1
    assert "**lr 0.1**" in (tmp_path / "tune.md").read_text()


def test_cli_tune_writes_json_and_prints_the_table(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    from replaybank.cli import main

    out = tmp_path / "t"
    argv = ["cl", "--tune", "lr", "--lrs", "0.1,0.3", "--tasks", "2", "--seeds", "1", "--out", str(out)]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    payload = json.loads((out / "tune.json").read_text())
    assert payload["stream"] == "split-digits" and payload["select_by"] == "joint"
    assert set(payload["grid"]["0.1"]) == {"naive", "joint", "er"}
    assert f"selected lr {payload['selected_lr']:g}" in printed and "| lr | naive | joint | er |" in printed
    assert np.isclose(payload["split"]["fraction"], 0.2)
    assert main(["cl", "--tune", "lr", "--lr", "0.1", "--out", str(out)]) == 2
    assert "--lr and --tune lr exclude each other" in capsys.readouterr().err
    assert main(["cl", "--tune", "lr", "--lrs", "0.1,x", "--out", str(out)]) == 2
    assert "--lrs must be comma-separated numbers" in capsys.readouterr().err
