"""How far a newcomer has to read, and what gets in the way, counted from the source.

A static measurement (``ast`` over the files; nothing under the tree is imported, so no torch)
of a source tree, by default ``src/replaybank``. Module names are the paths below the tree's
parent (``src/replaybank/llm/cli.py`` is ``replaybank.llm.cli``; a package is its
``__init__.py``). Each figure and its rule:

- **modules, lines**: ``.py`` files under the tree and their lines (newline-terminated or not).
- **dict[str, Any] annotations** (``llm/``, all): each ``dict[str, Any]`` (or ``Dict[str, Any]``,
  ``typing.Any``) written inside an annotation (a parameter, a return, an annotated assignment;
  quoted annotations parsed too; a nested one such as ``list[dict[str, Any]]`` counts once) or as
  the value of a plain assignment (a type alias such as ``ConfigDict = dict[str, Any]``, which
  would otherwise hide it).
- **dict[str, Any] in signatures** (``llm/recipes``, ``llm/report``): the same, in the parameters
  and returns of functions and methods only.
- **string-key reads** (``llm/report``, ``llm/recipes``, ``llm/eval/measure.py``): ``x["name"]``
  read (not assigned or deleted) and ``x.get("name", ...)``, where the key is a string constant;
  subscripts inside annotations and ``Literal[...]`` are not reads. Every such read counts, a dict
  the module built itself included; ``keys`` is the number of distinct names.
- **getattr / hasattr** in ``buffer*.py`` at the tree's top: every call of the built-ins.
- **foreign private reads** (the whole tree): ``x._name`` (one leading underscore, not a dunder)
  where ``x`` is not ``self``, ``cls``, ``super()`` or a name the module binds at its top level
  (its own classes, functions, constants). Reads on a module are counted apart
  (``private_reads_on_modules``): ``x`` is a name bound by ``import m`` / ``import m as x``, or by
  ``from pkg import x`` where ``pkg.x`` is a module of the tree. Everything else counts as
  another object's underscore attribute.
- **import closure** of ``replaybank.llm.recipes.rehearsal``: the tree's modules it reaches through
  ``import`` / ``from ... import`` statements, itself included (``from pkg import mod`` reaches
  the submodule; a name inside a module reaches that module). Importing ``a.b.c`` runs
  ``a/__init__.py`` and ``a/b/__init__.py``, so each reached module's parent packages are
  reached too, and their imports followed. Counted twice: following every import (inside
  functions too: a lazy import is still code a reader follows) and following only the imports
  outside function bodies (what ``import replaybank.llm.recipes.rehearsal`` runs, the imports
  under ``if TYPE_CHECKING`` included).
- **the recipe's imports**: the tree's modules the recipe imports itself and the names it takes
  from them (``from m import a, b`` is two names, ``import m`` one).
- **reader files of** ``replaybank run``: the files a reader opens to follow the command to
  ``report.md``, taken as: the ``replaybank`` command (``replaybank.cli``), the module holding the
  run command (``replaybank.llm.cli``) and every tree module it imports outside functions or
  inside its ``cmd_run``, the rehearsal recipe, and ``replaybank.llm.results`` (a package: every
  file of it). Components the recipe calls are not added: the recipe names each one with the
  step it does (its docstring), and that is where the reader looks one level down.
- **leftovers**: files named ``_moved.py``; the identifiers ``ArmSpec`` and ``MixNotBuiltError``
  (defined, imported or used: names, attributes, classes, functions, imported aliases); a class
  named ``Arm``; the text ``[arms.`` anywhere in the tree's ``.py`` files, with where it is (a
  refusal of such a table and its docstring mention the table; they do not read one).

Run ``python benchmarks/code_map.py`` (``--tree DIR`` for another tree, ``--ref COMMIT`` to
measure that commit's ``src/replaybank`` beside it, ``--out FILE``): prints a table and writes
``benchmarks/results/code_map.json`` with the commit measured. It reads only the files, in well
under a minute.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import functools
import io
import json
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
RECIPE = "replaybank.llm.recipes.rehearsal"
CLI = "replaybank.cli"
RUN_MODULE = "replaybank.llm.cli"
RUN_FUNCTION = "cmd_run"
RESULTS_MODULE = "replaybank.llm.results"
STRING_KEY_AREAS = ("llm/report", "llm/recipes", "llm/eval/measure.py")
SIGNATURE_AREAS = ("llm/recipes", "llm/report")
LEFTOVER_NAMES = ("ArmSpec", "MixNotBuiltError")
#: the goals these figures are read against
TARGETS = {
    "reader_files": "at most about 15",
    "dict_any_signatures": "0 in llm/recipes and llm/report",
    "string_key_reads_report": "at least 80% fewer than at the reference commit",
    "probe_calls_buffer": "0",
    "private_reads_on_objects": "0",
    "leftovers": "none",
}


# ---------------------------------------------------------------------------- files and modules


def module_files(tree: Path) -> dict[str, Path]:
    """Module name -> file for every ``.py`` file under ``tree`` (names relative to its parent)."""
    out: dict[str, Path] = {}
    for path in sorted(tree.rglob("*.py")):
        parts = path.relative_to(tree.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def count_lines(path: Path) -> int:
    """Lines of a file (a last line without a newline counts)."""
    text = path.read_text(encoding="utf-8")
    return text.count("\n") + (1 if text and not text.endswith("\n") else 0)


def files_under(tree: Path, area: str) -> list[Path]:
    """The ``.py`` files of ``area`` (a folder or a file, relative to ``tree``); none if it is missing."""
    path = tree / area
    if path.is_file():
        return [path]
    return sorted(path.rglob("*.py")) if path.is_dir() else []


@functools.cache
def _tree(source: str) -> ast.Module:
    """The parsed source, once per text (the trees are only read)."""
    return ast.parse(source)


def _parse(path: Path) -> ast.Module:
    return _tree(path.read_text(encoding="utf-8"))


# ---------------------------------------------------------------------------- dict[str, Any]


def _is_dict_any(node: ast.AST) -> bool:
    """``dict[str, Any]`` / ``Dict[str, Any]`` (``typing.`` prefixes allowed)."""
    if not isinstance(node, ast.Subscript):
        return False
    head = node.value
    name = head.id if isinstance(head, ast.Name) else head.attr if isinstance(head, ast.Attribute) else None
    if name not in ("dict", "Dict") or not isinstance(node.slice, ast.Tuple) or len(node.slice.elts) != 2:
        return False
    key, value = node.slice.elts
    value_name = value.id if isinstance(value, ast.Name) else value.attr if isinstance(value, ast.Attribute) else None
    return isinstance(key, ast.Name) and key.id == "str" and value_name == "Any"


def _annotation_nodes(annotation: ast.expr | None) -> Iterator[ast.AST]:
    """Every node of an annotation, a quoted one parsed."""
    if annotation is None:
        return
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        try:
            annotation = ast.parse(annotation.value, mode="eval").body
        except SyntaxError:
            return
    yield from ast.walk(annotation)


def _count_dict_any(annotation: ast.expr | None) -> int:
    return sum(_is_dict_any(n) for n in _annotation_nodes(annotation))


def _signature_annotations(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.expr | None]:
    a = fn.args
    params = [*a.posonlyargs, *a.args, *a.kwonlyargs, *([a.vararg] if a.vararg else []), *([a.kwarg] if a.kwarg else [])]
    return [p.annotation for p in params] + [fn.returns]


def dict_any_in_signatures(source: str) -> int:
    """``dict[str, Any]`` in the parameters and returns of every function and method of ``source``.

    Example:
        >>> dict_any_in_signatures("def f(a: dict[str, Any], b: int) -> list[dict[str, Any]]: ...")
        2
    """
    tree = _tree(source)
    return sum(_count_dict_any(ann) for fn in ast.walk(tree) if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
               for ann in _signature_annotations(fn))


def dict_any_annotations(source: str) -> int:
    """``dict[str, Any]`` in every annotation of ``source`` (signatures, annotated assignments) and
    as the value of plain assignments (type aliases).

    Example:
        >>> dict_any_annotations("X = dict[str, Any]\\ndef f(a: 'dict[str, Any]'):\\n    y: dict[str, Any] = {}\\n")
        3
    """
    tree = _tree(source)
    total = dict_any_in_signatures(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.AnnAssign):
            total += _count_dict_any(node.annotation)
        elif isinstance(node, ast.Assign):
            total += sum(_is_dict_any(n) for n in ast.walk(node.value))
    return total


# ---------------------------------------------------------------------------- string-key reads


def _annotation_ids(tree: ast.AST) -> set[int]:
    """ids of the nodes inside annotations (their subscripts are types, not reads)."""
    out: set[int] = set()
    for node in ast.walk(tree):
        anns: list[ast.expr | None] = []
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            anns = _signature_annotations(node)
        elif isinstance(node, ast.AnnAssign):
            anns = [node.annotation]
        for ann in anns:
            if ann is not None:
                out.update(id(n) for n in ast.walk(ann))
    return out


def string_key_reads(source: str) -> list[str]:
    """The key of each ``x["key"]`` read and each ``x.get("key", ...)`` in ``source``, in order.

    Example:
        >>> string_key_reads("a = d['x'] + d.get('y', 0)\\nd['z'] = 1\\nb: Literal['w'] = e['v']\\n")
        ['x', 'y', 'v']
    """
    tree = _tree(source)
    skip = _annotation_ids(tree)
    found: list[tuple[int, int, str]] = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if (isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load)
                and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str)):
            head = node.value
            if (isinstance(head, ast.Name) and head.id == "Literal") or (isinstance(head, ast.Attribute) and head.attr == "Literal"):
                continue
            found.append((node.lineno, node.col_offset, node.slice.value))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
              and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            found.append((node.lineno, node.col_offset, node.args[0].value))
    return [key for _, _, key in sorted(found)]


# ---------------------------------------------------------------------------- probes, private reads


def probe_calls(source: str) -> int:
    """Calls of the built-ins ``getattr`` and ``hasattr`` in ``source``.

    Example:
        >>> probe_calls("getattr(s, 'mark', None)\\nif hasattr(s, 'x'): pass\\ns.getattr(1)\\n")
        2
    """
    return sum(isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in ("getattr", "hasattr")
               for n in ast.walk(_tree(source)))


def _own_names(tree: ast.Module) -> set[str]:
    """Names a module binds at its top level (classes, functions, assignments), imports left out."""
    out: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            out.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            out.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
    return out


def _module_aliases(tree: ast.Module, name: str, is_package: bool, known: set[str]) -> set[str]:
    """Names bound to a module: by ``import m [as x]``, or ``from pkg import x`` of a module of the tree."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.asname or a.name.partition(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            source = _from_source(node, name, is_package)
            out.update(a.asname or a.name for a in node.names if f"{source}.{a.name}" in known)
    return out


