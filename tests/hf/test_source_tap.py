"""SourceTap: a mix stream's `source` column through a Trainer's collator to each forward call,
without the KL term (with KL off the column never reached the batch), and the
rehearsal share logged with each loss."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("datasets")

from replaybank.hf import MixError, MixSpec, SourceTap, mix  # noqa: E402


def _rows(tok, prefix, n):
    out = []
    for i in range(n):
        p, a = tok(f"{prefix}{i} =")["input_ids"], tok(f" {i % 7}")["input_ids"] + [tok.eos_token_id]
        out.append({"input_ids": p + a, "labels": [-100] * len(p) + a})
    return out


def _trainer(model_dir, tok, out, **overrides):
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir)  # no PEFT: no KL possible
    train = mix(_rows(tok, "d", 40), _rows(tok, "#", 10), MixSpec(0.25, batch_size=4, seed=0, world_size=1))
    kwargs = dict(per_device_train_batch_size=4, max_steps=3, learning_rate=1e-2, logging_steps=1, report_to=[],
                  use_cpu=True, remove_unused_columns=False, save_strategy="no")  # fmt: skip
    args = transformers.TrainingArguments(str(out), **{**kwargs, **overrides})
    collator = transformers.DataCollatorForSeq2Seq(tok, padding=True)
    return transformers.Trainer(model=model, args=args, train_dataset=train, data_collator=collator)


def test_the_source_reaches_each_step_and_the_share_is_logged(tiny_lm, tmp_path):
    model_dir, tok = tiny_lm
    trainer = _trainer(model_dir, tok, tmp_path)
    tap = SourceTap().attach(trainer)
    seen = []
    trainer.model.register_forward_pre_hook(lambda m, a, kw: seen.append(sorted(kw)), with_kwargs=True)
    trainer.train()
    assert trainer.state.global_step == 3
    logged = [h for h in trainer.state.log_history if "loss" in h]
    assert [h["rehearsal_share"] for h in logged] == [0.25, 0.25, 0.25]  # 1 rehearsal row of 4
    assert tap.last["source"].tolist().count(1) == 1
    marker = tok.convert_tokens_to_ids("#")
    assert tap.last["source"].tolist() == (tap.last["input_ids"][:, 0] == marker).long().tolist()
    assert all("source" not in kw for kw in seen)  # the model never saw the column


def test_a_trainer_that_would_lose_the_column_is_refused(tiny_lm, tmp_path):
    model_dir, tok = tiny_lm
    with pytest.raises(MixError, match="remove_unused_columns is True"):
        SourceTap().attach(_trainer(model_dir, tok, tmp_path, remove_unused_columns=True))
    trainer = _trainer(model_dir, tok, tmp_path)
    trainer.args.packing = True  # as SFTConfig(packing=True)
    with pytest.raises(MixError, match="packing joins rows"):
        SourceTap().attach(trainer)
    with pytest.raises(MixError, match="needs a model"):
        SourceTap().install()
