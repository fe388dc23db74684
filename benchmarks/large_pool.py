"""How a large Parquet rehearsal pool fares in today's data preparation, stage by stage.

Run ``python benchmarks/large_pool.py [--rows 2000000]``. Generates a Parquet pool (one ``text``
column, ~60 words a row) once under ``--work``, then times the stages ``replaybank run`` goes
through before its first optimizer step: reading the pool (only the text column), holding out
whole documents, the held-out overlap check, and tokenizing rehearsal rows (measured on
``--sample`` rows with the SmolLM2 tokenizer and extrapolated to the pool, since today the whole
pool is tokenized). Prints a table with the issue-24 targets (first step <= 60 s, peak RSS <= 3 GB)
and writes ``benchmarks/results/large_pool.json``.

Measured 2026-12-01 on the 2-CPU development machine (loaded, two runs): 2,000,000 rows read in
12.0-12.8 s, held out in 12.2-14.4 s, overlap check 1.0 s, peak RSS 2.2 GB; tokenizing
1,828-2,211 rows/s, so the whole pool would take 15-18 min: the 60 s target needs the lazy pool
(tokenize each virtual epoch's sampled rows only), which is not built yet.
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from pathlib import Path
from typing import Any

TARGET_SECONDS, TARGET_RSS_GB = 60.0, 3.0


def make_pool(path: Path, rows: int, seed: int = 0) -> None:
    """A Parquet file of ``rows`` distinct pseudo-English passages (column ``text``)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    words = np.array("the of and to in is that for it as with was on be by this are from or an at".split())
    path.parent.mkdir(parents=True, exist_ok=True)
    with pq.ParquetWriter(path, pa.schema([("text", pa.string())])) as out:
        for start in range(0, rows, 100_000):
            n = min(100_000, rows - start)
            picks = words[rng.integers(0, len(words), (n, 60))]
            out.write_table(pa.table({"text": [" ".join(p) + f" {start + i}" for i, p in enumerate(picks)]}))


def peak_rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6  # KiB on Linux


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--sample", type=int, default=5_000, help="rows tokenized to measure the rate")
    ap.add_argument("--work", type=Path, default=Path("/tmp/replaybank-large-pool"))
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "large_pool.json")
    args = ap.parse_args()

    from replaybank.llm.data.corpus import load_corpus, remove_overlap, split_heldout
    from replaybank.llm.data.rows import encode_rehearsal

    pool_file = args.work / f"pool-{args.rows}.parquet"
    if not pool_file.is_file():
        make_pool(pool_file, args.rows)
    times: dict[str, float] = {}
    t0 = time.perf_counter()
    corpus = load_corpus(pool_file)
    times["read"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    pool, held = split_heldout(corpus, 16, seed=0)
    times["hold_out"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    pool, _ = remove_overlap(pool.subset(range(len(pool))), held.texts)
    times["overlap"] = time.perf_counter() - t0
    tok = _tokenizer()
    sample = pool.texts[: args.sample]
    t0 = time.perf_counter()
    for text in sample:
        encode_rehearsal(tok, text[:400], "Continue the following passage", 128, 256)
    rate = len(sample) / (time.perf_counter() - t0)
    times["tokenize_all_estimated"] = len(pool) / rate
    before_step = sum(times.values())
    result = {
        "rows": len(corpus), "seconds": {k: round(v, 2) for k, v in times.items()},
        "tokenize_rows_per_second": round(rate, 1), "seconds_before_first_step_estimated": round(before_step, 1),
        "peak_rss_gb": round(peak_rss_gb(), 2), "targets": {"seconds": TARGET_SECONDS, "rss_gb": TARGET_RSS_GB},
    }
    print("| stage | seconds |\n|---|---|")
    for k, v in times.items():
        print(f"| {k} | {v:.1f} |")
    print(f"| before the first step (estimated) | {before_step:.1f} (target <= {TARGET_SECONDS:.0f}: "
          f"{'met' if before_step <= TARGET_SECONDS else 'not met'}) |")
    print(f"peak RSS {result['peak_rss_gb']} GB (target <= {TARGET_RSS_GB}: "
          f"{'met' if result['peak_rss_gb'] <= TARGET_RSS_GB else 'not met'}, before tokenizing)")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))


def _tokenizer() -> Any:
    from transformers import AutoTokenizer

    from replaybank.llm.model import _gguf_cache_path, smollm2_gguf

    gguf = smollm2_gguf()
    cached = _gguf_cache_path(gguf)
    if (cached / "tokenizer.json").is_file():
        return AutoTokenizer.from_pretrained(cached)
    return AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)


if __name__ == "__main__":
    main()
