"""Loading text corpora: local text / JSONL / Parquet files or folders, local HF datasets, and the
embedded Python documentation corpus.

Every loader returns a :class:`Corpus`: normalised passages (whitespace collapsed to single
spaces), a document id per passage (used to keep held-out text disjoint from the rehearsal pool),
the count of dropped rows by reason, and a manifest of the files read.

Bad input raises :class:`CorpusError` naming the file (and line, for JSONL) and what was wrong.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from replaybank import jsonl
from replaybank.errors import ReplayBankError
from replaybank.files import check_regular
from replaybank.jsonl import read_utf8
from replaybank.llm.data.pydocs import normalise
from replaybank.llm.data.saved import is_saved_dataset, iter_saved_dataset, open_hf_dataset

PYTHON_DOCS = "python-docs"
"""Name of the embedded general corpus: ``pydoc_data.topics`` plus stdlib docstrings."""

TEXT_SUFFIXES = (".txt", ".md")
JSONL_SUFFIXES = (".jsonl", ".json")
PARQUET_SUFFIXES = (".parquet",)
SUPPORTED_SUFFIXES = TEXT_SUFFIXES + JSONL_SUFFIXES + PARQUET_SUFFIXES

class CorpusError(ReplayBankError):
    """A corpus or data file could not be used; the message names the file and what was wrong."""


@dataclass
class Corpus:
    """Normalised passages with provenance.

    Attributes:
        texts: the passages, whitespace-normalised, non-empty.
        doc_ids: one id per passage; passages of one document share it.
        dropped: rows dropped, by reason (``empty``, ``non_string``).
        manifest: one entry per file or source read: ``{"source", "rows", "sha256"}``.
    """

    texts: list[str] = field(default_factory=list)
    doc_ids: list[str] = field(default_factory=list)
    dropped: Counter[str] = field(default_factory=Counter)
    manifest: list[dict[str, Any]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.texts)

    def subset(self, indices: Iterable[int]) -> Corpus:
        """A corpus with the passages at ``indices`` (manifest and drop counts kept)."""
        idx = list(indices)
        return Corpus(
            [self.texts[i] for i in idx], [self.doc_ids[i] for i in idx],
            Counter(self.dropped), list(self.manifest),
        )


def _read_utf8(path: Path) -> str:
    return read_utf8(path, error=CorpusError)


def _digest(data: str) -> str:
    return hashlib.sha256(data.encode("utf-8")).hexdigest()


def _add(corpus: Corpus, value: Any, doc_id: str) -> None:
    if not isinstance(value, str):
        corpus.dropped["non_string"] += 1
        return
    text = normalise(value)
    if not text:
        corpus.dropped["empty"] += 1
        return
    corpus.texts.append(text)
    corpus.doc_ids.append(doc_id)


def iter_jsonl(path: Path) -> Iterable[tuple[int, dict[str, Any]]]:
    """Yield ``(line_number, object)`` for each non-blank line of a JSONL file.

    Raises:
        CorpusError: ``file:line`` for a line that is not JSON or not a JSON object.
    """
    return jsonl.iter_jsonl(path, error=CorpusError)


def _load_text_file(path: Path, corpus: Corpus) -> None:
    raw = _read_utf8(path)
    start = len(corpus)
    # Passages are separated by blank lines; each passage is its own document.
    for i, para in enumerate(re.split(r"\n\s*\n", raw)):
        _add(corpus, para, f"{path}#{i}")
    corpus.manifest.append({"source": str(path), "rows": len(corpus) - start, "sha256": _digest(raw)})


def _load_jsonl_file(path: Path, text_field: str, corpus: Corpus) -> None:
    start = len(corpus)
    for number, obj in iter_jsonl(path):
        if text_field not in obj:
            keys = ", ".join(sorted(obj)) or "none"
            raise CorpusError(
                f"{path}:{number}: no field {text_field!r} (fields: {keys}); set rehearsal_text_field"
            )
        _add(corpus, obj[text_field], f"{path}:{number}")
    corpus.manifest.append(
        {"source": str(path), "rows": len(corpus) - start, "sha256": _digest(_read_utf8(path))}
    )


def read_parquet_column(path: Path, text_field: str) -> Any:
    """Column ``text_field`` of a Parquet file as a ``pyarrow.ChunkedArray`` (no other column is read).

    Raises:
        CorpusError: pyarrow missing, no such file, not Parquet, no such column (the columns listed).
    """
    try:
        import pyarrow.parquet as pq  # type: ignore[import-not-found]
    except ImportError:
        raise CorpusError(
            f"{path}: reading Parquet needs pyarrow (pip install pyarrow), or convert it to JSONL"
        ) from None
    check_regular(path, error=CorpusError)  # pyarrow would block on a FIFO
    try:
        names = pq.read_schema(path).names  # the footer only: a missing column fails before any row is read
    except Exception as exc:  # pyarrow raises several unrelated types for bad files
        raise CorpusError(f"{path}: not a readable Parquet file ({exc})") from None
    if text_field not in names:
        raise CorpusError(f"{path}: no column {text_field!r} (columns: {', '.join(names)}); set rehearsal_text_field")
    try:
        return pq.read_table(path, columns=[text_field]).column(text_field)
    except Exception as exc:
        raise CorpusError(f"{path}: not a readable Parquet file ({exc})") from None


def file_digest(path: Path) -> str:
    """SHA-256 of a file, read in blocks (a large Parquet pool is never held in memory whole)."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _load_parquet_file(path: Path, text_field: str, corpus: Corpus) -> None:
    start = len(corpus)
    for i, value in enumerate(read_parquet_column(path, text_field).to_pylist()):
        _add(corpus, value, f"{path}:{i}")
    corpus.manifest.append({"source": str(path), "rows": len(corpus) - start, "sha256": file_digest(path)})


