"""KLToBase: the main job's KL-to-base term on rehearsal rows, as Trainer's compute_loss_func.

Checked on constructed cases: a zero-initialised adapter gives KL 0; a known perturbation of the
adapter gives the KL computed by hand from two plain forward passes (adapter on / off); domain
rows never enter the KL; the loss composes with Trainer's num_items_in_batch; and a Trainer run
on a replaybank.hf.mix stream trains with it."""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")
pytest.importorskip("datasets")

from replaybank.hf import KLToBase, MixError, MixSpec, mix  # noqa: E402


def _peft(model_dir, seed=0):
    torch.manual_seed(seed)
    base = transformers.AutoModelForCausalLM.from_pretrained(model_dir)
    cfg = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
    return peft.get_peft_model(base, cfg)


def _perturb(model, scale=0.3, seed=1):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=g) * scale)


def _batch():
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(3, 40, (4, 9), generator=g)
    att = torch.ones_like(ids)
    att[1, 7:] = 0  # a padded row
    labels = ids.clone()
    labels[:, :4] = -100  # prompt positions
    labels[att == 0] = -100
    source = torch.tensor([0, 1, 0, 1])
    return ids, att, labels, source


def _loss(kl, model, ids, att, labels, source, n_items=None):
    out = model(input_ids=ids, attention_mask=att, source=source)  # the hook takes `source` out
    return kl(out, labels, num_items_in_batch=n_items), out.logits


def _hand(model, ids, att, labels, source, weight, temperature=1.0):
    """CE mean over labelled positions + weight * mean KL(base || adapted) over rehearsal ones."""
    with torch.no_grad():
        z = model(input_ids=ids, attention_mask=att).logits[:, :-1].double().numpy()
        with model.disable_adapter():
            zb = model(input_ids=ids, attention_mask=att).logits[:, :-1].double().numpy()
    target = labels[:, 1:].numpy()
    ce, n, kl, k = 0.0, 0, 0.0, 0
    for b in range(ids.shape[0]):
        for t in range(target.shape[1]):
            if target[b, t] == -100:
                continue
            lp = z[b, t] - np.log(np.exp(z[b, t]).sum())
            ce -= lp[target[b, t]]
            n += 1
            if int(source[b]) == 1:
                p = np.exp(z[b, t] / temperature) / np.exp(z[b, t] / temperature).sum()
                q = np.exp(zb[b, t] / temperature) / np.exp(zb[b, t] / temperature).sum()
                kl += float((q * (np.log(q) - np.log(p))).sum()) * temperature**2
                k += 1
    return ce / n, kl / k, n, k


def test_zero_initialised_adapter_has_zero_kl(tiny_lm):
    model = _peft(tiny_lm[0])
    kl = KLToBase(model, weight=5.0).install()
    ids, att, labels, source = _batch()
    loss, _ = _loss(kl, model, ids, att, labels, source)
    ce, _, _, k = _hand(model, ids, att, labels, source, 5.0)
    assert kl.last["kl"] == pytest.approx(0.0, abs=1e-6) and kl.last["kl_positions"] == k > 0
    assert float(loss.detach()) == pytest.approx(ce, rel=1e-5)


@pytest.mark.parametrize("temperature", [1.0, 2.0])
def test_perturbed_adapter_matches_the_hand_computed_kl(tiny_lm, temperature):
    model = _peft(tiny_lm[0])
    _perturb(model)
    kl = KLToBase(model, weight=0.7, temperature=temperature).install()
    ids, att, labels, source = _batch()
    loss, _ = _loss(kl, model, ids, att, labels, source)
    ce, kl_mean, _, _ = _hand(model, ids, att, labels, source, 0.7, temperature)
    assert kl_mean > 1e-3  # the perturbation is not negligible
    assert kl.last["kl"] == pytest.approx(kl_mean, rel=1e-4)
    assert float(loss.detach()) == pytest.approx(ce + 0.7 * kl_mean, rel=1e-5)


def test_kl_only_on_rehearsal_rows(tiny_lm):
    model = _peft(tiny_lm[0])
    _perturb(model)
    kl = KLToBase(model, weight=1.0).install()
    ids, att, labels, _ = _batch()
    domain_only = torch.zeros(4, dtype=torch.long)
    loss, _ = _loss(kl, model, ids, att, labels, domain_only)
    ce, _, n, _ = _hand(model, ids, att, labels, torch.ones(4), 1.0)
    assert kl.last["kl"] is None and kl.last["kl_positions"] == 0
    assert float(loss.detach()) == pytest.approx(ce, rel=1e-5)
    # Rows 1 and 3 rehearsal: the KL equals the one of those rows alone.
    source = torch.tensor([0, 1, 0, 1])
    _loss(kl, model, ids, att, labels, source)
    _, kl_pair, _, _ = _hand(model, ids[[1, 3]], att[[1, 3]], labels[[1, 3]], torch.ones(2), 1.0)
    assert kl.last["kl"] == pytest.approx(kl_pair, rel=1e-4)


