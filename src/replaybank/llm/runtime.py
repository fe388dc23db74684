"""Where a job runs: torch threads, the device, how busy the machine is, the library versions.

Shared by every recipe (the main job, the probe, the loop), so each picks threads and device the
same way and reports the same environment.
"""

from __future__ import annotations

import contextlib
import math
import os
import platform
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from replaybank.errors import ReplayBankError

#: A CPU counts as taken when other processes used at least this share of it over the window.
TAKEN_SHARE = 0.5
#: How long the auto thread count watches the CPUs before the run starts.
WINDOW_S = 0.4
#: Where the CPUs cannot be watched, a 1-minute load average below this counts as an idle machine.
IDLE_LOAD = 0.5


@dataclass(frozen=True)
class CpuUse:
    """What the CPUs this process may use did over a short window, apart from this process.

    Attributes:
        cpus: CPUs this process may run on.
        busy_cpus: CPUs' worth of time other processes used over the window (0 .. ``cpus``).
        window_s: the window's length in seconds.
    """

    cpus: int
    busy_cpus: float
    window_s: float


@dataclass(frozen=True)
class ThreadChoice:
    """Torch CPU threads for a job and why: the ``thread_choice`` record of ``metrics.json``.

    Attributes:
        threads: threads chosen.
        setting: the config's ``num_threads`` (0 = auto).
        cpus: CPUs this process may run on.
        busy_cpus: CPUs' worth of time other processes used over the window (None: not measured).
        window_s: the window's length in seconds (None: not measured).
        loadavg_1min: the 1-minute load average at the time (None where the OS has none).
        reason: the choice as a sentence, for the log and the report.
    """

    threads: int
    setting: int
    cpus: int
    busy_cpus: float | None
    window_s: float | None
    loadavg_1min: float | None
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def choose_threads(setting: int, cpus: int, use: CpuUse | None, load: float | None) -> ThreadChoice:
    """Torch CPU threads for ``num_threads = setting`` (0 = auto), given what the CPUs do now.

    Auto leaves out each CPU other processes are using (``use.busy_cpus`` rounded half up: a CPU
    counts as taken from half of it) and takes the rest, at least 1. A thread that shares its CPU with
    another busy process holds up every other thread at each barrier: on the 2-CPU development
    machine two threads ran 5-13x slower than one while other jobs ran. The load average is
    not used where ``use`` is measured: it trails by a minute, so a burst that has just ended
    (a ``pip install`` before the run) would cost the whole run its threads. Without a
    measurement (no ``/proc/stat``) auto falls back to every CPU below load 0.5, else 1.

    Example:
        >>> idle, busy = CpuUse(2, 0.04, 0.4), CpuUse(2, 1.9, 0.4)
        >>> choose_threads(0, 2, idle, 3.1).threads, choose_threads(0, 2, busy, 0.2).threads
        (2, 1)
        >>> choose_threads(0, 8, CpuUse(8, 2.6, 0.4), 2.0).reason
        'auto: other processes used 2.60 of 8 CPUs over 0.4 s, taking 3; 5 threads on the rest'
        >>> choose_threads(3, 2, None, None).threads
        3
    """
    busy = use.busy_cpus if use is not None else None
    window = use.window_s if use is not None else None

    def record(threads: int, reason: str) -> ThreadChoice:
        return ThreadChoice(threads, setting, cpus, busy, window, load, reason)

    if setting > 0:
        return record(setting, f"num_threads = {setting} in the config")
    if use is None:
        if load is None:
            return record(1, "auto with neither /proc/stat nor a load average, 1 thread")
        if load < IDLE_LOAD:
            return record(cpus, f"auto without /proc/stat: 1-minute load average {load} is below {IDLE_LOAD}, every CPU")
        return record(1, f"auto without /proc/stat: 1-minute load average {load} is not below {IDLE_LOAD}, 1 thread")
    taken = min(cpus, math.floor(use.busy_cpus + (1 - TAKEN_SHARE)))
    threads = max(1, cpus - taken)
    seen = f"auto: other processes used {use.busy_cpus:.2f} of {cpus} CPUs over {use.window_s:g} s"
    if taken == 0:
        return record(threads, f"{seen}, every CPU")
    if threads == 1:
        return record(1, f"{seen}, taking {taken}; 1 thread keeps torch off the busy ones")
    return record(threads, f"{seen}, taking {taken}; {threads} threads on the rest")


