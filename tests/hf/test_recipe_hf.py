"""A rehearsal recipe in replaybank.hf: mix(recipe=) takes its share, KLToBase.from_recipe its KL
term and its rehearsal_ce, checked against losses computed by hand from two plain forward passes."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")
pytest.importorskip("datasets")

import replaybank.hf  # noqa: E402
from replaybank.hf import KLToBase, MixSpec, mix  # noqa: E402
from replaybank.llm.config import Recipe  # noqa: E402


def _model(model_dir):
    torch.manual_seed(0)
    base = transformers.AutoModelForCausalLM.from_pretrained(model_dir)
    model = peft.get_peft_model(base, peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                                      task_type="CAUSAL_LM"))
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():  # move the adapter off zero so the KL term is not 0
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)
    return model


def _batch():
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(3, 40, (4, 9), generator=g)
    att = torch.ones_like(ids)
    att[2, 7:] = 0  # a padded domain row
    labels = ids.clone()
    labels[:, :4] = -100  # prompt positions
    labels[att == 0] = -100
    return ids, att, labels, torch.tensor([0, 1, 0, 1])


def _by_hand(model, ids, att, labels, source, *, weight, temperature, ce_on_rehearsal, kl_on_prompts):
    """CE summed over the positions that count, over all labelled positions, + weight x mean KL."""
    with torch.no_grad():
        z = model(input_ids=ids, attention_mask=att).logits[:, :-1].double().numpy()
        with model.disable_adapter():
            zb = model(input_ids=ids, attention_mask=att).logits[:, :-1].double().numpy()
    target = labels[:, 1:].numpy()
    ce, n, kl, k = 0.0, 0, 0.0, 0
    for b in range(ids.shape[0]):
        rehearsal = int(source[b]) == 1
        for t in range(target.shape[1]):
            labelled = target[b, t] != -100
            if labelled:
                n += 1
                if ce_on_rehearsal or not rehearsal:
                    ce -= (z[b, t] - np.log(np.exp(z[b, t]).sum()))[target[b, t]]
            prompt = not labelled and int(att[b, t + 1]) == 1
            if (rehearsal and labelled) or (kl_on_prompts and not rehearsal and prompt):
                p = np.exp(z[b, t] / temperature) / np.exp(z[b, t] / temperature).sum()
                q = np.exp(zb[b, t] / temperature) / np.exp(zb[b, t] / temperature).sum()
                kl += float((q * (np.log(q) - np.log(p))).sum()) * temperature**2
                k += 1
    return ce / n + weight * kl / k, kl / k


@pytest.mark.parametrize("ce,on", [(True, "rehearsal"), (False, "rehearsal"), (False, "all")])
def test_from_recipe_trains_the_recipes_loss(tiny_lm, ce, on):
    model = _model(tiny_lm[0])
    recipe = Recipe(source=["self"], ratio=0.5, kl_to_base=1.5, kl_temperature=2.0, kl_on=on, rehearsal_ce=ce)
    kl = KLToBase.from_recipe(model, recipe).install()
    ids, att, labels, source = _batch()
    out = model(input_ids=ids, attention_mask=att, source=source)
    loss = kl(out, labels)
    expected, kl_mean = _by_hand(model, ids, att, labels, source, weight=1.5, temperature=2.0,
                                 ce_on_rehearsal=ce, kl_on_prompts=on == "all")
    assert kl_mean > 1e-3
    assert kl.last["kl"] == pytest.approx(kl_mean, rel=1e-4)
    assert float(loss.detach()) == pytest.approx(expected, rel=1e-5)


def test_without_rehearsal_ce_the_rehearsal_answers_get_no_gradient_from_cross_entropy(tiny_lm):
    # at the base model (LoRA B = 0) the KL term and its gradient vanish, so with the self-distill
    # recipe the rehearsal rows' answers cannot move the adapter: other answers, the same gradient
    model = _model(tiny_lm[0])
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.zero_()
    kl = KLToBase.from_recipe(model, "self-distill").install()
    ids, att, labels, source = _batch()

    def grads(labels):
        model.zero_grad()
        kl(model(input_ids=ids, attention_mask=att, source=source), labels).backward()
        return [p.grad.clone() for name, p in model.named_parameters() if "lora_B" in name]

    other = labels.clone()
    other[1, 5:] = (other[1, 5:] + 7) % 40  # another answer on a rehearsal row
    other[other < 3] += 3
    other[labels == -100] = -100
    assert all(torch.allclose(a, b, atol=1e-9) for a, b in zip(grads(labels), grads(other), strict=True))
    domain_changed = labels.clone()
    domain_changed[0, 5:] = (domain_changed[0, 5:] + 7) % 40 + 3  # another answer on a domain row
    assert any(not torch.allclose(a, b, atol=1e-9) for a, b in zip(grads(labels), grads(domain_changed), strict=True))


def test_mix_and_the_torch_dataset_take_the_recipes_share():
    domain = [{"x": i} for i in range(16)]
    general = [{"x": 100 + i} for i in range(8)]
    ds = mix(domain, general, MixSpec(recipe="self-distill", batch_size=4, seed=0, epochs=1, world_size=1))
    sources = [row["source"] for row in ds]
    # an epoch is the domain's 16 rows, 2 per batch of 4: 50% of every batch is rehearsal
    assert len(sources) == 32 and all(sum(sources[i:i + 4]) == 2 for i in range(0, 32, 4))
    assert [row["source"] for row in mix(domain, general, MixSpec(recipe=replaybank.hf.recipe("rehearsal-corpus"), batch_size=10, seed=0, epochs=1, world_size=1))].count(1) == 1  # 10%
    from replaybank.hf.torch import MixedBatchSampler, MixedIterableDataset

    torch_ds = MixedIterableDataset(domain, general, MixSpec(recipe="self-distill", batch_size=4, seed=0, epochs=1, world_size=1), rank=0)
    assert [row["source"] for row in torch_ds] == sources  # the same order as mix()
    sampler = MixedBatchSampler(16, 8, MixSpec(recipe="self-distill", batch_size=4, seed=0, epochs=1, world_size=1), rank=0)
    assert [sum(i >= 16 for i in b) for b in sampler] == [2] * 8
    with pytest.raises(replaybank.hf.MixError, match="not both"):
        mix(domain, general, MixSpec(0.1, recipe="self-distill", batch_size=4, seed=0))