def test_the_base_pass_runs_on_the_rehearsal_rows_only(tiny_lm):
    """The base pass ran on all 8 rows of a batch though 1 was rehearsal."""
    model = _peft(tiny_lm[0])
    _perturb(model)
    kl = KLToBase(model, weight=1.0).install()
    rows_seen = []
    decoder = model.get_base_model().model
    decoder.register_forward_pre_hook(lambda m, a, kw: rows_seen.append(kw["input_ids"].shape[0]), with_kwargs=True)
    ids, att, labels, source = _batch()  # rows 1 and 3 rehearsal
    _loss(kl, model, ids, att, labels, source)
    assert rows_seen == [4, 2]  # the adapted pass on the batch, the base pass on 2 rows
    _, kl_pair, _, k = _hand(model, ids[[1, 3]], att[[1, 3]], labels[[1, 3]], torch.ones(2), 1.0)
    assert kl.last["kl"] == pytest.approx(kl_pair, rel=1e-4) and kl.last["kl_positions"] == k
    rows_seen.clear()
    _loss(kl, model, ids, att, labels, torch.zeros(4, dtype=torch.long))
    assert rows_seen == [4]  # no rehearsal row: no base pass


def test_num_items_in_batch_scales_both_terms(tiny_lm):
    model = _peft(tiny_lm[0])
    _perturb(model)
    kl = KLToBase(model, weight=0.5).install()
    ids, att, labels, source = _batch()
    ce, kl_mean, n, _ = _hand(model, ids, att, labels, source, 0.5)
    loss, _ = _loss(kl, model, ids, att, labels, source, n_items=torch.tensor(4 * n))
    assert float(loss.detach()) == pytest.approx((ce + 0.5 * kl_mean) / 4, rel=1e-5)


def test_bad_input_names_the_argument(tiny_lm):
    base = transformers.AutoModelForCausalLM.from_pretrained(tiny_lm[0])
    with pytest.raises(MixError, match="not a PEFT model"):
        KLToBase(base, 0.1)
    model = _peft(tiny_lm[0])
    with pytest.raises(MixError, match="weight must be >= 0"):
        KLToBase(model, -1.0)
    with pytest.raises(MixError, match="temperature must be > 0"):
        KLToBase(model, 0.1, temperature=0)
    kl = KLToBase(model, 0.1)  # no hook installed: the source never reaches the loss
    ids, att, labels, _ = _batch()
    with pytest.raises(MixError, match="no 'source' column reached"):
        kl(model(input_ids=ids, attention_mask=att), labels)
    collate = kl.collator(lambda rows: {"n": len(rows)})
    with pytest.raises(MixError, match="row 1 of the batch has no 'source' column"):
        collate([{"source": 1, "x": 1}, {"x": 2}])
    args = transformers.TrainingArguments("unused", report_to=[], use_cpu=True)
    trainer = transformers.Trainer(model=model, args=args)
    with pytest.raises(MixError, match="remove_unused_columns=False"):
        kl.attach(trainer)


def test_trainer_trains_with_kl_on_a_mixed_stream(tiny_lm, tmp_path):
    model_dir, tok = tiny_lm
    model = _peft(model_dir)

    def rows(prefix, n):
        out = []
        for i in range(n):
            p, a = tok(f"{prefix}{i} =")["input_ids"], tok(f" {i % 7}")["input_ids"] + [tok.eos_token_id]
            out.append({"input_ids": p + a, "labels": [-100] * len(p) + a})
        return out

    train = mix(rows("d", 40), rows("#", 10), MixSpec(0.25, batch_size=4, seed=0, world_size=1))
    args = transformers.TrainingArguments(
        str(tmp_path), per_device_train_batch_size=4, max_steps=5, learning_rate=5e-2, logging_steps=1,
        report_to=[], use_cpu=True, remove_unused_columns=False, save_strategy="no",
    )  # fmt: skip
    trainer = transformers.Trainer(
        model=model, args=args, train_dataset=train,
        data_collator=transformers.DataCollatorForSeq2Seq(tok, padding=True),
    )  # fmt: skip
    kl = KLToBase(model, weight=0.5).attach(trainer)
    seen = []
    real_call = kl.__call__

    class Spy:
        def __call__(self, outputs, labels, num_items_in_batch=None):
            loss = real_call(outputs, labels, num_items_in_batch)
            seen.append(dict(kl.last))
            return loss

    trainer.compute_loss_func = Spy()
    trainer.train()
    assert trainer.state.global_step == 5 and len(seen) == 5
    assert all(s["kl_positions"] > 0 for s in seen)  # 1 rehearsal row in every batch of 4
    assert seen[0]["kl"] == pytest.approx(0.0, abs=1e-6)  # LoRA B starts at zero
    assert seen[-1]["kl"] > 1e-6  # the adapter moved away from the base
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert len(losses) == 5 and all(math.isfinite(x) for x in losses)
    # each loss entry also carries its parts: one micro-batch per step, so loss = ce + 0.5 * kl
    logged = [h for h in trainer.state.log_history if "loss" in h]
    assert [h["ce"] for h in logged] == pytest.approx([s["ce"] for s in seen], rel=1e-6)
    assert [h["kl"] for h in logged] == pytest.approx([s["kl"] for s in seen], rel=1e-6, abs=1e-9)
    assert all(h["loss"] == pytest.approx(h["ce"] + 0.5 * h["kl"], rel=1e-4) for h in logged)
    assert all(h["rehearsal_share"] == 0.25 for h in logged)


