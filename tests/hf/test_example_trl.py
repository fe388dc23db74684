"""examples/trl_sft_rehearsal.py on a tiny random Llama: TRL's SFTTrainer trains a few LoRA steps
on replaybank.hf.mix with the KL-to-base term on the rehearsal rows and the main job's retention
suite every 2 steps, and every batch holds the quota."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pytest

pytest.importorskip("trl")
pytest.importorskip("peft")
pytest.importorskip("datasets")
torch = pytest.importorskip("torch")

from replaybank.hf import RetentionWarning  # noqa: E402

EXAMPLE = Path(__file__).parents[2] / "examples" / "trl_sft_rehearsal.py"


def _load_example():
    spec = importlib.util.spec_from_file_location("trl_sft_rehearsal", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_trl_example_trains_with_quota_and_kl(tiny_lm, tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_DISABLED", "true")
    model_dir, _ = tiny_lm
    domain = [{"prompt": f"{a} + {b} =", "completion": f" {a + b}"} for a in range(8) for b in range(5)]
    general = [{"prompt": f"# q{i}?", "completion": f" a{i}"} for i in range(12)]  # '#' marks rehearsal
    for name, rows in (("domain", domain), ("general", general)):
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    argv = ["--model", str(model_dir), "--domain", str(tmp_path / "domain.jsonl"),
            "--rehearsal", str(tmp_path / "general.jsonl"), "--ratio", "0.25", "--batch-size", "4",
            "--max-steps", "4", "--learning-rate", "5e-2", "--lora-rank", "4", "--kl-weight", "0.5",
            "--retention-every", "2", "--output-dir", str(tmp_path / "out")]  # fmt: skip
    with pytest.warns(RetentionWarning) as caught:  # the example warns below retention 0.8
        trainer = _load_example().main(argv)
    assert trainer.state.global_step == 4
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert len(losses) == 4 and all(math.isfinite(x) for x in losses)
    kl = trainer.compute_loss_func
    assert type(kl).__name__ == "KLToBase" and kl.last["kl_positions"] > 0
    assert kl.last["kl"] > 0  # the adapter moved away from the base, on the rehearsal rows
    # The main job's suite, every 2 steps, through the trainer's log.
    logged = [h for h in trainer.state.log_history if "retention/retention" in h]
    assert [h["step"] for h in logged] == [2, 4]
    assert [str(w.message) for w in caught if w.category is RetentionWarning] == [
        f"RetentionCallback: retention={h['retention/retention']:.4f} at step {h['step']} is below the threshold 0.8"
        for h in logged if h["retention/retention"] < 0.8
    ]
    # what was logged at step 4 (the last) is the suite's score of the trained model: asked again
    # now, the suite gives the same numbers, and below 1 (the base model, adapter off, gives 1.0)
    (cb,) = [c for c in trainer.callback_handler.callbacks if type(c).__name__ == "RetentionCallback"]
    trainer.model.eval()
    with torch.no_grad():
        again = cb.evaluator(trainer.model)
    assert {k: logged[-1][f"retention/{k}"] for k in again} == again
    assert again["retention"] < 1.0, again
    # Every batch SFTTrainer's dataloader yields holds 1 rehearsal row of 4, marked in `source`,
    # and the rows marked rehearsal are the '#' ones.
    marker = trainer.processing_class.convert_tokens_to_ids("#")
    for k, batch in enumerate(trainer.get_train_dataloader()):
        assert int(batch["source"].sum()) == 1
        assert batch["source"].tolist() == (batch["input_ids"][:, 0] == marker).long().tolist()
        if k == 12:
            break
