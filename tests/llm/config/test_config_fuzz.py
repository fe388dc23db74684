"""Hypothesis fuzz of the configs: the main job's TOML (``Config``), the loop's
(``LoopConfig``) and the recipe tables (``load_recipes``).

A valid file gets 1 to 4 random edits: a real key (or a misspelt one, or an unknown section) set
to a random TOML value (negative, huge or 65-bit integers, ``nan``/``inf``/``1e300``, paths such as
``../../x`` or ``/etc/hostname``, empty strings and lists, inline tables, dates, a 5,000-deep
array), a recipe table with a name that is a path, or the file damaged (cut short, a byte flipped,
a UTF-8 byte-order mark, a NUL). Reading it either refuses with a ``ConfigError`` (a
``ReplayBankError``) whose message starts with the file's name, or accepts it, and then every key
of every section (recipes included) is within its declared type and bounds (finite numbers,
non-empty where required), every recipe name is a name, and the config reads back from its own
``to_dict``. Reading never writes (the folder is unchanged) and every call is bounded. Any other
exception fails the test. ``FUZZ_EXAMPLES`` raises the count (suite: 100 per reader).

Beside the fuzz, every ``Literal`` key of every table a config file holds (the cases generated from
the dataclasses' field types, so a new key is covered without editing this file) is given values
outside its choices, and each reader must refuse them naming the file, the line, the table and the key.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import tempfile
from pathlib import Path
from typing import Any, Literal, get_args, get_origin, get_type_hints

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from replaybank.errors import ReplayBankError
from replaybank.llm.config import Config, load_recipes
from replaybank.llm.config.loop import Loop, LoopConfig
from replaybank.llm.config.names import is_name
from replaybank.llm.config.parse import SECTIONS
from replaybank.llm.config.recipe import Recipe
from replaybank.llm.config.schema import SharedData, SharedEvaluation, Training
from replaybank.llm.config.values import ConfigError

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "100"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
BOUND_S = 5.0

MAIN = '[training]\nlearning_rate = 0.001\nbatch_size = 4\n\n[recipes.mine]\nsource = ["self"]\nratio = 0.2\n'
LOOP = '[loop]\ngenerations = 2\nseed = 1\nrecipe = "mine"\n\n[training]\nlora_rank = 4\n\n[recipes.mine]\nsource = ["self"]\nratio = 0.5\n'

_KEYS = {name: [f.name for f in dataclasses.fields(klass)] for name, klass in SECTIONS.items()}
_KEYS["loop"] = [f.name for f in dataclasses.fields(Loop)] + ["rehearsal", "rehearsal_ratio", "kl_weight", "rehearsal_ce"]
RECIPE_KEYS = [f.name for f in dataclasses.fields(Recipe)]
SECTION_NAMES = [*_KEYS, "recipes.mine", "trainig", "arms.other"]
RECIPE_NAMES = ["mine", "../../../x", "/abs", "a/b", "..", ".hidden", "", "x" * 101, "ok.name", "tab\tname"]

toml_value = st.one_of(
    st.integers(-3, 12).map(str), st.integers(-(2**63), 2**63 - 1).map(str), st.just(str(2**70)),
    st.sampled_from(["nan", "inf", "-inf", "1e300", "-1e300", "1e-300", "0.0", "-0.0", "0.5", "1.5", "true", "false",
                     '""', '"../../../etc/passwd"', '"/etc/hostname"', '"self"', '"none"', '"window"', '"qproj"',
                     "[]", '["qproj"]', '["self", "self"]', "[1, 2]", "[5]", '[""]', "{}", "{ a = 1 }", "1979-05-27",
                     '"\\u0000"', "'''\nmulti\n'''", "[" * 5000 + "]" * 5000]),
    st.text(max_size=12).map(lambda s: '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'),
)


@st.composite
def files(draw: Any, base: str, sections: list[str]) -> bytes:
    tables: dict[str, list[str]] = {}
    header = None
    for line in base.splitlines():
        if line.startswith("["):
            header = line[1:-1]
            tables[header] = []
        elif line and header is not None:
            tables[header].append(line)
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["key", "key", "key", "drop", "recipe"]))
        if kind == "recipe":
            name = draw(st.sampled_from(RECIPE_NAMES))
            table = f'recipes."{name}"'
            tables.setdefault(table, [])
            key = draw(st.sampled_from(RECIPE_KEYS))
            tables[table].append(f"{key} = {draw(toml_value)}")
            continue
        section = draw(st.sampled_from(sections))
        lines = tables.setdefault(section, [])
        if kind == "drop" and lines:
            lines.pop(draw(st.integers(0, len(lines) - 1)))
            continue
        keys = _KEYS.get(section.split(".")[0], RECIPE_KEYS) if not section.startswith("recipes") else RECIPE_KEYS
        key = draw(st.sampled_from(keys + ["sed", "learning_rte"]))
        lines[:] = [x for x in lines if not x.startswith(f"{key} =")]
        lines.append(f"{key} = {draw(toml_value)}")
    raw = "".join(f"[{t}]\n" + "".join(f"{x}\n" for x in body) + "\n" for t, body in tables.items()).encode("utf-8")
    damage = draw(st.sampled_from([None] * 8 + ["cut", "flip", "bom", "nul"]))
    if damage == "cut":
        raw = raw[: draw(st.integers(0, len(raw)))]
    elif damage == "flip":
        k = draw(st.integers(0, len(raw) - 1))
        raw = raw[:k] + bytes([raw[k] ^ draw(st.integers(1, 255))]) + raw[k + 1 :]
    elif damage == "bom":
        raw = b"\xef\xbb\xbf" + raw
    elif damage == "nul":
        raw = raw.replace(b"\n", b"\x00\n", 1)
    return raw


def _in_bounds(where: str, obj: Any) -> None:
    """Every field of the dataclass ``obj`` within its declared bounds (the silent acceptances)."""
    for f in dataclasses.fields(obj):
        v, m = getattr(obj, f.name), f.metadata
        if isinstance(v, float):
            assert math.isfinite(v), f"{where}.{f.name} = {v} accepted"
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            assert ("min" not in m or v >= m["min"]) and ("max" not in m or v <= m["max"]), f"{where}.{f.name} = {v}"
            assert ("gt" not in m or v > m["gt"]) and ("lt" not in m or v < m["lt"]), f"{where}.{f.name} = {v}"
        if m.get("nonempty"):
            assert len(v) > 0, f"{where}.{f.name} is empty"
        if isinstance(v, list):
            assert all(not isinstance(x, float) or math.isfinite(x) for x in v), f"{where}.{f.name} = {v}"
    for key, choices in literal_fields(type(obj)):
        assert getattr(obj, key) in choices, f"{where}.{key} = {getattr(obj, key)!r} accepted; expected one of {choices}"


def literal_fields(klass: type) -> list[tuple[str, tuple[Any, ...]]]:
    """``(key, choices)`` of every field of the dataclass ``klass`` typed as a ``Literal``."""
    hints = get_type_hints(klass)
    return [(f.name, get_args(hints[f.name])) for f in dataclasses.fields(klass) if get_origin(hints[f.name]) is Literal]


def _read(reader: Any, raw: bytes, bounded: Any) -> Any:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "c.toml"
        path.write_bytes(raw)
        try:
            cfg = bounded(lambda: reader(path), BOUND_S)
        except ReplayBankError as err:
            msg = str(err)
            assert msg.startswith(str(path)), f"the error does not name the file: {msg[:200]}"
            lined = re.match(re.escape(str(path)) + r":\d+", msg) is not None
            event(f"refused, {'with' if lined else 'without'} a line")
            cfg = None
        else:
            event("accepted")
        assert os.listdir(tmp) == ["c.toml"] and path.read_bytes() == raw, "reading the config wrote"
    return cfg


@SETTINGS
@given(raw=files(MAIN, [*SECTIONS, "recipes.mine", "trainig", "arms.other"]))
def test_the_main_config_is_refused_naming_the_file_or_every_value_is_in_bounds(raw, bounded):
    cfg = _read(Config.from_toml, raw, bounded)
    if cfg is None:
        return
    for name in SECTIONS:
        _in_bounds(name, getattr(cfg, name))
    for name, recipe in cfg.recipes.items():
        assert is_name(name), f"recipe name {name!r} accepted"
        _in_bounds(f"recipes.{name}", recipe)
    again = Config.from_dict(cfg.to_dict())
    assert again.to_dict() == cfg.to_dict()


@SETTINGS
@given(raw=files(LOOP, ["loop", "training", "recipes.mine", "trainig", "arms.other"]))
def test_the_loop_config_is_refused_naming_the_file_or_every_value_is_in_bounds(raw, bounded):
    cfg = _read(LoopConfig.from_toml, raw, bounded)
    if cfg is None:
        return
    _in_bounds("loop", cfg.loop)
    _in_bounds("training", cfg.training)
    assert isinstance(cfg.training, Training)
    for name, recipe in cfg.recipes.items():
        assert is_name(name), f"recipe name {name!r} accepted"
        _in_bounds(f"recipes.{name}", recipe)
    recipe = bounded(lambda: cfg.recipe, BOUND_S)
    if recipe is not None:
        _in_bounds("recipe", recipe)
    again = LoopConfig.from_dict(cfg.to_dict())
    assert again.to_dict() == cfg.to_dict()


@SETTINGS
@given(raw=files(MAIN, ["recipes.mine", "arms.other", "training"]))
def test_recipe_tables_are_refused_naming_the_file_or_are_names_in_bounds(raw, bounded):
    recipes = _read(load_recipes, raw, bounded)
    if recipes is None:
        return
    for name, recipe in recipes.items():
        assert is_name(name), f"recipe name {name!r} accepted"
        _in_bounds(f"recipes.{name}", recipe)


#: every table a config file holds, with the dataclass it is read as and the readers (and their valid base files) that read it
TABLES: list[tuple[str, type, list[tuple[Any, str]]]] = [
    *((name, klass, [(Config.from_toml, MAIN)]) for name, klass in SECTIONS.items()),
    ("loop", Loop, [(LoopConfig.from_toml, LOOP)]),
    ("training", Training, [(LoopConfig.from_toml, LOOP)]),
    ("evaluation", SharedEvaluation, [(LoopConfig.from_toml, LOOP)]),
    ("data", SharedData, [(LoopConfig.from_toml, LOOP)]),
    ("recipes.mine", Recipe, [(Config.from_toml, MAIN), (LoopConfig.from_toml, LOOP), (load_recipes, MAIN)]),
]
LITERAL_CASES = [
    pytest.param(reader, base, table, key, choices, id=f"{reader.__qualname__}-[{table}]-{key}")
    for table, klass, readers in TABLES for key, choices in literal_fields(klass) for reader, base in readers
]


def _set_key(base: str, table: str, key: str, value: str) -> str:
    """``base`` with ``key = value`` written into ``[table]`` (the table added when absent)."""
    lines = base.splitlines()
    if f"[{table}]" not in lines:
        lines += ["", f"[{table}]"]
    at = lines.index(f"[{table}]") + 1
    lines = [x for x in lines if not x.startswith(f"{key} =")]
    lines.insert(at, f"{key} = {value}")
    return "\n".join(lines) + "\n"


def test_the_literal_cases_cover_every_section():
    covered = {(table, key) for *_, table, key, _ in (c.values for c in LITERAL_CASES)}
    for known in [("orchestration", "lineage"), ("training", "mix_by"), ("evaluation", "choose"), ("loop", "init"),
                  ("recipes.mine", "controller"), ("recipes.mine", "peer")]:
        assert known in covered


@pytest.mark.parametrize("reader, base, table, key, choices", LITERAL_CASES)
def test_a_value_outside_a_literal_keys_choices_is_refused_naming_the_table_and_key(tmp_path, reader, base, table, key, choices):
    path = tmp_path / "c.toml"
    near = str(choices[0])
    for value, shown in [(f'"{near}x"', repr(near + "x")), (f'"{near.upper()}"', repr(near.upper())), ("1", "1")]:
        if shown.strip("'") in choices:
            continue
        text = _set_key(base, table, key, value)
        path.write_text(text, encoding="utf-8")
        line = text.splitlines().index(f"{key} = {value}") + 1
        with pytest.raises(ConfigError) as err:
            reader(path)
        prefix = f"{path}:{line}: [{table}] {key} = {shown}: expected one of {', '.join(map(repr, choices))}"
        assert str(err.value).startswith(prefix), f"{err.value}\nexpected it to start with\n{prefix}"


def test_the_base_files_are_valid():
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "c.toml"
        path.write_text(MAIN, encoding="utf-8")
        assert Config.from_toml(path).recipes["mine"].ratio == 0.2
        path.write_text(LOOP, encoding="utf-8")
        assert LoopConfig.from_toml(path).recipe.ratio == 0.5  # type: ignore[union-attr]


pytestmark = pytest.mark.filterwarnings("ignore")
