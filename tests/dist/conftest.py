import pytest

ray = pytest.importorskip("ray", reason="the dist extra (ray) is not installed")


@pytest.fixture(scope="session")
def ray_session():
    """One local Ray for all of tests/dist (starting Ray takes seconds)."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()
