"""Worker processes that end with the process that started them.

Every entry point that fans work out over processes (``replaybank run --jobs``, ``replaybank loop
--jobs``, ``replaybank rl compare --jobs``) takes its pool from :func:`worker_pool`, so a killed
parent never leaves workers training unseen.
"""

from __future__ import annotations

import os
import platform
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context


def worker_pool(jobs: int, spawn: bool = True) -> ProcessPoolExecutor:
    """A pool of ``jobs`` processes that end when this process ends (:func:`die_with_parent`).

    ``spawn`` starts each worker in a fresh interpreter (the safe choice once torch or Ray threads
    exist); ``spawn=False`` keeps the platform's default start method.
    """
    context = get_context("spawn") if spawn else None
    return ProcessPoolExecutor(jobs, mp_context=context, initializer=die_with_parent, initargs=(os.getpid(),))


def die_with_parent(parent: int) -> None:
    """Make this worker process end when ``parent`` (the process that started it) ends.

    A pool's workers outlive a parent that is killed (``kill PID`` of ``replaybank run --jobs N``
    left its seed workers training, unseen, for minutes); on Linux the kernel sends this process
    SIGTERM when its parent dies (``prctl(PR_SET_PDEATHSIG)``). Elsewhere nothing changes. Passed
    to a pool as its ``initializer`` with ``os.getpid()`` of the parent.
    """
    import ctypes
    import ctypes.util
    import signal

    if platform.system() != "Linux":
        return
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    pr_set_pdeathsig = 1
    libc.prctl(pr_set_pdeathsig, int(signal.SIGTERM), 0, 0, 0)
    if os.getppid() != parent:  # the parent ended before the request took effect
        os._exit(1)