def test_a_trainer_batch_size_other_than_the_mix_is_refused_at_attach(tiny_lm, tmp_path):
    """``mix(batch_size=8)`` under a trainer batch of 4 halved the first batch's rehearsal
    silently; now attach (and replaybank.hf.check_trainer) names both sizes."""
    from replaybank.hf import check_trainer

    model_dir, tok = tiny_lm
    model = _peft(model_dir)
    rows = [{"input_ids": [5, 6, 7], "labels": [5, 6, 7]} for _ in range(40)]
    train = mix(rows, rows[:10], MixSpec(0.25, batch_size=8, seed=0, world_size=1))

    def trainer_with(batch):
        args = transformers.TrainingArguments(
            str(tmp_path), per_device_train_batch_size=batch, max_steps=1, report_to=[], use_cpu=True,
            remove_unused_columns=False, save_strategy="no",
        )  # fmt: skip
        return transformers.Trainer(model=model, args=args, train_dataset=train)

    with pytest.raises(MixError, match=r"built for 8 rows per rank .* trainer takes 4 \(per_device_train_batch_size=4\)"):
        KLToBase(model, 0.1).attach(trainer_with(4))
    with pytest.raises(MixError, match="trainer takes 4"):
        check_trainer(trainer_with(4))
    check_trainer(trainer_with(8))  # the same size: no complaint
    two_ranks = mix(rows, rows[:10], MixSpec(0.25, batch_size=4, seed=0, world_size=2))
    trainer = trainer_with(4)
    trainer.train_dataset = two_ranks
    with pytest.raises(MixError, match="world_size=2, but the trainer runs on 1 process"):
        check_trainer(trainer)


@pytest.mark.parametrize(
    "weight, temperature, message",
    [
        (1e308, 1.0, r"weight = 1e\+308: must lie in \[0, 1000\]; outside it the KL term's loss overflows"),
        (1000.5, 1.0, r"weight = 1000.5: must lie in \[0, 1000\]"),
        (0.1, 1e-300, r"temperature = 1e-300: must lie in \[0.01, 100\]"),
        (0.1, 1e3, r"temperature = 1000.0: must lie in \[0.01, 100\]"),
        (0.1, float("nan"), r"temperature must be a finite number"),
        (True, 1.0, r"weight must be a finite number, got True"),
    ],
)
def test_weights_and_temperatures_whose_loss_cannot_be_finite_are_refused(tiny_lm, weight, temperature, message):
    model = _peft(tiny_lm[0])
    with pytest.raises(MixError, match=message):
        KLToBase(model, weight, temperature=temperature)


@pytest.mark.parametrize("temperature", [0.01, 100.0])
def test_the_bounds_themselves_give_a_finite_loss(tiny_lm, temperature):
    model = _peft(tiny_lm[0])
    _perturb(model, scale=3.0)
    kl = KLToBase(model, weight=1000.0, temperature=temperature).install()
    loss, _ = _loss(kl, model, *_batch())
    assert torch.isfinite(loss) and kl.last["kl_positions"] > 0
    loss.backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


@pytest.mark.parametrize("value", ["1", None, 1.0, True, 2, -1, torch.tensor([1])])
def test_a_source_column_of_strings_or_none_is_named(value):
    from replaybank.hf import SourceTap

    collate = SourceTap().collator(lambda rows: {"n": len(rows)})
    with pytest.raises(MixError, match=r"row 1 of the batch has source = .*: expected the integer 0 \(domain\) or 1"):
        collate([{"source": 0}, {"source": value}])
    assert collate([{"source": 0}, {"source": torch.tensor(1)}])["source"].tolist() == [0, 1]


@pytest.mark.parametrize("trainer", [None, object(), "trainer"])
def test_attach_to_what_is_not_a_trainer_is_named(tiny_lm, trainer):
    from replaybank.hf import SourceTap

    with pytest.raises(MixError, match=r"SourceTap.attach\(trainer=.*\): expected a transformers Trainer"):
        SourceTap().attach(trainer)
    with pytest.raises(MixError, match=r"KLToBase.attach\(trainer=.*\): expected a transformers Trainer"):
        KLToBase(_peft(tiny_lm[0]), 0.1).attach(trainer)
