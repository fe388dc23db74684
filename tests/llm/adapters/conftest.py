"""A tiny base model (one 6 -> 5 linear layer) and LoRA adapters on it, for the library tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
peft = pytest.importorskip("peft")


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(6, 5)

    def forward(self, x: Any) -> Any:
        return self.proj(x)


def make_base() -> Net:
    torch.manual_seed(0)
    return Net().eval()


def make_adapter(rank: int = 2, seed: int = 1, alpha: float = 4.0) -> Any:
    """A PEFT model on a fresh base with a random (non-zero) LoRA of ``rank``."""
    base = make_base()
    torch.manual_seed(seed)
    return peft.get_peft_model(base, peft.LoraConfig(r=rank, lora_alpha=alpha, target_modules=["proj"],
                                                     init_lora_weights=False)).eval()


def delta(model: Any, name: str = "default") -> Any:
    """delta W = s * B @ A of ``model``'s adapter ``name`` on ``proj``."""
    layer = model.base_model.model.proj
    return layer.scaling[name] * layer.lora_B[name].weight.detach() @ layer.lora_A[name].weight.detach()


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` but the lock file, with its bytes."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and p.name != ".lock"}


def inputs() -> Any:
    torch.manual_seed(123)
    return torch.randn(7, 6)


@pytest.fixture
def lib(tmp_path: Path) -> Any:
    from replaybank.llm.adapters import AdapterLibrary

    return AdapterLibrary(tmp_path / "lib", create=True)
