"""The resume checkpoint is read with ``torch.load(weights_only=True)``: tensors and plain
containers round-trip; a pickled object is refused before it can run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from replaybank.errors import ReplayBankError

torch = pytest.importorskip("torch")
peft = pytest.importorskip("peft")

from replaybank.llm.train.checkpoint import (  # noqa: E402
    CHECKPOINT_SCHEMA_VERSION,
    load_checkpoint,
    save_checkpoint,
)
from replaybank.llm.train.lora import TrainLog  # noqa: E402
from replaybank.mixing import Mixer  # noqa: E402


class _Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(4, 4)

    def forward(self, x: Any) -> Any:
        return self.proj(x)


def _lora(seed: int) -> tuple[Any, Any]:
    torch.manual_seed(seed)
    model = peft.get_peft_model(_Net(), peft.LoraConfig(r=2, lora_alpha=2, target_modules=["proj"], init_lora_weights=False))
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    return model, opt


def _step(model: Any, opt: Any) -> None:
    loss = model(torch.ones(3, 4)).pow(2).sum()
    loss.backward()
    opt.step()
    opt.zero_grad()


def test_checkpoint_round_trips_under_weights_only(tmp_path: Path) -> None:
    model, opt = _lora(0)
    _step(model, opt)
    mixer = Mixer([20, 8], [0.75, 0.25], 4, seed=3)
    next(iter(mixer.epoch(0)))
    log = TrainLog(steps=[{"step": 1, "loss": np.float64(0.5), "batch": "ab"}], evals=[{"step": 1, "general_loss": np.float32(1.5)}], tokens=12, seconds=0.25)
    path = tmp_path / "checkpoint.pt"
    save_checkpoint(path, model, opt, mixer, log, step=1)
    torch.load(path, weights_only=True)  # the file itself is weights_only-clean

    other, other_opt = _lora(0)  # same base weights; adapters moved away, optimizer state empty
    with torch.no_grad():
        for name, p in other.named_parameters():
            if "lora_" in name:
                p.add_(1.0)
    other_mixer = Mixer([20, 8], [0.75, 0.25], 4, seed=3)
    restored = TrainLog()
    assert load_checkpoint(path, other, other_opt, other_mixer, restored) == 1
    for (name, a), b in zip(model.named_parameters(), other.parameters(), strict=True):
        if "lora_" in name:
            assert torch.equal(a, b), name
    assert other_mixer.state_dict() == mixer.state_dict()
    assert restored.steps == [{"step": 1, "loss": 0.5, "batch": "ab"}] and restored.evals[0]["general_loss"] == 1.5
    assert (restored.tokens, restored.seconds) == (12, 0.25)
    # the optimizer continues identically: one more step on both gives the same weights
    _step(model, opt)
    _step(other, other_opt)
    for (name, a), b in zip(model.named_parameters(), other.parameters(), strict=True):
        if "lora_" in name:
            assert torch.allclose(a, b), name


class _Touch:
    """Unpickling this would create ``marker``: stands in for any code a stranger's file runs."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (Path.touch, (self.marker,))


def test_checkpoint_with_a_pickled_object_is_refused_without_running_it(tmp_path: Path) -> None:
    marker = tmp_path / "code-ran"
    path = tmp_path / "checkpoint.pt"
    torch.save({"schema_version": CHECKPOINT_SCHEMA_VERSION, "step": 1, "log": _Touch(marker)}, path)
    with pytest.raises(ReplayBankError, match=r"checkpoint.pt: refused: the checkpoint holds objects other than tensors"):
        load_checkpoint(path, None, None, None, TrainLog())  # type: ignore[arg-type]
    assert not marker.exists()


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"schema_version": 99}, r"schema_version 99, expected 1"),
        ({"step": "4"}, r"field 'step' is str, expected int"),
        ({"step": -1}, r"step -1 is negative"),
        ({"torch_rng": [1, 2]}, r"field 'torch_rng' is list, expected Tensor"),
        ({"log": {"steps": [], "evals": [], "tokens": 1.5, "seconds": 0.0}}, r"field 'log.tokens' is float"),
        ({"adapter": {"w": [1.0]}}, r"'adapter' holds non-tensor values"),
        ({"cuda_rng": [1, 2]}, r"field 'cuda_rng' is list, expected Tensor"),
    ],
)
def test_checkpoint_fields_are_checked_before_use(tmp_path: Path, change: dict[str, Any], match: str) -> None:
    state = {
        "schema_version": CHECKPOINT_SCHEMA_VERSION, "step": 1, "adapter": {}, "optimizer": {}, "mixer": {},
        "torch_rng": torch.get_rng_state(), "log": {"steps": [{"step": 1}], "evals": [], "tokens": 0, "seconds": 0.0},
    }
    path = tmp_path / "checkpoint.pt"
    torch.save({**state, **change}, path)
    with pytest.raises(ReplayBankError, match=match):
        load_checkpoint(path, None, None, None, TrainLog())  # type: ignore[arg-type]


def test_truncated_checkpoint_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.pt"
    torch.save({"schema_version": CHECKPOINT_SCHEMA_VERSION}, path)
    path.write_bytes(path.read_bytes()[:20])
    with pytest.raises(ReplayBankError, match=r"not a readable checkpoint"):
        load_checkpoint(path, None, None, None, TrainLog())  # type: ignore[arg-type]


def test_cuda_rng_is_saved_and_restored_on_a_gpu_and_absent_on_cpu(tmp_path: Path, monkeypatch: Any) -> None:
    from replaybank.llm.train import checkpoint

    model, opt = _lora(0)
    mixer, log = Mixer([20, 8], [0.75, 0.25], 4, seed=3), TrainLog(steps=[{"step": 1}])  # step 1 logged
    save_checkpoint(tmp_path / "cpu.pt", model, opt, mixer, log, step=1)
    assert "cuda_rng" not in torch.load(tmp_path / "cpu.pt", weights_only=True)

    gpu = torch.device("cuda", 1)
    saved_state = torch.arange(16, dtype=torch.uint8)
    restored: list[tuple[Any, Any]] = []
    monkeypatch.setattr(checkpoint, "model_device", lambda m: gpu)
    monkeypatch.setattr(torch.cuda, "get_rng_state", lambda device: saved_state.clone() if device == gpu else None)
    monkeypatch.setattr(torch.cuda, "set_rng_state", lambda state, device: restored.append((state, device)))
    save_checkpoint(tmp_path / "gpu.pt", model, opt, mixer, log, step=1)
    assert torch.equal(torch.load(tmp_path / "gpu.pt", weights_only=True)["cuda_rng"], saved_state)
    load_checkpoint(tmp_path / "gpu.pt", model, opt, Mixer([20, 8], [0.75, 0.25], 4, seed=3), TrainLog())
    assert len(restored) == 1 and torch.equal(restored[0][0], saved_state) and restored[0][1] == gpu

    restored.clear()
    monkeypatch.setattr(checkpoint, "model_device", lambda m: torch.device("cpu"))
    load_checkpoint(tmp_path / "gpu.pt", model, opt, Mixer([20, 8], [0.75, 0.25], 4, seed=3), TrainLog())
    assert restored == []  # resumed on the CPU: no CUDA generator to restore
