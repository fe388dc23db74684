"""The LoRA path on a real accelerator, and the same checks on the CPU: bf16 training, gradient
checkpointing, an exact resume with LoRA dropout (the CUDA generator in the checkpoint), bf16
loading and seeded sampling. Each test runs once on the CPU and once on CUDA; the CUDA case skips
without a GPU (``benchmarks/gpu/check.sh`` runs this file on one)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from replaybank.llm.config import Training  # noqa: E402
from replaybank.llm.data.rows import token_rows  # noqa: E402
from replaybank.llm.model import is_checkpointing, load_model  # noqa: E402
from replaybank.llm.train import add_lora, train_lora  # noqa: E402

VOCAB = 128


@pytest.fixture(params=["cpu", "cuda"])
def device(request: Any) -> str:
    if request.param == "cuda" and not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    return str(request.param)


def _tiny(device: str, dtype: Any, attn: str = "sdpa") -> Any:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=128, tie_word_embeddings=True, pad_token_id=0, eos_token_id=1,
    )  # fmt: skip
    config._attn_implementation = attn
    torch.manual_seed(0)
    model: Any = LlamaForCausalLM(config)
    return model.to(device=device, dtype=dtype)


def _rows(n: int, seed: int = 0) -> Any:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        ids = rng.integers(2, VOCAB, size=int(rng.integers(12, 24))).astype(np.int64)
        labels = ids.copy()
        labels[:5] = -100  # the prompt
        out.append((ids, labels))
    return token_rows(out)


def _cfg(**changes: Any) -> Training:
    return dataclasses.replace(Training(), **{"lora_rank": 4, "lora_alpha": 8, "batch_size": 4, "learning_rate": 1e-2, **changes})


def _lora_state(model: Any) -> dict[str, Any]:
    return {k: v.detach().float().cpu().clone() for k, v in model.state_dict().items() if "lora_" in k}


def test_bf16_lora_trains_on_the_device(device: str) -> None:
    rows = []
    for k in range(8):  # counting rows (the next id is the last one + 1): learnable by a tiny LoRA
        ids = ((np.arange(20) + 7 * k) % (VOCAB - 2) + 2).astype(np.int64)
        rows.append((ids, np.concatenate([np.full(5, -100), ids[5:]])))
    cfg = _cfg(num_train_epochs=6)
    model = add_lora(_tiny(device, torch.bfloat16), cfg)
    lora = [p for p in model.parameters() if p.requires_grad]
    assert lora and {(p.dtype, p.device.type) for p in lora} == {(torch.bfloat16, device)}
    log = train_lora(model, 0, token_rows(rows), cfg)
    losses = [s["loss"] for s in log.steps]
    assert len(losses) == 12 and np.isfinite(losses).all() and log.tokens == 8 * 20 * 6
    assert losses[-1] < losses[0] - 0.15, losses  # 4.88 -> 4.63 on the CPU


def test_gradient_checkpointing_changes_no_gradient_on_the_device(device: str) -> None:
    from replaybank.llm.eval.losses import collate, token_loss_sum

    ids, att, labels = (t.to(device) for t in collate(_rows(4, seed=1).rows(np.arange(4)), 0))
    grads = []
    for checkpointing in (False, True):
        model = add_lora(_tiny(device, torch.bfloat16), _cfg(gradient_checkpointing=checkpointing))
        model.train()
        assert is_checkpointing(model) == checkpointing
        loss, n = token_loss_sum(model, ids, att, labels)
        (loss / n).backward()
        grads.append(torch.cat([p.grad.float().flatten() for p in model.parameters() if p.grad is not None]))
    plain, ckpt = grads
    assert plain.shape == ckpt.shape and float(plain.norm()) > 0
    cosine = float(torch.nn.functional.cosine_similarity(plain, ckpt, dim=0))
    assert cosine > 0.999 and abs(float(ckpt.norm() / plain.norm()) - 1) < 0.01, (cosine, ckpt.norm(), plain.norm())


def test_resume_with_lora_dropout_is_exact_on_the_device(device: str, tmp_path: Path) -> None:
    cfg = _cfg(lora_dropout=0.3, num_train_epochs=2, save_every=2)  # 16 rows / 4 = 4 steps per epoch

    def run(checkpoint_dir: Path | None, max_steps: int | None, reseed: int | None = None) -> dict[str, Any]:
        model = add_lora(_tiny(device, torch.float32, attn="eager"), cfg)
        if reseed is not None:  # another process: the generators start elsewhere
            torch.manual_seed(reseed)
        train_lora(model, 0, _rows(16), cfg, checkpoint_dir=checkpoint_dir, max_steps=max_steps)
        return _lora_state(model)

    whole = run(None, None)
    run(tmp_path, 6)  # stops after step 6; the checkpoint of step 6 is on disk
    resumed = run(tmp_path, None, reseed=12345)  # steps 7 and 8 from the checkpoint
    other_masks = run(None, None, reseed=12345)  # the same run with other dropout masks
    for key in whole:
        assert torch.allclose(whole[key], resumed[key], atol=1e-5, rtol=0), key
    assert any(not torch.allclose(whole[k], other_masks[k], atol=1e-3, rtol=0) for k in whole)  # dropout matters


def _save_tiny_model(folder: Path) -> None:
    import tokenizers
    import transformers

    vocab = {"<pad>": 0, "<eos>": 1, **{f"t{i}": i for i in range(2, VOCAB)}}
    tk = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="<pad>"))
    tk.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    tok = transformers.PreTrainedTokenizerFast(tokenizer_object=tk, pad_token="<pad>", eos_token="<eos>")
    _tiny("cpu", torch.float32).save_pretrained(folder)
    tok.save_pretrained(folder)


def test_load_model_gives_bf16_on_a_gpu_and_fp32_on_the_cpu(device: str, tmp_path: Path) -> None:
    _save_tiny_model(tmp_path / "m")
    model, tok = load_model(str(tmp_path / "m"), device, log=lambda _: None)
    want = torch.bfloat16 if device == "cuda" else torch.float32
    assert {(p.dtype, p.device.type) for p in model.parameters()} == {(want, device)}
    assert tok.pad_token_id == 0


def test_seeded_sampling_on_the_device(device: str) -> None:
    from replaybank.rl.sampling import generator_for, sample

    model = _tiny(device, torch.bfloat16).eval()

    def draw(seed: int) -> list[list[int]]:
        out = sample(model, [[5, 6, 7], [8]], max_new_tokens=12, stop_ids=[1], pad_id=0, temperature=3.0,
                     generator=generator_for(model, seed))  # fmt: skip
        return [t.tolist() for t in out.tokens]

    first = draw(0)
    assert first == draw(0) and all(1 <= len(t) <= 12 for t in first)
    assert any(draw(s) != first for s in (1, 2, 3))  # the seed is used
