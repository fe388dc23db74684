"""The early warning: KL(base || adapter) on domain rows, and its rank correlation with retention."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from replaybank.llm.eval.drift import domain_kl
from replaybank.llm.eval.frontier import spearman


def test_spearman_matches_scipy_with_ties():
    rng = np.random.default_rng(0)
    for _ in range(20):
        n = int(rng.integers(3, 12))
        x, y = rng.integers(0, 4, n).astype(float), rng.normal(size=n)  # x has ties
        if np.unique(x).size < 2:
            continue
        assert spearman(list(x), list(y), min_points=3) == pytest.approx(stats.spearmanr(x, y).statistic, abs=1e-4)


def test_spearman_undefined_cases_and_bad_input():
    assert spearman([0.1, 0.2], [0.3, 0.1], min_points=3) is None  # two points always rank perfectly
    assert spearman([0.1, 0.2], [0.3, 0.1]) == pytest.approx(-1.0)
    assert spearman([0.5, 0.5, 0.5], [0.1, 0.2, 0.3]) is None
    with pytest.raises(ValueError, match="3 values against 2"):
        spearman([1, 2, 3], [1, 2])


def test_domain_kl_is_zero_for_a_fresh_adapter_and_grows_with_the_update(tiny_model_dir):
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from replaybank.llm.data.rows import token_rows

    rows = token_rows([(np.arange(5, 5 + n), np.r_[[-100] * 3, np.arange(8, 8 + n - 3)]) for n in (6, 9, 4)])
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_model_dir),
                           LoraConfig(r=2, target_modules=["q_proj", "v_proj"]))
    assert domain_kl(model, rows, pad_id=0) == pytest.approx(0.0, abs=1e-7)  # B = 0: the adapter is the base
    kls = []
    for scale in (0.05, 0.5):
        with torch.no_grad():
            for name, p in model.named_parameters():
                if "lora_B" in name:
                    p.copy_(torch.full_like(p, scale))
        kls.append(domain_kl(model, rows, pad_id=0))
    assert 0 < kls[0] < kls[1]
    assert model.training  # the mode it had is restored


def test_domain_kl_with_kept_base_states_matches_and_runs_the_base_once(tiny_model_dir):
    """The kept base states give the KL of the plain two passes (rows run alone instead of padded:
    float noise only), and a second evaluation point projects them instead of a new base pass."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from replaybank.llm.data.rows import token_rows
    from replaybank.llm.train.kl import BaseCache

    rows = token_rows([(np.arange(5, 5 + n), np.r_[[-100] * 3, np.arange(8, 8 + n - 3)]) for n in (6, 9, 4)])
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_model_dir),
                           LoraConfig(r=2, target_modules=["q_proj", "v_proj"]))
    kept = BaseCache()
    for scale in (0.05, 0.5):
        with torch.no_grad():
            for name, p in model.named_parameters():
                if "lora_B" in name:
                    p.copy_(torch.full_like(p, scale))
        assert domain_kl(model, rows, pad_id=0, base=kept) == pytest.approx(domain_kl(model, rows, pad_id=0), rel=1e-4)
    assert (kept.misses, kept.hits) == (3, 3)  # three rows: run once, projected at the second point
