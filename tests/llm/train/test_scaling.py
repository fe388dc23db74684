"""Post-hoc LoRA scaling on a tiny random Llama: 1 is the adapter, 0 the base, restore is exact,
a baked scale is what PEFT loads back."""

from __future__ import annotations

import pytest

from replaybank.llm.config import Training
from replaybank.llm.train.scaling import Scale, bake, lora_layers, scaled


@pytest.fixture
def adapted(tiny_model_dir):
    import torch
    from transformers import AutoModelForCausalLM

    from replaybank.llm.train.lora import add_lora

    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    model = add_lora(base, Training(lora_rank=4, lora_target_modules=["q_proj", "v_proj", "down_proj"]))
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():  # a trained-looking adapter: B is zero at init
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.5)
    model.eval()
    return model


def _logits(model):
    import torch

    ids = torch.tensor([[1, 5, 9, 13, 2, 7]])
    with torch.no_grad():
        return model(input_ids=ids).logits


def test_scale_one_is_the_adapter_scale_zero_the_base_and_restore_is_exact(adapted):
    import torch

    trained = _logits(adapted)
    with adapted.disable_adapter():
        base = _logits(adapted)
    assert not torch.allclose(trained, base)  # the adapter changes the model
    before = [dict(m.scaling) for m, _ in lora_layers(adapted)]
    with scaled(adapted, Scale.uniform(1.0)):
        assert torch.equal(_logits(adapted), trained)
    with scaled(adapted, Scale.uniform(0.0)):
        torch.testing.assert_close(_logits(adapted), base, rtol=0, atol=1e-6)
    with scaled(adapted, Scale.depth(0.0, 0.0)):
        torch.testing.assert_close(_logits(adapted), base, rtol=0, atol=1e-6)
    with scaled(adapted, Scale.uniform(0.37)):
        half = _logits(adapted)
        assert not torch.allclose(half, trained) and not torch.allclose(half, base)
    with pytest.raises(RuntimeError), scaled(adapted, Scale.depth(0.3, 1.7)):
        raise RuntimeError("inside")  # restored even when the block fails
    assert [dict(m.scaling) for m, _ in lora_layers(adapted)] == before  # the same numbers, not recomputed
    assert torch.equal(_logits(adapted), trained)


def test_depth_runs_linearly_over_the_decoder_layers(adapted):
    layers = lora_layers(adapted)
    assert sorted({i for _, i in layers}) == [0, 1]
    with scaled(adapted, Scale.depth(0.25, 1.5)):
        got = {(i, m.scaling["default"] / (m.lora_alpha["default"] / m.r["default"])) for m, i in layers}
    assert {round(f, 6) for i, f in got if i == 0} == {0.25} and {round(f, 6) for i, f in got if i == 1} == {1.5}


@pytest.mark.parametrize("scale", [Scale.uniform(0.5), Scale.depth(0.2, 1.0), Scale.uniform(1.8)])
def test_a_baked_scale_is_the_scaled_model_and_loads_back_through_peft(adapted, scale):
    import torch
    from peft import get_peft_model_state_dict, set_peft_model_state_dict

    with scaled(adapted, scale):
        want = _logits(adapted)
    scaling = [dict(m.scaling) for m, _ in lora_layers(adapted)]
    bake(adapted, scale)
    assert [dict(m.scaling) for m, _ in lora_layers(adapted)] == scaling
    torch.testing.assert_close(_logits(adapted), want, rtol=1e-5, atol=1e-5)
    state = {k: v.clone() for k, v in get_peft_model_state_dict(adapted).items()}  # the saved weights
    with torch.no_grad():
        for name, p in adapted.named_parameters():
            if "lora_B" in name:
                p.zero_()
    set_peft_model_state_dict(adapted, state)
    torch.testing.assert_close(_logits(adapted), want, rtol=1e-5, atol=1e-5)
