from __future__ import annotations

import warnings

import pytest


@pytest.fixture(autouse=True)
def _quiet_and_single_threaded() -> None:
    warnings.filterwarnings("ignore", message=".*Overriding environment.*")
    torch = pytest.importorskip("torch")
    torch.set_num_threads(1)
