"""The device check: what replaybank's LoRA path does on a GPU, in one call of at most 8 minutes.

    bash benchmarks/gpu/check.sh                  # on the GPU machine (see docs/llm.md, "Running at scale")
    python benchmarks/gpu/check.py --dry-run      # every stage on the CPU with tiny shapes (< 1 minute)

Stages, each in its own (forked) process with its own time limit (a stage that runs out of time or
crashes is recorded as such and the next one starts; its GPU memory goes back with its process):

1. ``env``: Python, torch, CUDA, the GPU, bf16 support, library versions, a bf16 matmul rate;
2. ``tests``: the repository's CUDA/bf16 tests (``tests/llm/test_cuda.py`` and the device tests);
3. ``per``: the torch priority tree on the device (``Prioritized(device="cuda")``, branching 32 and
   128) against the default numba tree, a ``sample`` + ``update_priorities`` step at 10^5 and 10^6
   items, batches of 256 and 8,192 (``benchmarks/per_torch.py``);
4. ``speed``: LoRA step tokens/s of replaybank's loop vs ``transformers.Trainer`` (bf16, the same
   rows, the same LoRA) on random models of SmolLM2-135M's, Qwen2.5-1.5B's and Qwen2.5-7B's shape;
5. ``memory``: peak allocated memory of a Qwen2.5-7B-shaped model with LoRA r32 on every linear
   layer at 1, 2, 4 and 8 rows of 2048 tokens, without and with gradient checkpointing;
6. ``mainjob``: the wall time of ``replaybank run`` (the embedded default experiment) with a
   random SmolLM2-135M-shaped model in place of the embedded weights.

Writes ``check.json`` (every figure), ``check.md`` (the table, also printed) and ``check.log``
(every stage's output) into ``--out`` (default ``$OUT`` when set, else ``runs/gpu-check``).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from report import render  # noqa: E402

#: stage -> (seconds on a GPU, seconds in the dry run)
LIMITS = {"env": (60, 60), "tests": (120, 120), "per": (60, 60), "speed": (150, 120), "memory": (120, 90), "mainjob": (200, 120)}
STAGES = list(LIMITS)


def run_stage(name: str, device: str, tiny: bool) -> dict[str, Any]:
    """Run one stage in this process (the child side of :func:`spawn`)."""
    import torch

    def log(msg: str) -> None:
        print(msg, flush=True)

    if not device.startswith("cuda"):
        torch.set_num_threads(1)
    if name == "env":
        from job_stages import stage_env

        return stage_env(device, tiny, log)
    if name == "tests":
        from job_stages import stage_tests

        return stage_tests(device, tiny, log)
    if name == "per":
        sys.path.insert(0, str(HERE.parent))
        from per_torch import measure

        if tiny:  # the plumbing: one small buffer on the CPU
            return measure(device, [10_000], [256], [32], rounds=1, seconds=0.02, log=log)
        return measure(device, [100_000, 1_000_000], [256, 8192], [32, 128], rounds=5, seconds=0.2, log=log)
    if name == "speed":
        from lora_stages import stage_speed

        return stage_speed(device, tiny, warmup=1 if tiny else 2, steps=1 if tiny else 5, log=log)
    if name == "memory":
        from lora_stages import stage_memory

        return stage_memory(device, tiny, log=log)
    from job_stages import stage_mainjob

    return stage_mainjob(device, tiny, log)


def preload() -> None:
    """Import the heavy libraries once, before the stages are forked (a CPU run only: a process that
    forks must not have touched CUDA, and some imports may). Saves each stage 3-5 s on a small CPU."""
    try:
        import peft  # noqa: F401
        import pytest  # noqa: F401
        import torch  # noqa: F401
        from transformers import LlamaForCausalLM, Qwen2ForCausalLM, Trainer  # noqa: F401

        import replaybank.llm.recipes.rehearsal  # noqa: F401
        import replaybank.llm.train  # noqa: F401
    except Exception as exc:  # the stages will fail with the full traceback in check.log
        print(f"preload failed: {exc!r}", flush=True)


def spawn(name: str, device: str, tiny: bool, limit: float, out: Path, log_file: Any) -> dict[str, Any]:
    """Run stage ``name`` in a forked child (its own process group, output into ``log_file``) for at
    most ``limit`` seconds; its status and result. A child that outlives the limit is killed with
    everything it started; its memory (GPU memory too) goes back with it."""
    result_file = out / f".{name}.json"
    result_file.unlink(missing_ok=True)
    log_file.write(f"\n===== stage {name} (limit {limit:.0f} s) =====\n")
    log_file.flush()
    sys.stdout.flush()
    sys.stderr.flush()
    t0 = time.perf_counter()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        code = 1
        try:
            os.setsid()
            os.dup2(log_file.fileno(), 1)
            os.dup2(log_file.fileno(), 2)
            result = run_stage(name, device, tiny)
            result_file.write_text(json.dumps(result, indent=1, default=str) + "\n")
            code = 0
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    rc: int | None = None
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            rc = os.waitstatus_to_exitcode(status)
            break
        if time.perf_counter() - t0 > limit:
            os.killpg(pid, signal.SIGKILL)  # the stage and anything it started
            os.waitpid(pid, 0)
            break
        time.sleep(0.1)
    entry: dict[str, Any] = {"seconds": round(time.perf_counter() - t0, 1), "limit_s": round(limit)}
    if rc is None:
        entry["status"] = f"timed out after {limit:.0f} s"
    elif rc != 0 or not result_file.is_file():
        entry["status"] = f"failed (exit code {rc}; see check.log)"
    else:
        entry["status"] = "ok"
        entry["result"] = json.loads(result_file.read_text())
        result_file.unlink()
    return entry


def write(report: dict[str, Any], out: Path, seconds: float) -> str:
    """Write ``check.json`` and ``check.md`` (the table, returned) as they stand."""
    report["total_seconds"] = round(seconds, 1)
    table = render(report)
    (out / "check.json").write_text(json.dumps(report, indent=1, default=str) + "\n")
    (out / "check.md").write_text(table)
    return table


def default_out() -> Path:
    return Path(os.environ["OUT"]) if os.environ.get("OUT") else Path("runs/gpu-check")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--dry-run", action="store_true", help="--device cpu --tiny: every stage on the CPU, tiny shapes")
    p.add_argument("--device", default=None, help="cuda (default when available), cuda:N or cpu")
    p.add_argument("--tiny", action="store_true", help="tiny shapes and budgets")
    p.add_argument("--out", type=Path, default=None, help="folder for check.json / check.md / check.log")
    p.add_argument("--budget", type=float, default=None, help="seconds for all stages (default 420; dry run 400)")
    p.add_argument("--stages", default=",".join(STAGES), help=f"comma-separated subset of {','.join(STAGES)}")
    args = p.parse_args(argv)
    tiny = args.tiny or args.dry_run
    device = "cpu" if args.dry_run else args.device
    stages = [s for s in args.stages.split(",") if s]
    unknown = [s for s in stages if s not in LIMITS]
    if unknown:
        p.error(f"--stages: unknown {', '.join(unknown)}; expected a subset of {','.join(STAGES)}")
    if device is None:
        device = "cuda" if _cuda_available() else "cpu"
    out = args.out or default_out()
    out.mkdir(parents=True, exist_ok=True)
    budget = args.budget if args.budget is not None else (400.0 if tiny else 420.0)
    start = time.perf_counter()
    if device == "cpu":
        preload()
    report: dict[str, Any] = {"device": device, "tiny": tiny, "budget_s": budget, "stages": {},
                              "when_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}  # fmt: skip
    print(f"device check: {device}{' (tiny shapes)' if tiny else ''}, stages {','.join(stages)}, budget {budget:.0f} s, "
          f"output in {out}", flush=True)  # fmt: skip
    table = write(report, out, 0.0)
    with open(out / "check.log", "w", encoding="utf-8") as log_file:
        for name in stages:
            left = budget - (time.perf_counter() - start)
            if left < 15:
                report["stages"][name] = {"status": "skipped: the budget is spent", "seconds": 0.0}
            else:
                limit = min(LIMITS[name][1 if tiny else 0], left)
                report["stages"][name] = spawn(name, device, tiny, limit, out, log_file)
            entry = report["stages"][name]
            print(f"stage {name}: {entry['status']} ({entry['seconds']} s)", flush=True)
            table = write(report, out, time.perf_counter() - start)  # after every stage: a killed call keeps it
    print("\n" + table, flush=True)
    return 0 if all(e["status"] == "ok" for e in report["stages"].values()) else 1


def _cuda_available() -> bool:
    proc = subprocess.run([sys.executable, "-c", "import torch; print(torch.cuda.is_available())"],
                          capture_output=True, text=True)  # fmt: skip
    return proc.stdout.strip() == "True"


if __name__ == "__main__":
    sys.exit(main())