def private_reads(source: str, name: str = "m", *, is_package: bool = False,
                  known: frozenset[str] | set[str] = frozenset()) -> tuple[list[str], list[str]]:
    """``(on objects, on modules)``: ``line: expr`` for each ``x._name`` read (see the module doc).

    Example:
        >>> src = "import os\\nclass C:\\n    _k = 1\\ndef f(buf, self):\\n    return buf._lock, os._exit, self._a, C._k, super()._b\\n"
        >>> private_reads(src)
        (['5: buf._lock'], ['5: os._exit'])
    """
    tree = _tree(source)
    own = _own_names(tree) | {"self", "cls"}
    modules = _module_aliases(tree, name, is_package, set(known))
    objects: list[tuple[int, int, str]] = []
    on_modules: list[tuple[int, int, str]] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or not node.attr.startswith("_"):
            continue
        if node.attr.startswith("__") and node.attr.endswith("__"):
            continue
        base = node.value
        if isinstance(base, ast.Name) and base.id in own:
            continue
        if isinstance(base, ast.Call) and isinstance(base.func, ast.Name) and base.func.id == "super":
            continue
        hit = (node.lineno, node.col_offset, f"{node.lineno}: {ast.unparse(node)}")
        (on_modules if isinstance(base, ast.Name) and base.id in modules else objects).append(hit)
    return [h for _, _, h in sorted(objects)], [h for _, _, h in sorted(on_modules)]


