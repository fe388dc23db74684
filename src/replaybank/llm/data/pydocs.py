"""The text of the embedded Python documentation corpus, read with the standard library alone.

Run as a script in a fresh interpreter (``python -I -S pydocs.py TARGET_CHARS``) it prints
``[[doc_id, chunk], ...]`` as JSON: ``pydoc_data.topics`` cut into chunks, then the docstrings of
:data:`DOC_MODULES`. :func:`replaybank.llm.data.corpus.python_docs_corpus` reads it that way, so
the corpus does not depend on what the calling process imported or patched before. Imports nothing
outside the standard library.
"""

from __future__ import annotations

import importlib
import inspect
import json
import re
import sys
import warnings
from typing import Any

# Stdlib modules whose docstrings join the embedded corpus. A fixed list keeps the corpus the same
# from run to run on one Python version (the manifest records a digest of it).
DOC_MODULES = (
    "json", "os", "pathlib", "re", "collections", "itertools", "functools", "textwrap", "string",
    "datetime", "random", "statistics", "math", "csv", "argparse", "logging", "shutil",
    "subprocess", "typing", "dataclasses", "heapq", "bisect", "enum", "contextlib", "io",
    "tempfile", "glob", "fnmatch", "hashlib", "base64", "urllib.parse", "html", "uuid", "copy",
    "pprint", "operator", "decimal", "fractions", "zipfile", "tarfile", "gzip", "sqlite3",
    "threading", "queue", "calendar", "abc", "configparser", "difflib", "pickle", "struct",
    "weakref", "inspect", "ast", "tokenize", "traceback", "warnings", "codecs", "ipaddress",
    "graphlib", "numbers", "zoneinfo", "sched", "shlex", "secrets",
)


def normalise(text: str) -> str:
    """Collapse every run of whitespace to one space and strip the ends.

    Example:
        >>> normalise("  a\\n\\n b\\tc ")
        'a b c'
    """
    return " ".join(text.split())


def chunks(text: str, target_chars: int) -> list[str]:
    # Join paragraphs until a chunk is about target_chars long; short lines (headings) ride along.
    out, buf = [], ""
    for para in re.split(r"\n\s*\n", text):
        para = normalise(para)
        if not para:
            continue
        buf = f"{buf} {para}".strip()
        if len(buf) >= target_chars:
            out.append(buf)
            buf = ""
    if len(buf) >= target_chars // 4:
        out.append(buf)
    return out


def _module_docs(module: Any, target_chars: int) -> list[str]:
    out: list[str] = []
    members: list[tuple[str, Any]] = [(module.__name__, module)]
    members += [
        (f"{module.__name__}.{k}", v)
        for k, v in sorted(vars(module).items())
        if not k.startswith("_") and getattr(v, "__module__", None) == module.__name__
        and (inspect.isclass(v) or inspect.isfunction(v))
    ]
    for qualname, obj in members:
        doc = inspect.getdoc(obj)
        if doc and len(doc) >= 200:
            out.extend(chunks(f"{qualname}\n\n{doc}", target_chars))
    return out


def pieces(target_chars: int) -> list[tuple[str, str]]:
    """Every chunk of the corpus with its document id (``topic:<name>``, ``doc:<module>``), in order."""
    from pydoc_data.topics import topics

    out = [(f"topic:{name}", chunk) for name in sorted(topics) for chunk in chunks(topics[name], target_chars)]
    for mod_name in DOC_MODULES:
        try:
            module = importlib.import_module(mod_name)
        except ImportError:  # e.g. a Python built without sqlite3
            continue
        with warnings.catch_warnings():  # typing's deprecated aliases warn when touched
            warnings.simplefilter("ignore", DeprecationWarning)
            out += [(f"doc:{mod_name}", chunk) for chunk in _module_docs(module, target_chars)]
    return out


if __name__ == "__main__":
    json.dump(pieces(int(sys.argv[1])), sys.stdout)
