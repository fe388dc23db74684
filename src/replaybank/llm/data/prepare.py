"""Preparing the run's data: the rehearsal pool, the held-out sets and the domain generations.

Everything here turns config values into tokenized :class:`TokenRows` plus a manifest saying what
was used (sources, digests, row counts, drop counts).
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from replaybank.llm.config import (
    BUILTIN_AGENDA,
    BUILTIN_LEDGER,
    BUILTIN_PROBE,
    BUILTIN_TOOLAPI,
    Config,
)
from replaybank.llm.data import agenda, ledger, toolapi
from replaybank.llm.data.columns import hold_out_rows, open_column
from replaybank.llm.data.corpus import (
    Corpus,
    CorpusError,
    iter_jsonl,
    load_corpus,
    remove_overlap,
    split_heldout,
)
from replaybank.llm.data.domain_files import DomainRecord, read_domain_source
from replaybank.llm.data.pool import ColumnTexts, LazyPool, ListTexts, PoolTexts
from replaybank.llm.data.rows import (
    FormatError,
    TokenRows,
    encode_messages,
    encode_pair,
    encode_rehearsal,
    encode_text,
    token_rows,
)
from replaybank.llm.eval.skill_probe import ProbeItem, default_probe_items

LAZY_MIN_ROWS = 20_000
"""A rehearsal pool with more rows is tokenized when its rows are drawn (:class:`LazyPool`); a
columnar source (Parquet, JSONL, a saved or cached HF dataset) that large is also read as an Arrow
column with its held-out rows sampled by index (:mod:`replaybank.llm.data.columns`). Smaller pools
are read and tokenized up front, as they always were."""


@dataclass
class Prepared:
    """All tokenized data of a run and its manifest."""

    rehearsal_pool: TokenRows
    general_eval: TokenRows
    domain_generations: list[TokenRows]
    domain_eval: TokenRows
    probe: list[ProbeItem]
    manifest: dict[str, Any] = field(default_factory=dict)
    domain_evals: list[TokenRows] = field(default_factory=list)
    """Held-out rows of each generation's domain (the same object repeated when one is shared)."""
    domain_eval_records: list[list[DomainRecord]] = field(default_factory=list)
    """The raw held-out records per generation, for generated-accuracy evaluation."""
    domain_train_records: list[list[DomainRecord]] = field(default_factory=list)
    rehearsal_texts: list[str] = field(default_factory=list)
    """The corpus passages of an eager rehearsal pool (for overlap checks against the suite); empty
    for a :class:`LazyPool`, whose rows are checked when drawn."""


BUILTINS = {
    BUILTIN_TOOLAPI: toolapi.generate_examples,
    BUILTIN_AGENDA: agenda.generate_examples,
    BUILTIN_LEDGER: ledger.generate_examples,
}
"""Built-in domain generators: ``builtin:toolapi`` (the qx tool API), ``builtin:agenda`` (``@agenda{...}``),
``builtin:ledger`` (``~ledger`` lines rewritten from money statements)."""


def load_domain(
    source: str, n_builtin: int, seed: int, exclude: set[str] | None = None, split: str = "train"
) -> tuple[list[DomainRecord], dict[str, Any]]:
    """Domain records from ``builtin:toolapi`` / ``builtin:agenda`` / ``builtin:ledger``, or a JSONL / Parquet / text
    file or folder, a ``save_to_disk`` folder or a cached HF dataset (split ``split``).

    JSONL lines and Parquet / dataset rows are ``{"prompt", "response"}`` (``completion`` also
    accepted) or ``{"messages": [...]}``; ``text`` and text files give ``{"text"}`` records (plain
    LM loss). See :mod:`replaybank.llm.data.domain_files`.

    Raises:
        CorpusError: missing file, malformed line (``file:line``), a line or columnar source with
            none of the accepted fields (the fields found listed), a null value (file and row), or
            no records at all.
    """
    if source in BUILTINS:
        recs: list[DomainRecord] = list(BUILTINS[source](n_builtin, seed, exclude))
        digest = hashlib.sha256(repr(recs).encode()).hexdigest()
        return recs, {"source": f"{source} (seed {seed})", "rows": len(recs), "sha256": digest}
    return read_domain_source(Path(source).expanduser(), split, source)


def encode_domain(tokenizer: Any, records: list[DomainRecord], max_seq_length: int) -> TokenRows:
    rows = []
    for i, rec in enumerate(records):
        where = rec.get("where", f"record {i}")
        try:
            if "messages" in rec:
                rows.append(encode_messages(tokenizer, rec["messages"], max_seq_length))
            elif "prompt" in rec:
                rows.append(encode_pair(tokenizer, rec["prompt"], rec["response"], max_seq_length))
            else:
                rows.append(encode_text(tokenizer, rec["text"], max_seq_length))
        except FormatError as exc:
            raise CorpusError(f"{where}: {exc}") from None
    return token_rows(rows)