def cpu_ticks(proc_stat: str) -> dict[int, tuple[int, int]]:
    """``{cpu: (busy ticks, all ticks)}`` from the text of ``/proc/stat`` (idle and iowait are not busy;
    steal is: another machine's time on this CPU).

    Example:
        >>> cpu_ticks("cpu  9 0 3 80 2 0 0 1 0 0\\ncpu0 5 0 2 40 1 0 0 1 0 0\\nintr 7")
        {0: (8, 49)}
    """
    ticks: dict[int, tuple[int, int]] = {}
    for line in proc_stat.splitlines():
        name, _, rest = line.partition(" ")
        if not name.startswith("cpu") or name == "cpu":
            continue
        fields = [int(v) for v in rest.split()[:8]]  # user nice system idle iowait irq softirq steal
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
        ticks[int(name[3:])] = (sum(fields) - idle, sum(fields))
    return ticks


def busy_between(before: dict[int, tuple[int, int]], after: dict[int, tuple[int, int]], cpus: set[int]) -> float:
    """CPUs' worth of busy time on ``cpus`` between two :func:`cpu_ticks` snapshots.

    Example:
        >>> busy_between({0: (0, 0), 1: (0, 0)}, {0: (40, 40), 1: (10, 40)}, {0, 1})
        1.25
    """
    busy = 0.0
    for cpu in cpus & before.keys() & after.keys():
        d_busy = after[cpu][0] - before[cpu][0]
        d_all = after[cpu][1] - before[cpu][1]
        busy += d_busy / d_all if d_all > 0 else 0.0
    return busy


def _read_proc_stat() -> str:
    return Path("/proc/stat").read_text()


