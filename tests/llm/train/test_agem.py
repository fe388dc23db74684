"""A-GEM's projection: the pure function on constructed vectors, and one LoRA step on a tiny Llama."""

from __future__ import annotations

import numpy as np
import pytest

from replaybank.llm.train.agem import agem_project


def test_projection_leaves_no_negative_inner_product():
    rng = np.random.default_rng(0)
    acted = 0
    for _ in range(200):
        g, g_ref = rng.normal(size=50), rng.normal(size=50)
        out, changed = agem_project(g, g_ref)
        assert out @ g_ref >= -1e-9
        if g @ g_ref < 0:
            acted += 1
            assert changed and out @ g_ref == pytest.approx(0.0, abs=1e-9)
            np.testing.assert_allclose(out, g - (g @ g_ref) / (g_ref @ g_ref) * g_ref)
        else:
            assert not changed and out is g  # already not opposed: unchanged
    assert 0 < acted < 200


def test_zero_reference_and_torch_tensors():
    torch = pytest.importorskip("torch")
    g = np.array([1.0, -1.0])
    assert agem_project(g, np.zeros(2)) == (g, False)
    out, changed = agem_project(torch.tensor([1.0, -2.0]), torch.tensor([0.0, 1.0]))
    assert changed and out.tolist() == [1.0, 0.0]


def test_tiny_llama_step_applies_the_projected_gradient(tiny_model_dir):
    import copy

    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from replaybank.llm.train.agem import take_reference
    from replaybank.llm.train.step import DOMAIN, train_step

    torch.manual_seed(0)
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_model_dir),
                           LoraConfig(r=2, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
    params = [p for p in model.parameters() if p.requires_grad]
    rng = np.random.default_rng(0)
    domain = [(x, x) for x in (rng.integers(100, 300, 12) for _ in range(3))]
    rehearsal = [(x, x) for x in (rng.integers(1000, 2000, 12) for _ in range(3))]
    groups = [(DOMAIN, domain), (1, rehearsal)]
    names = ["domain", "self"]

    def grads(rows):  # the gradient of the step's loss on these rows alone
        for p in params:
            p.grad = None
        from replaybank.llm.eval.losses import collate, token_loss_sum

        loss, _ = token_loss_sum(model, *collate(rows, 0))
        (loss / 66).backward()  # the step normalises by every labelled token of the step (2 x 3 rows x 11)
        return take_reference(params)

    g, g_r = grads(domain), grads(rehearsal)
    expected_acted = float(g @ g_r) < 0

    class Capture:  # an optimizer that records the gradient it is asked to apply
        def step(self):
            self.applied = torch.cat([p.grad.reshape(-1) for p in params]).clone()

        def zero_grad(self, set_to_none=True):
            for p in params:
                p.grad = None

    opt = Capture()
    stats, _ = train_step(model, opt, params, copy.deepcopy(groups), names, 0, "cpu", None, 0.0, agem=True)
    assert stats["projected"] is expected_acted
    g_proj = opt.applied - g_r
    assert float(g_proj @ g_r) >= -1e-6 * float(g_r @ g_r)
    if not expected_acted:
        torch.testing.assert_close(opt.applied, g + g_r, rtol=1e-4, atol=1e-6)
    stats, _ = train_step(model, opt, params, copy.deepcopy(groups), names, 0, "cpu", None, 0.0)
    assert "projected" not in stats  # off: the step's log is as before
    stats, _ = train_step(model, opt, params, [(DOMAIN, domain)], names, 0, "cpu", None, 0.0, agem=True)
    assert stats["projected"] is None  # no rehearsal rows: nothing to project against
