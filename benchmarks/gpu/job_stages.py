"""The device check's other stages: the environment, the repository's CUDA/bf16 tests, and the main
job (``replaybank run``, the embedded default experiment) with a random model of SmolLM2-135M's
shape in place of the embedded weights (they do not travel to the device).

The random model writes no usable answer, so self-synthesis would stop the run ("yielded no usable
row"): its generations still run (and are timed), and their texts are then replaced by fixed
sentences, as the tests do.

    >>> [Path(f).name for f in TEST_FILES]
    ['test_cuda.py', 'test_device.py', 'test_memory.py', 'test_torch_tree.py']
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
CARRY = REPO / "benchmarks" / "gpu" / "carry"
#: the CUDA/bf16 tests: real CUDA runs (skipped without a GPU), and the device and bf16 handling
TEST_FILES = ["tests/llm/test_cuda.py", "tests/llm/test_device.py", "tests/llm/train/test_memory.py",
              "tests/test_torch_tree.py"]  # fmt: skip
#: the dry run's selection: the stage's plumbing, not the tests (the suite runs them on the CPU anyway)
TINY_SELECTION = ["tests/llm/test_cuda.py", "-k", "load_model"]
PACKAGES = ["transformers", "peft", "accelerate", "tokenizers", "safetensors", "huggingface-hub", "numpy"]


def stage_env(device: str, tiny: bool, log: Any = print) -> dict[str, Any]:
    """Python, torch, CUDA, the GPU, bf16 support, library versions and a bf16 matmul rate."""
    import torch

    info: dict[str, Any] = {"python": platform.python_version(), "torch": torch.__version__,
                            "cuda_available": torch.cuda.is_available(), "torch_cuda": torch.version.cuda,
                            "device": device, "cpus": os.cpu_count()}  # fmt: skip
    for name in PACKAGES:
        try:
            info[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            info[name] = None
    import transformers

    import replaybank

    info["replaybank_from"] = str(Path(replaybank.__file__).parent)
    info["transformers_from"] = str(Path(transformers.__file__).parent)
    if device.startswith("cuda"):
        props = torch.cuda.get_device_properties(device)
        info.update(gpu=props.name, capability=f"{props.major}.{props.minor}", gpu_memory_gib=props.total_memory / 2**30,
                    multiprocessors=props.multi_processor_count, bf16_supported=torch.cuda.is_bf16_supported(),
                    tf32_matmul=torch.backends.cuda.matmul.allow_tf32)  # fmt: skip
    n = 256 if tiny else 8192
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16, generator=torch.Generator(device).manual_seed(0))
    for _ in range(3):
        a @ a
    _sync(device)
    t0 = time.perf_counter()
    for _ in range(10):
        a @ a
    _sync(device)
    info["bf16_matmul_tflops"] = 10 * 2 * n**3 / (time.perf_counter() - t0) / 1e12
    info["bf16_matmul_n"] = n
    info.setdefault("bf16_supported", True)  # on a CPU: the matmul above ran
    log(f"env: {json.dumps(info)}")
    return info


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()


class _Outcomes:
    """A pytest plugin that keeps the outcome counts and the failed and skipped tests."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.notes: list[str] = []

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        stats = terminalreporter.stats
        self.counts = {k: len(v) for k, v in stats.items() if k in ("passed", "failed", "skipped", "error", "xfailed", "xpassed")}
        for kind in ("failed", "error", "skipped"):
            for rep in stats.get(kind, []):
                reason = rep.longrepr[2] if kind == "skipped" and isinstance(rep.longrepr, tuple) else ""
                self.notes.append(f"{kind.upper()} {rep.nodeid} {reason}".rstrip())


def stage_tests(device: str, tiny: bool, log: Any = print) -> dict[str, Any]:
    """``pytest`` on :data:`TEST_FILES` (``tiny``: :data:`TINY_SELECTION`) in this process, with the
    tokenizer of the carried SmolLM2 folder for the tests that need one."""
    import pytest

    files = TINY_SELECTION if tiny else TEST_FILES
    folder = smollm2_folder()
    if folder is not None:
        os.environ.setdefault("REPLAYBANK_TEST_TOKENIZER", str(folder))
    outcomes = _Outcomes()
    t0 = time.perf_counter()
    here = os.getcwd()
    os.chdir(REPO)
    try:
        code = pytest.main(["-q", "-p", "no:cacheprovider", "-W", "ignore::FutureWarning", *files], plugins=[outcomes])
    finally:
        os.chdir(here)
    return {"files": files, "returncode": int(code), "counts": outcomes.counts, "notes": outcomes.notes,
            "seconds": time.perf_counter() - t0}  # fmt: skip


