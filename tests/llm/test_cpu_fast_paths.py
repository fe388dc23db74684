"""The CPU training and generation fast paths: FrozenBf16 (a LoRA model's frozen weights held as bf16
copies under autocast, the numbers unchanged) and short_row_attention (eager attention for short rows)."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("peft")

from replaybank.llm.runtime import EAGER_MAX_WIDTH, FrozenBf16, short_row_attention  # noqa: E402


def _lora_model(attn: str = "sdpa") -> Any:
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=300, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True,
                                      attn_implementation=attn)  # fmt: skip
    model = get_peft_model(transformers.LlamaForCausalLM(config),
                           LoraConfig(r=4, target_modules=["q_proj", "v_proj", "up_proj"], lora_dropout=0.0))  # fmt: skip
    with torch.no_grad():  # a trained-looking adapter: B is zero at init, which would hide a wrong path
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.05)
    return model


def _loss_and_grads(model: Any, ids: Any, context: Any) -> tuple[Any, Any, list[Any]]:
    model.zero_grad(set_to_none=True)
    with context:
        out = model(input_ids=ids, labels=ids)
    out.loss.backward()
    grads = [p.grad.clone() for p in model.parameters() if p.requires_grad]
    return out.loss.detach(), out.logits.detach(), grads


def test_same_logits_loss_and_lora_gradients_as_plain_autocast() -> None:
    model = _lora_model()
    ids = torch.randint(3, 300, (3, 17), generator=torch.Generator().manual_seed(1))
    plain = _loss_and_grads(model, ids, torch.autocast("cpu", dtype=torch.bfloat16))
    casts = FrozenBf16(model, "bf16")
    swapped = _loss_and_grads(model, ids, casts)
    assert casts.on and len(casts._modules) > 0
    assert torch.equal(plain[0], swapped[0]) and torch.equal(plain[1], swapped[1])
    assert len(plain[2]) == len(swapped[2]) > 0
    assert all(torch.equal(a, b) for a, b in zip(plain[2], swapped[2], strict=True))
    fp32 = _loss_and_grads(model, ids, torch.autocast("cpu", enabled=False))
    assert not torch.equal(fp32[1], swapped[1])  # bf16 really ran: the comparison above can fail


def test_only_frozen_fp32_linear_weights_are_swapped_and_restored_even_on_error() -> None:
    model = _lora_model()
    before = {n: p for n, p in model.named_parameters()}
    casts = FrozenBf16(model, "bf16")
    with casts:
        inside = dict(model.named_parameters())
        swapped = [n for n in before if inside[n] is not before[n]]
        assert swapped and all(inside[n].dtype == torch.bfloat16 for n in swapped)
        assert all(not before[n].requires_grad for n in swapped)
        assert not any("lora_" in n or "embed_tokens" in n or "norm" in n for n in swapped)
    with pytest.raises(ZeroDivisionError), casts:
        1 / 0  # noqa: B018
    after = dict(model.named_parameters())
    assert all(after[n] is before[n] and after[n].dtype == torch.float32 for n in before)
    assert not torch.is_autocast_enabled("cpu")


def test_fp32_precision_makes_no_copies_and_no_autocast() -> None:
    model = _lora_model()
    casts = FrozenBf16(model, "fp32")
    assert not casts.on and casts._modules == []
    with casts:
        assert not torch.is_autocast_enabled("cpu")


def test_generation_answers_are_identical_to_plain_autocast(tiny_model_dir: Any, small_tok: Any) -> None:
    from replaybank.llm.eval import decode as gen

    model = transformers.AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    prompts = ["Hi", "What is 2 + 2?", "Name three colours.", "Write a haiku about rain."]
    new = gen.generate_detailed(model, small_tok, prompts, max_new_tokens=12, batch_size=3, precision="bf16")

    class PlainAutocast:  # what generate_detailed used before: autocast over the fp32 weights
        def __init__(self, model: Any, precision: str) -> None:
            self.ctx = torch.autocast("cpu", dtype=torch.bfloat16)

        def __enter__(self) -> Any:
            return self.ctx.__enter__()

        def __exit__(self, *exc: Any) -> Any:
            return self.ctx.__exit__(*exc)

    mp = pytest.MonkeyPatch()
    mp.setattr(gen, "FrozenBf16", PlainAutocast)
    try:
        old = gen.generate_detailed(model, small_tok, prompts, max_new_tokens=12, batch_size=3, precision="bf16")
    finally:
        mp.undo()
    assert [g.n_tokens for g in new] == [g.n_tokens for g in old] and [g.text for g in new] == [g.text for g in old]


def test_short_rows_train_with_eager_attention_and_the_same_loss() -> None:
    model = _lora_model()
    base = model.get_base_model()
    assert base.config._attn_implementation == "sdpa"
    ids = torch.randint(3, 300, (2, 40), generator=torch.Generator().manual_seed(2))
    att = torch.ones_like(ids)
    att[1, 30:] = 0  # a right-padded row, as the training batches have
    sdpa = model(input_ids=ids, attention_mask=att, labels=ids).loss
    with short_row_attention(model, ids.shape[1]):
        assert base.config._attn_implementation == "eager"
        eager = model(input_ids=ids, attention_mask=att, labels=ids).loss
    assert base.config._attn_implementation == "sdpa"
    assert float(eager.detach()) == pytest.approx(float(sdpa.detach()), rel=1e-5)
    with pytest.raises(ZeroDivisionError), short_row_attention(model, 8):
        1 / 0  # noqa: B018
    assert base.config._attn_implementation == "sdpa"


def test_long_rows_and_other_implementations_are_left_alone() -> None:
    model = _lora_model()
    with short_row_attention(model, EAGER_MAX_WIDTH + 1):
        assert model.get_base_model().config._attn_implementation == "sdpa"
    eager = _lora_model("eager")
    with short_row_attention(eager, 16):
        assert eager.get_base_model().config._attn_implementation == "eager"
    assert eager.get_base_model().config._attn_implementation == "eager"


def test_held_out_loss_in_bf16_is_close_to_fp32_and_leaves_the_weights_fp32() -> None:
    import numpy as np

    from replaybank.llm.data.rows import token_rows
    from replaybank.llm.eval.losses import mean_loss

    model = _lora_model()
    rng = np.random.default_rng(3)
    ids = [rng.integers(3, 300, n) for n in (12, 30, 45)]
    rows = token_rows([(a, np.where(np.arange(a.size) < 4, -100, a)) for a in ids])
    fp32 = mean_loss(model, rows, pad_id=0)
    bf16 = mean_loss(model, rows, pad_id=0, precision="bf16")
    assert bf16 != fp32 and bf16 == pytest.approx(fp32, abs=0.05)
    assert all(p.dtype == torch.float32 for p in model.parameters())


def test_interference_probe_at_the_training_precision_agrees_with_fp32() -> None:
    import numpy as np

    from replaybank.llm.data.rows import token_rows
    from replaybank.llm.eval.interference import probe_sources

    model = _lora_model()
    rng = np.random.default_rng(4)

    def rows(n: int, low: int, high: int) -> Any:
        ids = [rng.integers(low, high, int(k)) for k in rng.integers(12, 40, n)]
        return token_rows([(a, np.where(np.arange(a.size) < 4, -100, a)) for a in ids])

    domain, sources = rows(16, 3, 150), {"near": rows(16, 3, 150), "far": rows(16, 150, 300)}
    kwargs = {"pairs": 4, "batch_size": 4, "seed": 0}
    fp32 = probe_sources(model, 0, domain, sources, **kwargs)
    bf16 = probe_sources(model, 0, domain, sources, precision="bf16", **kwargs)
    for name in sources:
        assert bf16[name].cosine_mean == pytest.approx(fp32[name].cosine_mean, abs=0.03)
        assert bf16[name].cosine_mean != fp32[name].cosine_mean
    assert all(p.dtype == torch.float32 for p in model.parameters())


KL_CASES = {"no kl": None, "kl only": ("rehearsal", False), "kl and ce": ("rehearsal", True), "kl on all": ("all", True)}


@pytest.mark.parametrize("case", list(KL_CASES))
def test_sources_sharing_passes_take_the_same_step_as_one_row_a_pass(case: str) -> None:
    """Rows of every source in shared, length-cut passes (the loop's path) against each row run
    alone (no padding, no neighbour): the same loss, log fields, KL and adapter after one step,
    up to float order."""
    import numpy as np

    from replaybank.llm.train import step as step_mod
    from replaybank.llm.train.kl import BaseCache, KLSpec

    rng = np.random.default_rng(5)

    def rows(lengths: list[int]) -> list[tuple[Any, Any]]:
        out = []
        for n in lengths:
            ids = rng.integers(3, 300, n)
            out.append((ids, np.where(np.arange(n) < 4, -100, ids)))
        return out

    groups = [(0, rows([12, 14, 60, 64])), (1, rows([10, 48, 11, 50]))]
    tagged = [(s, r) for s, rs in groups for r in rs]
    parts = step_mod.by_length(tagged, rows_per_pass=8)
    assert len(parts) == 2 and {s for s, _ in parts[0]} == {0, 1}  # the sources share both passes
    spec = KL_CASES[case]
    kl = None if spec is None else KLSpec(2.0, on=spec[0], rehearsal_ce=spec[1])  # type: ignore[arg-type]
    after = []
    for per_pass, cache in ((8, BaseCache()), (8, None), (1, None)):
        model = _lora_model()
        params = [p for p in model.parameters() if p.requires_grad]
        opt = torch.optim.SGD(params, lr=1.0)
        stats, loss = step_mod.train_step(model, opt, params, groups, ["domain", "self"], 0, torch.device("cpu"), kl, 0.0,
                                          cache, rows_per_pass=per_pass)  # fmt: skip
        after.append((stats, loss, [p.detach().clone() for p in params]))
    (s1, l1, p1) = after[-1]
    for s2, l2, p2 in after[:-1]:
        assert l2 == pytest.approx(l1, rel=1e-5)
        assert s2["rows"] == 8 and s2["tokens"] == s1["tokens"] and s2["label_tokens"] == s1["label_tokens"]
        assert s2["domain_loss"] == pytest.approx(s1["domain_loss"], rel=1e-4)
        assert s2["rehearsal_loss"] == pytest.approx(s1["rehearsal_loss"], rel=1e-4)
        if kl is not None:
            assert s2["kl"] == pytest.approx(s1["kl"], rel=1e-4, abs=1e-7) and s1["kl"] > 0
        assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(p1, p2, strict=True))
    assert not all(torch.equal(a, b) for a, b in zip(p1, _lora_params(), strict=True))  # the step moved the adapter


def test_a_rehearsal_row_learnt_through_kl_only_gives_no_ce_gradient() -> None:
    import numpy as np

    from replaybank.llm.train import step as step_mod
    from replaybank.llm.train.kl import KLSpec

    ids = np.arange(3, 23)
    row = (ids, np.where(np.arange(20) < 4, -100, ids))
    model = _lora_model()
    params = [p for p in model.parameters() if p.requires_grad]
    before = [p.detach().clone() for p in params]
    opt = torch.optim.SGD(params, lr=1.0)
    # the KL term scaled to nothing: the row's cross-entropy is measured but moves nothing
    stats, _ = step_mod.train_step(model, opt, params, [(1, [row])], ["domain", "self"], 0, torch.device("cpu"),
                                   KLSpec(1e-30, rehearsal_ce=False), 0.0)  # fmt: skip
    assert stats["rehearsal_loss"] > 0 and stats["kl"] > 0
    assert all(torch.allclose(a, b, atol=1e-12) for a, b in zip(params, before, strict=True))


def _lora_params() -> list[Any]:
    return [p.detach().clone() for p in _lora_model().parameters() if p.requires_grad]


def test_rows_of_like_length_stay_in_one_pass() -> None:
    import numpy as np

    from replaybank.llm.train.step import by_length

    rows = [(0, (np.zeros(n), np.zeros(n))) for n in (58, 60, 62, 64)]
    assert by_length(rows) == [rows]
    assert by_length(rows[:1]) == [rows[:1]]
    assert [len(p) for p in by_length(rows, rows_per_pass=3)] == [3, 1]
