"""examples/hf_trainer_rehearsal.py on a tiny random Llama: it trains, the quota survives Trainer's
data pipeline, and a run resumed from a checkpoint logs the same losses as an uninterrupted one."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import socket
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

pytest.importorskip("datasets")
pytest.importorskip("peft")
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

EXAMPLE = Path(__file__).parents[2] / "examples" / "hf_trainer_rehearsal.py"


def _load_example():
    spec = importlib.util.spec_from_file_location("hf_trainer_rehearsal", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def setup(tmp_path_factory, tiny_lm):
    """The tiny random Llama of conftest.py (as ``root/model``) and two JSONL files."""
    root = tmp_path_factory.mktemp("hf-example")
    model_dir, tok = tiny_lm
    (root / "model").symlink_to(model_dir, target_is_directory=True)
    domain = [{"prompt": f"{a} + {b} =", "answer": str(a + b)} for a in range(8) for b in range(5)]
    general = [{"prompt": f"# q{i}?", "answer": f"a{i}"} for i in range(12)]  # '#' marks rehearsal
    for name, rows in (("domain", domain), ("general", general)):
        (root / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return root, tok.convert_tokens_to_ids("#")


def _argv(root: Path, out: str, steps: int, **extra: str) -> list[str]:
    argv = ["--model", str(root / "model"), "--domain", str(root / "domain.jsonl"),
            "--rehearsal", str(root / "general.jsonl"), "--ratio", "0.25", "--batch-size", "4",
            "--max-steps", str(steps), "--output-dir", str(root / out), "--learning-rate", "1e-2",
            "--lora-rank", "4"]  # fmt: skip
    for key, value in extra.items():
        argv += [f"--{key.replace('_', '-')}", value]
    return argv


def _run(root: Path, out: str, steps: int, **extra: str):
    return _load_example().main(_argv(root, out, steps, **extra))


def test_example_trains_with_the_quota_and_resumes_exactly(setup, monkeypatch):
    monkeypatch.setenv("WANDB_DISABLED", "true")
    root, marker = setup
    trainer = _run(root, "full", 4, save_steps="2")
    assert trainer.state.global_step == 4
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert len(losses) == 4 and all(math.isfinite(x) for x in losses)
    lora_b = [p for n, p in trainer.model.named_parameters() if "lora_B" in n]
    assert lora_b and any(float(p.detach().abs().sum()) > 0 for p in lora_b)  # LoRA B starts at zero

    # Every batch Trainer's (accelerate-prepared) dataloader yields holds 1 rehearsal row of 4.
    loader = trainer.get_train_dataloader()
    counts = []
    for k, batch in enumerate(loader):
        counts.append(int((batch["input_ids"][:, 0] == marker).sum()))
        if k == 29:  # 30 batches: past the end of the first epoch (40 domain rows, 3 per batch)
            break
    assert counts == [1] * 30

    # Resume from the step-2 checkpoint: steps 3 and 4 see the same rows, so the same losses.
    resumed = _run(root, "full", 4, resume=str(root / "full" / "checkpoint-2"))
    again = [h["loss"] for h in resumed.state.log_history if "loss" in h and h["step"] > 2]
    assert again == pytest.approx(losses[2:], rel=1e-5)


def test_resume_check_can_fail(setup, monkeypatch):
    """Control for the test above: a resumed run fed other rows logs other losses."""
    import replaybank.hf

    root, _ = setup
    full = _run(root, "control", 4, save_steps="2")
    losses = [h["loss"] for h in full.state.log_history if "loss" in h]
    real_mix = replaybank.hf.mix
    monkeypatch.setattr(replaybank.hf, "mix", lambda d, r, spec, **k: real_mix(d, r, replace(spec, seed=99), **k))
    resumed = _run(root, "control", 4, resume=str(root / "control" / "checkpoint-2"))
    again = [h["loss"] for h in resumed.state.log_history if "loss" in h and h["step"] > 2]
    assert again != pytest.approx(losses[2:], rel=1e-5)


def test_example_under_torchrun_on_two_ranks(setup):
    """The unchanged example on 2 CPU ranks (gloo): each rank trains on its part of every global
    batch, 1 rehearsal row of 4 per rank, and together they read the single-process global stream;
with --kl-weight, so KLToBase also runs under DDP."""
    from replaybank.hf import MixSpec, mix

    root, _ = setup
    out = root / "ddp"
    out.mkdir()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port",
           str(port), str(Path(__file__).with_name("trainer_ddp_worker.py")), str(out), "--",
           *_argv(root, "ddp-run", 3, kl_weight="0.5")]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]
    assert [r["world"] for r in ranks] == [2, 2] and [r["steps"] for r in ranks] == [3, 3]
    # KL to the base ran on each rank's rehearsal row (after 2 steps the adapter has moved).
    assert all(r["kl_positions"] > 0 and r["kl"] > 0 for r in ranks)
    per_step = list(zip(ranks[0]["seen"], ranks[1]["seen"], strict=False))
    assert len(per_step) >= 3
    for a, b in per_step:
        assert [sum(p.startswith("#") for p in part) for part in (a, b)] == [1, 1]
    got = [p for a, b in per_step for p in a + b]
    rows = [json.loads(line) for line in (root / "domain.jsonl").read_text().splitlines()]
    general = [json.loads(line) for line in (root / "general.jsonl").read_text().splitlines()]
    stream = mix(rows, general, MixSpec(0.25, batch_size=4, seed=0, world_size=2))
    want = [r["prompt"] for _, r in zip(range(len(got)), stream, strict=False)]
    assert got == want
