"""Domain data from Parquet files and folders, save_to_disk folders, and their bad input."""

from __future__ import annotations

import hashlib
import json

import pytest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from replaybank.llm.config import Config, ConfigError  # noqa: E402
from replaybank.llm.config.check import check_sources  # noqa: E402
from replaybank.llm.data.corpus import CorpusError  # noqa: E402
from replaybank.llm.data.prepare import load_domain  # noqa: E402

PAIRS = [
    {"prompt": "List the files.", "response": 'qx.ls(path="/")'},
    {"prompt": "Show me the config", "response": 'qx.cat(path="cfg.toml")'},
]
CHATS = [
    {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"},
                  {"role": "assistant", "content": "hello", "name": "bot"}]},
    {"messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}]},
]


def _bare(records):
    return [{k: v for k, v in r.items() if k != "where"} for r in records]


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.mark.parametrize("rows", [PAIRS, CHATS], ids=["prompt-response", "messages"])
def test_parquet_gives_the_records_of_the_same_jsonl(tmp_path, rows):
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "d.parquet")
    from_parquet, man = load_domain(str(tmp_path / "d.parquet"), 0, 0)
    from_jsonl, _ = load_domain(str(_jsonl(tmp_path / "d.jsonl", rows)), 0, 0)
    assert _bare(from_parquet) == _bare(from_jsonl) == [
        r if "messages" in r else {"prompt": r["prompt"], "response": r["response"]} for r in rows
    ]
    assert from_parquet[1]["where"] == f"{tmp_path / 'd.parquet'}: row 1"
    assert man["rows"] == len(rows)
    assert man["sha256"] == hashlib.sha256((tmp_path / "d.parquet").read_bytes()).hexdigest()


def test_parquet_reads_completion_and_only_the_chosen_columns(tmp_path):
    rows = [{"id": i, "prompt": r["prompt"], "completion": r["response"], "score": None} for i, r in enumerate(PAIRS)]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "c.parquet")
    recs, _ = load_domain(str(tmp_path / "c.parquet"), 0, 0)
    assert _bare(recs) == PAIRS


def test_folder_of_parquet_files_in_sorted_order_with_one_digest(tmp_path):
    folder = tmp_path / "gen0"
    folder.mkdir()
    pq.write_table(pa.Table.from_pylist(PAIRS[1:]), folder / "b.parquet")
    pq.write_table(pa.Table.from_pylist(PAIRS[:1]), folder / "a.parquet")
    recs, man = load_domain(str(folder), 0, 0)
    assert _bare(recs) == PAIRS
    assert man["files"] == [str(folder / "a.parquet"), str(folder / "b.parquet")]
    both = (folder / "a.parquet").read_bytes() + (folder / "b.parquet").read_bytes()
    assert man["sha256"] == hashlib.sha256(both).hexdigest()


def test_save_to_disk_dataset_and_split_of_a_dataset_dict(tmp_path):
    datasets = pytest.importorskip("datasets")
    datasets.Dataset.from_list(PAIRS).save_to_disk(str(tmp_path / "ds"))
    recs, man = load_domain(str(tmp_path / "ds"), 0, 0)
    assert _bare(recs) == PAIRS
    arrow = sorted((tmp_path / "ds").glob("*.arrow"))
    assert man["source"] == f"save_to_disk:{tmp_path / 'ds'}[train]"
    assert man["sha256"] == hashlib.sha256(b"".join(f.read_bytes() for f in arrow)).hexdigest()

    dd = datasets.DatasetDict({"train": datasets.Dataset.from_list(CHATS), "test": datasets.Dataset.from_list(PAIRS)})
    dd.save_to_disk(str(tmp_path / "dd"))
    from_jsonl, _ = load_domain(str(_jsonl(tmp_path / "chats.jsonl", CHATS)), 0, 0)
    assert _bare(load_domain(str(tmp_path / "dd"), 0, 0)[0]) == _bare(from_jsonl)  # the "name" only one message has is not invented in the others
    assert _bare(load_domain(str(tmp_path / "dd"), 0, 0, split="test")[0]) == PAIRS
    assert _bare(load_domain(str(tmp_path / "dd" / "test"), 0, 0)[0]) == PAIRS  # a split's own folder
    with pytest.raises(CorpusError, match=r"no split 'dev' in this saved DatasetDict \(splits: train, test\); set domain_split"):
        load_domain(str(tmp_path / "dd"), 0, 0, split="dev")


def test_parquet_without_accepted_columns_names_the_file_and_its_columns(tmp_path):
    pq.write_table(pa.table({"question": ["q"], "answer": ["a"]}), tmp_path / "qa.parquet")
    with pytest.raises(CorpusError, match=r"qa\.parquet: domain data needs columns prompt\+response.*\(columns: question, answer\)"):
        load_domain(str(tmp_path / "qa.parquet"), 0, 0)


def test_null_prompt_names_the_file_and_row(tmp_path):
    pq.write_table(pa.table({"prompt": ["p0", None], "response": ["r0", "r1"]}), tmp_path / "n.parquet")
    with pytest.raises(CorpusError, match=r"n\.parquet: row 1: null 'prompt'"):
        load_domain(str(tmp_path / "n.parquet"), 0, 0)


def test_folder_that_is_neither_data_nor_save_to_disk_names_what_it_holds(tmp_path):
    folder = tmp_path / "mixed"
    folder.mkdir()
    (folder / "rows.csv").write_text("prompt,response\n")
    (folder / "data-00000-of-00001.arrow").write_bytes(b"")  # Arrow shards without save_to_disk's metadata
    with pytest.raises(CorpusError, match=r"mixed: folder holds no .*not a save_to_disk dataset.*found: \.arrow, \.csv"):
        load_domain(str(folder), 0, 0)


def test_bad_domain_data_fails_the_config_check_before_any_model_loads(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    pq.write_table(pa.table({"question": ["q"]}), tmp_path / "qa.parquet")
    pq.write_table(pa.Table.from_pylist(PAIRS), tmp_path / "ok.parquet")
    check_sources(Config.from_dict({"data": {"domain_train": ["ok.parquet"], "domain_eval": "ok.parquet"}}))
    cfg = Config.from_dict({"data": {"domain_train": ["qa.parquet"]}}, source="c.toml")
    with pytest.raises(ConfigError, match=r"c.toml: \[data\] domain_train = 'qa.parquet': qa\.parquet: domain data needs columns.*\(columns: question\)"):
        check_sources(cfg)
    assert Config.from_dict({}).data.domain_split == "train"
