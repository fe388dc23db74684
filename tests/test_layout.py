"""The package's shape: no import circles, recipes on top of components, every module on the map,
no module reading another object's private fields.

Imports are read from the source (``ast``), every ``import`` / ``from ... import`` anywhere in a
module: at the top, inside functions (lazy imports) and under ``if TYPE_CHECKING``. A lazy import
is still a dependency a reader has to follow, so a circle through one counts.

The map is docs/layout.md: every module under src/replaybank is named there (:func:`mapped`).
"""

from __future__ import annotations

import ast
import functools
import re
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "replaybank"
LAYOUT = Path(__file__).resolve().parents[1] / "docs" / "layout.md"
#: the standard library's underscore names that its own documentation tells callers to use
ALLOWED_PRIVATE = {"os._exit"}
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


_FILE = re.compile(r"(?<![\w./-])((?:\w+/)*\w+\.py)\b")
_FOLDER = re.compile(r"(?<![\w./-])((?:\w+/)*\w+)/(?![\w.])")
_DOTTED = re.compile(r"\breplaybank((?:\.\w+)+)")


def mapped(text: str) -> tuple[set[str], set[str]]:
    """The modules a layout text names, as paths relative to src/replaybank (``llm/train/loop.py``,
    a package as its ``__init__.py``), and those of them named inside a map.

    A map is a fenced block whose first line is a folder of the package (``src/replaybank/`` or
    ``src/replaybank/llm/``). In a map, an entry line (the least indented) that starts with one
    folder (``train/``) opens that folder, any other entry line goes back to the map's own folder,
    and the more indented lines go on with the entry above them; a file name (``checkpoint.py``) or
    folder (``samplers/``) on a line is read in the folder it is listed under, a path with a slash
    (``config/check.py``) also from the map's own folder. Anywhere in the text, a path relative to
    src/replaybank (``llm/train/checkpoint.py``) or a dotted name (``replaybank.llm.train.checkpoint``,
    the package itself for a package) counts.

    Example: ``llm/`` then ``train/  loop.py, checkpoint.py`` names ``llm/train/loop.py``.
    """
    named: set[str] = set()
    in_maps: set[str] = set()
    for part in _FILE.findall(text):
        named.add(part.removeprefix("src/replaybank/"))
    for part in _DOTTED.findall(text):
        dotted = part.lstrip(".").replace(".", "/")
        named.update({f"{dotted}.py", f"{dotted}/__init__.py"})
    for block in re.findall(r"^```[^\n]*\n(.*?)^```", text, flags=re.S | re.M):
        lines = block.splitlines()
        head = lines[0].strip() if lines else ""
        if not head.startswith("src/replaybank/"):
            continue
        root = head.removeprefix("src/replaybank/")
        found = {root + "__init__.py"}
        entries = [ln for ln in lines[1:] if ln.strip()]
        indent = min((len(ln) - len(ln.lstrip()) for ln in entries), default=0)
        folder = root
        for line in entries:
            if len(line) - len(line.lstrip()) == indent:
                first = line.split()[0]
                folder = root + first if re.fullmatch(r"\w+/", first) else root
                if folder != root:  # the folder it opens is named in the map's own folder
                    found.add(folder + "__init__.py")
                    line = line.lstrip()[len(first):]
            for name in _FILE.findall(line):
                found.add(folder + name)
                if "/" in name:
                    found.add(root + name)
            for name in _FOLDER.findall(line):
                found.add(f"{folder}{name}/__init__.py")
        in_maps |= found
    return named | in_maps, in_maps


def missing_from_layout(text: str, modules: list[str]) -> list[str]:
    """The ``modules`` (paths relative to src/replaybank) that ``text`` does not name
    (:func:`mapped`), each with its dotted name."""
    named, _ = mapped(text)
    return [f"{m} (replaybank.{m.removesuffix('.py').removesuffix('/__init__').replace('/', '.')})"
            for m in modules if m not in named]


def gone_from_package(text: str, modules: list[str]) -> list[str]:
    """The modules a map in ``text`` names (:func:`mapped`) that are not among ``modules``."""
    return sorted(mapped(text)[1] - set(modules))


