"""Memory at scale, on the tiny random Llama: gradient checkpointing changes nothing but memory."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from replaybank.llm.config import Config, ConfigError, Training  # noqa: E402
from replaybank.llm.data.rows import token_rows  # noqa: E402
from replaybank.llm.model import ModelError, is_checkpointing  # noqa: E402
from replaybank.llm.train import add_lora, train_lora  # noqa: E402


def _rows(n: int, vocab: int, seed: int = 0) -> Any:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        ids = rng.integers(1, vocab, size=int(rng.integers(12, 24))).astype(np.int64)
        labels = ids.copy()
        labels[:5] = -100  # the prompt
        out.append((ids, labels))
    return token_rows(out)


def _train(model_dir: Path, checkpointing: bool, steps: int = 2) -> tuple[list[float], dict[str, Any], Any]:
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    cfg = dataclasses.replace(Training(), lora_rank=4, batch_size=4, learning_rate=1e-2, gradient_checkpointing=checkpointing)
    model = add_lora(base, cfg)
    log = train_lora(model, 0, _rows(16, base.config.vocab_size), None, cfg, 0.0, max_steps=steps)
    lora = {k: v.detach().clone() for k, v in model.state_dict().items() if "lora_" in k}
    return [s["loss"] for s in log.steps], lora, model


def test_gradient_checkpointing_gives_the_same_losses_and_weights(tiny_model_dir: Path) -> None:
    torch.set_num_threads(1)
    plain_losses, plain, m0 = _train(tiny_model_dir, False)
    ckpt_losses, ckpt, m1 = _train(tiny_model_dir, True)
    assert not is_checkpointing(m0) and is_checkpointing(m1)  # it really is on
    assert len(plain_losses) == 2 and np.allclose(plain_losses, ckpt_losses, atol=1e-6, rtol=0)
    assert plain.keys() == ckpt.keys()
    for key in plain:
        assert torch.allclose(plain[key], ckpt[key], atol=1e-6, rtol=0), key


def test_gradient_checkpointing_is_a_checked_bool_and_needs_a_model_that_supports_it(tmp_path: Path) -> None:
    path = tmp_path / "run.toml"
    path.write_text('[training]\ngradient_checkpointing = "yes"\n')
    with pytest.raises(ConfigError, match=r"run\.toml: \[training\] gradient_checkpointing = 'yes': expected true or false"):
        Config.from_toml(path)

    class _NoCheckpointing(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.q_proj = torch.nn.Linear(4, 4)

    cfg = dataclasses.replace(Training(), lora_target_modules=["q_proj"], gradient_checkpointing=True)
    with pytest.raises(ModelError, match=r"gradient_checkpointing = true but the model \(_NoCheckpointing\) does not support"):
        add_lora(_NoCheckpointing(), cfg)
