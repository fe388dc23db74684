"""TRL's own installed trl/scripts/sft.py patched by examples/trl_sft_script.patch (three lines), run as
TRL runs it (its parser, its main) for 2 LoRA steps on a tiny random Llama: the domain dataset is
a local folder of chat rows, the rehearsal rows stand in for self_rows (tested on its own in
test_embedded.py), and the trainer logs ce, kl and the rehearsal share with each loss."""

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

import replaybank.hf  # noqa: E402
from replaybank.hf.kl import KLToBase  # noqa: E402

PATCH = Path(__file__).parents[2] / "examples" / "trl_sft_script.patch"


def _patched_script(folder: Path) -> Path:
    """TRL's own installed trl/scripts/sft.py, copied into ``folder`` and patched with the example."""
    import shutil
    import subprocess

    import trl

    script = folder / "sft.py"
    shutil.copyfile(Path(trl.__file__).parent / "scripts" / "sft.py", script)
    subprocess.run(["git", "apply", str(PATCH)], cwd=folder, check=True, capture_output=True)
    return script


def _chat(prompt: str, answer: str) -> dict:
    return {"messages": [{"role": "user", "content": prompt}, {"role": "assistant", "content": answer}]}


def _completion(prompt: str, answer: str) -> dict:
    return {"prompt": prompt, "completion": answer}


# the row format of the domain dataset, how to write a row in it, and where the '#' that marks a
# rehearsal row lands in its tokens (after the chat template's "u: ", or first in a plain prompt)
FORMATS = {"messages": (_chat, 3), "prompt-completion": (_completion, 0)}


@pytest.mark.parametrize("row_format", list(FORMATS))
def test_trl_sft_script_with_three_lines_trains_on_the_mix_with_kl(tiny_lm, tmp_path, monkeypatch, row_format):
    monkeypatch.setenv("WANDB_DISABLED", "true")
    model_dir, _ = tiny_lm
    make, at = FORMATS[row_format]
    data = tmp_path / "domain"
    data.mkdir()
    rows = [make(f"{a} + {b} =", f" {a + b}") for a in range(8) for b in range(6)]
    (data / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    asked = {}

    def fake_self_rows(model, tokenizer=None, *, row_format="conversational", **kwargs):
        asked.update(model=model, row_format=row_format)
        return [FORMATS[row_format][0](f"# q{i}?", f" a{i}") for i in range(12)]  # '#' marks rehearsal rows

    monkeypatch.setattr(replaybank.hf, "self_rows", fake_self_rows)
    trainers = []
    real_attach = KLToBase.attach

    def spy_attach(self, trainer):
        trainers.append(trainer)
        return real_attach(self, trainer)

    monkeypatch.setattr(KLToBase, "attach", spy_attach)
    spec = importlib.util.spec_from_file_location("trl_sft_script", _patched_script(tmp_path))
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    # --activation_checkpointing True is TRL's default under transformers 5's name: TRL's own default
    # sets the deprecated gradient_checkpointing, which transformers 5 warns about
    argv = ["--model_name_or_path", str(model_dir), "--dataset_name", str(data), "--output_dir", str(tmp_path / "out"),
            "--per_device_train_batch_size", "10", "--max_steps", "2", "--remove_unused_columns", "False",
            "--use_peft", "--lora_r", "4", "--lora_alpha", "8", "--learning_rate", "5e-2", "--logging_steps", "1",
            "--report_to", "none", "--save_strategy", "no", "--use_cpu", "True", "--bf16", "False", "--dtype", "float32",
            "--lora_target_modules", "all-linear", "--activation_checkpointing", "True"]  # fmt: skip
    args = script.make_parser().parse_args_and_config(args=argv)
    script.main(*args)

    assert asked == {"model": str(model_dir), "row_format": row_format}  # picked from the dataset's columns
    (trainer,) = trainers
    assert trainer.state.global_step == 2
    assert (tmp_path / "out" / "adapter_model.safetensors").is_file()  # the script saved as it does
    logged = [h for h in trainer.state.log_history if "loss" in h]
    assert len(logged) == 2
    for entry in logged:
        # ratio 0.1 of 10 rows: 1 rehearsal row per batch; one micro-batch per step, so the
        # logged loss is the token-mean cross-entropy + 0.1 x the mean KL per rehearsal position
        assert entry["rehearsal_share"] == pytest.approx(0.1)
        assert math.isfinite(entry["ce"]) and entry["kl"] >= 0.0
        assert entry["loss"] == pytest.approx(entry["ce"] + 0.1 * entry["kl"], rel=1e-3)
    assert logged[0]["kl"] == pytest.approx(0.0, abs=1e-6)  # LoRA B starts at zero
    assert logged[1]["kl"] > 0.0  # one step later the adapter has moved
    targeted = {n.split(".lora_A")[0].rsplit(".", 1)[-1] for n, _ in trainer.model.named_parameters() if ".lora_A" in n}
    assert {"q_proj", "v_proj", "k_proj", "o_proj", "gate_proj", "up_proj", "down_proj"} <= targeted  # all-linear
    marker = trainer.processing_class.convert_tokens_to_ids("#")
    for k, batch in enumerate(trainer.get_train_dataloader()):
        assert batch["source"].tolist() == [0] * 9 + [1]  # the rehearsal row sits at the end of the batch
        assert batch["source"].tolist() == (batch["input_ids"][:, at] == marker).long().tolist()
        if k == 4:
            break
