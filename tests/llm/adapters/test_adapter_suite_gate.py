"""The gate's shipped measurement (the general-capability suite) on the tiny random Llama:
an adapter that changes nothing keeps 100%, one that changes the answers is refused at a floor."""

from __future__ import annotations

import pytest

from replaybank.llm.adapters import AdapterLibrary, GateError, Registration, suite_measure

torch = pytest.importorskip("torch")
peft = pytest.importorskip("peft")


def _adapter(model_dir, zero: bool):
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    model = peft.get_peft_model(LlamaForCausalLM.from_pretrained(model_dir).eval(), peft.LoraConfig(
        r=4, lora_alpha=64, target_modules=["q_proj", "v_proj", "down_proj"], init_lora_weights=zero))
    if not zero:
        with torch.no_grad():
            for name, p in model.named_parameters():
                if "lora_" in name:
                    p.normal_(0, 0.5)
    return model


def test_suite_measurement_through_the_gate(full_vocab_model_dir, smol_tok, tmp_path, isolated_cache):
    # On the full vocabulary: over the 2k-token vocabulary of tiny_model_dir the noisy adapter
    # leaves the random model's greedy suite answers at or above 90% retention, so the gate's
    # refusal would not be exercised.
    from transformers import LlamaForCausalLM

    tiny_model_dir = full_vocab_model_dir

    lib = AdapterLibrary(tmp_path / "lib", create=True)
    base = LlamaForCausalLM.from_pretrained(tiny_model_dir).eval()
    measure = suite_measure(smol_tok, per_family=2, seed=0, batch_size=8)
    same = lib.add(_adapter(tiny_model_dir, zero=True), Registration("noop", skill="s"), base_model=base, measure=measure, floor=0.9)
    assert same.figures["retention"] == 1.0 and same.figures["n"] > 0 and same.figures["passed"] is True
    with pytest.raises(GateError, match=r"adapter 'noisy', field 'figures.retention': retention \d+\.\d% is below the floor 90.0%"):
        lib.add(_adapter(tiny_model_dir, zero=False), Registration("noisy", skill="s"), base_model=base, measure=measure, floor=0.9)
    assert lib.names() == ["noop"] and not any("lora" in n for n, _ in base.named_modules())
