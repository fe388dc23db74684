"""Where a job runs: torch threads, the device, how busy the machine is, the library versions.

Shared by every recipe (the main job, the probe, the loop), so each picks threads and device the
same way and reports the same environment.
"""

from __future__ import annotations

import os
import platform
from typing import Any, Literal

from replaybank.errors import ReplayBankError


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


Precision = Literal["auto", "fp32", "bf16"]
PRECISIONS: tuple[Precision, ...] = ("auto", "fp32", "bf16")


class PrecisionError(ReplayBankError):
    """A precision that is not one of ``auto``, ``fp32``, ``bf16``."""


def resolve_precision(precision: str, device_type: str = "cpu") -> Literal["fp32", "bf16"]:
    """The arithmetic ``precision`` means on ``device_type``: ``auto`` is ``bf16`` on a CPU with
    native bfloat16 units (AMX tiles or AVX512-BF16), else ``fp32``.

    Raises:
        PrecisionError: ``precision`` is not one of ``auto``, ``fp32``, ``bf16``.

    Example:
        >>> resolve_precision("fp32"), resolve_precision("bf16"), resolve_precision("auto", "cuda")
        ('fp32', 'bf16', 'fp32')
    """
    if precision not in PRECISIONS:
        raise PrecisionError(f"precision {precision!r}: expected one of {', '.join(PRECISIONS)}")
    if precision != "auto":
        return "bf16" if precision == "bf16" else "fp32"
    if device_type != "cpu":
        return "fp32"
    return "bf16" if _cpu_has_bf16() else "fp32"


def _cpu_has_bf16() -> bool:
    import torch

    probes = ("_is_amx_tile_supported", "_is_avx512_bf16_supported")
    try:
        return any(bool(getattr(torch.cpu, name)()) for name in probes if hasattr(torch.cpu, name))
    except Exception:  # a private probe that changed shape: fall back to the exact path
        return False


def autocast(precision: str, device_type: str) -> Any:
    """``torch.autocast`` in bfloat16 when ``precision`` resolves to bf16 on ``device_type``, else a
    context that changes nothing (the weights keep their dtype either way)."""
    import torch

    on = resolve_precision(precision, device_type) == "bf16"
    return torch.autocast(device_type, dtype=torch.bfloat16, enabled=on)
