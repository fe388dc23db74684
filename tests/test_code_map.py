"""benchmarks/code_map.py counts what it says, on a small source tree built here (the real tree's
figures change with every commit; these are known by construction)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

FILES = {
    "__init__.py": "from replaybank import buffer\n",
    "cli.py": "def main():\n    from replaybank.llm.cli import cmd_run\n",
    "buffer.py": (
        "import os\n"
        "def add(s, buf, self):\n"
        "    os._exit\n"
        "    return getattr(s, 'hook', None) if hasattr(s, 'x') else (buf._lock, self._a)\n"
    ),
    "buffer_state.py": "def state(s):\n    return s.getattr('x')\n",
    "llm/__init__.py": "",
    "llm/cli.py": (
        "from replaybank.llm.config import load\n"
        "def cmd_run(args):\n    from replaybank.llm.recipes.rehearsal import run\n"
        "def cmd_loop(args):\n    from replaybank.llm.loopstuff import x\n"
    ),
    "llm/config.py": "from typing import Any\nDEFAULTS: dict[str, Any] = {}\ndef load():\n    return DEFAULTS\n",
    "llm/recipes/__init__.py": "",
    "llm/recipes/rehearsal.py": (
        "from typing import Any\n"
        "from replaybank.llm.report import metrics\n"
        "from replaybank.llm.results import Result, Other\n"
        "ConfigDict = dict[str, Any]\n"
        "def run(cfg: ConfigDict, extra: dict[str, Any]) -> list[dict[str, Any]]:\n"
        "    from replaybank.llm.heavy import go\n"
        "    return [cfg['a'], cfg.get('b'), metrics._cache]\n"
    ),
    "llm/report/__init__.py": "",
    "llm/report/metrics.py": (
        "from typing import Any, Literal\n"
        "_cache = {}\n"
        "def build(m: 'dict[str, Any]') -> dict[str, Any]:\n"
        "    t: Literal['x'] = 'x'\n"
        "    m['out'] = m['in'] + m.get('extra', 0)\n"
        "    return m\n"
    ),
    "llm/results.py": "class Result:\n    pass\nclass Other:\n    pass\n",
    "llm/heavy.py": "from replaybank.llm import deep\ngo = 1\n",
    "llm/deep.py": "",
    "llm/loopstuff.py": "x = 1\n",
    "llm/eval/__init__.py": "",
    "llm/eval/measure.py": "def f(r):\n    return r['loss'], r['loss']\n",
    "llm/_moved.py": "class Arm:\n    pass\nArmSpec = 1\n# [arms.x] is gone\n",
}


@pytest.fixture(scope="module")
def code_map():
    spec = importlib.util.spec_from_file_location("code_map", ROOT / "benchmarks" / "code_map.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["code_map"] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "src" / "replaybank"
    for rel, text in FILES.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


def test_every_figure_of_a_tree_built_to_known_counts(code_map, tree):
    cm = code_map.measure(tree)
    assert cm.modules == len(FILES)
    assert cm.lines == sum(text.count("\n") for text in FILES.values())
    # config's annotated constant, the alias, the recipe's two in its signature, metrics' two (one quoted)
    assert cm.dict_any_llm == 6
    assert cm.dict_any_signatures == {"llm/recipes": 2, "llm/report": 2}
    # reads only: m['out'] = ... is a write, Literal['x'] a type
    assert cm.string_key_reads["llm/report"] == code_map.KeyReads(reads=2, keys=2)
    assert cm.string_key_reads["llm/recipes"] == code_map.KeyReads(reads=2, keys=2)
    assert cm.string_key_reads["llm/eval/measure.py"] == code_map.KeyReads(reads=2, keys=1)
    assert cm.probe_calls_buffer == {"buffer.py": 2, "buffer_state.py": 0}  # s.getattr(...) is a method
    # buf._lock is another object's; metrics._cache is read on a module (``from pkg import mod``), as os._exit
    assert [h.split(":")[0] for h in cm.private_reads_on_objects] == ["replaybank/buffer.py"]
    assert cm.private_reads_on_objects[0].endswith("buf._lock")
    assert sorted(h.rpartition(" ")[2] for h in cm.private_reads_on_modules) == ["metrics._cache", "os._exit"]


def test_the_recipe_closure_follows_lazy_imports_and_parent_packages(code_map, tree):
    cm = code_map.measure(tree)
    top = {"replaybank", "replaybank.buffer", "replaybank.llm", "replaybank.llm.recipes",
           "replaybank.llm.recipes.rehearsal", "replaybank.llm.report", "replaybank.llm.report.metrics",
           "replaybank.llm.results"}
    modules = code_map.module_files(tree)
    assert code_map.import_closure("replaybank.llm.recipes.rehearsal", modules, in_functions=False) == top
    # the import inside run() reaches heavy, and heavy's ``from replaybank.llm import deep`` the submodule
    lazy = code_map.import_closure("replaybank.llm.recipes.rehearsal", modules, in_functions=True)
    assert lazy == top | {"replaybank.llm.heavy", "replaybank.llm.deep"}
    assert (cm.closure_top_level.modules, cm.closure_all.modules) == (8, 10)
    assert cm.closure_all.llm_modules == 8  # all but replaybank and replaybank.buffer
    assert cm.recipe_imports == {"replaybank.llm.heavy": 1, "replaybank.llm.report.metrics": 1, "replaybank.llm.results": 2}
    assert cm.recipe_imports_top_level == {"replaybank.llm.report.metrics": 1, "replaybank.llm.results": 2}


def test_reader_files_are_the_run_command_its_imports_the_recipe_and_results(code_map, tree):
    cm = code_map.measure(tree)
    # cmd_loop's import (loopstuff) is another command's; the recipe's components are not added
    assert cm.reader_files == ["replaybank/cli.py", "replaybank/llm/cli.py", "replaybank/llm/config.py",
                               "replaybank/llm/recipes/rehearsal.py", "replaybank/llm/results.py"]


def test_leftovers_are_found_with_where_they_are(code_map, tree):
    left = code_map.measure(tree).leftovers
    assert left == {"_moved.py": ["replaybank/llm/_moved.py"], "class Arm": ["replaybank/llm/_moved.py:1"],
                    "[arms.": ["replaybank/llm/_moved.py:4"], "ArmSpec": ["replaybank/llm/_moved.py"],
                    "MixNotBuiltError": []}


def test_the_script_prints_a_table_and_writes_the_figures_with_the_commit(code_map, tree, tmp_path, capsys):
    out = tmp_path / "code_map.json"
    assert code_map.main(["--tree", str(tree), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "dict[str, Any] in signatures of llm/recipes" in printed and "replaybank/llm/config.py" in printed
    saved = json.loads(out.read_text(encoding="utf-8"))
    assert len(saved["commit"]) == 40 and saved["tree"]["modules"] == len(FILES)
    assert saved["tree"]["string_key_reads"]["llm/eval/measure.py"] == {"reads": 2, "keys": 1}
