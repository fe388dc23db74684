"""Local Hugging Face datasets: a folder written by ``Dataset.save_to_disk`` / ``DatasetDict.save_to_disk``,
or a dataset name already in the local cache (:func:`open_hf_dataset`).

Such a folder holds Arrow shards and JSON metadata (``state.json`` and ``dataset_info.json`` for a
``Dataset``, ``dataset_dict.json`` and one subfolder per split for a ``DatasetDict``), none of
which is a JSONL or Parquet file, so it is recognised by its metadata and read with
``datasets.load_from_disk`` (memory-mapped, nothing downloaded).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any


def is_saved_dataset(path: Path) -> bool:
    """Whether ``path`` is a folder written by ``save_to_disk`` (a Dataset or a DatasetDict)."""
    return path.is_dir() and (
        (path / "dataset_dict.json").is_file() or ((path / "state.json").is_file() and (path / "dataset_info.json").is_file())
    )


def iter_saved_dataset(path: Path, split: str, text_field: str, error: type[Exception]) -> Iterator[Any]:
    """The values of column ``text_field`` of a ``save_to_disk`` folder (split ``split`` of a DatasetDict).

    Raises:
        error: ``datasets`` missing, an unreadable folder, a split or column that is not there
            (the message names the folder and lists what is).
    """
    column = open_saved_dataset(path, split, text_field, error).select_columns([text_field])
    for start in range(0, len(column), 10_000):  # in blocks: the Arrow file stays memory-mapped
        yield from column[start : start + 10_000][text_field]


def open_saved_dataset(
    path: Path, split: str, text_field: str | None, error: type[Exception], *, split_key: str = "rehearsal_split"
) -> Any:
    """The ``datasets.Dataset`` of a ``save_to_disk`` folder (split ``split`` of a DatasetDict),
    memory-mapped, checked to hold column ``text_field`` (unless None: the caller picks columns).
    ``split_key`` is the config key a missing split's message points at.

    Raises:
        error: as :func:`iter_saved_dataset`.
    """
    try:
        import datasets  # type: ignore[import-not-found]
    except ImportError:
        raise error(f"{path}: a save_to_disk dataset folder; reading it needs the 'datasets' package") from None
    try:
        ds = datasets.load_from_disk(str(path))
    except Exception as exc:  # datasets raises several unrelated types for damaged folders
        raise error(f"{path}: a save_to_disk dataset folder that could not be read ({type(exc).__name__}: {exc})") from None
    if isinstance(ds, datasets.DatasetDict):
        if split not in ds:
            raise error(f"{path}: no split {split!r} in this saved DatasetDict (splits: {', '.join(ds)}); set {split_key}")
        ds = ds[split]
    if text_field is not None and text_field not in ds.column_names:
        raise error(f"{path}: no column {text_field!r} (columns: {', '.join(ds.column_names)}); set rehearsal_text_field")
    return ds


def open_hf_dataset(
    name: str, split: str, text_field: str | None, error: type[Exception], *, key: str = "rehearsal_dataset"
) -> Any:
    """Split ``split`` of the Hugging Face dataset ``name``, only if it is in the local cache
    (memory-mapped; nothing is downloaded), checked to hold column ``text_field`` (unless None).
    ``key`` is the config key the not-found message points at.

    Raises:
        error: ``datasets`` missing, a dataset that would need a download, a missing column.
    """
    hint = (
        f"{name!r} is neither a local path nor a locally available dataset; download it elsewhere "
        f"and point {key} at a local .jsonl/.parquet file or folder"
    )
    try:
        import datasets  # type: ignore[import-not-found]
    except ImportError:
        raise error(f"{hint} (the 'datasets' package is not installed)") from None
    try:
        ds = datasets.load_dataset(name, split=split, download_mode="reuse_cache_if_exists")
    except Exception as exc:  # offline mode raises ConnectionError, FileNotFoundError, ...
        raise error(f"{hint} ({type(exc).__name__}: {exc})") from None
    if text_field is not None and text_field not in ds.column_names:
        raise error(f"{name}[{split}]: no column {text_field!r} (columns: {', '.join(ds.column_names)})")
    return ds
