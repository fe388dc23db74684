"""Row sources for the mixed datasets: a HF ``datasets.Dataset`` or a sequence of row dicts.

A source is read by index, a batch at a time (one Arrow ``take`` for a HF dataset). The checks
here run before any iteration: a source with no rows, a row that is not a mapping, a column the
rehearsal source lacks, a column whose type differs between the sources, or a source column name
that is already taken, each raise :class:`~replaybank.hf.plan.MixError` naming the column.

Streaming ``datasets.IterableDataset`` sources are refused (see :func:`as_source`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from replaybank.hf.plan import MixError


def _is_hf_dataset(obj: Any) -> bool:
    mod = type(obj).__module__
    return mod.startswith("datasets") and hasattr(obj, "column_names") and hasattr(obj, "features")


def _kind_of_feature(feature: Any) -> str:
    dtype = getattr(feature, "dtype", None)
    inner = getattr(feature, "feature", None)
    if inner is not None and type(feature).__name__ in ("List", "Sequence", "LargeList"):
        return f"list[{_kind_of_feature(inner)}]"
    if isinstance(feature, list) and feature:
        return f"list[{_kind_of_feature(feature[0])}]"
    if type(feature).__name__ == "Value" and isinstance(dtype, str):
        if "string" in dtype:
            return "string"
        if dtype.startswith(("int", "uint")):
            return "int"
        if dtype.startswith("float"):
            return "float"
        if dtype == "bool":
            return "bool"
    return "?"


def _kind_of_value(value: Any) -> str:
    if isinstance(value, str):
        return "string"
    if isinstance(value, (bool, np.bool_)):
        return "bool"
    if isinstance(value, (int, np.integer)):
        return "int"
    if isinstance(value, (float, np.floating)):
        return "float"
    if isinstance(value, np.ndarray):
        kind = {"i": "int", "u": "int", "f": "float", "b": "bool", "U": "string"}.get(
            value.dtype.kind, "?"
        )
        return kind if value.ndim == 0 else f"list[{kind}]" if value.ndim == 1 else "?"
    if isinstance(value, (list, tuple)):
        return f"list[{_kind_of_value(value[0])}]" if value else "list[?]"
    return "?"


def _compatible(a: str, b: str) -> bool:
    if "?" not in a and "?" not in b:
        return a == b
    # Unknown parts (an empty list, an exotic feature) match anything at that position.
    return a.split("[")[0] == b.split("[")[0] or a == "?" or b == "?"


class Source:
    """Random access to the rows of one source, by index batches.

    Args:
        data: a ``datasets.Dataset`` or a sequence (list, tuple) of row mappings.
        name: ``"domain"`` or ``"rehearsal"``, used in error messages.

    Raises:
        MixError: on a streaming dataset, an unsupported type or rows that are not mappings.
    """

    def __init__(self, data: Any, name: str) -> None:
        self.name = name
        if type(data).__name__ == "IterableDataset" and type(data).__module__.startswith(
            "datasets"
        ):
            raise MixError(
                f"the {name} source is a streaming datasets.IterableDataset; exact per-epoch "
                "permutations and seeded rehearsal slices need random access and a known size. "
                "Materialise it first, e.g. datasets.Dataset.from_generator(lambda: (yield from "
                f"{name}_stream.take(n)))"
            )
        self.is_hf = _is_hf_dataset(data)
        if self.is_hf:
            self.data = data.with_format(None)
            self.columns: list[str] = list(data.column_names)
            self.kinds = {c: _kind_of_feature(data.features[c]) for c in self.columns}
        elif isinstance(data, Sequence) and not isinstance(data, (str, bytes)):
            self.data = data
            first = data[0] if len(data) else {}
            if not isinstance(first, Mapping):
                raise MixError(
                    f"the {name} source's rows must be mappings of column -> value, row 0 is "
                    f"{type(first).__name__} ({first!r:.60}); wrap them, e.g. "
                    '[{"text": t} for t in texts]'
                )
            self.columns = list(first)
            self.kinds = {c: _kind_of_value(first[c]) for c in self.columns}
        else:
            raise MixError(
                f"the {name} source must be a datasets.Dataset or a sequence of row dicts, got "
                f"{type(data).__name__}"
            )

    def __len__(self) -> int:
        return len(self.data)

    def take(self, index: np.ndarray, columns: Sequence[str]) -> dict[str, list[Any]]:
        """The rows at ``index`` (in that order) as ``{column: values}``."""
        if index.size == 0:
            return {c: [] for c in columns}
        if self.is_hf:
            batch = self.data[index.tolist()]
            return {c: batch[c] for c in columns}
        rows = [self.data[int(i)] for i in index]
        out: dict[str, list[Any]] = {}
        for c in columns:
            try:
                out[c] = [row[c] for row in rows]
            except (KeyError, TypeError) as exc:
                bad = next(int(i) for i, row in zip(index, rows, strict=True) if c not in row)
                raise MixError(f"{self.name} row {bad} has no column {c!r}") from exc
        return out


def mean_label_tokens(source: Source) -> float:
    """Mean labelled tokens per row of ``source``, for ``mix_by="tokens"``.

    A row's labelled tokens are its ``labels`` entries other than -100 (the tokens of the loss,
    as the main job counts them) when the source has a ``labels`` column, else the length of its
    ``input_ids``.

    Raises:
        MixError: when the source has neither column, or a row's value is not a list.
    """
    column = "labels" if "labels" in source.columns else "input_ids"
    if column not in source.columns:
        raise MixError(
            f'mix_by="tokens" counts each row\'s tokens from its "labels" (entries != -100) or '
            f'"input_ids" column; the {source.name} source has neither (it has '
            f'{sorted(source.columns)}): tokenize the rows first, or use mix_by="rows"'
        )
    values = source.data[column] if source.is_hf else [row.get(column) for row in source.data]
    total = 0
    for i, v in enumerate(values):
        if not isinstance(v, (list, tuple, np.ndarray)):
            raise MixError(
                f"{source.name} row {i}: column {column!r} is {type(v).__name__}, expected a list "
                'of token ids (mix_by="tokens" counts them)'
            )
        total += len(v) if column == "input_ids" else int(np.count_nonzero(np.asarray(v) != -100))
    return total / max(len(values), 1)


def tokens_per_row(domain: Source, rehearsal: Source | None, mix_by: str, ratio: float) -> tuple[float, float] | None:
    """``(mean labelled tokens per domain row, per rehearsal row)`` when a ``mix_by="tokens"`` share
    draws rehearsal rows, else ``None`` (nothing to convert, so the rows are not read for it)."""
    if mix_by != "tokens" or ratio == 0 or rehearsal is None or len(rehearsal) == 0:
        return None
    return mean_label_tokens(domain), mean_label_tokens(rehearsal)


def rehearsal_source(data: Any) -> Source | None:
    """The rehearsal :class:`Source`, or ``None`` when there is none (``None``, an empty list).

    An empty HF dataset gives a source of 0 rows (its columns are still known).
    """
    if data is None:
        return None
    if isinstance(data, Sequence) and not isinstance(data, (str, bytes)) and len(data) == 0:
        return None
    return Source(data, "rehearsal")


def check_columns(
    domain: Source,
    rehearsal: Source | None,
    columns: Sequence[str] | None,
    source_column: str,
) -> list[str]:
    """The columns every mixed row will carry (besides ``source_column``), checked.

    Raises:
        MixError: when a column is missing from a source, differs in type between the sources,
            or ``source_column`` is already one of the data columns.
    """
    cols = list(domain.columns if columns is None else columns)
    if not cols:
        raise MixError("no columns to mix: the domain rows have no columns")
    for src in (domain, rehearsal):
        if src is None:
            continue
        missing = [c for c in cols if c not in src.columns]
        if missing:
            raise MixError(
                f"the {src.name} source has no column {missing[0]!r} (it has "
                f"{sorted(src.columns)}); give both sources the same columns, or pick the "
                "shared ones with columns=[...]"
            )
    if source_column in cols:
        raise MixError(
            f"source_column={source_column!r} is already a data column; pick another name "
            "with source_column=..."
        )
    if rehearsal is not None:
        for c in cols:
            a, b = domain.kinds[c], rehearsal.kinds[c]
            if not _compatible(a, b):
                raise MixError(
                    f"column {c!r} is {a} in the domain source but {b} in the rehearsal source; "
                    "tokenize/format both the same way"
                )
    return cols
