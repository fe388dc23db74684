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
    log = train_lora(model, 0, _rows(16, base.config.vocab_size), cfg, max_steps=steps)
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
    with pytest.raises(ConfigError, match=r"run\.toml:2: \[training\] gradient_checkpointing = 'yes': expected true or false"):
        Config.from_toml(path)

    class _NoCheckpointing(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.q_proj = torch.nn.Linear(4, 4)

    cfg = dataclasses.replace(Training(), lora_target_modules=["q_proj"], gradient_checkpointing=True)
    with pytest.raises(ModelError, match=r"gradient_checkpointing = true but the model \(_NoCheckpointing\) does not support"):
        add_lora(_NoCheckpointing(), cfg)


def _strip_times(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip_times(v) for k, v in value.items() if "second" not in k and k not in ("timings", "environment")}
    if isinstance(value, list):
        return [_strip_times(v) for v in value]
    return value


def _tiny_cfg(model_dir: Path, out: Path) -> Config:
    return Config.from_dict({
        # one generation: an arm trains all its generations inside one adapter, so a leak between
        # arms shows in the first
        "orchestration": {"num_generations": 1},
        "training": {"base_model": str(model_dir), "batch_size": 5, "learning_rate": 5e-3, "lora_rank": 4,
                     "lora_dropout": 0.1, "rehearsal_rows_per_epoch": 20, "mixing_ratio": 0.2, "num_threads": 1,
                     "max_seq_length": 96},
        "data": {"domain_train_rows": 15, "domain_eval_rows": 4, "general_eval_rows": 4},
        "recipes": {"corpus-kl": {"source": ["corpus"], "ratio": 0.2, "kl_to_base": 0.5}},
        "evaluation": {"arms": ["base", "naive", "rehearsal", "corpus-kl"], "suite_per_family": 1,
                       "max_new_tokens": 4, "probe_pairs": 1, "probe_sources": True},
        "output": {"out_dir": str(out), "save_adapters": False},
    })


def test_one_base_model_with_an_adapter_per_arm_measures_what_copies_did(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: Any, isolated_cache: Any,
) -> None:
    """Every arm and the probe on the one base model (a fresh adapter each, taken off after) give
    bit-identical measurements to the old way, a deep copy of the base per arm (emulated here)."""
    import contextlib
    import copy

    from replaybank.llm.recipes import rehearsal
    from replaybank.llm.train import add_lora

    torch.set_num_threads(1)
    # 2 steps per arm and generation: enough for an adapter (or its dropout RNG) leaking from one
    # arm into the next to change the later arms' figures
    shared = rehearsal.run_experiment(_tiny_cfg(tiny_model_dir, tmp_path / "a"), log=lambda _: None, max_steps=2)

    bases: list[Any] = []

    @contextlib.contextmanager
    def copied(base_model: Any, cfg: Training, *_peer: Any) -> Any:  # no peer arm in this run
        bases.append(base_model)
        yield add_lora(copy.deepcopy(base_model), cfg)

    monkeypatch.setattr(rehearsal, "fresh_adapter", copied)
    copies = rehearsal.run_experiment(_tiny_cfg(tiny_model_dir, tmp_path / "b"), log=lambda _: None, max_steps=2)
    assert len(bases) == 4 and all(b is bases[0] for b in bases)  # the probe and three arms, one base
    assert _strip_times(shared.to_json()["arms"]) == _strip_times(copies.to_json()["arms"])
    assert shared.probe.fresh_lora and _strip_times(shared.probe.to_json()) == _strip_times(copies.probe.to_json())
    assert shared.arms["naive"].mean("general_loss") != shared.arms["rehearsal"].mean("general_loss")


def test_fresh_adapter_leaves_the_base_model_as_it_was_and_follows_a_bf16_base(tiny_model_dir: Path) -> None:
    from transformers import AutoModelForCausalLM

    from replaybank.llm.train.adapter import fresh_adapter

    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.bfloat16)
    before = {k: v.clone() for k, v in base.state_dict().items()}
    cfg = dataclasses.replace(Training(), lora_rank=4, batch_size=4, learning_rate=1e-2)
    with fresh_adapter(base, cfg) as model:
        assert model.get_base_model() is base
        lora = [p for n, p in model.named_parameters() if "lora_" in n]
        assert lora and {p.dtype for p in lora} == {torch.bfloat16} and all(p.requires_grad for p in lora)
        log = train_lora(model, 0, _rows(8, base.config.vocab_size), cfg, max_steps=2)
        assert all(np.isfinite(s["loss"]) for s in log.steps)
        assert any(not torch.equal(p, torch.zeros_like(p)) for n, p in model.named_parameters() if "lora_B" in n)
    assert type(base.model.layers[0].self_attn.q_proj) is torch.nn.Linear  # the adapter is gone
    after = base.state_dict()
    assert after.keys() == before.keys() and all(torch.equal(before[k], after[k]) for k in before)
    assert all(p.requires_grad for p in base.parameters())  # as from_pretrained left them