def allowed_cpus() -> set[int]:
    """The CPUs this process may run on (every CPU where the OS cannot say)."""
    try:
        return set(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return set(range(os.cpu_count() or 1))


def measure_cpu_use(window_s: float = WINDOW_S, read_stat: Callable[[], str] | None = None) -> CpuUse | None:
    """How busy the CPUs this process may use are over ``window_s`` seconds, this process's own
    threads left out (its CPU time over the window is subtracted); None without ``/proc/stat``.

    Sleeps for the window; on a 100 Hz tick 0.4 s resolves each CPU's share to 2.5%.
    """
    read = read_stat or _read_proc_stat
    cpus = allowed_cpus()
    try:
        before = cpu_ticks(read())
        own0, t0 = _own_cpu_seconds(), time.monotonic()
        time.sleep(window_s)
        after = cpu_ticks(read())
        own1, t1 = _own_cpu_seconds(), time.monotonic()
    except (OSError, ValueError, IndexError):
        return None
    seen = cpus & before.keys() & after.keys()
    if not seen:
        return None
    elapsed = max(t1 - t0, 1e-9)
    busy = busy_between(before, after, seen) - (own1 - own0) / elapsed
    return CpuUse(len(seen), round(min(max(busy, 0.0), len(seen)), 2), round(elapsed, 2))


def _own_cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system


def pick_threads(setting: int, window_s: float = WINDOW_S) -> ThreadChoice:
    """:func:`choose_threads` on this machine now: measures only when ``setting`` is 0 (auto)."""
    use = measure_cpu_use(window_s) if setting == 0 else None
    cpus = use.cpus if use is not None else len(allowed_cpus())
    return choose_threads(setting, cpus, use, loadavg())


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


def device_type(model: Any) -> str:
    """``cpu`` or ``cuda``: where ``model``'s first parameter lives (``cpu`` for a stand-in without any)."""
    params = getattr(model, "parameters", None)
    first = next(iter(params()), None) if callable(params) else None
    return str(first.device.type) if first is not None else "cpu"


def autocast(precision: str, device_type: str) -> Any:
    """``torch.autocast`` in bfloat16 when ``precision`` resolves to bf16 on ``device_type``, else a
    context that changes nothing (the weights keep their dtype either way)."""
    import torch

    on = resolve_precision(precision, device_type) == "bf16"
    return torch.autocast(device_type, dtype=torch.bfloat16, enabled=on)


class FrozenBf16:
    """``autocast(precision, device)`` over a model whose frozen fp32 linear weights are swapped
    for bfloat16 copies while it runs (CPU only).

    Autocast keeps the bf16 casts of trainable weights but casts a frozen weight again at every
    call, so a LoRA model's whole base was converted at every forward pass: each token of greedy
    decoding, each micro-batch and base pass of a training step. The copies are made once (about
    half the model's fp32 size, held for this object's life) and swapped in by attribute only.
    The numbers are unchanged: autocast rounds a weight to bf16 the same way before its matmul
    (tested: identical tokens and identical LoRA gradients). On a GPU, or when the precision
    resolves to fp32, this is plain :func:`autocast`.

    Example::

        casts = FrozenBf16(model, "auto")
        for batch in batches:
            with casts:
                loss = model(**batch).loss
            loss.backward()  # outside is fine too: the backward graph kept the bf16 copies
    """

    def __init__(self, model: Any, precision: str) -> None:
        import torch

        self.device_type = device_type(model)
        self.on = resolve_precision(precision, self.device_type) == "bf16"
        self._modules: list[Any] = []
        self._copies: list[Any] = []
        if self.on and self.device_type == "cpu":
            for module in model.modules():
                w = getattr(module, "weight", None)
                if isinstance(module, torch.nn.Linear) and w is not None and not w.requires_grad and w.dtype == torch.float32:
                    self._modules.append(module)
                    self._copies.append(torch.nn.Parameter(w.detach().to(torch.bfloat16), requires_grad=False))
        self._kept: list[Any] = []
        self._autocast: Any = None

    def __enter__(self) -> FrozenBf16:
        import torch

        if self._kept:
            raise RuntimeError("FrozenBf16 is not re-entrant")
        self._autocast = torch.autocast(self.device_type, dtype=torch.bfloat16, enabled=self.on)
        self._autocast.__enter__()
        self._kept = [m.weight for m in self._modules]
        for module, copy in zip(self._modules, self._copies, strict=True):
            module.weight = copy
        return self

    def __exit__(self, *exc: Any) -> None:
        for module, weight in zip(self._modules, self._kept, strict=True):
            module.weight = weight
        self._kept = []
        self._autocast.__exit__(*exc)


#: Longest padded row a CPU training step runs with eager attention (see :func:`short_row_attention`).
EAGER_MAX_WIDTH = 256


@contextlib.contextmanager
def short_row_attention(model: Any, width: int) -> Iterator[None]:
    """Eager attention while one CPU training step runs rows at most :data:`EAGER_MAX_WIDTH`
    tokens wide; the model's own implementation (SDPA) otherwise and afterwards.

    On the 2-CPU development machine SDPA's fused CPU kernel spent 18% of a SmolLM2 LoRA step in
    its backward pass on 64-token rows; eager attention (plain matmuls and a softmax) made the
    naive step about 10% and the self-distill step about 15% faster (``benchmarks/train_step.py``).
    Eager keeps a ``rows x heads x width x width`` probability tensor per layer for the backward
    pass: small for short rows, quadratic in the width, hence the cap. On a GPU, or for a model
    whose attention cannot be switched, nothing changes.
    """
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    current = getattr(getattr(base, "config", None), "_attn_implementation", None)
    switch = (device_type(base) == "cpu" and current == "sdpa" and width <= EAGER_MAX_WIDTH
              and hasattr(base, "set_attn_implementation"))
    if not switch:
        yield
        return
    base.set_attn_implementation("eager")
    try:
        yield
    finally:
        base.set_attn_implementation(current)
