"""``replaybank loop`` from the command line: help, the printed config reads back, bad flags and
configs are clear errors; and the default rehearsal (self-synthesized rows) on a tiny model."""

from __future__ import annotations

import pytest

from replaybank.cli import main
from replaybank.llm.config.loop import LoopConfig
from replaybank.llm.recipes.loop import run_loop


def test_help_explains_the_loop(capsys):
    with pytest.raises(SystemExit):
        main(["loop", "--help"])
    text = capsys.readouterr().out
    for words in ("BM25", "validation", "resumes", "--lineage", "--rehearsal", "--seeds", "--jobs"):
        assert words in text


def test_printed_config_reads_back_and_bad_input_is_named(capsys, tmp_path):
    assert main(["loop", "--print-config", "--generations", "7"]) == 0
    path = tmp_path / "loop.toml"
    path.write_text(capsys.readouterr().out, encoding="utf-8")
    cfg = LoopConfig.from_toml(path)
    assert cfg.loop == LoopConfig().with_(generations=7).loop and cfg.training == LoopConfig().training
    path.write_text('[loop]\ncontext_examples = "three"\n', encoding="utf-8")
    assert main(["loop", str(path), "--out", str(tmp_path / "o")]) == 2
    assert f"{path}:2: [loop] context_examples = 'three': expected an integer" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="--lineage 'newest'"):
        main(["loop", "--lineage", "newest", "--out", str(tmp_path / "o")])
    with pytest.raises(SystemExit, match="--seeds 'a,b'"):
        main(["loop", "--seeds", "a,b", "--out", str(tmp_path / "o")])


def test_self_synthesized_rehearsal_is_mixed_into_consolidation(tiny_cfg, tmp_path, monkeypatch):
    import replaybank.llm.data.selfsynth as selfsynth
    from replaybank.llm.eval.decode import Generation

    def fake(model, tokenizer, prompts, **kw):  # the tiny random model writes no usable answer
        return [Generation(f"Here is a short answer number {k} about it.", False, 12) for k, _ in enumerate(prompts)]

    monkeypatch.setattr(selfsynth, "generate_detailed", fake)
    cfg = LoopConfig.from_dict(tiny_cfg(generations=1, rehearsal="self", self_rows=5, rehearsal_ratio=0.5))
    state = run_loop(cfg, tmp_path / "run", log=lambda m: None)
    assert state.rehearsal is not None and state.rehearsal["source"] == "self" and state.rehearsal["kept"] == 5
    train = state.generations[1].train
    assert train is not None and isinstance(train["rows"], int)
    assert train["rehearsal_rows"] == train["rows"] // 2  # 2 of every 4 rows (batch_size 4, ratio 0.5)
    none = LoopConfig.from_dict(tiny_cfg(generations=1, rehearsal="none"))
    state = run_loop(none, tmp_path / "none", log=lambda m: None)
    assert state.rehearsal == {"source": "none"} and (state.generations[1].train or {})["rehearsal_rows"] == 0
