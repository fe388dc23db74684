"""Module paths that moved when llm/ became recipes over components, or whose module was merged
into the one holding its concern, kept working with a warning.

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

MOVED: dict[str, str | tuple[str, ...]] = {
    # old module: its new module, or the modules its names went to (looked up in this order)
    "agenda": "data.agenda",
    "arms": ("recipes.rehearsal", "train.sources", "eval.measure"),
    "corpus": "data.corpus",
    "config_schema": "config.schema",
    "data_prep": "data.prepare",
    "evaluate": ("eval.losses", "eval.probe"),
    "generations": "train.lineage",
    "measure": "eval.measure",
    "probe": "eval.interference",
    "report_write": ("report.markdown", "report.plots"),
    "rows": "data.rows",
    "run": ("recipes.rehearsal", "runtime", "report.folder"),
    "run_probe": ("recipes.probe", "eval.interference"),
    "seed": ("recipes.rehearsal", "eval.suite", "data.selfsynth", "data.prepare", "config.parse", "report.folder"),
    "seeds": "report.seeds",
    "sources": "config.check",
    "toolapi": "data.toolapi",
    "loop.cli": "cli",
    "loop.config": "config.loop",
    "loop.run": ("recipes.loop", "loop.tasks", "eval.measure"),
    "adapters.compare_report": "adapters.compare",
    "eval.answer_cache": "eval.suite",
    "loop.state_check": "loop.state",
    "train.checkpoint_check": "train.checkpoint",
}
_PREFIX = "replaybank.llm."


class _Alias(importlib.abc.Loader):
    def __init__(self, targets: tuple[str, ...]) -> None:
        self.targets = targets

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        where = " and ".join(self.targets)
        warnings.warn(
            f"{spec.name} moved to {where}; import from there (the old path will be removed)",
            DeprecationWarning,
            stacklevel=2,
        )
        if len(self.targets) == 1:
            return importlib.import_module(self.targets[0])
        module = ModuleType(spec.name, f"Moved to {where}.")
        targets = self.targets

        def __getattr__(name: str) -> Any:
            for target in targets:
                found = importlib.import_module(target)
                if hasattr(found, name):
                    return getattr(found, name)
            raise AttributeError(f"{spec.name}.{name} is gone: it was moved or renamed (look in {where})")

        module.__getattr__ = __getattr__  # type: ignore[method-assign]
        return module

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run: the target modules are imported on use."""


class _MovedFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if not fullname.startswith(_PREFIX):
            return None
        new = MOVED.get(fullname[len(_PREFIX):])
        if new is None:
            return None
        targets = (new,) if isinstance(new, str) else new
        return importlib.machinery.ModuleSpec(fullname, _Alias(tuple(_PREFIX + t for t in targets)))


def install() -> None:
    """Put the finder on ``sys.meta_path`` once (idempotent)."""
    if not any(isinstance(f, _MovedFinder) for f in sys.meta_path):
        sys.meta_path.append(_MovedFinder())