def package_files() -> list[str]:
    return sorted(p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*.py"))


def test_layout_reader_finds_a_missing_module_by_name() -> None:
    # the checker itself must be able to fail: a map that misses two modules, one more named in prose
    text = (
        "The loop's checks are in `llm/loop/state.py`.\n\n"
        "```\nsrc/replaybank/llm/\n  train/             loop.py (the LoRA loop), checkpoint.py\n"
        "                     (resumable), kl.py\n  model.py           the base model\n"
        "  loop/              config.py\n```\n"
    )
    modules = ["llm/__init__.py", "llm/train/__init__.py", "llm/train/loop.py", "llm/train/checkpoint.py",
               "llm/train/kl.py", "llm/model.py", "llm/loop/__init__.py", "llm/loop/state.py", "llm/loop/config.py",
               "llm/loop/act.py", "llm/results.py"]
    assert missing_from_layout(text, modules) == [
        "llm/loop/act.py (replaybank.llm.loop.act)", "llm/results.py (replaybank.llm.results)",
    ]
    assert missing_from_layout(text + "`replaybank.llm.results`, `llm/loop/act.py`", modules) == []
    named, in_maps = mapped(text)
    assert "llm/kl.py" not in named  # a file is read in the folder it is listed under, not the map's
    assert "llm/loop/state.py" in named and "llm/loop/state.py" not in in_maps  # named in prose, not in the map
    assert gone_from_package(text, modules) == []
    stale = text.replace("kl.py\n", "kl.py, checkpoint_check.py\n")
    assert gone_from_package(stale, modules) == ["llm/train/checkpoint_check.py"]


def test_every_module_is_on_the_layout_map() -> None:
    missing = missing_from_layout(LAYOUT.read_text(encoding="utf-8"), package_files())
    assert missing == [], (
        "docs/layout.md does not name these modules; add each to the map under its folder, with what it holds: "
        + "; ".join(missing)
    )


def test_the_layout_map_names_only_modules_that_exist() -> None:
    gone = gone_from_package(LAYOUT.read_text(encoding="utf-8"), package_files())
    assert gone == [], "docs/layout.md's map names modules that do not exist (moved, merged or removed): " + "; ".join(gone)


@functools.cache
def _code_map():  # type: ignore[no-untyped-def]
    """``benchmarks/code_map.py``, whose ``private_reads`` is the one finder of underscore reads."""
    import importlib.util

    if "code_map" in sys.modules:
        return sys.modules["code_map"]
    spec = importlib.util.spec_from_file_location("code_map", Path(__file__).resolve().parents[1] / "benchmarks" / "code_map.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["code_map"] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


def foreign_private_reads(source: str) -> list[str]:
    """``line: expr`` for each ``x._name`` (single underscore, not a dunder) where ``x`` is neither
    ``self``, ``cls``, ``super()`` nor a name the module binds itself, nor in ``ALLOWED_PRIVATE``
    (reads on objects and on modules alike: ``benchmarks/code_map.py``'s ``private_reads``)."""
    on_objects, on_modules = _code_map().private_reads(source)
    hits = [h for h in on_objects + on_modules if h.split(": ", 1)[1] not in ALLOWED_PRIVATE]
    return sorted(hits, key=lambda h: (int(h.split(":", 1)[0]), h))


def test_private_read_finder_sees_a_foreign_read() -> None:
    # the checker itself must be able to fail: a read of another object's field, and of a module's
    snippet = (
        "import os\n"
        "class Own:\n    _x = 1\n"
        "def f(buf, self, cls):\n"
        "    return buf._lock, os._environ, self._a, cls._b, super()._c, Own._x, buf.__len__\n"
    )
    assert foreign_private_reads(snippet) == ["5: buf._lock", "5: os._environ"]


def test_no_module_reads_another_objects_private_fields() -> None:
    bad = [
        f"{name}:{hit}"
        for name, path in modules().items()
        for hit in foreign_private_reads(path.read_text(encoding="utf-8"))
    ]
    assert bad == [], "give what is needed a public name or a method: " + "; ".join(bad)


def test_old_flat_llm_paths_do_not_import() -> None:
    """The flat modules of ``llm/`` live in its component packages (docs/layout.md); the old paths
    are not aliased."""
    import importlib

    for old, new in (("rows", "data.rows"), ("evaluate", "eval.losses"), ("seed", "recipes.rehearsal"), ("loop.run", "recipes.loop")):
        assert f"replaybank.llm.{old}" not in modules()
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module(f"replaybank.llm.{old}")
        assert importlib.import_module(f"replaybank.llm.{new}")
