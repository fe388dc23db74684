"""Workers of `replaybank run --jobs N`, `replaybank loop --jobs N` and `replaybank rl compare --jobs N`
end when their parent is killed."""

from __future__ import annotations

import os
import platform
import signal
import subprocess
import sys
import textwrap
import time

import pytest

pytestmark = pytest.mark.skipif(platform.system() != "Linux", reason="PR_SET_PDEATHSIG is Linux's")

PARENT = textwrap.dedent("""
    import os, sys, time
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context
    from replaybank.workers import die_with_parent

    def work(path):
        with open(path, "w") as f:
            f.write(str(os.getpid()))
        time.sleep(120)

    if __name__ == "__main__":
        init = die_with_parent if sys.argv[2] == "on" else None
        args = (os.getpid(),) if init else ()
        with ProcessPoolExecutor(1, get_context("spawn"), initializer=init, initargs=args) as pool:
            pool.submit(work, sys.argv[1]).result()
""")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def _worker_after_parent_killed(tmp_path, mode: str) -> bool:
    script, pid_file = tmp_path / f"parent_{mode}.py", tmp_path / f"worker_{mode}.pid"
    script.write_text(PARENT)
    parent = subprocess.Popen([sys.executable, str(script), str(pid_file), mode], start_new_session=True)
    deadline = time.monotonic() + 60
    while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
        time.sleep(0.1)
    worker = int(pid_file.read_text())
    parent.send_signal(signal.SIGKILL)  # no cleanup: the pool never tells its workers
    parent.wait()
    deadline = time.monotonic() + (10 if mode == "on" else 1.5)  # "off": still there after 1.5 s is enough
    while _alive(worker) and time.monotonic() < deadline:
        time.sleep(0.1)
    alive = _alive(worker)
    if alive:
        os.kill(worker, signal.SIGKILL)
    return alive


def test_a_worker_ends_with_its_killed_parent(tmp_path):
    assert _worker_after_parent_killed(tmp_path, "off") is True  # without it the worker lives on (the bug)
    assert _worker_after_parent_killed(tmp_path, "on") is False


def _death_signal() -> int:
    import ctypes
    import ctypes.util

    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    value = ctypes.c_int(0)
    libc.prctl(2, ctypes.byref(value), 0, 0, 0)  # PR_GET_PDEATHSIG
    return value.value


@pytest.mark.parametrize("spawn", [True, False])
def test_every_pool_of_worker_pool_asks_for_the_death_signal(spawn: bool) -> None:
    from replaybank.workers import worker_pool

    with worker_pool(1, spawn=spawn) as pool:
        assert pool.submit(_death_signal).result(timeout=60) == int(signal.SIGTERM)