def _load_file(path: Path, text_field: str, corpus: Corpus) -> None:
    suffix = path.suffix.lower()
    if suffix in TEXT_SUFFIXES:
        _load_text_file(path, corpus)
    elif suffix in JSONL_SUFFIXES:
        _load_jsonl_file(path, text_field, corpus)
    elif suffix in PARQUET_SUFFIXES:
        _load_parquet_file(path, text_field, corpus)
    else:
        raise CorpusError(
            f"{path}: unsupported file type {suffix or '(none)'!r}; "
            f"expected one of {', '.join(SUPPORTED_SUFFIXES)}"
        )


def list_data_files(path: Path) -> list[Path]:
    """Supported files under a folder, recursively, in sorted order.

    Raises:
        CorpusError: if the folder holds no supported file.
    """
    files = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in SUPPORTED_SUFFIXES)
    if not files:
        found = ", ".join(sorted({p.suffix or p.name for p in path.rglob("*") if p.is_file()})[:8]) or "nothing"
        raise CorpusError(
            f"{path}: folder holds no {', '.join(SUPPORTED_SUFFIXES)} file and is not a save_to_disk dataset "
            f"(no dataset_dict.json, or state.json + dataset_info.json); found: {found}"
        )
    return files


def load_corpus(source: str | Path, text_field: str = "text", split: str = "train") -> Corpus:
    """Load passages from a file, a folder, a locally cached HF dataset, or ``python-docs``.

    Args:
        source: path of a ``.txt``/``.md`` (passages separated by blank lines), ``.jsonl`` or
            ``.parquet`` file, a folder of them, a folder written by ``save_to_disk``,
            :data:`PYTHON_DOCS`, or a Hugging Face dataset name (only when available locally).
        text_field: JSONL field / Parquet column / dataset column with the text.
        split: dataset split, for HF datasets.

    Returns:
        The loaded :class:`Corpus`.

    Raises:
        CorpusError: missing or unreadable file, bad JSON line (``file:line``), non-UTF-8 bytes,
            a missing text field, a dataset that would need a download, or an empty corpus.
    """
    if str(source) == PYTHON_DOCS:
        corpus = python_docs_corpus()
    else:
        path = Path(source).expanduser()
        corpus = Corpus()
        if is_saved_dataset(path):
            for i, value in enumerate(iter_saved_dataset(path, split, text_field, CorpusError)):
                _add(corpus, value, f"{path}:{i}")
            corpus.manifest.append({"source": f"save_to_disk:{path}[{split}]", "rows": len(corpus), "sha256": None})
        elif path.is_dir():
            for file in list_data_files(path):
                _load_file(file, text_field, corpus)
        elif path.exists() or path.suffix.lower() in SUPPORTED_SUFFIXES or "/" not in str(source):
            _load_file(path, text_field, corpus)
        else:
            corpus = _load_hf_dataset(str(source), split, text_field)
    if not corpus.texts:
        dropped = ", ".join(f"{k}={v}" for k, v in sorted(corpus.dropped.items())) or "none"
        raise CorpusError(f"{source}: corpus is empty after dropping blank/non-string rows (dropped: {dropped})")
    return corpus


