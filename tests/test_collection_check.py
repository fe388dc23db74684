"""The check in tests/conftest.py fails a run of all of tests/ that leaves a test file out."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PASSING = "def test_ok():\n    assert True\n"


def make_project(root: Path, pytest_ini: str) -> Path:
    """A project with tests/test_a.py and tests/dist/test_b.py, under the real tests/conftest.py."""
    (root / "tests" / "dist").mkdir(parents=True)
    (root / "pyproject.toml").write_text(f"[tool.pytest.ini_options]\ntestpaths = [\"tests\"]\n{pytest_ini}")
    shutil.copy(ROOT / "tests" / "conftest.py", root / "tests" / "conftest.py")
    (root / "tests" / "test_a.py").write_text(PASSING)
    (root / "tests" / "dist" / "test_b.py").write_text(PASSING)
    return root


def pytest_in(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTEST_DISABLE_PLUGIN_AUTOLOAD="1")  # plugins cost seconds a run
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
                          cwd=root, env=env, capture_output=True, text=True, timeout=120)


def test_a_folder_left_out_by_norecursedirs_fails_the_run_and_is_named(tmp_path: Path) -> None:
    root = make_project(tmp_path, "")  # pytest's default norecursedirs: skips dist/
    whole = pytest_in(root)
    assert whole.returncode == 1, whole.stdout
    assert "1 test file(s) under tests/ were not collected" in whole.stdout
    assert "tests/dist/test_b.py" in whole.stdout and "1 failed, 1 passed" in whole.stdout
    # the same when the whole folder is named on the command line, and under -k
    assert pytest_in(root, "tests", "-k", "test_ok").returncode == 1
    # a run of one file (or one folder) is not a run of all of tests/: not checked
    one = pytest_in(root, "tests/test_a.py")
    assert one.returncode == 0 and "1 passed" in one.stdout, one.stdout
    # a folder left out on purpose is not missing; other files still are
    assert pytest_in(root, "--ignore", "tests/dist").returncode == 0
    assert pytest_in(root, "--ignore-glob", "*/dist/*").returncode == 0
    assert pytest_in(root, "--ignore", "tests/test_a.py").returncode == 1


def test_a_run_that_collects_every_file_passes(tmp_path: Path) -> None:
    root = make_project(tmp_path, 'norecursedirs = [".*", "build", "__pycache__"]\n')
    whole = pytest_in(root)
    assert whole.returncode == 0 and "2 passed" in whole.stdout, whole.stdout


def test_the_project_does_not_skip_dist_folders(pytestconfig: pytest.Config) -> None:
    skipped = pytestconfig.getini("norecursedirs")
    assert "dist" not in skipped and ".*" in skipped, skipped
