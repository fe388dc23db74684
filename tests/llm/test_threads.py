"""The auto torch thread count: the pure rule on constructed measurements, the measurement on
synthetic ``/proc/stat`` snapshots, and on this machine with every CPU kept busy by other processes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from replaybank.llm import runtime
from replaybank.llm.runtime import (
    CpuUse,
    busy_between,
    choose_threads,
    cpu_ticks,
    measure_cpu_use,
    pick_threads,
)


def _stat(*cpus: tuple[int, int]) -> str:
    """A ``/proc/stat`` text whose CPU k spent ``cpus[k] = (busy, idle)`` ticks."""
    lines = [f"cpu  {sum(b for b, _ in cpus)} 0 0 {sum(i for _, i in cpus)} 0 0 0 0 0 0"]
    lines += [f"cpu{k} {b} 0 0 {i} 0 0 0 0 0 0" for k, (b, i) in enumerate(cpus)]
    return "\n".join(lines + ["intr 1 2 3", "procs_running 1"]) + "\n"


@pytest.mark.parametrize(
    ("cpus", "busy", "threads"),
    [
        (2, 0.0, 2), (2, 0.49, 2), (2, 0.5, 1), (2, 1.0, 1), (2, 2.0, 1),
        (8, 0.3, 8), (8, 1.0, 7), (8, 2.6, 5), (8, 8.0, 1), (1, 0.0, 1), (1, 1.0, 1),
    ],
)
def test_rule_leaves_out_each_cpu_others_use_half_of(cpus, busy, threads):
    choice = choose_threads(0, cpus, CpuUse(cpus, busy, 0.4), load=9.0)
    assert choice.threads == threads
    assert f"{busy:.2f} of {cpus} CPUs" in choice.reason


def test_rule_ignores_the_load_average_once_measured():
    # a burst that just ended: the load average says busy, the CPUs say idle
    assert choose_threads(0, 2, CpuUse(2, 0.02, 0.4), load=0.85).threads == 2
    # a job that just started: the load average has not caught up yet
    assert choose_threads(0, 2, CpuUse(2, 1.0, 0.4), load=0.1).threads == 1


def test_rule_setting_and_fallback_without_proc_stat():
    set_ = choose_threads(3, 2, None, load=5.0)
    assert (set_.threads, set_.reason) == (3, "num_threads = 3 in the config")
    assert choose_threads(0, 4, None, load=0.2).threads == 4
    assert choose_threads(0, 4, None, load=0.5).threads == 1
    assert choose_threads(0, 4, None, load=None).threads == 1


def test_record_is_the_metrics_json_entry():
    choice = choose_threads(0, 2, CpuUse(2, 1.2, 0.41), load=3.5)
    assert choice.to_dict() == {
        "threads": 1, "setting": 0, "cpus": 2, "busy_cpus": 1.2, "window_s": 0.41, "loadavg_1min": 3.5,
        "reason": "auto: other processes used 1.20 of 2 CPUs over 0.41 s, taking 1; 1 thread keeps torch off the busy ones",
    }


def test_ticks_count_iowait_as_idle_and_steal_as_busy():
    text = "cpu0 10 1 4 100 20 2 3 5 0 0\ncpu1 0 0 0 50 0 0 0 0 0 0\n"
    assert cpu_ticks(text) == {0: (25, 145), 1: (0, 50)}
    before, after = cpu_ticks(_stat((0, 0), (0, 0))), cpu_ticks(_stat((30, 10), (0, 40)))
    assert busy_between(before, after, {0, 1}) == 0.75
    assert busy_between(before, after, {1}) == 0.0  # CPUs this process may not use are not counted


def test_idle_after_a_burst_picks_every_cpu(monkeypatch):
    """The machine the bootstrap just left: load average high, nothing running now."""
    cpus = sorted(runtime.allowed_cpus())
    snapshots = iter([_stat(*[(900, 100)] * len(cpus)), _stat(*[(901, 139)] * len(cpus))])
    monkeypatch.setattr(runtime, "_read_proc_stat", lambda: next(snapshots))
    monkeypatch.setattr(runtime, "loadavg", lambda: 3.2)
    choice = pick_threads(0, window_s=0.01)
    assert choice.threads == len(cpus) and choice.loadavg_1min == 3.2
    assert choice.busy_cpus is not None and choice.busy_cpus < 0.1 * len(cpus)


def test_setting_measures_nothing(monkeypatch):
    def fail() -> str:
        raise AssertionError("measured although num_threads was set")

    monkeypatch.setattr(runtime, "_read_proc_stat", fail)
    assert pick_threads(2).threads == 2


def test_no_proc_stat_falls_back_to_the_load_average():
    def missing() -> str:
        raise FileNotFoundError("/proc/stat")

    assert measure_cpu_use(0.01, read_stat=missing) is None


@pytest.mark.skipif(not Path("/proc/stat").is_file(), reason="needs Linux /proc/stat")
def test_one_thread_while_other_processes_keep_every_cpu_busy():
    n = os.cpu_count() or 1
    loop = "import sys\nprint('on', flush=True)\nwhile True: pass\n"
    workers = [subprocess.Popen([sys.executable, "-c", loop], stdout=subprocess.PIPE, text=True) for _ in range(n)]
    try:
        for w in workers:  # each has printed: all are spinning before the window opens
            assert w.stdout is not None and w.stdout.readline().strip() == "on"
        use = measure_cpu_use(0.4)
    finally:
        for w in workers:
            w.kill()
        for w in workers:
            w.wait()
            if w.stdout is not None:
                w.stdout.close()
    assert use is not None and use.cpus == len(runtime.allowed_cpus())
    assert use.busy_cpus >= use.cpus - 0.5, use
    assert choose_threads(0, use.cpus, use, load=0.0).threads == 1


def test_measurement_leaves_out_this_process(monkeypatch):
    """A CPU this process kept busy over the whole window is not another process's load."""
    import time

    snapshots = iter([_stat((0, 0), (0, 0)), _stat((40, 0), (0, 40))])
    monkeypatch.setattr(runtime, "allowed_cpus", lambda: {0, 1})
    monkeypatch.setattr(runtime, "_own_cpu_seconds", time.monotonic)  # one CPU's worth, all window long
    use = measure_cpu_use(0.05, read_stat=lambda: next(snapshots))
    assert use is not None and use.cpus == 2 and use.busy_cpus <= 0.05
