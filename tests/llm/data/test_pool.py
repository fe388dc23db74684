"""The lazy rehearsal pool: the same rows as the eager pool, rows that overlap the suite dropped
and counted, and a large columnar pool prepared without tokenizing (or stringifying) every row."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from replaybank.llm.config import Config
from replaybank.llm.data.corpus import CorpusError
from replaybank.llm.data.pool import LazyPool
from replaybank.llm.data.prepare import check_overlaps, prepare
from replaybank.llm.data.rows import TokenRows, encode_rehearsal
from replaybank.llm.eval.suite import SuiteOverlapError, load_suite, overlap_key
from replaybank.llm.train.lora import Source, epoch_slice
from replaybank.llm.train.sources import sampled_rows

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


class CountingTokenizer:
    """Wraps a tokenizer and counts its calls (every row encoding calls it at least once)."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.calls = inner, 0
        self.chat_template, self.eos_token = inner.chat_template, inner.eos_token

    def __call__(self, text: str, add_special_tokens: bool = False) -> Any:
        self.calls += 1
        return self.inner(text, add_special_tokens=add_special_tokens)

    def apply_chat_template(self, conversation: Any, **kwargs: Any) -> Any:
        return self.inner.apply_chat_template(conversation, **kwargs)


def _parquet(path: Path, texts: list[Any]) -> Path:
    pq.write_table(pa.table({"text": pa.array(texts, pa.string()), "n": list(range(len(texts)))}), path)
    return path


