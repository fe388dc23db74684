"""A large rehearsal source read as one Arrow text column, and its held-out rows sampled by index.

:func:`load_corpus <replaybank.llm.data.corpus.load_corpus>` turns every row into Python strings
(the text and a document id), which for two million rows takes seconds and gigabytes before
anything is trained. A *columnar* source - a Parquet file (only the text column is read), a JSONL
file (pyarrow's JSON reader), a folder of those, a ``save_to_disk`` folder or a locally cached HF
dataset (both memory-mapped) - is read here as one ``pyarrow.ChunkedArray`` instead; rows become
Python strings only when they are drawn (:class:`replaybank.llm.data.pool.LazyPool`).

Each row of a columnar source is its own document, so the held-out general rows are a seeded
sample of row indices (:func:`hold_out_rows`), not a sort of every document id.
"""

from __future__ import annotations

import bisect
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from replaybank.files import check_regular
from replaybank.llm.data.corpus import (
    JSONL_SUFFIXES,
    PARQUET_SUFFIXES,
    PYTHON_DOCS,
    SUPPORTED_SUFFIXES,
    CorpusError,
    file_digest,
    list_data_files,
    normalise,
    read_parquet_column,
)
from replaybank.llm.data.saved import is_saved_dataset, open_hf_dataset, open_saved_dataset


@dataclass
class TextColumn:
    """The text column of a columnar source.

    Attributes:
        values: a ``pyarrow.ChunkedArray`` of strings (nulls allowed), every file's rows in order.
        files: ``(name, first row)`` of each file (or dataset) in ``values``, for document ids.
        manifest: one entry per file read: ``{"source", "rows", "sha256"}``.
    """

    values: Any
    files: list[tuple[str, int]]
    manifest: list[dict[str, Any]] = field(default_factory=list)
    _starts: np.ndarray | None = field(default=None, repr=False)

    def __len__(self) -> int:
        return len(self.values)

    def doc_id(self, row: int) -> str:
        """``<file>:<row within the file>``, as :func:`load_corpus` names a Parquet row."""
        k = bisect.bisect_right([start for _, start in self.files], row) - 1
        name, start = self.files[k]
        return f"{name}:{row - start}"

    def raw(self, rows: np.ndarray) -> list[Any]:
        """The values at ``rows`` (column positions) as Python objects (``None`` for a null).

        Taken chunk by chunk: ``ChunkedArray.take`` first concatenates every chunk (a copy of
        the whole column, 2.8 s and 0.44 GB for two million rows).
        """
        rows = np.asarray(rows, dtype=np.int64)
        if self._starts is None:
            self._starts = np.cumsum([0] + [len(c) for c in self.values.chunks])
        chunk = np.searchsorted(self._starts, rows, side="right") - 1
        out: list[Any] = [None] * rows.size
        for k in np.unique(chunk).tolist():
            at = np.flatnonzero(chunk == k)
            for pos, value in zip(at.tolist(), self.values.chunk(k).take(rows[at] - self._starts[k]).to_pylist()):
                out[pos] = value
        return out


def open_column(source: str | Path, text_field: str, split: str, min_rows: int) -> TextColumn | None:
    """``source`` as a :class:`TextColumn` when it is columnar and has more than ``min_rows`` rows.

    Returns ``None`` for every other source (``python-docs``, text files, a folder with text
    files, a missing path, a column that is not strings, a JSONL file pyarrow cannot read
    exactly): :func:`load_corpus` reads those, with its file:line messages.

    Raises:
        CorpusError: a Parquet file or dataset without the column, a saved split that is not
            there, a dataset name that is not cached (as :func:`load_corpus`).
    """
    if str(source) == PYTHON_DOCS:
        return None
    path = Path(source).expanduser()
    if is_saved_dataset(path):
        ds = open_saved_dataset(path, split, text_field, CorpusError)
        return _from_dataset(ds, text_field, f"save_to_disk:{path}[{split}]", min_rows)
    if not path.exists():
        if path.suffix.lower() in SUPPORTED_SUFFIXES or "/" not in str(source):
            return None  # a missing file: load_corpus names it
        ds = open_hf_dataset(str(source), split, text_field, CorpusError)
        return _from_dataset(ds, text_field, f"hf:{source}[{split}]", min_rows)
    files = list_data_files(path) if path.is_dir() else [check_regular(path, error=CorpusError)]  # no FIFO
    if any(f.suffix.lower() not in PARQUET_SUFFIXES + JSONL_SUFFIXES for f in files):
        return None
    if sum(_row_estimate(f) for f in files) <= min_rows:
        return None
    chunks: list[Any] = []
    column = TextColumn(None, [])
    for f in files:
        values = read_parquet_column(f, text_field) if f.suffix.lower() in PARQUET_SUFFIXES else _jsonl_column(f, text_field)
        if values is None or not _is_text(values.type):
            return None
        column.files.append((str(f), sum(len(c) for c in chunks)))
        column.manifest.append({"source": str(f), "rows": len(values), "sha256": file_digest(f)})
        chunks.append(values)
    column.values = _concat(chunks)
    return column


def _row_estimate(path: Path) -> int:
    """Rows of a Parquet file (from its footer) or lines of a JSONL file (blank ones included)."""
    if path.suffix.lower() in PARQUET_SUFFIXES:
        import pyarrow.parquet as pq  # type: ignore[import-not-found]

        try:
            return int(pq.ParquetFile(path).metadata.num_rows)
        except Exception:  # not Parquet: read_parquet_column says so
            return 0
    lines = 0
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            lines += block.count(b"\n")
    return lines + 1