# ---------------------------------------------------------------------------- imports


def _from_source(node: ast.ImportFrom, name: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = name.split(".") if is_package else name.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _imports(tree: ast.Module, *, in_functions: bool) -> Iterator[ast.Import | ast.ImportFrom]:
    """The import statements of a module; inside function bodies only with ``in_functions``."""
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                yield child
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) and not in_functions:
                continue
            else:
                stack.append(child)


def _resolve(target: str, known: set[str]) -> str | None:
    while target and target not in known:  # ``import a.b.c`` of a name inside a module
        target = target.rpartition(".")[0]
    return target or None


def imported(name: str, path: Path, known: set[str], *, in_functions: bool = True,
             tree: ast.AST | None = None) -> dict[str, int]:
    """The tree's modules ``name`` imports -> how many names it takes from each (``from m import a,
    b``: 2; ``import m``: 1; ``from pkg import mod``: one for the submodule ``pkg.mod``).

    ``tree``: the statements to read (a function of the module), the whole module by default.
    """
    is_package = path.name == "__init__.py"
    root = tree if tree is not None else _parse(path)
    out: dict[str, int] = {}
    for node in _imports(root, in_functions=in_functions):  # type: ignore[arg-type]
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        else:
            source = _from_source(node, name, is_package)
            targets = [f"{source}.{a.name}" if f"{source}.{a.name}" in known else source for a in node.names]
        for target in targets:
            module = _resolve(target, known)
            if module is not None and module != name:
                out[module] = out.get(module, 0) + 1
    return out


