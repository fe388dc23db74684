"""Regular files only: every reader of a file a user or a run folder names refuses a FIFO
at once with its own ReplayBankError (before: blocked forever, or silently skipped), and a link or
FIFO where a run folder holds its own file is refused, not followed."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from replaybank.episodic.env import JsonlTasks, TaskFileError
from replaybank.errors import ReplayBankError
from replaybank.llm.config.values import ConfigError, read_toml
from replaybank.llm.data.columns import open_column
from replaybank.llm.data.corpus import CorpusError, load_corpus
from replaybank.llm.data.domain_files import read_domain_source
from replaybank.llm.data.prepare import load_probe
from replaybank.llm.data.selfsynth import SelfSynthError, load_prompt_pool
from replaybank.llm.eval.suite import SuiteError, load_suite
from replaybank.llm.loop.consolidate import read_rehearsal_file
from replaybank.llm.report.folder import OutputError, read_result
from replaybank.llm.results import SeedResult, Stat

READERS: dict[str, tuple[str, Callable[[Path], Any], type[ReplayBankError]]] = {
    "config": (".toml", read_toml, ConfigError),
    "tasks": (".jsonl", JsonlTasks, TaskFileError),
    "suite": (".jsonl", lambda p: load_suite(str(p)), SuiteError),
    "probe": (".jsonl", lambda p: load_probe(str(p)), CorpusError),
    "corpus-jsonl": (".jsonl", load_corpus, CorpusError),
    "corpus-text": (".txt", load_corpus, CorpusError),
    "corpus-parquet": (".parquet", load_corpus, CorpusError),
    "column-jsonl": (".jsonl", lambda p: open_column(p, "text", "train", 0), CorpusError),
    "column-parquet": (".parquet", lambda p: open_column(p, "text", "train", 0), CorpusError),
    "domain-jsonl": (".jsonl", lambda p: read_domain_source(p, "train"), CorpusError),
    "domain-parquet": (".parquet", lambda p: read_domain_source(p, "train"), CorpusError),
    "prompt-pool": (".jsonl", lambda p: load_prompt_pool(str(p)), SelfSynthError),
    "rehearsal": (".jsonl", read_rehearsal_file, ReplayBankError),
}


@pytest.mark.parametrize("reader", list(READERS))
def test_a_fifo_is_refused_at_once(tmp_path, alarm, reader):
    suffix, read, error = READERS[reader]
    path = tmp_path / f"in{suffix}"
    os.mkfifo(path)
    with pytest.raises(error, match=r"in\.\w+: is a FIFO \(named pipe\), not a regular file"):
        read(path)


def test_the_main_jobs_finished_results_are_regular_files_inside_the_run(tmp_path, alarm):
    partial = tmp_path / "out.partial"
    (partial / "seeds").mkdir(parents=True)
    os.mkfifo(partial / "seeds" / "seed0.json")
    with pytest.raises(OutputError, match=r"seed0.json: is a FIFO"):
        read_result(partial, "seeds/seed0", SeedResult)
    (partial / "seeds" / "seed0.json").unlink()
    (partial / "seeds" / "seed0.json").write_text("[1, 2")  # damaged: an OutputError, not a JSONDecodeError
    with pytest.raises(OutputError, match=r"seed0.json: expected the results of an earlier run"):
        read_result(partial, "seeds/seed0", SeedResult)


def test_the_main_jobs_results_are_not_written_through_a_link(tmp_path):
    from replaybank.llm.config.names import UnsafePathError
    from replaybank.llm.report.folder import write_result

    partial, elsewhere = tmp_path / "out.partial", tmp_path / "elsewhere"
    partial.mkdir()
    elsewhere.mkdir()
    (partial / "arms").symlink_to(elsewhere)
    with pytest.raises(UnsafePathError, match=r"arms: is a symbolic link"):
        write_result(partial, "arms/seed0-naive", Stat(1.0, None, 1, [1.0]))
    (partial / "arms").unlink()
    (partial / "arms").mkdir()
    (partial / "arms" / ".seed0-naive.json.tmp").symlink_to(elsewhere / "t.json")  # a leftover link: removed
    write_result(partial, "arms/seed0-naive", Stat(1.0, None, 1, [1.0]))
    assert read_result(partial, "arms/seed0-naive", Stat) == Stat(1.0, None, 1, [1.0]) and list(elsewhere.iterdir()) == []


def test_caches_skip_a_fifo(tmp_path, alarm):
    from replaybank.llm.data.selfsynth import _read_cache
    from replaybank.llm.eval.suite import read_answers

    os.mkfifo(tmp_path / "c.json")
    assert read_answers(tmp_path / "c.json", "f", "d", 1) is None  # generated again, never waited on
    assert _read_cache(tmp_path / "c.json") is None


@pytest.mark.parametrize("kind", ["fifo", "link"])
def test_a_checkpoint_that_is_a_fifo_or_a_link_is_refused(tmp_path, alarm, kind):
    pytest.importorskip("torch")
    from replaybank.llm.train.checkpoint import load_checkpoint

    path = tmp_path / "checkpoint.pt"
    if kind == "fifo":
        os.mkfifo(path)
    else:
        (tmp_path / "elsewhere.pt").write_bytes(b"x")
        path.symlink_to(tmp_path / "elsewhere.pt")
    what = "a FIFO" if kind == "fifo" else "a symbolic link"
    with pytest.raises(ReplayBankError, match=rf"checkpoint.pt: is {what}"):
        load_checkpoint(path, None, None, None, None)  # refused before anything is read


def test_the_config_checks_name_a_fifo_as_one(tmp_path, alarm):
    from replaybank.llm.config.check import check_loop_sources
    from replaybank.llm.config.loop import LoopConfig

    os.mkfifo(tmp_path / "tasks.jsonl")
    path = tmp_path / "c.toml"
    path.write_text(f'[loop]\ntasks = "{tmp_path / "tasks.jsonl"}"\n', encoding="utf-8")
    with pytest.raises(ConfigError, match=r"c.toml:2: \[loop\] tasks = .*: is a FIFO \(named pipe\), not a regular file"):
        check_loop_sources(LoopConfig.from_toml(path))


def test_the_main_jobs_stamp_and_report_files_are_not_written_through_a_link(tmp_path):
    from replaybank.llm.config.names import UnsafePathError
    from replaybank.llm.report.folder import partial_dir
    from replaybank.llm.report.metrics import write_outputs

    out, outside = tmp_path / "out", tmp_path / "outside.txt"
    outside.write_text("mine")
    partial = out.with_name("out.partial")
    partial.mkdir()
    (partial / "config.sha256").symlink_to(outside)
    partial_dir(out, {"a": 1}, 1, force=True)  # another config's leftovers: removed, the link with them
    assert outside.read_text() == "mine" and not (partial / "config.sha256").is_symlink()
    key = (partial / "config.sha256").read_text()
    (partial / "config.sha256").unlink()
    outside.write_text(key)  # a link to a file that matches: resumed, but the stamp never rewritten through it
    (partial / "config.sha256").symlink_to(outside)
    with pytest.raises(UnsafePathError, match=r"config.sha256: is a symbolic link"):
        partial_dir(out, {"a": 1}, 1, force=False)
    outside.write_text("mine")
    for name in ("report.md", "metrics.json", "losses.png"):
        folder = tmp_path / f"f-{name}"
        folder.mkdir()
        (folder / name).symlink_to(outside)
        with pytest.raises(UnsafePathError, match=rf"{name}: is a symbolic link"):
            write_outputs(folder, {})  # refused before anything is drawn or written
        assert outside.read_text() == "mine" and [p.name for p in folder.iterdir()] == [name]