def _jsonl_column(path: Path, text_field: str) -> Any:
    """The field of every line of a JSONL file, or ``None`` when pyarrow cannot read it exactly:
    a malformed line, a non-string value or a missing field (load_corpus names the line)."""
    import pyarrow as pa
    import pyarrow.json as pj  # type: ignore[import-not-found]

    options = pj.ParseOptions(explicit_schema=pa.schema([(text_field, pa.string())]), unexpected_field_behavior="ignore")
    try:  # 16 MB blocks: a line longer than a block is an error in pyarrow
        values = pj.read_json(path, read_options=pj.ReadOptions(block_size=1 << 24), parse_options=options).column(text_field)
    except Exception:  # pyarrow's messages name no line; load_corpus's do
        return None
    return None if values.null_count else values  # a null is a missing field (an error) or a null value (dropped)


def _from_dataset(ds: Any, text_field: str, name: str, min_rows: int) -> TextColumn | None:
    if len(ds) <= min_rows:
        return None
    if getattr(ds, "_indices", None) is not None:  # a selected / shuffled view: write its rows out in order
        ds = ds.flatten_indices()
    values = ds.data.table.column(text_field)  # memory-mapped Arrow: nothing is copied
    if not _is_text(values.type):
        return None
    return TextColumn(values, [(name, 0)], [{"source": name, "rows": len(ds), "sha256": None}])


def _is_text(kind: Any) -> bool:
    import pyarrow as pa

    return bool(pa.types.is_string(kind) or pa.types.is_large_string(kind))


def _concat(chunks: list[Any]) -> Any:
    import pyarrow as pa

    kind = chunks[0].type if all(c.type == chunks[0].type for c in chunks) else pa.large_string()
    return pa.chunked_array([piece for c in chunks for piece in c.cast(kind).chunks], type=kind)


@dataclass
class HeldOut:
    """The split of a :class:`TextColumn` into held-out rows and the rehearsal pool.

    Attributes:
        pool: column positions of the pool's rows, in order.
        texts: the held-out passages (normalised, uncut).
        doc_ids: their document ids.
        dropped: rows dropped from the pool by reason (``non_string``: nulls, ``empty``: blank).
        overlap_removed: pool rows whose text equals a held-out text.
    """

    pool: np.ndarray
    texts: list[str]
    doc_ids: list[str]
    dropped: Counter[str]
    overlap_removed: int


def hold_out_rows(column: TextColumn, n_heldout: int, seed: int) -> HeldOut:
    """Hold out ``n_heldout`` rows of ``column``, sampled by index (``numpy`` generator ``seed``).

    Null and blank rows are found on the whole column at once (Arrow compute, no Python string
    per row) and dropped; the held-out rows are drawn from the rest; pool rows equal to a
    held-out text are dropped too. Whitespace that Arrow's ``\\S`` does not know (e.g. no-break
    spaces only) is caught when a row is drawn (:class:`LazyPool`).

    Raises:
        CorpusError: when the held-out rows would take every usable row.

    Example:
        >>> import pyarrow as pa
        >>> col = TextColumn(pa.chunked_array([["a", " ", None, "b", "c", "a"]]), [("f.parquet", 0)])
        >>> split = hold_out_rows(col, 1, seed=0)
        >>> split.texts, split.pool.tolist(), dict(split.dropped), split.overlap_removed
        (['c'], [0, 3, 5], {'non_string': 1, 'empty': 1}, 0)
    """
    import pyarrow as pa
    import pyarrow.compute as pc  # type: ignore[import-not-found]

    has_text = pc.match_substring_regex(column.values, r"\S").fill_null(False)
    usable = np.flatnonzero(_numpy(has_text))
    dropped: Counter[str] = Counter()
    if column.values.null_count:
        dropped["non_string"] = column.values.null_count
    if len(column) - usable.size - column.values.null_count:
        dropped["empty"] = len(column) - usable.size - column.values.null_count
    if n_heldout <= 0:
        return HeldOut(usable, [], [], dropped, 0)
    if usable.size <= n_heldout:
        raise CorpusError(
            f"{column.files[0][0]}: {usable.size} usable rows; too few to hold out {n_heldout} rows and keep a "
            "rehearsal pool; lower general_eval_rows"
        )
    rng = np.random.default_rng(seed)
    candidates = usable[rng.choice(usable.size, size=min(usable.size - 1, 2 * n_heldout + 8), replace=False)]
    held = [(int(row), text) for row, text in zip(candidates, column.raw(candidates)) if normalise(text)][:n_heldout]
    held_rows = np.asarray(sorted(row for row, _ in held), dtype=np.int64)
    raw_held = pa.array([text for _, text in held], type=column.values.type)
    same = _numpy(pc.is_in(column.values, value_set=raw_held).fill_null(False))
    same[held_rows] = False
    keep = np.ones(len(column), dtype=bool)
    keep[held_rows] = False
    pool = usable[keep[usable] & ~same[usable]]
    return HeldOut(pool, [normalise(text) for _, text in held], [column.doc_id(row) for row, _ in held], dropped,
                   int(same[usable].sum()))


def _numpy(mask: Any) -> np.ndarray:
    return np.asarray(mask.to_numpy(zero_copy_only=False), dtype=bool)
