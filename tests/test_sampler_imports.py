"""The samplers package has no import circle, counting imports made inside functions too, and
the prioritized samplers are public where users import them."""

from __future__ import annotations

import ast
from pathlib import Path

import replaybank.samplers as samplers_pkg

PKG = Path(samplers_pkg.__file__).parent


def _imports(path: Path) -> set[str]:
    """Sibling modules of ``replaybank.samplers`` that ``path`` imports, anywhere in the file."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level == 1 and node.module:  # from .x import y
                found.add(node.module.split(".")[0])
            elif node.level == 1:  # from . import x
                found.update(alias.name for alias in node.names)
            elif node.module and node.module.startswith("replaybank.samplers."):
                found.add(node.module.split(".")[2])
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("replaybank.samplers."):
                    found.add(alias.name.split(".")[2])
    return found


def test_no_import_circle_among_the_samplers() -> None:
    graph = {p.stem: _imports(p) for p in PKG.glob("*.py") if p.stem != "__init__"}
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for dep in sorted(graph.get(module, ())):
            if state.get(dep) == 1:
                raise AssertionError("import circle: " + " -> ".join([*path, module, dep]))
            if dep not in state:
                visit(dep, [*path, module])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [])
    assert "rrm" not in graph["per"]


def test_public_import_paths() -> None:
    import replaybank.samplers as samplers
    from replaybank import Prioritized, PrioritizedReshuffled
    from replaybank.samplers.per import Prioritized as defined
    from replaybank.samplers.priorities import check_priorities, leaf_limit
    from replaybank.samplers.rrm import PrioritizedReshuffled as defined_rr

    assert samplers.Prioritized is Prioritized is defined
    assert samplers.PrioritizedReshuffled is PrioritizedReshuffled is defined_rr
    assert callable(check_priorities) and callable(leaf_limit)
    assert not (PKG / "prioritized.py").exists()  # one import path per name
