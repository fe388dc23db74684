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


def pick_device(setting: str, worker: int | None = None, where: str = "[training] device") -> str:
    """The torch device for ``device = setting``, checked against this machine before a model loads.

    ``auto`` -> ``cuda`` when available, else ``cpu``. ``cuda`` and ``cuda:N`` must exist.
    ``worker`` k (of ``--jobs``) given a bare ``cuda``/``auto`` gets GPU ``k mod n_gpus``, so
    every GPU of the machine is used; an explicit ``cuda:N`` pins every worker to GPU N.

    Raises:
        ConfigError: a spelling other than auto/cpu/cuda/cuda:N, ``cuda`` without a CUDA device,
            or ``cuda:N`` beyond the GPUs present (the message says how many there are).

    Example:
        >>> pick_device("cpu"), pick_device("cpu", worker=3)
        ('cpu', 'cpu')
    """
    from replaybank.llm.config.values import ConfigError, parse_device

    try:
        kind, index = parse_device(setting)
    except ValueError as exc:
        raise ConfigError(f"{where} = {setting!r}: {exc}") from None
    if kind == "cpu":
        return "cpu"
    import torch

    available = torch.cuda.is_available()
    count = torch.cuda.device_count() if available else 0
    if kind == "auto":
        if not count:
            return "cpu"
        kind = "cuda"
    if not count:
        raise ConfigError(f"{where} = {setting!r} but no CUDA device is available here (torch.cuda.is_available() is False)")
    if index is None:
        return f"cuda:{worker % count}" if worker is not None and count > 1 else "cuda"
    if index >= count:
        raise ConfigError(
            f"{where} = {setting!r} but this machine has {count} CUDA device{'s' if count > 1 else ''} "
            f"(cuda:0{f' .. cuda:{count - 1}' if count > 1 else ''})"
        )
    return f"cuda:{index}"


def use_device(device: str) -> None:
    """Make ``device``'s GPU the current one (CUDA RNG state, new tensors); no-op on CPU."""
    if device.startswith("cuda:"):
        import torch

        torch.cuda.set_device(int(device.split(":", 1)[1]))


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
