"""Where a job runs: torch threads, the device, how busy the machine is, the library versions.

Shared by every recipe (the main job, the probe, the loop), so each picks threads and device the
same way and reports the same environment.
"""

from __future__ import annotations

import os
import platform
from typing import Any


def resolve_threads(setting: int, load: float | None) -> int:
    """Torch CPU threads for ``num_threads = setting`` (0 = auto).

    Auto uses every CPU on an idle machine and 1 thread otherwise: with other processes running,
    multi-threaded torch slowed the 2-CPU development machine 5-13x (threads wait for each other
    while one is descheduled), while 1 thread kept about 120 tokens/s of LoRA training.

    Example:
        >>> resolve_threads(3, 5.0), resolve_threads(0, 4.0)
        (3, 1)
    """
    if setting > 0:
        return setting
    cpus = os.cpu_count() or 1
    return cpus if load is not None and load < 0.5 else 1


def pick_device(setting: str) -> str:
    """``auto`` -> ``cuda`` when available, else ``cpu``; an explicit ``cuda`` must exist.

    Raises:
        ValueError: ``cuda`` asked for on a machine without a CUDA device.
    """
    import torch

    if setting == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if setting == "cuda" and not torch.cuda.is_available():
        raise ValueError("[training] device = 'cuda' but no CUDA device is available")
    return setting


def loadavg() -> float | None:
    """The 1-minute load average (None where the OS has none).

    Other processes on a small machine change the timings a lot; the report says how busy it was.
    """
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def environment(device: str) -> dict[str, Any]:
    """Device, library versions, Python, torch threads and machine, for ``metrics.json``."""
    import peft
    import torch
    import transformers

    return {
        "device": device,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "peft": peft.__version__,
        "python": platform.python_version(),
        "threads": torch.get_num_threads(),
        "machine": platform.machine(),
    }
