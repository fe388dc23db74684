from __future__ import annotations

import doctest
import importlib

import pytest


@pytest.mark.parametrize(
    "module",
    ["replaybank.cl.streams", "replaybank.cl.config", "replaybank.cl.report", "replaybank.cl.models", "replaybank.cl.runner",
     "replaybank.cl.tune"],
)
def test_docstring_examples_hold(module: str) -> None:
    result = doctest.testmod(importlib.import_module(module))
    assert result.attempted >= 1
    assert result.failed == 0
