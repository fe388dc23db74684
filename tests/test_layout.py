"""The package's shape: no import circles, recipes on top of components, modules a reader can hold.

Imports are read from the source (``ast``), every ``import`` / ``from ... import`` anywhere in a
module: at the top, inside functions (lazy imports) and under ``if TYPE_CHECKING``. A lazy import
is still a dependency a reader has to follow, so a circle through one counts.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "replaybank"
MAX_LINES = 400
#: modules allowed to import a recipe: the command-line entry points, and the recipes package
ENTRY_POINTS = {"replaybank.cli", "replaybank.llm.cli"}


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The replaybank modules that ``name`` imports (a package import counts as its ``__init__``)."""
    is_package = path.name == "__init__.py"
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            # ``from pkg import mod`` imports the submodule; ``from mod import name`` the module
            targets = [f"{source}.{a.name}" if f"{source}.{a.name}" in known else source for a in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:  # ``import a.b.c`` of a name inside a module
                target = target.rpartition(".")[0]
            if target and target != name:
                out.add(target)
    return out


def graph() -> dict[str, set[str]]:
    mods = modules()
    known = set(mods)
    return {name: imports_of(name, path, known) for name, path in mods.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_cycle_finder_sees_a_circle_through_a_lazy_import(tmp_path: Path) -> None:
    # the checker itself must be able to fail: a two-module circle, one side imported lazily
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(edges) == [["a", "b", "c"]]
    (tmp_path / "m.py").write_text("def f():\n    from replaybank import buffer\n")
    known = {"replaybank", "replaybank.buffer", "m"}
    assert imports_of("m", tmp_path / "m.py", known) == {"replaybank.buffer"}


def test_no_import_circles() -> None:
    found = cycles(graph())
    assert found == [], "import circles (break each by moving the shared part into its own module): " + "; ".join(
        " <-> ".join(c) for c in found
    )


def test_components_never_import_a_recipe() -> None:
    bad = [
        f"{name} imports {target}"
        for name, targets in graph().items()
        if not name.startswith("replaybank.llm.recipes") and name not in ENTRY_POINTS
        for target in targets
        if target.startswith("replaybank.llm.recipes.")
    ]
    assert bad == []


def test_recipes_never_import_each_other() -> None:
    bad = [
        f"{name} imports {target}"
        for name, targets in graph().items()
        if name.startswith("replaybank.llm.recipes.")
        for target in targets
        if target.startswith("replaybank.llm.recipes.")
    ]
    assert bad == []


@pytest.mark.parametrize("name", sorted(modules()))
def test_module_stays_readable(name: str) -> None:
    lines = len(modules()[name].read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_LINES, f"{name}: {lines} lines; split it by concern (at most {MAX_LINES})"


def test_old_flat_llm_paths_do_not_import() -> None:
    """The flat modules of ``llm/`` live in its component packages (docs/layout.md); the old paths
    are not aliased."""
    import importlib

    for old, new in (("rows", "data.rows"), ("evaluate", "eval.losses"), ("seed", "recipes.rehearsal"), ("loop.run", "recipes.loop")):
        assert f"replaybank.llm.{old}" not in modules()
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module(f"replaybank.llm.{old}")
        assert importlib.import_module(f"replaybank.llm.{new}")