def _parents(module: str, known: set[str]) -> list[str]:
    parts = module.split(".")
    return [p for p in (".".join(parts[:k]) for k in range(1, len(parts))) if p in known]


def import_closure(start: str, modules: dict[str, Path], *, in_functions: bool) -> set[str]:
    """The modules ``start`` reaches (itself and each reached module's parent packages included)."""
    known = set(modules)
    seen: set[str] = set()
    todo = [start, *_parents(start, known)]
    while todo:
        mod = todo.pop()
        if mod in seen or mod not in modules:
            continue
        seen.add(mod)
        for target in imported(mod, modules[mod], known, in_functions=in_functions):
            todo += [target, *_parents(target, known)]
    return seen


def _function(path: Path, fn: str) -> ast.AST | None:
    return next((n for n in _parse(path).body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == fn), None)


def reader_files(modules: dict[str, Path], *, cli: str = CLI, run_module: str = RUN_MODULE,
                 run_function: str = RUN_FUNCTION, recipe: str = RECIPE, results: str = RESULTS_MODULE) -> list[str]:
    """The modules a reader opens to follow ``replaybank run`` to ``report.md`` (module doc), sorted."""
    known = set(modules)
    out = {m for m in (cli, run_module, recipe) if m in modules}
    if run_module in modules:
        path = modules[run_module]
        out |= set(imported(run_module, path, known, in_functions=False))
        fn = _function(path, run_function)
        if fn is not None:
            out |= set(imported(run_module, path, known, tree=fn))
    out |= {m for m in modules if m == results or m.startswith(results + ".")}
    return sorted(out)


# ---------------------------------------------------------------------------- leftovers


def _identifiers(tree: ast.AST) -> Iterator[str]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            yield node.id
        elif isinstance(node, ast.Attribute):
            yield node.attr
        elif isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node.name
        elif isinstance(node, ast.alias):
            yield node.asname or node.name.rpartition(".")[2]


def leftovers(tree: Path) -> dict[str, list[str]]:
    """Where each leftover of the old arm and mixing names is (``file:line`` or a file)."""
    out: dict[str, list[str]] = {"_moved.py": [], "class Arm": [], "[arms.": [], **{n: [] for n in LEFTOVER_NAMES}}
    for path in sorted(tree.rglob("*.py")):
        rel = path.relative_to(tree.parent).as_posix()
        if path.name == "_moved.py":
            out["_moved.py"].append(rel)
        text = path.read_text(encoding="utf-8")
        parsed = _tree(text)
        names = set(_identifiers(parsed))
        for leftover in LEFTOVER_NAMES:
            if leftover in names:
                out[leftover].append(rel)
        out["class Arm"] += [f"{rel}:{n.lineno}" for n in ast.walk(parsed) if isinstance(n, ast.ClassDef) and n.name == "Arm"]
        out["[arms."] += [f"{rel}:{k}" for k, line in enumerate(text.splitlines(), 1) if "[arms." in line]
    return out


# ---------------------------------------------------------------------------- the whole map


@dataclass(frozen=True)
class KeyReads:
    """String-key reads of one area: how many, and how many distinct key names."""

    reads: int
    keys: int