def load_probe(source: str) -> list[ProbeItem]:
    if source == BUILTIN_PROBE:
        return default_probe_items()
    items = []
    for number, obj in iter_jsonl(Path(source).expanduser()):
        if not isinstance(obj.get("prompt"), str) or not isinstance(obj.get("answer"), str):
            raise CorpusError(f"{source}:{number}: a probe line needs string 'prompt' and 'answer'")
        items.append(ProbeItem(obj["prompt"], obj["answer"]))
    if not items:
        raise CorpusError(f"{source}: probe file has no items")
    return items


def _general(cfg: Config, encode: Callable[[str], Any], lazy_min_rows: int) -> tuple[TokenRows, list[str], Corpus, dict[str, Any]]:
    """The rehearsal pool, its passages (eager pools only: a lazy pool's stay in their column),
    the held-out general passages (uncut) and the manifest's entries for them.

    A columnar source of more than ``lazy_min_rows`` rows is read as an Arrow column, its held-out
    rows sampled by index; any other source through :func:`load_corpus`, whole documents held out.
    """
    t, d = cfg.training, cfg.data
    dropped: Counter[str] = Counter()
    held = Corpus()
    if d.general_eval:
        held = load_corpus(d.general_eval, t.rehearsal_text_field, t.rehearsal_split)
        dropped.update({f"general_eval_{k}": v for k, v in held.dropped.items()})
        held = held.subset(range(min(len(held), d.general_eval_rows)))
    column = open_column(t.rehearsal_dataset, t.rehearsal_text_field, t.rehearsal_split, lazy_min_rows)
    pool: TokenRows
    if column is not None:
        split = hold_out_rows(column, 0 if d.general_eval else d.general_eval_rows, seed=t.seed)
        if not d.general_eval:
            held = Corpus(split.texts, split.doc_ids)
        dropped.update(split.dropped)
        sources, overlap, how = column.manifest, split.overlap_removed, "rows sampled by index"
        lazy = _lazy_pool(ColumnTexts(column, split.pool), encode, cfg)
        held_cut = set(_cut(held.texts, t.rehearsal_max_chars))
        lazy.add_check("heldout", held_cut.__contains__)  # a held-out text with other whitespace, or from general_eval
        pool, texts = lazy, []
    else:
        general = load_corpus(t.rehearsal_dataset, t.rehearsal_text_field, t.rehearsal_split)
        dropped.update(general.dropped)
        corpus = general
        if not d.general_eval:
            corpus, held = split_heldout(general, d.general_eval_rows, seed=t.seed)
        corpus, overlap = remove_overlap(corpus.subset(range(len(corpus))), held.texts)
        sources, how = general.manifest, "whole documents"
        texts = _cut(corpus.texts, t.rehearsal_max_chars)
        pool = _lazy_pool(ListTexts(texts), encode, cfg) if len(texts) > lazy_min_rows else token_rows([encode(x) for x in texts])
    if len(pool) == 0:
        raise CorpusError(f"{t.rehearsal_dataset}: no rehearsal passages left after holding out the general eval set")
    manifest = {
        "general_corpus": sources,
        "general_eval_source": d.general_eval or f"held out from {t.rehearsal_dataset} ({how})",
        "overlap_removed": overlap,
        "dropped": dict(sorted(dropped.items())),
    }
    return pool, [] if isinstance(pool, LazyPool) else texts, held, manifest


def _cut(texts: list[str], max_chars: int) -> list[str]:
    return [t[:max_chars] for t in texts]


def _lazy_pool(texts: PoolTexts, encode: Callable[[str], Any], cfg: Config) -> LazyPool:
    t = cfg.training
    # room for every virtual epoch's slice, so arms and generations after the first tokenize nothing
    cache = min(max(t.rehearsal_rows_per_epoch * t.num_train_epochs, 1024), 8192)
    return LazyPool(texts, encode, t.rehearsal_max_chars, cache_rows=cache, seed=t.seed)


