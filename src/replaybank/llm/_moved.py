"""Module paths that moved when llm/ became recipes over components, kept working with a warning.

``import replaybank.llm.rows`` still gives the module that now lives at
``replaybank.llm.data.rows`` (the same module object, so its state is shared) and warns once with
the new path. The finder only answers for the old names below; everything else imports as usual.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from types import ModuleType
from typing import Any

MOVED: dict[str, str] = {
    "agenda": "data.agenda",
    "arms": "recipes.rehearsal",
    "corpus": "data.corpus",
    "config_schema": "config.schema",
    "data_prep": "data.prepare",
    "evaluate": "eval.losses",
    "generations": "train.lineage",
    "measure": "eval.measure",
    "probe": "eval.interference",
    "report": "report.metrics",
    "report_write": "report.markdown",
    "rows": "data.rows",
    "run": "recipes.rehearsal",
    "run_probe": "recipes.probe",
    "seed": "recipes.rehearsal",
    "seeds": "report.seeds",
    "sources": "config.check",
    "toolapi": "data.toolapi",
    "loop.run": "recipes.loop",
}
_PREFIX = "replaybank.llm."


class _Alias(importlib.abc.Loader):
    def __init__(self, target: str) -> None:
        self.target = target

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        warnings.warn(
            f"{spec.name} moved to {self.target}; import it from there (the old path will be removed)",
            DeprecationWarning,
            stacklevel=2,
        )
        return importlib.import_module(self.target)

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run: the target module is already imported."""


class _MovedFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if not fullname.startswith(_PREFIX):
            return None
        new = MOVED.get(fullname[len(_PREFIX):])
        if new is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, _Alias(_PREFIX + new))


def install() -> None:
    """Put the finder on ``sys.meta_path`` once (idempotent)."""
    if not any(isinstance(f, _MovedFinder) for f in sys.meta_path):
        sys.meta_path.append(_MovedFinder())