@dataclass(frozen=True)
class Closure:
    """An import closure: its modules and their lines, all and those under ``llm/``."""

    modules: int
    lines: int
    llm_modules: int
    llm_lines: int

    @classmethod
    def of(cls, reached: set[str], lines: dict[str, int], llm: str) -> Closure:
        mine = [m for m in reached if m == llm or m.startswith(llm + ".")]
        return cls(len(reached), sum(lines[m] for m in reached), len(mine), sum(lines[m] for m in mine))


@dataclass(frozen=True)
class CodeMap:
    """Every figure of one tree (the module doc says how each is counted)."""

    tree: str
    modules: int
    lines: int
    dict_any_llm: int
    dict_any_signatures: dict[str, int]
    """Per area of :data:`SIGNATURE_AREAS`."""
    string_key_reads: dict[str, KeyReads]
    """Per area of :data:`STRING_KEY_AREAS`, and per file of ``llm/report``."""
    probe_calls_buffer: dict[str, int]
    """Per ``buffer*.py`` file."""
    private_reads_on_objects: list[str]
    private_reads_on_modules: list[str]
    recipe_imports: dict[str, int]
    """The recipe's own imports: module -> names taken from it."""
    recipe_imports_top_level: dict[str, int]
    """The same, outside function bodies."""
    closure_all: Closure
    closure_top_level: Closure
    reader_files: list[str]
    reader_lines: int
    leftovers: dict[str, list[str]]

    def to_json(self) -> dict[str, object]:
        return dataclasses.asdict(self)


def _rel(path: Path, tree: Path) -> str:
    return path.relative_to(tree.parent).as_posix()


def measure(tree: Path) -> CodeMap:
    """Every figure of the source tree ``tree`` (a package folder such as ``src/replaybank``)."""
    modules = module_files(tree)
    known = set(modules)
    lines = {m: count_lines(p) for m, p in modules.items()}

    def area_keys(files: list[Path]) -> KeyReads:
        keys = [k for f in files for k in string_key_reads(f.read_text(encoding="utf-8"))]
        return KeyReads(reads=len(keys), keys=len(set(keys)))

    key_reads = {area: area_keys(files_under(tree, area)) for area in STRING_KEY_AREAS}
    key_reads |= {_rel(f, tree): area_keys([f]) for f in files_under(tree, "llm/report")}
    objects: list[str] = []
    on_modules: list[str] = []
    for mod, path in modules.items():
        o, m = private_reads(path.read_text(encoding="utf-8"), mod, is_package=path.name == "__init__.py", known=known)
        objects += [f"{_rel(path, tree)}:{h}" for h in o]
        on_modules += [f"{_rel(path, tree)}:{h}" for h in m]
    recipe_name = f"{tree.name}{RECIPE.removeprefix('replaybank')}"
    closures = {flag: import_closure(recipe_name, modules, in_functions=flag) if recipe_name in modules else set()
                for flag in (True, False)}
    prefix = tree.name  # module names start with the tree's folder name (replaybank)
    readers = reader_files(modules, **{k: prefix + v.removeprefix("replaybank") for k, v in {
        "cli": CLI, "run_module": RUN_MODULE, "recipe": RECIPE, "results": RESULTS_MODULE}.items()})
    return CodeMap(
        tree=str(tree),
        modules=len(modules),
        lines=sum(lines.values()),
        dict_any_llm=sum(dict_any_annotations(f.read_text(encoding="utf-8")) for f in files_under(tree, "llm")),
        dict_any_signatures={area: sum(dict_any_in_signatures(f.read_text(encoding="utf-8")) for f in files_under(tree, area))
                             for area in SIGNATURE_AREAS},
        string_key_reads=key_reads,
        probe_calls_buffer={f.name: probe_calls(f.read_text(encoding="utf-8")) for f in sorted(tree.glob("buffer*.py"))},
        private_reads_on_objects=objects,
        private_reads_on_modules=on_modules,
        recipe_imports=dict(sorted(imported(recipe_name, modules[recipe_name], known).items())) if recipe_name in modules else {},
        recipe_imports_top_level=dict(sorted(imported(recipe_name, modules[recipe_name], known, in_functions=False).items()))
        if recipe_name in modules else {},
        closure_all=Closure.of(closures[True], lines, f"{prefix}.llm"),
        closure_top_level=Closure.of(closures[False], lines, f"{prefix}.llm"),
        reader_files=[_rel(modules[m], tree) for m in readers],
        reader_lines=sum(lines[m] for m in readers),
        leftovers=leftovers(tree),
    )