def smollm2_folder() -> Path | None:
    """Config and tokenizer of SmolLM2-135M-Instruct (no weights are read): the carried copy
    (``benchmarks/gpu/prepare.sh``), else the local cache of the embedded model, else None."""
    if (CARRY / "smollm2" / "tokenizer.json").is_file():
        return CARRY / "smollm2"
    from replaybank.llm.model import cache_dir

    found = sorted(cache_dir().glob("SmolLM2-135M-Instruct*/tokenizer.json"))
    return found[0].parent if found else None


def _random_model_folder(source: Path, tiny: bool, where: Path) -> Path:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(source)
    config = AutoConfig.from_pretrained(source)
    if tiny:  # 2 layers of width 32, SmolLM2's vocabulary and tokenizer
        config.update({"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                       "num_key_value_heads": 2, "head_dim": 8})  # fmt: skip
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config)
    model.save_pretrained(where)
    tok.save_pretrained(where)
    return where


def _canned_self_answers() -> None:
    import replaybank.llm.data.selfsynth as selfsynth
    from replaybank.llm.eval.decode import Generation

    real = selfsynth.generate_detailed

    def run_then_replace(model: Any, tokenizer: Any, prompts: Any, **kw: Any) -> list[Any]:
        done = real(model, tokenizer, prompts, **kw)  # the real generation, timed with the job
        return [Generation(f"Here is a short answer number {k} about it.", False, 12) for k, _ in enumerate(done)]

    selfsynth.generate_detailed = run_then_replace


def stage_mainjob(device: str, tiny: bool, log: Any = print) -> dict[str, Any]:
    """``replaybank run`` (the embedded default; ``tiny``: a tiny budget) on ``device`` with a random
    SmolLM2-shaped model, in a fresh cache. Returns its wall time, phase timings and peak memory."""
    import torch

    from replaybank.llm.config import Config
    from replaybank.llm.recipes.rehearsal import run_experiment

    source = smollm2_folder()
    if source is None:
        return {"skipped": "no SmolLM2 tokenizer: run benchmarks/gpu/prepare.sh, or install the embedded model"}
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["REPLAYBANK_CACHE"] = str(Path(tmp) / "cache")  # cold: base answers, self rows
        folder = _random_model_folder(source, tiny, Path(tmp) / "model")
        _canned_self_answers()
        raw: dict[str, Any] = {"training": {"base_model": str(folder), "device": device}}
        if tiny:
            raw["training"].update(batch_size=4, rehearsal_rows_per_epoch=8, num_threads=1, max_seq_length=64)
            raw["data"] = {"domain_train_rows": 8, "domain_eval_rows": 2, "general_eval_rows": 2, "self_rows": 4}
            # generation_batch_size 8: self-synthesis answers 8 prompts for its 4 rows, not the default 64
            raw["evaluation"] = {"suite_per_family": 1, "max_new_tokens": 2, "probe_pairs": 1, "generation_batch_size": 8,
                                 "arms": ["base", "naive", "rehearsal-self"]}
            raw["output"] = {"save_adapters": False}
        cfg = Config.from_dict(raw, source="benchmarks/gpu/check.py main job")
        t0 = time.perf_counter()
        stamp = lambda msg: log(f"[{time.perf_counter() - t0:7.1f} s] {msg}")  # noqa: E731
        metrics = run_experiment(cfg, Path(tmp) / "out", log=stamp, max_steps=1 if tiny else None).to_json()
    steps = {arm: sum(len(g["train"]["steps"]) for g in r.get("generations", []) if "train" in g)
             for arm, r in metrics["arms"].items()}  # fmt: skip
    return {
        "wall_seconds": metrics["wall_seconds"], "timings": metrics.get("timings", {}),
        "arms": sorted(metrics["arms"]), "budget": "tiny" if tiny else "the embedded default (1 seed)",
        "steps": steps, "device": metrics["environment"]["device"],
        "peak_gib": torch.cuda.max_memory_allocated() / 2**30 if device.startswith("cuda") else None,
        "stage_seconds": time.perf_counter() - t_start,
    }  # fmt: skip
