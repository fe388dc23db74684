"""A tiny main job prints no DeprecationWarning / FutureWarning that our calls cause: each such
warning raised while replaybank code is on the call stack (ours, or a library's on our behalf)."""

from __future__ import annotations

import traceback
import warnings
from pathlib import Path
from typing import Any

import pytest

import replaybank
from replaybank.llm.config import Config

OURS = str(Path(replaybank.__file__).parent)


@pytest.fixture(autouse=True)
def _own_cache(isolated_cache):
    """Suite answers of the tiny model go to a per-test cache, never the user's."""


class DeprecationsOfOurs:
    """Inside ``with``: the deprecation warnings raised with our code on the stack, one line each
    naming where it was raised and the last frame of ours that led there."""

    def __init__(self) -> None:
        self.found: list[str] = []
        self._catch = warnings.catch_warnings()

    def __enter__(self) -> DeprecationsOfOurs:
        self._catch.__enter__()
        warnings.simplefilter("always")
        warnings.showwarning = self._show
        return self

    def __exit__(self, *exc: Any) -> None:
        self._catch.__exit__(*exc)

    def _show(self, message: Any, category: type[Warning], filename: str, lineno: int, *_: Any) -> None:
        if not issubclass(category, (DeprecationWarning, FutureWarning)):
            return
        ours = [f for f in traceback.extract_stack() if f.filename.startswith(OURS)]
        if ours:
            self.found.append(f"{category.__name__} at {filename}:{lineno} via {ours[-1].filename}:{ours[-1].lineno}: {message}")


def test_collector_keeps_what_our_code_led_to():
    def library() -> None:
        warnings.warn("old name", DeprecationWarning, stacklevel=2)

    caller = compile("library()", f"{OURS}/caller.py", "exec")  # a frame that reads as replaybank code
    with DeprecationsOfOurs() as seen:
        warnings.warn("not ours", FutureWarning, stacklevel=1)  # only this test's frames on the stack
        exec(caller, {"library": library})
    assert len(seen.found) == 1 and "old name" in seen.found[0] and "caller.py:1" in seen.found[0]


def test_peft_wrapping_silences_only_peft_s_own_deprecation():
    from replaybank.llm.model import peft_wrapping

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with peft_wrapping():
            warnings.warn("`is_gradient_checkpointing` is deprecated and will be removed in v6.", FutureWarning, stacklevel=1)
            warnings.warn("something else", FutureWarning, stacklevel=1)
    assert [str(w.message) for w in caught] == ["something else"]


def test_tiny_main_job_raises_no_deprecation_of_ours(tiny_model_dir, tmp_path):
    from replaybank.llm.recipes.rehearsal import run_experiment

    cfg = Config.from_dict({
        "training": {"base_model": str(tiny_model_dir), "batch_size": 5, "lora_rank": 2, "num_threads": 0,
                     "rehearsal_rows_per_epoch": 10, "mixing_ratio": 0.2, "gradient_checkpointing": True},
        "data": {"domain_train_rows": 10, "domain_eval_rows": 3, "general_eval_rows": 3},
        "evaluation": {"eval_points": 1, "arms": ["base", "rehearsal"], "suite_per_family": 1,
                       "max_new_tokens": 4, "probe_pairs": 1},
        "output": {"out_dir": str(tmp_path / "run")},
    })
    with DeprecationsOfOurs() as seen:
        run_experiment(cfg, log=lambda m: None, max_steps=2)
    assert seen.found == []