def rows(cm: CodeMap) -> list[tuple[str, str]]:
    """(figure, value) rows of the printed table."""
    out = [
        ("modules in the tree", str(cm.modules)),
        ("lines in the tree", f"{cm.lines:,}"),
        ("dict[str, Any] annotations in llm/", str(cm.dict_any_llm)),
        *((f"dict[str, Any] in signatures of {a}", str(n)) for a, n in cm.dict_any_signatures.items()),
        *((f"string-key reads in {a} (keys)", f"{k.reads} ({k.keys})") for a, k in cm.string_key_reads.items()),
        *((f"getattr/hasattr in {f}", str(n)) for f, n in cm.probe_calls_buffer.items()),
        ("underscore reads of another object", str(len(cm.private_reads_on_objects))),
        ("underscore reads on a module", str(len(cm.private_reads_on_modules))),
        ("recipe's imports, all: modules (names)", f"{len(cm.recipe_imports)} ({sum(cm.recipe_imports.values())})"),
        ("recipe's imports, outside functions: modules (names)",
         f"{len(cm.recipe_imports_top_level)} ({sum(cm.recipe_imports_top_level.values())})"),
        *(row for title, c in (("all imports", cm.closure_all), ("outside functions", cm.closure_top_level)) for row in (
            (f"recipe's import closure, {title}: modules (lines)", f"{c.modules} ({c.lines:,})"),
            ("  of them under llm/: modules (lines)", f"{c.llm_modules} ({c.llm_lines:,})"))),
        ("reader files of `replaybank run` (lines)", f"{len(cm.reader_files)} ({cm.reader_lines:,})"),
        *((f"leftover {name}", str(len(where))) for name, where in cm.leftovers.items()),
    ]
    return out


def _git(*args: str, cwd: Path = ROOT) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout.strip()


def _export(commit: str, into: Path) -> Path:
    """``src/replaybank`` of ``commit`` written under ``into``; returns the package folder."""
    data = subprocess.run(["git", "archive", commit, "src/replaybank"], cwd=ROOT, capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(into, filter="data")
    return into / "src" / "replaybank"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", type=Path, default=ROOT / "src" / "replaybank", help="the package folder to measure")
    parser.add_argument("--ref", help="a commit whose src/replaybank is measured beside it")
    parser.add_argument("--out", type=Path, default=RESULTS / "code_map.json")
    args = parser.parse_args(argv)
    cm = measure(args.tree)
    ref = None
    if args.ref:
        with tempfile.TemporaryDirectory() as tmp:
            ref = measure(_export(args.ref, Path(tmp)))
        ref = dataclasses.replace(ref, tree=f"{args.ref}:src/replaybank")
    now, before = rows(cm), rows(ref) if ref else None
    width = max(len(r[0]) for r in now)
    print(f"{'figure':<{width}}  {'this tree':>16}" + (f"  {args.ref[:12]:>16}" if ref else ""))
    for k, (name, value) in enumerate(now):
        print(f"{name:<{width}}  {value:>16}" + (f"  {before[k][1]:>16}" if before else ""))
    for title, hits in (("underscore reads of another object", cm.private_reads_on_objects),
                        ("underscore reads on a module", cm.private_reads_on_modules),
                        *((f"leftover {n}", w) for n, w in cm.leftovers.items())):
        if hits:
            print(f"\n{title}:\n  " + "\n  ".join(hits))
    print("\nreader files of `replaybank run`:\n  " + "\n  ".join(cm.reader_files))
    try:
        commit, clean = _git("rev-parse", "HEAD"), not _git("status", "--porcelain", "--untracked-files=no", "--", "src")
    except (OSError, subprocess.CalledProcessError):
        commit, clean = None, None
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "commit": commit, "src_clean": clean, "python": sys.version.split()[0], "targets": TARGETS,
        "tree": cm.to_json(), "ref": None if ref is None else {"commit": args.ref, **ref.to_json()},
    }, indent=1) + "\n", encoding="utf-8")
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
