"""The run folder's last step: OUT.partial becomes OUT with its stamp, checkpoints and per-arm files dropped."""

from __future__ import annotations

from replaybank.llm.report.folder import finish, partial_dir


def test_finish_renames_and_drops_what_only_a_resume_needs(tmp_path):
    out = tmp_path / "run"
    partial = partial_dir(out, {"x": 1}, 1, force=False)
    (partial / "arms").mkdir()
    (partial / "arms" / "seed0-naive.json").write_text("{}")
    (partial / "metrics.json").write_text("{}")
    finish(partial, out)
    assert sorted(p.name for p in out.iterdir()) == ["metrics.json"] and not partial.exists()


def test_finish_completes_a_run_whose_stamp_went_missing(tmp_path):
    """The results are complete; a stamp removed while the run went on must not lose the rename."""
    out = tmp_path / "run"
    partial = partial_dir(out, {"x": 1}, 1, force=False)
    (partial / "metrics.json").write_text("{}")
    (partial / "config.sha256").unlink()
    finish(partial, out)
    assert (out / "metrics.json").is_file() and not partial.exists()
