"""The KL-to-base term in the loop's consolidation (the recipe's ``kl_to_base``; old spelling
``[loop] kl_weight``), on a tiny random Llama."""

from __future__ import annotations

import dataclasses

import pytest

from replaybank.llm.config import ConfigError, Recipe, Training
from replaybank.llm.config.loop import TRAINING_DEFAULTS, LoopConfig


def _recipe(weight: float, ce: bool = True) -> Recipe:
    """Rehearsal at half of the rows with the KL term at ``weight``; ``ce``: cross-entropy on them too."""
    return Recipe(source=["self"], ratio=0.5, kl_to_base=weight, rehearsal_ce=ce)


def test_kl_weight_is_validated_and_documented():
    assert LoopConfig().recipe.kl_to_base >= 0
    assert LoopConfig.from_dict({"loop": {"kl_weight": 2}}).recipe.kl_to_base == 2.0  # the old key, still read
    with pytest.raises(ConfigError, match=r"\[loop\] kl_weight = -1"):
        LoopConfig.from_dict({"loop": {"kl_weight": -1}})
    with pytest.raises(ConfigError, match=r"\[loop\] kl_weight = 'high'"):
        LoopConfig.from_dict({"loop": {"kl_weight": "high"}})
    with pytest.raises(ConfigError, match="did you mean 'kl_weight'"):
        LoopConfig.from_dict({"loop": {"kl_wieght": 1.0}})
    line = next(x for x in LoopConfig().to_toml().splitlines() if x.startswith("kl_to_base"))
    assert "KL-to-base" in line and "rehearsal" in line


@pytest.fixture
def tiny(tiny_model_dir):
    """The tiny random Llama as ``_tiny`` sets it up."""
    return _tiny(tiny_model_dir)


@pytest.fixture
def tiny_full_vocab(full_vocab_model_dir):
    """``_tiny`` on the tiny Llama with SmolLM2's full vocabulary: the pull tests' bound (the KL
    term at weight 100 over 40 epochs halves the KL) was set on it. Over the 2k-token vocabulary
    the same run cuts the KL by 39% (0.0119 to 0.0073), and needs about 80 epochs to halve it."""
    return _tiny(full_vocab_model_dir)


def _tiny(model_dir):
    """A LoRA-wrapped tiny Llama whose adapter is moved off zero (so it differs from the base),
    4 domain rows and 4 rehearsal rows, and a config that puts all 8 rows in one batch."""
    import torch

    from replaybank.llm.data.rows import encode_pair, token_rows
    from replaybank.llm.model import load_model
    from replaybank.llm.train import add_lora

    cfg = dataclasses.replace(
        Training(**TRAINING_DEFAULTS), base_model=str(model_dir), lora_rank=2, lora_alpha=4,
        batch_size=8, num_train_epochs=1, max_seq_length=48, learning_rate=1e-2, seed=3,
    )
    base, tok = load_model(str(model_dir))
    model = add_lora(base, cfg)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(0.3 * torch.randn(p.shape, generator=gen))
    start = {k: v.detach().clone() for k, v in model.state_dict().items() if "lora_" in k}
    domain = token_rows([encode_pair(tok, f"Add {i} tea.", f"<<qx cart.add; sku=tea; qty={i}>>", 48) for i in range(4)])
    rehearsal = token_rows([encode_pair(tok, f"Name colour {i}.", f"Colour {i} is blue and green.", 48) for i in range(4)])
    return model, tok, cfg, start, domain, rehearsal


def _kl_to_base(model, rows, pad_id):
    """Mean per-token KL(base || adapted) over the answer tokens of ``rows``, computed directly."""
    import torch

    from replaybank.llm.eval.losses import collate, logits_at
    from replaybank.llm.train.kl import base_logits_at, kl_to_base

    ids, att, labels = collate(rows.rows(list(range(len(rows)))), pad_id)
    mask = labels[:, 1:] != -100
    with torch.no_grad():
        adapted = logits_at(model, ids, att, mask)
        base = base_logits_at(model, ids, att, mask)
        return float(kl_to_base(adapted, base)) / int(mask.sum())


def _lora(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items() if "lora_" in k}


def test_zero_weight_is_the_path_without_kl_and_a_weight_adds_the_predicted_term(tiny):
    import torch

    from replaybank.llm.loop.consolidate import consolidate
    from replaybank.llm.train import Source, train_lora

    model, tok, cfg, start, domain, rehearsal = tiny
    pad = tok.pad_token_id
    expected_kl = _kl_to_base(model, rehearsal, pad)
    assert expected_kl > 1e-3  # the moved adapter differs from the base

    old = train_lora(model, pad, domain, cfg, desc="t", sources=[Source("rehearsal", rehearsal, 0.5)])
    after_old = _lora(model)
    model.load_state_dict(start, strict=False)
    zero = consolidate(model, pad, domain, rehearsal, _recipe(0.0), cfg, desc="t")
    after_zero = _lora(model)
    assert zero.steps == len(old.steps) == 1 and zero.kl_mean is None and zero.kl_weight == 0.0
    assert zero.loss_first == old.steps[0]["loss"]
    assert all(torch.equal(after_old[k], after_zero[k]) for k in after_old)

    model.load_state_dict(start, strict=False)
    weighted = consolidate(model, pad, domain, rehearsal, _recipe(2.0), cfg, desc="t")
    after_kl = _lora(model)
    # the logged term is the KL of the starting adapter on the rehearsal answers (all in the one batch)
    assert weighted.kl_weight == 2.0
    assert weighted.kl_mean == pytest.approx(expected_kl, rel=1e-3, abs=1e-6)
    assert weighted.loss_first == pytest.approx(zero.loss_first, rel=1e-6)  # the logged loss is the CE
    assert any(not torch.equal(after_kl[k], after_zero[k]) for k in after_kl)  # and the KL moved the update


