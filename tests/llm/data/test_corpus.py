from __future__ import annotations

import json

import pytest

from replaybank.llm.data.corpus import (
    PYTHON_DOCS,
    CorpusError,
    load_corpus,
    normalise,
    python_docs_corpus,
    remove_overlap,
    split_heldout,
)


def test_normalise():
    assert normalise("  a\n\n b\tc  ") == "a b c"


def test_text_file_passages(tmp_path):
    f = tmp_path / "a.txt"
    f.write_text("First  passage\nline two.\n\n\nSecond passage.\n\n   \n")
    c = load_corpus(f)
    assert c.texts == ["First passage line two.", "Second passage."]
    assert c.dropped["empty"] == 1
    assert c.manifest[0]["rows"] == 2 and len(c.manifest[0]["sha256"]) == 64


def test_jsonl_drops_and_counts(tmp_path):
    f = tmp_path / "a.jsonl"
    rows = [{"text": "one"}, {"text": "  "}, {"text": 3}, {"text": None}, {"text": "two\nlines"}]
    f.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    c = load_corpus(f)
    assert c.texts == ["one", "two lines"]
    assert dict(c.dropped) == {"empty": 1, "non_string": 2}
    assert c.doc_ids == [f"{f}:1", f"{f}:5"]


def test_folder_sorted_and_mixed(tmp_path):
    (tmp_path / "b.txt").write_text("from text")
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "a.jsonl").write_text(json.dumps({"body": "from jsonl"}) + "\n")
    (tmp_path / "ignored.csv").write_text("x")
    c = load_corpus(tmp_path, text_field="body")
    assert c.texts == ["from text", "from jsonl"]


def test_malformed_jsonl_names_file_and_line(tmp_path):
    f = tmp_path / "bad.jsonl"
    f.write_text('{"text": "ok"}\n{"text": oops}\n')
    with pytest.raises(CorpusError, match=r"bad.jsonl:2: malformed JSON"):
        load_corpus(f)
    f.write_text('{"text": "ok"}\n[1, 2]\n')
    with pytest.raises(CorpusError, match=r"bad.jsonl:2: expected a JSON object"):
        load_corpus(f)


def test_missing_text_field_lists_fields(tmp_path):
    f = tmp_path / "a.jsonl"
    f.write_text('{"text": "ok"}\n{"content": "x", "id": 1}\n')
    with pytest.raises(CorpusError, match=r"a.jsonl:2: no field 'text' \(fields: content, id\)"):
        load_corpus(f)


def test_non_utf8_names_line(tmp_path):
    f = tmp_path / "latin.txt"
    f.write_bytes(b"fine\nalso fine\ncaf\xe9\n")
    with pytest.raises(CorpusError, match=r"latin.txt:3: not valid UTF-8 \(byte 0xe9"):
        load_corpus(f)


def test_missing_and_empty(tmp_path):
    with pytest.raises(CorpusError, match="nope.jsonl: file not found"):
        load_corpus(tmp_path / "nope.jsonl")
    empty = tmp_path / "empty.jsonl"
    empty.write_text('{"text": ""}\n')
    with pytest.raises(CorpusError, match=r"corpus is empty .*empty=1"):
        load_corpus(empty)
    d = tmp_path / "d"
    d.mkdir()
    with pytest.raises(CorpusError, match="folder holds no"):
        load_corpus(d)
    odd = tmp_path / "x.csv"
    odd.write_text("a")
    with pytest.raises(CorpusError, match="unsupported file type '.csv'"):
        load_corpus(odd)


def test_parquet_without_pyarrow_or_bad(tmp_path):
    f = tmp_path / "a.parquet"
    f.write_bytes(b"not parquet")
    with pytest.raises(CorpusError, match="a.parquet: (reading Parquet needs pyarrow|not a readable Parquet)"):
        load_corpus(f)


def test_hf_name_that_needs_download_says_how_to_fix():
    with pytest.raises(CorpusError, match="point rehearsal_dataset at a local"):
        load_corpus("HuggingFaceH4/stack-exchange-paired")