def _load_hf_dataset(name: str, split: str, text_field: str) -> Corpus:
    corpus = Corpus()
    for i, value in enumerate(open_hf_dataset(name, split, text_field, CorpusError)[text_field]):
        _add(corpus, value, f"{name}:{i}")
    corpus.manifest.append({"source": f"hf:{name}[{split}]", "rows": len(corpus), "sha256": None})
    return corpus


def python_docs_corpus(target_chars: int = 480) -> Corpus:
    """The embedded general corpus: Python's reference topics and stdlib docstrings.

    ``pydoc_data.topics.topics`` (the language reference behind ``help()``) is cut into chunks of
    about ``target_chars`` characters; docstrings of a fixed list of stdlib modules, their public
    classes and functions are added, one document each. The text depends on the Python version only:
    it is read in a fresh interpreter (:mod:`.pydocs`), so what this process imported or patched
    before cannot change it. The manifest records a digest.

    Returns:
        A :class:`Corpus` whose doc ids are ``topic:<name>`` and ``doc:<module>``.

    Raises:
        CorpusError: the fresh interpreter failed or printed something other than the corpus.
    """
    from replaybank.llm.data import pydocs

    cmd = [sys.executable, "-I", "-S", pydocs.__file__, str(target_chars)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, encoding="utf-8", timeout=300, check=False)
        pieces = json.loads(done.stdout) if done.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, ValueError) as exc:
        raise CorpusError(f"{PYTHON_DOCS}: reading Python's documentation in a fresh interpreter failed: {exc}") from exc
    if not isinstance(pieces, list) or not all(
        isinstance(p, list) and len(p) == 2 and all(isinstance(x, str) for x in p) for p in pieces
    ):
        raise CorpusError(f"{PYTHON_DOCS}: reading Python's documentation in a fresh interpreter failed "
                          f"(exit {done.returncode}): {done.stderr.strip()[-500:]}")
    corpus = Corpus()
    digest = hashlib.sha256()
    for doc_id, chunk in pieces:
        _add(corpus, chunk, doc_id)
        digest.update(chunk.encode())
    n_topics = sum(1 for doc_id in corpus.doc_ids if doc_id.startswith("topic:"))
    corpus.manifest.append(
        {
            "source": "pydoc_data.topics + stdlib docstrings",
            "rows": len(corpus),
            "topic_rows": n_topics,
            "docstring_rows": len(corpus) - n_topics,
            "sha256": digest.hexdigest(),
        }
    )
    return corpus


def split_heldout(corpus: Corpus, n_heldout: int, seed: int) -> tuple[Corpus, Corpus]:
    """Split passages into (pool, held-out) by whole documents, so no document is in both.

    Documents are ordered by a seeded hash of their id and taken into the held-out set until it
    has at least ``n_heldout`` passages (at most ``n_heldout`` are kept, the rest are dropped, not
    moved to the pool, so the sets stay disjoint by document).

    Raises:
        CorpusError: if the held-out set would take every document.
    """
    if n_heldout <= 0:
        return corpus, Corpus()
    docs = sorted(
        set(corpus.doc_ids),
        key=lambda d: hashlib.sha256(f"{seed}:{d}".encode()).hexdigest(),
    )
    by_doc: dict[str, list[int]] = {}
    for i, d in enumerate(corpus.doc_ids):
        by_doc.setdefault(d, []).append(i)
    held: list[int] = []
    held_docs: set[str] = set()
    for d in docs:
        if len(held) >= n_heldout:
            break
        held.extend(by_doc[d])
        held_docs.add(d)
    if len(held_docs) == len(docs):
        raise CorpusError(
            f"corpus has {len(docs)} documents ({len(corpus)} passages); too few to hold out "
            f"{n_heldout} passages and keep a rehearsal pool; lower general_eval_rows"
        )
    pool = [i for i, d in enumerate(corpus.doc_ids) if d not in held_docs]
    return corpus.subset(pool), corpus.subset(held[:n_heldout])


def remove_overlap(pool: Corpus, heldout: Sequence[str]) -> tuple[Corpus, int]:
    """Drop pool passages whose text also appears in ``heldout``; returns the pool and the count."""
    seen = set(heldout)
    keep = [i for i, t in enumerate(pool.texts) if t not in seen]
    return pool.subset(keep), len(pool) - len(keep)
