"""The KL-to-base term on constructed cases with known values, and on a PEFT model."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from replaybank.llm.train.kl import base_logits_at, kl_mask, kl_to_base  # noqa: E402


def _kl(p: list[float], q: list[float]) -> float:
    return sum(a * math.log(a / b) for a, b in zip(p, q, strict=True) if a > 0)


def test_two_token_case_matches_the_closed_form():
    base = torch.tensor([[0.0, 0.0]])  # p_base = (1/2, 1/2)
    adapted = torch.tensor([[math.log(3.0), 0.0]])  # p = (3/4, 1/4)
    assert float(kl_to_base(adapted, base)) == pytest.approx(0.5 * math.log(4 / 3), rel=1e-6)


def test_direction_is_base_to_adapted_and_positions_are_summed():
    # KL is asymmetric: with p_base = (0.9, 0.1) and p = (0.5, 0.5) the two directions differ.
    base = torch.log(torch.tensor([[0.9, 0.1], [0.2, 0.8]]))
    adapted = torch.log(torch.tensor([[0.5, 0.5], [0.2, 0.8]]))
    expected = _kl([0.9, 0.1], [0.5, 0.5]) + 0.0
    assert float(kl_to_base(adapted, base)) == pytest.approx(expected, rel=1e-6)
    assert expected != pytest.approx(_kl([0.5, 0.5], [0.9, 0.1]))


def test_temperature_softens_both_sides_and_scales_by_t_squared():
    base = torch.tensor([[0.0, 0.0, 0.0]])
    adapted = torch.tensor([[2.0 * math.log(2.0), 0.0, 0.0]])  # at T=2: logits (ln 2, 0, 0) -> (1/2, 1/4, 1/4)
    expected = 4.0 * _kl([1 / 3] * 3, [0.5, 0.25, 0.25])
    assert float(kl_to_base(adapted, base, temperature=2.0)) == pytest.approx(expected, rel=1e-6)


def test_gradient_is_softmax_minus_base_softmax():
    base = torch.tensor([[1.0, -0.5, 0.25, 0.0]])
    logits = torch.tensor([[0.3, 0.2, -1.0, 0.7]], requires_grad=True)
    kl_to_base(logits, base).backward()
    expected = torch.softmax(logits.detach(), -1) - torch.softmax(base, -1)
    torch.testing.assert_close(logits.grad, expected)


def test_zero_when_equal_zero_positions_and_bad_input():
    x = torch.randn(5, 7)
    assert float(kl_to_base(x, x.clone())) == pytest.approx(0.0, abs=1e-6)
    assert float(kl_to_base(torch.zeros(0, 7), torch.zeros(0, 7))) == 0.0
    with pytest.raises(ValueError, match="differ in shape"):
        kl_to_base(torch.zeros(2, 3), torch.zeros(2, 4))
    with pytest.raises(ValueError, match="temperature must be > 0"):
        kl_to_base(x, x, temperature=0.0)


def test_the_kl_mask_holds_the_completion_of_rehearsal_rows_only_and_with_all_the_others_prompts():
    # three rows: rehearsal, domain, rehearsal; prompt of 2 tokens, completion of 2-3, then padding
    labels = torch.tensor([[-100, -100, 5, 6, -100], [-100, -100, 7, 8, 9], [-100, -100, -100, 4, -100]])
    att = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1], [1, 1, 1, 1, 1]])
    rehearsal = torch.tensor([True, False, True])
    # next-token positions are labels[:, 1:]: a rehearsal row's labelled ones, never a domain row's
    assert kl_mask(labels, att, rehearsal).int().tolist() == [[0, 1, 1, 0], [0, 0, 0, 0], [0, 0, 1, 0]]
    # "all" adds the domain row's prompt positions (unlabelled, not padding), not its completion
    every = kl_mask(labels, att, rehearsal, "all").int().tolist()
    assert every == [[0, 1, 1, 0], [1, 0, 0, 0], [0, 0, 1, 0]]
    # a batch without rehearsal rows has no KL position under the default rule
    assert not kl_mask(labels, att, torch.tensor([False, False, False])).any()


def test_base_logits_come_from_the_disabled_adapter(tiny_model_dir):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from replaybank.llm.eval.losses import logits_at

    plain = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    ids = torch.tensor([[5, 9, 13, 2, 7]])
    att = torch.ones_like(ids)
    mask = torch.ones((1, 4), dtype=torch.bool)
    with torch.no_grad():
        want = logits_at(plain, ids, att, mask)
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_model_dir),
                           LoraConfig(r=2, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
    with torch.no_grad():
        adapted = logits_at(model, ids, att, mask)
    assert not torch.allclose(adapted, want)  # the adapter changes the logits...
    torch.testing.assert_close(base_logits_at(model, ids, att, mask), want)  # ...disabled, they are the base's
    assert float(kl_to_base(adapted, want)) > 0
    with pytest.raises(ValueError, match="needs a PEFT model"):
        base_logits_at(plain, ids, att, mask)


def test_base_cache_gives_the_base_pass_logits_and_runs_each_row_once(tiny_model_dir):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from replaybank.llm.eval.losses import collate
    from replaybank.llm.train.kl import BaseCache

    model = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_model_dir),
                           LoraConfig(r=2, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
    np = pytest.importorskip("numpy")
    rows = [(np.array([5, 9, 13, 2, 7, 11]), np.array([-100, -100, -100, 2, 7, 11])),
            (np.array([4, 8, 3]), np.array([-100, 8, 3])),
            (np.array([6, 1, 12, 10]), np.array([-100, -100, 12, 10]))]
    ids, att, labels = collate(rows, pad_id=0)  # right-padded to 6
    mask = labels[:, 1:] != -100
    cache = BaseCache()
    want = base_logits_at(model, ids, att, mask)
    got = cache.logits_at(model, ids, att, mask)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)  # padding does not change a row's base logits
    assert (cache.misses, cache.hits, len(cache)) == (3, 0, 3)
    # the same rows again, in another order and with other batch-mates: kept hidden states, same logits
    ids2, att2, labels2 = collate([rows[2], rows[0]], pad_id=0)
    mask2 = labels2[:, 1:] != -100
    torch.testing.assert_close(cache.logits_at(model, ids2, att2, mask2), base_logits_at(model, ids2, att2, mask2),
                               rtol=1e-4, atol=1e-4)
    assert (cache.misses, cache.hits) == (3, 2)
    # another set of positions of a kept row is another key (no stale positions)
    mask3 = mask2.clone()
    mask3[0, 0] = True
    torch.testing.assert_close(cache.logits_at(model, ids2, att2, mask3), base_logits_at(model, ids2, att2, mask3),
                               rtol=1e-4, atol=1e-4)
    assert cache.misses == 4
