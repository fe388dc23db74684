"""Hypothesis fuzz of what a resume reads: the loop's ``state.json`` and the LoRA loop's
``checkpoint.pt``.

A valid state has 1 to 3 random edits: a field set to a random value (negative, huge, fractional,
NaN, a path, a string, a list, an object, a 5,000-deep array), deleted, added, or nudged to a
plausible value; now and then the file itself is cut short or a byte flipped. Reading it either
refuses with a ``ReplayBankError`` subclass, leaving the file and the run (model, optimizer,
mixer, generator, log) exactly as they were, or accepts it, and then what reads it next works:
the resume's config check, lineage and log line and the report's tables for ``state.json``; an
optimizer step with finite weights and the next batch for the checkpoint. Every call is bounded.
Any other exception fails the test. ``FUZZ_EXAMPLES`` raises the count (suite: 100 each).
"""

from __future__ import annotations

import copy
import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from replaybank.errors import ReplayBankError
from replaybank.llm.config.loop import LoopConfig
from replaybank.llm.loop.lineage import lineage_for
from replaybank.llm.loop.report import (
    LoopRun,
    _calls_table,
    _experience_table,
    _level_table,
    _run_table,
    aggregate,
    paired_gaps,
)
from replaybank.llm.loop.state import check_same_run, read_state
from replaybank.llm.recipes.loop import _line

torch = pytest.importorskip("torch")
peft = pytest.importorskip("peft")

from replaybank.llm.train.checkpoint import load_checkpoint, save_checkpoint  # noqa: E402

from .test_checkpoint_checks import parts, same, snapshot, step  # noqa: E402

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "100"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
BOUND_S = 5.0
DEEP = "__deep__"

scalar = st.one_of(
    st.integers(-3, 12), st.integers(-(2**70), 2**70), st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([True, False, None, "", "base", "../../../../etc/passwd", "/abs", "0123456789abcdef", "x" * 70,
                     DEEP]),
    st.builds(list), st.builds(dict),
)
value = st.one_of(scalar, st.lists(scalar, max_size=3), st.dictionaries(st.sampled_from(["a", "n", "step"]), scalar, max_size=2))