def prepare(cfg: Config, tokenizer: Any, *, lazy_min_rows: int | None = None) -> Prepared:
    """Load, split, cut and tokenize everything the run needs (the rehearsal pool lazily when it has
    more than ``lazy_min_rows`` rows, default :data:`LAZY_MIN_ROWS`).

    Raises:
        CorpusError: for any bad data source (see :mod:`replaybank.llm.data.corpus`).
    """
    t, d = cfg.training, cfg.data

    def encode(text: str) -> tuple[Any, Any]:
        return encode_rehearsal(tokenizer, text, t.rehearsal_prompt, t.rehearsal_prompt_chars, t.max_seq_length)

    pool, pool_texts, held, general = _general(cfg, encode, LAZY_MIN_ROWS if lazy_min_rows is None else lazy_min_rows)
    held_texts = _cut(held.texts, t.rehearsal_max_chars)

    n_gen = cfg.orchestration.num_generations
    eval_sets: dict[str, tuple[list[DomainRecord], dict[str, Any], TokenRows]] = {}
    for k, source in enumerate(d.domain_eval):
        if source not in eval_sets:
            recs, man = load_domain(source, d.domain_eval_rows, seed=t.seed + 10_000 + 100 * k, split=d.domain_split)
            recs = recs[: d.domain_eval_rows]
            eval_sets[source] = (recs, {**man, "rows": len(recs)}, encode_domain(tokenizer, recs, t.max_seq_length))
    eval_of = [d.domain_eval[g] if len(d.domain_eval) > 1 else d.domain_eval[0] for g in range(n_gen)]
    held_prompts = {r["prompt"] for recs, _, _ in eval_sets.values() for r in recs if "prompt" in r}
    eval_records, eval_manifest, _ = eval_sets[eval_of[0]]
    generations, gen_manifest, train_records = [], [], []
    for g in range(n_gen):
        source = d.domain_train[g] if len(d.domain_train) > 1 else d.domain_train[0]
        recs, man = load_domain(source, d.domain_train_rows, seed=t.seed + 1 + g, exclude=held_prompts, split=d.domain_split)
        generations.append(encode_domain(tokenizer, recs, t.max_seq_length))
        gen_manifest.append({"generation": g, **man})
        train_records.append(recs)
    probe = load_probe(d.probe)
    manifest = {
        "general_corpus": general["general_corpus"],
        "general_pool_rows": len(pool),
        "general_eval_rows": len(held_texts),
        "general_eval_source": general["general_eval_source"],
        "general_eval_docs": sorted(set(held.doc_ids))[:50],
        "overlap_removed": general["overlap_removed"],
        "dropped": general["dropped"],
        "domain_train": gen_manifest,
        "domain_train_rows": [len(g) for g in generations],
        "domain_eval": eval_manifest,
        "domain_eval_rows": len(eval_records),
        "domain_evals": [{"generation": g, **eval_sets[src][1]} for g, src in enumerate(eval_of)],
        "probe_items": len(probe),
        "rehearsal_pool": pool.stats if isinstance(pool, LazyPool) else _eager_stats(len(pool)),
    }
    return Prepared(
        pool, token_rows([encode(x) for x in held_texts]), generations,
        eval_sets[eval_of[0]][2], probe, manifest,
        domain_evals=[eval_sets[src][2] for src in eval_of],
        domain_eval_records=[eval_sets[src][0] for src in eval_of],
        domain_train_records=train_records,
        rehearsal_texts=pool_texts,
    )


def _eager_stats(rows: int, suite_dropped: int = 0) -> dict[str, Any]:
    return {"rows": rows, "lazy": False, "checked": rows, "dropped": {"suite": suite_dropped} if suite_dropped else {},
            "tokenized": rows}


def check_overlaps(suite: Any, data: Prepared, sampled: np.ndarray | None = None) -> None:
    """Keep suite prompts out of this seed's training text (the whole suite, not the sample).

    Domain training data that contains a suite prompt stops the run (:class:`SuiteOverlapError`
    naming the generation and row): it is the user's own training set, and quietly training on
    less of it than they gave would hide a suite that measures memorisation. Rehearsal rows that
    contain one are general text the run samples, so they are dropped and counted in
    ``data.manifest["rehearsal_pool"]["dropped"]["suite"]`` instead: for an eager pool every row
    is checked here and the overlapping ones removed; a :class:`LazyPool` checks the ``sampled``
    rows now (every virtual epoch's slice: :func:`replaybank.llm.train.sources.sampled_rows`) and
    any other row when it is first drawn, the next clean row taking a dropped one's place.

    Raises:
        SuiteOverlapError: domain training data overlaps the suite.
        CorpusError: every rehearsal row overlaps the suite.
    """
    from replaybank.llm.eval.suite import Suite, check_no_overlap, overlap_key, overlaps

    for g, recs in enumerate(data.domain_train_records):
        texts = [str(r.get("prompt", r.get("text", ""))) for r in recs]
        check_no_overlap(suite, texts, f"domain training data of generation {g}")
    prompts = [overlap_key(item.prompt) for item in (suite.items if isinstance(suite, Suite) else suite)]

    def hits(text: str) -> bool:
        key = overlap_key(text)
        return any(overlaps(key, prompt) for prompt in prompts)

    pool = data.rehearsal_pool
    if isinstance(pool, LazyPool):
        pool.add_check("suite", hits)
        if sampled is not None:
            pool.stand_ins(sampled)
        return
    if len(data.rehearsal_texts) != len(pool):  # a Prepared put together without its passages
        return
    keep = [i for i, text in enumerate(data.rehearsal_texts) if not hits(text)]
    data.manifest["rehearsal_pool"] = _eager_stats(len(pool), len(pool) - len(keep))
    if len(keep) < len(pool):
        if not keep:
            raise CorpusError(f"every one of the rehearsal pool's {len(pool)} passages overlaps an evaluation-suite prompt")
        data.rehearsal_pool = token_rows(pool.rows(keep))
        data.rehearsal_texts = [data.rehearsal_texts[i] for i in keep]
