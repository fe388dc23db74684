import pytest

ray = pytest.importorskip("ray", reason="the dist extra (ray) is not installed")


@pytest.fixture(scope="module")
def ray_session():
    """One local Ray per test module (starting Ray takes seconds)."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()
