"""The suite's cache of the base model's answers: read back only when it is exactly what was asked for.

The file is JSON (never code); a file that does not match (another model, other items, a newer or
older schema, a value that is not text) is ignored and the answers are generated again.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from replaybank.files import read_regular


def read_answers(path: Path, fingerprint: str, digest: str, schema: int) -> dict[str, str] | None:
    """The answers cached in ``path`` when it holds answers of this model (``fingerprint``), these
    items (``digest``) and this cache ``schema``; None for anything else (missing, unreadable,
    another model, a tampered file): the caller then generates them again."""
    try:  # a FIFO or device in the cache is skipped (read_regular refuses it), never waited on
        obj = json.loads(read_regular(path).decode("utf-8"))
    except (ValueError, RecursionError):  # ReplayBankError included
        return None
    if not isinstance(obj, dict) or obj.get("schema") != schema or obj.get("model") != fingerprint \
            or obj.get("items_sha256") != digest or not isinstance(obj.get("answers"), dict):
        return None
    answers = obj["answers"]
    if not all(isinstance(v, str) for v in answers.values()):
        return None
    return {str(k): v for k, v in answers.items()}


def write_json_atomic(path: Path, obj: dict[str, Any]) -> None:
    """Write ``obj`` as JSON to ``path`` through a temporary file and a rename (never half-written)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(obj, indent=1, ensure_ascii=False), "utf-8")
    os.replace(tmp, path)