def _words(n: int, n_words: int = 12, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    words = np.array("the of and to in is that for it as with was on be by this are from".split())
    return [" ".join(words[rng.integers(0, len(words), n_words)]) + f" row{i}" for i in range(n)]


def _same_rows(a: list[tuple[np.ndarray, np.ndarray]], b: list[tuple[np.ndarray, np.ndarray]]) -> bool:
    return len(a) == len(b) and all(np.array_equal(x[0], y[0]) and np.array_equal(x[1], y[1]) for x, y in zip(a, b))


def test_lazy_pool_gives_the_embedded_default_the_eager_rows(smol_tok: Any) -> None:
    cfg = Config.from_dict({"training": {"num_train_epochs": 3}})
    eager, lazy = prepare(cfg, smol_tok), prepare(cfg, smol_tok, lazy_min_rows=0)
    assert type(eager.rehearsal_pool) is TokenRows and isinstance(lazy.rehearsal_pool, LazyPool)
    assert len(lazy.rehearsal_pool) == len(eager.rehearsal_pool) == eager.manifest["general_pool_rows"] > 1000
    t = cfg.training
    for epoch in range(t.num_train_epochs):
        rows = epoch_slice(len(eager.rehearsal_pool), t.rehearsal_rows_per_epoch, t.seed, epoch)
        assert _same_rows(lazy.rehearsal_pool.rows(rows), eager.rehearsal_pool.rows(rows))
    # every row and every token: the mix_by=tokens quota sees the same labelled tokens
    assert lazy.rehearsal_pool.label_tokens() == eager.rehearsal_pool.label_tokens()
    everything = np.arange(len(eager.rehearsal_pool))
    assert _same_rows(lazy.rehearsal_pool.rows(everything), eager.rehearsal_pool.rows(everything))
    assert {k: v for k, v in lazy.manifest.items() if k != "rehearsal_pool"} == \
        {k: v for k, v in eager.manifest.items() if k != "rehearsal_pool"}
    assert _same_rows(lazy.general_eval.rows(range(len(lazy.general_eval))), eager.general_eval.rows(range(len(eager.general_eval))))


def test_lazy_and_eager_pools_train_the_same_steps(tiny_model_dir: Path) -> None:
    import copy

    from replaybank.llm.model import load_model
    from replaybank.llm.train import add_lora, train_lora

    cfg = Config.from_dict({"training": {"base_model": str(tiny_model_dir), "batch_size": 5, "lora_rank": 2,
                                         "rehearsal_rows_per_epoch": 30, "mixing_ratio": 0.3, "num_threads": 1,
                                         "num_train_epochs": 2, "mix_by": "tokens"},
                            "data": {"domain_train_rows": 15}})
    base, tok = load_model(cfg.training.base_model, "cpu")
    logs = []
    for lazy_min_rows in (None, 0):
        data = prepare(cfg, tok, lazy_min_rows=lazy_min_rows)
        logs.append(train_lora(add_lora(copy.deepcopy(base), cfg.training), tok.pad_token_id,
                               data.domain_generations[0], cfg.training,
                               sources=[Source("corpus", data.rehearsal_pool, 0.3, sliced=True)]))
    eager, lazy = logs
    assert len(eager.steps) == len(lazy.steps) > 4 and {s["epoch"] for s in lazy.steps} == {0, 1}
    for key in ("batch", "tokens", "source_rows", "label_tokens"):
        assert [s[key] for s in lazy.steps] == [s[key] for s in eager.steps], key
    np.testing.assert_allclose([s["loss"] for s in lazy.steps], [s["loss"] for s in eager.steps], rtol=1e-6)


def _overlap_cfg(pool: Path, **training: Any) -> Config:
    return Config.from_dict({
        "training": {"rehearsal_dataset": str(pool), "rehearsal_rows_per_epoch": 200, "num_train_epochs": 2, **training},
        "data": {"domain_train_rows": 10, "domain_eval_rows": 4, "general_eval_rows": 8},
    })


def test_lazy_pool_drops_and_counts_the_sampled_rows_that_overlap_the_suite(tmp_path: Path, char_tok: Any) -> None:
    items = load_suite()
    prompt = items[3].prompt
    texts = _words(3000, n_words=30)  # longer than rehearsal_max_chars: rows are cut before encoding
    for i in range(0, 3000, 7):  # every 7th row quotes a suite prompt
        texts[i] = f"As asked in row {i}: {prompt} And so on."
    cfg = _overlap_cfg(_parquet(tmp_path / "pool.parquet", texts), rehearsal_max_chars=80, rehearsal_prompt_chars=20)
    data = prepare(cfg, char_tok, lazy_min_rows=1000)
    pool = data.rehearsal_pool
    assert isinstance(pool, LazyPool) and data.rehearsal_texts == []
    sampled = sampled_rows(len(pool), cfg.training)
    planted = sum(overlap_key(prompt) in overlap_key(t) for t in pool.texts.take(sampled))
    assert 40 < planted < 110
    check_overlaps(items, data, sampled)  # before: SuiteOverlapError
    stats = data.manifest["rehearsal_pool"]
    assert stats is pool.stats and stats["dropped"]["suite"] == planted and stats["tokenized"] == 0
    # every epoch still draws its 200 rows, none of them quoting the prompt, each the row that
    # stands in for the sampled one, cut and encoded as the eager pool encodes a passage
    t = cfg.training
    for epoch in range(2):
        rows = epoch_slice(len(pool), 200, t.seed, epoch)
        drawn = pool.rows(rows)
        assert len(drawn) == 200
        assert not any(overlap_key(prompt) in overlap_key(char_tok.decode(ids)) for ids, _ in drawn)
        passages = pool.texts.take(pool.stand_ins(rows))
        assert sum(p != q for p, q in zip(passages, pool.texts.take(rows))) > 5  # dropped rows were stood in for
        expected = [encode_rehearsal(char_tok, p[:80], t.rehearsal_prompt, t.rehearsal_prompt_chars, t.max_seq_length)
                    for p in passages]
        assert _same_rows(drawn, expected)
    assert stats["dropped"]["suite"] == planted  # the epochs drew only rows that were checked already
    assert json.loads(json.dumps(data.manifest))["rehearsal_pool"]["dropped"] == {"suite": planted}


def test_eager_pool_drops_overlapping_rows_and_domain_overlap_stays_an_error(tmp_path: Path, char_tok: Any) -> None:
    items = load_suite()
    texts = _words(300)
    texts[5] = f"Quoted: {items[0].prompt}"
    texts[77] = f"Also {items[1].prompt.upper()} here"  # case and spacing do not hide an overlap
    cfg = _overlap_cfg(_parquet(tmp_path / "pool.parquet", texts), rehearsal_rows_per_epoch=20)
    data = prepare(cfg, char_tok)
    assert type(data.rehearsal_pool) is TokenRows and len(data.rehearsal_pool) == 292  # 300 - 8 held out
    check_overlaps(items, data, sampled_rows(len(data.rehearsal_pool), cfg.training))
    assert data.manifest["rehearsal_pool"]["dropped"] == {"suite": 2} and len(data.rehearsal_pool) == 290
    assert len(data.rehearsal_texts) == 290 and not any("Quoted:" in t for t in data.rehearsal_texts)
    data.domain_train_records[0].append({"prompt": f"please: {items[2].prompt}", "response": "x"})
    with pytest.raises(SuiteOverlapError, match=r"domain training data of generation 0: text \d+ overlaps evaluation-suite item"):
        check_overlaps(items, data)
    everything = _overlap_cfg(_parquet(tmp_path / "bad.parquet", [f"{items[0].prompt} (copy {i})" for i in range(30)]))
    with pytest.raises(CorpusError, match="every one of the rehearsal pool's 22 passages overlaps"):
        check_overlaps(items, prepare(everything, char_tok))


def test_a_200k_row_parquet_pool_is_prepared_without_a_python_string_or_token_per_row(tmp_path: Path, char_tok: Any) -> None:
    rows = 200_000
    rng = np.random.default_rng(1)
    words = np.array("alpha beta gamma delta epsilon zeta eta theta iota kappa".split())
    picks = [" ".join(p) for p in words[rng.integers(0, len(words), (rows, 20))]]
    picks[10] = None  # a null and a blank row are counted, as load_corpus counts them
    picks[11] = "   "
    pool_file = _parquet(tmp_path / "big.parquet", picks)
    del picks
    cfg = _overlap_cfg(pool_file, rehearsal_rows_per_epoch=500, num_train_epochs=1)
    # one small pool first, untraced: what the first call imports, compiles or caches (pyarrow's
    # readers, the suite and its overlap keys) is not a cost per row
    warm = _overlap_cfg(_parquet(tmp_path / "warm.parquet", picks_small := _words(300)), rehearsal_rows_per_epoch=20)
    data = prepare(warm, char_tok)
    check_overlaps(load_suite(), data, sampled_rows(len(data.rehearsal_pool), warm.training))
    del data, picks_small
    tok = CountingTokenizer(char_tok)
    tracemalloc.start()
    data = prepare(cfg, tok)  # the default threshold: 200k rows are lazy
    check_overlaps(load_suite(), data, sampled_rows(len(data.rehearsal_pool), cfg.training))
    python_peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    pool = data.rehearsal_pool
    assert isinstance(pool, LazyPool) and len(pool) == rows - 2 - 8
    assert data.manifest["dropped"] == {"empty": 1, "non_string": 1} and data.manifest["general_eval_rows"] == 8
    # Python objects: 200k passages as str would take ~30 MB (eager: text + document id per row)
    assert python_peak < 8e6, python_peak
    assert pool.stats["tokenized"] == 0 and pool.stats["checked"] == 500
    domain_and_held = tok.calls
    assert domain_and_held < 2_000  # domain rows and the 8 held-out rows, not the pool
    drawn = pool.rows(epoch_slice(len(pool), 500, cfg.training.seed, 0))
    assert len(drawn) == 500 and pool.stats["tokenized"] == 500
    assert 500 <= tok.calls - domain_and_held <= 3 * 500  # a rehearsal row costs a few tokenizer calls
    pool.rows(epoch_slice(len(pool), 500, cfg.training.seed, 0))  # the cache serves the epoch again
    assert pool.stats["tokenized"] == 500
    held = set(data.manifest["general_eval_docs"])
    assert len(held) == 8 and all(d.startswith(f"{pool_file}:") for d in held)
    held_rows = {int(d.rsplit(":", 1)[1]) for d in held}
    assert not held_rows & set(pool.texts.positions.tolist())  # type: ignore[attr-defined]


def test_columnar_sources_are_read_as_one_arrow_column(tmp_path: Path) -> None:
    from replaybank.llm.data.columns import open_column
    from replaybank.llm.data.corpus import load_corpus

    folder = tmp_path / "pool"
    folder.mkdir()
    _parquet(folder / "a.parquet", ["a0", "a1", None])
    _parquet(folder / "b.parquet", ["b0", "b1"])
    (folder / "c.jsonl").write_text('{"text": "c0", "x": 1}\n\n{"text": "c1"}\n')
    column = open_column(folder, "text", "train", min_rows=0)
    assert column is not None and len(column) == 7
    assert column.raw(np.array([6, 0, 3, 2])) == ["c1", "a0", "b0", None]
    assert column.doc_id(4) == f"{folder / 'b.parquet'}:1" and column.doc_id(5) == f"{folder / 'c.jsonl'}:0"
    assert [m["rows"] for m in column.manifest] == [3, 2, 2] and all(len(m["sha256"]) == 64 for m in column.manifest)
    assert open_column(folder, "text", "train", min_rows=100) is None  # small: load_corpus reads it, as before
    # what pyarrow cannot read exactly goes to load_corpus, which names the line
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "ok"}\n{"body": "no text"}\n')
    assert open_column(bad, "text", "train", min_rows=0) is None
    with pytest.raises(CorpusError, match=r"bad\.jsonl:2: no field 'text' \(fields: body\)"):
        load_corpus(bad)
    numbers = tmp_path / "numbers.parquet"
    pq.write_table(pa.table({"text": [1, 2, 3]}), numbers)
    assert open_column(numbers, "text", "train", min_rows=0) is None
    with pytest.raises(CorpusError, match=r"a\.parquet: no column 'body' \(columns: text, n\); set rehearsal_text_field"):
        open_column(folder, "body", "train", min_rows=0)


def test_save_to_disk_dataset_is_a_memory_mapped_column(tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    from replaybank.llm.data.columns import hold_out_rows, open_column

    saved = tmp_path / "saved"
    datasets.Dataset.from_dict({"text": [f"passage {i}" for i in range(50)], "n": list(range(50))}).save_to_disk(str(saved))
    column = open_column(saved, "text", "train", min_rows=10)
    assert column is not None and len(column) == 50 and column.raw(np.array([7])) == ["passage 7"]
    split = hold_out_rows(column, 5, seed=3)
    held_rows = {int(d.rsplit(":", 1)[1]) for d in split.doc_ids}
    assert len(held_rows) == 5 and split.texts == [f"passage {d.rsplit(':', 1)[1]}" for d in split.doc_ids]
    assert sorted(held_rows | set(split.pool.tolist())) == list(range(50)) and not held_rows & set(split.pool.tolist())
    assert hold_out_rows(column, 5, seed=4).texts != split.texts  # the sample follows the seed
    with pytest.raises(CorpusError, match="50 usable rows; too few to hold out 50 rows"):
        hold_out_rows(column, 50, seed=0)