def test_the_term_pulls_the_rehearsal_answers_toward_the_base_model(tiny_full_vocab):
    from replaybank.llm.loop.consolidate import consolidate

    model, tok, cfg, start, domain, rehearsal = tiny_full_vocab
    pad = tok.pad_token_id
    cfg = dataclasses.replace(cfg, num_train_epochs=40, learning_rate=5e-2)
    before = _kl_to_base(model, rehearsal, pad)
    kl_after = {}
    for weight in (0.0, 100.0):
        model.load_state_dict(start, strict=False)
        consolidate(model, pad, domain, rehearsal, _recipe(weight), cfg, desc="t")
        kl_after[weight] = _kl_to_base(model, rehearsal, pad)
    # cross-entropy on the rehearsal answers alone moves the distribution elsewhere; the KL term
    # brings it back to the base model's
    assert kl_after[100.0] < 0.5 * before
    assert kl_after[100.0] < 0.5 * kl_after[0.0]


def test_without_rehearsal_rows_the_weight_is_inactive(tiny):
    from replaybank.llm.loop.consolidate import consolidate

    model, tok, cfg, _, domain, _ = tiny
    out = consolidate(model, tok.pad_token_id, domain, None, _recipe(3.0), cfg, desc="t")
    assert out.kl_weight == 0.0 and out.kl_mean is None


def test_rehearsal_ce_false_needs_the_kl_term():
    # the default: rehearsal through the KL term only, weight 3 (docs/loop.md)
    assert LoopConfig().recipe.rehearsal_ce is False and LoopConfig().recipe.kl_to_base == 3.0
    assert LoopConfig.from_dict({"loop": {"rehearsal_ce": True}}).recipe.rehearsal_ce is True
    with pytest.raises(ConfigError, match=r"rehearsal_ce = false \(the default\) .* kl_weight = 0 .* set rehearsal_ce = true"):
        LoopConfig.from_dict({"loop": {"kl_weight": 0}})
    # turning the term off with cross-entropy on the rows is valid
    assert LoopConfig.from_dict({"loop": {"kl_weight": 0, "rehearsal_ce": True}}).recipe.kl_to_base == 0
    # inactive without rehearsal rows: the no-rehearsal arm of a KL-only config is valid
    assert LoopConfig.from_dict({"loop": {"rehearsal_ce": False, "rehearsal": "none"}}).recipe is None


def test_without_rehearsal_ce_the_rows_train_only_through_the_kl_term(tiny):
    """From the base model (LoRA B = 0) the KL term and its gradient are exactly zero, so with
    ``rehearsal_ce=False`` what the rehearsal answers say cannot change the first update; with
    cross-entropy it does."""
    import torch

    from replaybank.llm.data.rows import encode_pair, token_rows
    from replaybank.llm.loop.consolidate import consolidate

    model, tok, cfg, start, domain, rehearsal = tiny
    at_base = {k: (torch.zeros_like(v) if "lora_B" in k else v) for k, v in start.items()}
    other = token_rows([encode_pair(tok, f"Name colour {i}.", f"Colour {i} is green and blue.", 48) for i in range(4)])
    assert len(other.rows([0])[0][1]) == len(rehearsal.rows([0])[0][1])  # same token counts, other answers
    after = {}
    for ce in (True, False):
        for name, rows in (("blue-green", rehearsal), ("green-blue", other)):
            model.load_state_dict(at_base, strict=False)
            log = consolidate(model, tok.pad_token_id, domain, rows, _recipe(1.0, ce), cfg, desc="t")
            assert log.rehearsal_ce is ce and log.kl_mean == 0.0
            after[ce, name] = _lora(model)
    same = [torch.allclose(after[False, "blue-green"][k], after[False, "green-blue"][k], atol=1e-8) for k in after[False, "blue-green"]]
    differ = [not torch.allclose(after[True, "blue-green"][k], after[True, "green-blue"][k], atol=1e-8) for k in after[True, "blue-green"]]
    assert all(same) and any(differ)


def test_kl_only_rehearsal_still_pulls_the_answers_toward_the_base_model(tiny_full_vocab):
    from replaybank.llm.loop.consolidate import consolidate

    model, tok, cfg, start, domain, rehearsal = tiny_full_vocab
    pad = tok.pad_token_id
    cfg = dataclasses.replace(cfg, num_train_epochs=40, learning_rate=5e-2)
    before = _kl_to_base(model, rehearsal, pad)
    consolidate(model, pad, domain, rehearsal, _recipe(100.0, False), cfg, desc="t")
    assert _kl_to_base(model, rehearsal, pad) < 0.5 * before