def _paths(node: Any, here: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in a nested dict/list (tensors are leaves)."""
    out = [here]
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, (*here, k))
    elif isinstance(node, list):
        for k, v in enumerate(node):
            out += _paths(v, (*here, k))
    return out


def _nudge(v: Any, draw: Any) -> Any:
    """A value of the same kind a real file could hold."""
    if isinstance(v, bool):
        return not v
    if isinstance(v, int):
        return v + draw(st.sampled_from([-1, 1, 2, 10**6]))
    if isinstance(v, float):
        return v * draw(st.sampled_from([-1.0, 0.5, 1.5, 1e6]))
    if isinstance(v, str):
        return draw(st.sampled_from(["window", "best", "self", "none", "base", "fedcba9876543210", v + "x"]))
    if isinstance(v, torch.Tensor):
        return v * draw(st.sampled_from([-1.0, 2.0, float("nan")])) if v.is_floating_point() else v + 1
    return draw(value)


def _edit(draw: Any, state: Any, extra: Any = value) -> Any:
    state = copy.deepcopy(state)
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(_paths(state)[1:]))
        parent = state
        for key in path[:-1]:
            parent = parent[key]
        key, action = path[-1], draw(st.sampled_from(["set", "del", "add", "nudge", "nudge", "nudge"]))
        if action == "del":
            del parent[key]
        elif action == "add" and isinstance(parent, dict):
            parent["extra"] = draw(extra)
        elif action == "nudge":
            parent[key] = _nudge(parent[key], draw)
        else:
            parent[key] = draw(extra)
    return state


def _field(err: Exception) -> str:
    """The top-level field an error names (``generations``, ``optimizer``, ...), for the statistics."""
    found = re.search(r"field '([A-Za-z_]+)", str(err))
    if found:
        return found.group(1)
    words = {"schema_version": "schema_version", "schema": "schema", "not a loop state file": "not JSON",
             "holds a loop run": "another config", "written before": "another config", "step": "step"}
    return next((label for word, label in words.items() if word in str(err)), "other")


# -- state.json ----------------------------------------------------------------------------------


def _part(g: int) -> dict[str, Any]:
    level = {"success": 0.5, "credit": 0.75, "n": 2}
    return {"success": 0.5, "credit": 0.6 + g / 10, "n": 4, "levels": {"1": dict(level), "2": dict(level)}}


def valid_loop_state() -> dict[str, Any]:
    """A state.json as a two-generation run writes it (the fields the loop records)."""
    rows = []
    for g in range(3):
        row: dict[str, Any] = {
            "generation": g, "adapter": "base" if g == 0 else f"{g:016x}", "no_context": _part(g), "context": _part(g),
            "validation": _part(g), "retention": 0.9, "eval_tokens_per_second": {"no_context": 50.0, "context": 40.0},
            "suite": {"families": {"code": 0.5}, "retention": {"code": 0.9}, "leakage": 0.0, "seconds": 1.0},
            "examples": [{"task": "t", "expected": ["<<qx a>>"], "output": "x", "success": False}],
        }
        if g:
            row.update(lineage=list(range(1, g + 1)), train_rows=10 * g, seconds=2.5,
                       act={"n": 6, "success": 0.5, "credit": 0.6, "levels": {}}, train={"steps": 3, "loss_first": 2.0})
        rows.append(row)
    return {"schema": 1, "config": LoopConfig().to_dict(), "finished": 2, "adapter": rows[-1]["adapter"],
            "generations": rows, "rehearsal": {"source": "self", "kept": 96, "sha256": "ab" * 32},
            "suite_base": {"families": {"code": 0.5}, "n": 8}, "base_model": "cd" * 32, "seconds_this_session": 9.5}


VALID_STATE = valid_loop_state()


@st.composite
def state_files(draw: Any) -> bytes:
    text = json.dumps(_edit(draw, VALID_STATE))
    text = text.replace(json.dumps(DEEP), "[" * 5000 + "]" * 5000)
    raw = text.encode("utf-8")
    damage = draw(st.sampled_from(["none"] * 8 + ["cut", "flip"]))
    if damage == "cut":
        raw = raw[: draw(st.integers(0, len(raw) - 1))]
    elif damage == "flip":
        k = draw(st.integers(0, len(raw) - 1))
        raw = raw[:k] + bytes([raw[k] ^ draw(st.integers(1, 255))]) + raw[k + 1:]
    return raw


def test_the_valid_loop_state_reads_back(tmp_path):
    (tmp_path / "state.json").write_text(json.dumps(VALID_STATE), encoding="utf-8")
    state = read_state(tmp_path)
    assert state is not None and state.to_json() == VALID_STATE and state.finished == 2


@SETTINGS
@given(raw=state_files())
def test_state_json_is_refused_whole_or_everything_that_reads_it_works(raw, bounded):
    cfg = LoopConfig().with_(generations=5)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "state.json").write_bytes(raw)
        try:
            state = bounded(lambda: read_state(folder), BOUND_S)
            assert state is not None
            bounded(lambda: check_same_run(folder, state, cfg), BOUND_S)
        except ReplayBankError as err:
            event(f"state.json: {type(err).__name__} ({_field(err)})")
            assert (folder / "state.json").read_bytes() == raw and os.listdir(folder) == ["state.json"]
            return
        event("state.json: accepted")
        # what the resume and the report read next must work on an accepted state
        rows = state.generations
        lineage_for(state.finished + 1, 3, "best", [r.evaluation.validation.credit for r in rows])
        for row in rows:
            _line(row, 5)
        runs = [LoopRun("r", folder, state)]
        aggregate(runs), paired_gaps(runs), _run_table(rows), _level_table(rows)
        _calls_table(rows), _experience_table(rows)
        assert (folder / "state.json").read_bytes() == raw


# -- checkpoint.pt -------------------------------------------------------------------------------

tensor = st.one_of(
    st.builds(lambda: torch.zeros(())), st.builds(lambda: torch.zeros(9)), st.builds(lambda: torch.full((2, 4), float("nan"))),
    st.builds(lambda: torch.zeros(2, 4, dtype=torch.int64)), st.builds(lambda: torch.zeros(5056, dtype=torch.uint8)),
    st.builds(lambda: torch.full((4, 2), 1e30)),
)
ck_value = st.one_of(scalar.filter(lambda v: v != DEEP), tensor, st.lists(scalar.filter(lambda v: v != DEEP), max_size=3))


def _valid_checkpoint() -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "checkpoint.pt"
        save_checkpoint(path, *parts(0), step=1)
        return torch.load(path, weights_only=True)


VALID_CHECKPOINT = _valid_checkpoint()


@st.composite
def checkpoints(draw: Any) -> dict[str, Any]:
    return _edit(draw, VALID_CHECKPOINT, ck_value)


@SETTINGS
@given(state=checkpoints())
def test_checkpoint_is_refused_whole_or_training_resumes_well_formed(state, bounded):
    target = parts(1)
    before = snapshot(*target)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "checkpoint.pt"
        torch.save(state, path)
        try:
            got = bounded(lambda: load_checkpoint(path, *target), BOUND_S)
        except ReplayBankError as err:
            event(f"checkpoint: {type(err).__name__} ({_field(err)})")
            assert same(snapshot(*target), before), "a refused checkpoint changed the run"
            return
    event("checkpoint: accepted")
    model, opt, mixer, log = target
    assert got == len(log.steps)
    bounded(lambda: step(model, opt), BOUND_S)
    assert all(bool(torch.isfinite(p).all()) for p in model.parameters())
    batch = bounded(lambda: next(iter(mixer)), BOUND_S)
    assert all(0 <= i < mixer.sizes[s] for s, i in zip(batch.source, batch.index, strict=True))
