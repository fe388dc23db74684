"""RetentionCallback: evaluates every N steps inside Trainer, logs through trainer.log, warns or
stops below a threshold; and the main job's suite as its evaluator on a tiny model."""

from __future__ import annotations

import json
import warnings

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")
pytest.importorskip("datasets")

from replaybank.hf import MixError, MixSpec, RetentionCallback, RetentionWarning, mix  # noqa: E402


def _peft(model_dir):
    torch.manual_seed(0)
    base = transformers.AutoModelForCausalLM.from_pretrained(model_dir)
    cfg = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
    return peft.get_peft_model(base, cfg)


def _trainer(tiny_lm, tmp_path, steps):
    model_dir, tok = tiny_lm
    model = _peft(model_dir)
    rows = []
    for i in range(24):
        p, a = tok(f"q{i} =")["input_ids"], tok(f" {i % 5}")["input_ids"] + [tok.eos_token_id]
        rows.append({"input_ids": p + a, "labels": [-100] * len(p) + a})
    train = mix(rows[:20], rows[20:], MixSpec(0.25, batch_size=4, seed=0, world_size=1))
    args = transformers.TrainingArguments(
        str(tmp_path), per_device_train_batch_size=4, max_steps=steps, learning_rate=5e-2,
        logging_steps=1, report_to=[], use_cpu=True, save_strategy="no",
    )  # fmt: skip
    return transformers.Trainer(
        model=model, args=args, train_dataset=train,
        data_collator=transformers.DataCollatorForSeq2Seq(tok, padding=True),
    )  # fmt: skip


class Falling:
    """A tiny evaluator: retention 1.0, 0.8, 0.6, ... and whether the model was in eval mode."""

    def __init__(self):
        self.calls, self.modes = 0, []

    def __call__(self, model):
        self.modes.append((model.training, torch.is_grad_enabled()))
        self.calls += 1
        return {"retention": 1.2 - 0.2 * self.calls, "probe": 0.5}


def test_evaluates_every_n_steps_and_logs_through_the_trainer(tiny_lm, tmp_path):
    trainer = _trainer(tiny_lm, tmp_path, steps=5)
    ev = Falling()
    cb = RetentionCallback(ev, every=2).attach(trainer)
    trainer.train()
    assert [h["step"] for h in cb.history] == [2, 4, 5]  # every 2 steps, and after the last one
    assert ev.modes == [(False, False)] * 3  # eval mode, no gradient
    assert trainer.model.training  # put back in training mode
    logged = [h for h in trainer.state.log_history if "retention/retention" in h]
    assert [h["step"] for h in logged] == [2, 4, 5]
    assert [h["retention/retention"] for h in logged] == pytest.approx([1.0, 0.8, 0.6])
    assert all(h["retention/probe"] == 0.5 for h in logged)
    # The trainer's own loss entries are all still there (one per step, logging_steps=1).
    assert [h["step"] for h in trainer.state.log_history if "loss" in h] == [1, 2, 3, 4, 5]


def test_warns_or_stops_below_the_threshold(tiny_lm, tmp_path):
    trainer = _trainer(tiny_lm, tmp_path / "warn", steps=6)
    RetentionCallback(Falling(), every=2, threshold=0.9).attach(trainer)
    with pytest.warns(RetentionWarning) as caught:
        trainer.train()
    assert [str(w.message) for w in caught if w.category is RetentionWarning] == [
        "RetentionCallback: retention=0.8000 at step 4 is below the threshold 0.9",
        "RetentionCallback: retention=0.6000 at step 6 is below the threshold 0.9",
    ]  # each evaluation below the threshold warns
    assert trainer.state.global_step == 6  # warn only

    trainer = _trainer(tiny_lm, tmp_path / "stop", steps=10)
    cb = RetentionCallback(Falling(), every=2, threshold=0.9, on_drop="stop").attach(trainer)
    with pytest.warns(RetentionWarning, match="stopping training"):
        trainer.train()
    assert trainer.state.global_step == 4 and [h["step"] for h in cb.history] == [2, 4]


def test_without_attach_it_still_records_in_log_history(tiny_lm, tmp_path):
    trainer = _trainer(tiny_lm, tmp_path, steps=2)
    trainer.add_callback(RetentionCallback(lambda m: 0.75, every=1, prefix=""))
    trainer.train()
    assert [h["retention"] for h in trainer.state.log_history if "retention" in h] == [0.75, 0.75]


def test_bad_input_names_the_argument(tiny_lm, tmp_path):
    with pytest.raises(MixError, match="every must be an int >= 1"):
        RetentionCallback(Falling(), every=0)
    with pytest.raises(MixError, match="on_drop must be"):
        RetentionCallback(Falling(), every=1, on_drop="panic")  # type: ignore[arg-type]
    with pytest.raises(MixError, match="evaluator must be a callable"):
        RetentionCallback("suite", every=1)  # type: ignore[arg-type]
    with pytest.raises(MixError, match="threshold must be a finite number"):
        RetentionCallback(Falling(), every=1, threshold=float("nan"))
    trainer = _trainer(tiny_lm, tmp_path, steps=2)
    RetentionCallback(lambda m: {"probe": 1.0}, every=1, threshold=0.5).attach(trainer)
    with pytest.raises(MixError, match="without metric='retention'"):
        trainer.train()
    trainer = _trainer(tiny_lm, tmp_path / "b", steps=2)
    RetentionCallback(lambda m: {"retention": "high"}, every=1).attach(trainer)
    with pytest.raises(MixError, match="'retention' is str at step 1"):
        trainer.train()


def test_the_main_jobs_suite_as_evaluator(tiny_lm, tmp_path):
    from replaybank.llm.eval.suite import load_suite

    items_file = tmp_path / "suite.jsonl"
    items = [
        {"id": "c1", "family": "open", "prompt": "say a b c", "check": {"type": "agreement"},
         "max_new_tokens": 6},
        {"id": "c2", "family": "open", "prompt": "count 1 2 3", "check": {"type": "agreement"},
         "max_new_tokens": 6},
    ]  # fmt: skip
    items_file.write_text("".join(json.dumps(i) + "\n" for i in items))
    model_dir, tok = tiny_lm
    cb = RetentionCallback.from_suite(
        tok, every=2, items=load_suite(str(items_file)), cache_dir=tmp_path / "cache", batch_size=2
    )
    # The untrained adapter (LoRA B = 0) answers exactly as the base: retention 1.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        first = cb.evaluator(_peft(model_dir))
    # a suite of agreement items only: its retention is the open family's
    assert first["retention"] == 1.0 and first["retention/open"] == 1.0
    assert list((tmp_path / "cache").glob("suite-*.json"))  # the base answers were cached
    trainer = _trainer(tiny_lm, tmp_path / "run", steps=2)
    cb.attach(trainer)
    trainer.train()
    logged = [h for h in trainer.state.log_history if "retention/retention" in h]
    assert [h["step"] for h in logged] == [2]
    # what was logged is the suite's score of the trained model (step 2 is the last step): the
    # same number when the suite is asked again now, and below 1, as training at lr 5e-2 changed
    # the greedy answers (an evaluation of the base model, adapter off, would give 1.0 again)
    trainer.model.eval()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        again = cb.evaluator(trainer.model)
    assert {k: logged[0][f"retention/{k}"] for k in again} == again
    assert again["retention"] < 1.0, again
