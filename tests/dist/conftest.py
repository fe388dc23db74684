from __future__ import annotations

from pathlib import Path

import pytest

ray = pytest.importorskip("ray", reason="the dist extra (ray) is not installed")

HERE = Path(__file__).resolve().parent


@pytest.fixture
def ray_session():
    """One local Ray for the tests of this folder: started by the first that needs it (it takes
    seconds), shut down after the folder's last test (below), not left running for the rest."""
    if not ray.is_initialized():
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    return ray


def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    if (nextitem is None or HERE not in Path(nextitem.path).resolve().parents) and ray.is_initialized():
        ray.shutdown()
