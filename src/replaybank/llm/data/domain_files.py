"""Domain records from files: JSONL, text, Parquet, a ``save_to_disk`` folder or a cached HF dataset.

Every source gives the same records: ``{"prompt", "response"}`` (a ``completion`` column or field
is read as the response), ``{"messages": [...]}`` or ``{"text"}``, each with a ``where`` naming
the file and line (JSONL, 1-based) or row (Parquet and datasets, 0-based). Every row goes through
:func:`domain_record`, so a Parquet row and the JSONL line with the same fields give the same
record and fail the same checks.

A columnar source (Parquet, a dataset) has one schema, so its format is chosen once from its
columns, in :func:`domain_record`'s order: ``messages``, else ``prompt`` + ``response`` (or
``completion``), else ``text``; only those columns are read. A null in one of them stops the run
naming the file and row. In ``messages``, struct fields that are null in a message (Arrow fills a
field that only some messages have, e.g. ``name``) are left out, as they would be absent from the
JSONL line.

Example:
    >>> import pyarrow as pa, pyarrow.parquet as pq, tempfile, pathlib
    >>> f = pathlib.Path(tempfile.mkdtemp()) / "d.parquet"
    >>> pq.write_table(pa.table({"prompt": ["p"], "completion": ["r"], "id": [7]}), f)
    >>> [{k: v for k, v in r.items() if k != "where"} for r in read_domain_source(f, "train")[0]]
    [{'prompt': 'p', 'response': 'r'}]
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from replaybank.files import check_regular
from replaybank.llm.data.corpus import (
    JSONL_SUFFIXES,
    PARQUET_SUFFIXES,
    TEXT_SUFFIXES,
    CorpusError,
    iter_jsonl,
    list_data_files,
    load_corpus,
)
from replaybank.llm.data.saved import is_saved_dataset, open_hf_dataset, open_saved_dataset

DomainRecord = dict[str, Any]  # {"prompt", "response"} | {"messages"} | {"text"}, plus "where"

FORMATS = (("messages",), ("prompt", "response"), ("prompt", "completion"), ("text",))
"""The column sets a columnar domain source may have, in the order they are looked for."""

_BLOCK = 10_000  # rows of a dataset materialised at once


def domain_record(obj: dict[str, Any], where: str) -> DomainRecord:
    """One domain record from a JSONL line or a row of a columnar source.

    Raises:
        CorpusError: naming ``where`` and the fields found, for a row with none of the formats or
            with values of the wrong type.
    """
    if "messages" in obj:
        if not isinstance(obj["messages"], list):
            raise CorpusError(f"{where}: 'messages' must be a list of {{role, content}} objects")
        return {"messages": obj["messages"], "where": where}
    answer_key = "response" if "response" in obj else "completion" if "completion" in obj else None
    if "prompt" in obj and answer_key:
        if not isinstance(obj["prompt"], str) or not isinstance(obj[answer_key], str):
            raise CorpusError(f"{where}: 'prompt' and {answer_key!r} must be strings")
        return {"prompt": obj["prompt"], "response": obj[answer_key], "where": where}
    if "text" in obj and isinstance(obj["text"], str):
        return {"text": obj["text"], "where": where}
    raise CorpusError(
        f"{where}: a domain line needs prompt+response, prompt+completion, messages or text "
        f"(fields: {', '.join(sorted(obj)) or 'none'})"
    )


def read_domain_source(path: Path, split: str, source: str | None = None) -> tuple[list[DomainRecord], dict[str, Any]]:
    """The records and manifest entry of a domain file, folder, ``save_to_disk`` folder or, when
    ``path`` does not exist and ``source`` looks like one (``owner/name``), a cached HF dataset.

    ``split`` picks the split of a saved DatasetDict or an HF dataset (``[data] domain_split``).
    The manifest's ``sha256`` covers every file read (the Arrow files of a dataset).

    Raises:
        CorpusError: a missing source, a file of another type, a folder with no domain file that is
            not a ``save_to_disk`` folder (what it holds listed), a columnar source without the
            accepted columns (its columns listed), a null value (file and row), a bad line, or no
            records at all.
    """
    source = str(path) if source is None else source
    if is_saved_dataset(path):
        ds = open_saved_dataset(path, split, None, CorpusError, split_key="domain_split")
        return _dataset(ds, f"save_to_disk:{path}[{split}]", str(path))
    if not path.exists():
        if path.suffix or "/" not in source or source.startswith((".", "/", "~")):
            raise CorpusError(f"{path}: domain data not found")
        ds = open_hf_dataset(source, split, None, CorpusError, key="domain_train / domain_eval")
        return _dataset(ds, f"hf:{source}[{split}]", source)
    files = list_data_files(path) if path.is_dir() else [check_regular(path, error=CorpusError)]  # no FIFO
    records: list[DomainRecord] = []
    digest = hashlib.sha256()
    for file in files:
        suffix = file.suffix.lower()
        if suffix in JSONL_SUFFIXES:
            records += [domain_record(obj, f"{file}:{number}") for number, obj in iter_jsonl(file)]
        elif suffix in TEXT_SUFFIXES:
            records += [{"text": t} for t in load_corpus(file).texts]
        elif suffix in PARQUET_SUFFIXES:
            records += _parquet(file)
        else:
            raise CorpusError(f"{file}: unsupported file type {suffix!r}; domain data must be .jsonl, .parquet or .txt/.md")
        _hash_file(digest, file)
    if not records:
        raise CorpusError(f"{path}: no domain records")
    return records, {"source": str(path), "files": [str(f) for f in files], "rows": len(records), "sha256": digest.hexdigest()}


def pick_columns(names: list[str], where: str) -> tuple[str, ...]:
    """The first of :data:`FORMATS` whose columns are all in ``names``.

    >>> pick_columns(["id", "completion", "prompt"], "f.parquet")
    ('prompt', 'completion')

    Raises:
        CorpusError: none is, naming ``where`` and listing ``names``.
    """
    for columns in FORMATS:
        if all(c in names for c in columns):
            return columns
    raise CorpusError(
        f"{where}: domain data needs columns prompt+response, prompt+completion, messages or text "
        f"(columns: {', '.join(names) or 'none'})"
    )


def _parquet(file: Path) -> list[DomainRecord]:
    try:
        import pyarrow.parquet as pq  # type: ignore[import-not-found]
    except ImportError:
        raise CorpusError(f"{file}: reading Parquet needs pyarrow (pip install pyarrow), or convert it to JSONL") from None
    try:
        names = pq.read_schema(file).names  # the footer only: missing columns fail before any row is read
        columns = pick_columns(names, str(file))
        table = pq.read_table(file, columns=list(columns))
    except CorpusError:
        raise
    except Exception as exc:  # pyarrow raises several unrelated types for bad files
        raise CorpusError(f"{file}: not a readable Parquet file ({exc})") from None
    return list(_rows({c: table.column(c).to_pylist() for c in columns}, str(file), 0))


def _dataset(ds: Any, name: str, where: str) -> tuple[list[DomainRecord], dict[str, Any]]:
    columns = pick_columns(list(ds.column_names), name)
    ds = ds.select_columns(list(columns))
    records: list[DomainRecord] = []
    for start in range(0, len(ds), _BLOCK):  # in blocks: the Arrow file stays memory-mapped
        records += _rows(ds[start : start + _BLOCK], where, start)
    if not records:
        raise CorpusError(f"{name}: no domain records")
    digest = hashlib.sha256()
    files = [Path(f["filename"]) for f in ds.cache_files]
    for file in files:
        _hash_file(digest, file)
    return records, {"source": name, "files": [str(f) for f in files], "rows": len(records), "sha256": digest.hexdigest()}


def _rows(block: dict[str, list[Any]], where: str, start: int) -> Iterator[DomainRecord]:
    columns = list(block)
    for i, values in enumerate(zip(*block.values(), strict=True)):
        row = f"{where}: row {start + i}"
        nulls = [c for c, v in zip(columns, values, strict=True) if v is None]
        if nulls:
            raise CorpusError(f"{row}: null {', '.join(repr(c) for c in nulls)}")
        obj = dict(zip(columns, values, strict=True))
        if isinstance(obj.get("messages"), list):
            obj["messages"] = [_drop_nulls(m) for m in obj["messages"]]
        yield domain_record(obj, row)


def _drop_nulls(message: Any) -> Any:
    return {k: v for k, v in message.items() if v is not None} if isinstance(message, dict) else message


def _hash_file(digest: Any, file: Path) -> None:
    with file.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