def test_python_docs_corpus_and_disjoint_split():
    c = load_corpus(PYTHON_DOCS)
    assert len(c) > 500
    assert any(d.startswith("topic:") for d in c.doc_ids) and any(d.startswith("doc:") for d in c.doc_ids)
    assert c.manifest[0]["sha256"] == python_docs_corpus().manifest[0]["sha256"]  # deterministic
    pool, held = split_heldout(c, 16, seed=0)
    assert len(held) == 16
    assert not set(pool.doc_ids) & set(held.doc_ids)
    assert not set(pool.texts) & set(held.texts)
    pool2, held2 = split_heldout(c, 16, seed=0)
    assert held2.texts == held.texts


def test_split_needs_a_pool_and_overlap_removed(tmp_path):
    f = tmp_path / "a.jsonl"
    f.write_text('{"text": "a"}\n{"text": "b"}\n')
    with pytest.raises(CorpusError, match="too few to hold out"):
        split_heldout(load_corpus(f), 5, seed=0)
    pool, n = remove_overlap(load_corpus(f), ["b"])
    assert pool.texts == ["a"] and n == 1


def test_parquet_reads_only_the_text_column_and_names_the_columns(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    from replaybank.llm.data.corpus import load_corpus

    f = tmp_path / "pool.parquet"
    pq.write_table(pa.table({"text": ["first passage", " ", "second  passage"], "score": [1, 2, 3]}), f)
    corpus = load_corpus(f)
    assert corpus.texts == ["first passage", "second passage"] and corpus.dropped["empty"] == 1
    with pytest.raises(CorpusError, match=r"pool\.parquet: no column 'body' \(columns: text, score\); set rehearsal_text_field"):
        load_corpus(f, text_field="body")


def test_save_to_disk_folder_is_read_as_a_dataset(tmp_path):
    datasets = pytest.importorskip("datasets")

    from replaybank.llm.config import Config
    from replaybank.llm.config.check import check_sources
    from replaybank.llm.data.corpus import load_corpus

    single = tmp_path / "single"
    datasets.Dataset.from_dict({"text": ["alpha passage", "beta passage"], "n": [1, 2]}).save_to_disk(str(single))
    assert load_corpus(single).texts == ["alpha passage", "beta passage"]
    with pytest.raises(CorpusError, match=r"single: no column 'body' \(columns: text, n\); set rehearsal_text_field"):
        load_corpus(single, text_field="body")
    both = tmp_path / "dict"
    datasets.DatasetDict({
        "train": datasets.Dataset.from_dict({"text": ["train passage"]}),
        "test": datasets.Dataset.from_dict({"text": ["test passage"]}),
    }).save_to_disk(str(both))
    assert load_corpus(both, split="test").texts == ["test passage"]
    with pytest.raises(CorpusError, match=r"dict: no split 'valid' in this saved DatasetDict \(splits: train, test\); set rehearsal_split"):
        load_corpus(both, split="valid")
    problems = []
    try:
        check_sources(Config.from_dict({"training": {"rehearsal_dataset": str(single)}}))
    except Exception as exc:  # other keys may name things this machine lacks; not the dataset
        problems = str(exc).splitlines()
    assert not [p for p in problems if "rehearsal_dataset" in p]


def test_folder_that_is_neither_data_files_nor_a_saved_dataset_says_what_it_found(tmp_path):
    from replaybank.llm.data.corpus import load_corpus

    (tmp_path / "odd").mkdir()
    (tmp_path / "odd" / "data.arrow").write_bytes(b"x")
    with pytest.raises(CorpusError, match=r"odd: folder holds no .* and is not a save_to_disk dataset .*found: \.arrow"):
        load_corpus(tmp_path / "odd")


def test_the_embedded_corpus_does_not_depend_on_what_this_process_patched(monkeypatch):
    # a library that replaces a stdlib function (as one of the test suite's imports does) used to
    # drop that function's docstring from the corpus of whichever process built it
    import textwrap

    from replaybank.llm.data.corpus import python_docs_corpus

    before = python_docs_corpus()
    monkeypatch.setattr(textwrap, "dedent", lambda text: text)
    after = python_docs_corpus()
    assert after.manifest == before.manifest and after.texts == before.texts
    assert any(t.startswith("textwrap.dedent ") for t in after.texts)
