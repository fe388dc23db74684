"""The two workloads a trained MoE model is traced on: prose and code, as byte-level token ids.

* ``prose``: the embedded Python documentation corpus (``pydoc_data.topics`` + stdlib docstrings,
  ``llm/data/corpus.py``), split by whole document into a training part and a held-out part; the
  model trains on the first, its routing is recorded on the second.
* ``code``: the source of a fixed list of stdlib modules (never trained on), cut into passages.

Tokens are UTF-8 bytes (ids 0..255), so nothing is downloaded and no tokenizer is needed.

>>> encode("ab\\u00e9")
[97, 98, 195, 169]
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from ..errors import ReplayBankError

if TYPE_CHECKING:
    from .trace import Trace

Workload = Literal["prose", "code"]
WORKLOADS: tuple[Workload, ...] = ("prose", "code")
VOCAB = 256
#: held-out prose passages (whole documents; llm/data/corpus.py split_heldout)
HELDOUT_PASSAGES = 400
SPLIT_SEED = 0
# Stdlib modules whose source is the code workload (fixed, so the workload is the same each run
# on one Python version); none of it is in the training text (docstrings are, as prose).
_CODE_MODULES = (
    "argparse",
    "ast",
    "bisect",
    "calendar",
    "configparser",
    "csv",
    "dataclasses",
    "difflib",
    "fractions",
    "functools",
    "heapq",
    "inspect",
    "ipaddress",
    "json.decoder",
    "json.encoder",
    "shlex",
    "statistics",
    "string",
    "textwrap",
    "tokenize",
)


def encode(text: str) -> list[int]:
    """UTF-8 bytes as token ids."""
    return list(text.encode("utf-8"))


@dataclass(frozen=True)
class Texts:
    """Passages of one workload, with the id of the document each came from."""

    name: str
    texts: tuple[str, ...]
    doc_ids: tuple[str, ...]


def prose_split() -> tuple[Texts, Texts]:
    """``(train, heldout)`` of the documentation corpus, disjoint by document."""
    from ..llm.data.corpus import python_docs_corpus, split_heldout

    pool, held = split_heldout(python_docs_corpus(), HELDOUT_PASSAGES, SPLIT_SEED)
    return (
        Texts("prose-train", tuple(pool.texts), tuple(pool.doc_ids)),
        Texts("prose", tuple(held.texts), tuple(held.doc_ids)),
    )


def code_texts(target_chars: int = 480) -> Texts:
    """Passages of about ``target_chars`` characters of stdlib source (blank-line separated
    blocks joined; indentation kept)."""
    texts: list[str] = []
    docs: list[str] = []
    for name in _CODE_MODULES:
        module = importlib.import_module(name)
        source = Path(module.__file__ or "").read_text(encoding="utf-8")
        buf = ""
        for block in re.split(r"\n\s*\n", source):
            buf = f"{buf}\n\n{block}" if buf else block
            if len(buf) >= target_chars:
                texts.append(buf[: 2 * target_chars])
                docs.append(f"code:{name}")
                buf = ""
    return Texts("code", tuple(texts), tuple(docs))


def workload_texts(name: Workload) -> Texts:
    """The held-out passages of ``name`` (see the module doc).

    Raises:
        ReplayBankError: an unknown workload.
    """
    if name == "prose":
        return prose_split()[1]
    if name == "code":
        return code_texts()
    raise ReplayBankError(f"workload = {name!r}: expected one of {list(WORKLOADS)}")


def windows(texts: Texts, count: int, tokens: int, seed: int) -> tuple[list[list[int]], list[str]]:
    """``count`` windows of ``tokens`` bytes, each from a different passage drawn with ``seed``
    (at a random offset into it), and their document ids.

    Raises:
        ReplayBankError: fewer passages of at least ``tokens`` bytes than ``count``.
    """
    rng = np.random.default_rng(seed)
    encoded = [encode(t) for t in texts.texts]
    usable = [i for i, ids in enumerate(encoded) if len(ids) >= tokens]
    if len(usable) < count:
        raise ReplayBankError(
            f"{texts.name}: {len(usable)} passages of at least {tokens} bytes, {count} requested"
        )
    out, docs = [], []
    for i in rng.choice(usable, size=count, replace=False).tolist():
        first = int(rng.integers(0, len(encoded[i]) - tokens + 1))
        out.append(encoded[i][first : first + tokens])
        docs.append(texts.doc_ids[i])
    return out, docs


def record_workload(
    model: Any,
    name: Workload,
    *,
    requests: int,
    prompt_tokens: int,
    decode_tokens: int,
    prefill_chunk: int | None,
    seed: int = 0,
    meta: Mapping[str, str] | None = None,
) -> Trace:
    """The trace of ``model`` serving ``requests`` windows of workload ``name``: a prompt of
    ``prompt_tokens`` bytes (prefilled in chunks of ``prefill_chunk``), then ``decode_tokens``
    decode steps fed the window's next bytes (teacher forcing: the routing of the text itself)."""
    from .recorder import record

    texts = workload_texts(name)
    wins, docs = windows(texts, requests, prompt_tokens + decode_tokens, seed)
    return record(
        model,
        [w[:prompt_tokens] for w in wins],
        prefill_chunk=prefill_chunk,
        continuations=[w[prompt_tokens:] for w in wins],
        meta={
            "workload": name,
            "text": texts.name,
            "documents": ",".join(sorted(set(docs))),
            "prefill_chunk": str(prefill_chunk or prompt_tokens),
            **(meta or {}),
        },
    )
