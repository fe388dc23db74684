"""ControllerCallback: Trainer's per-source eval losses steer a ``mix`` stream's
rehearsal share through a replay controller; the batches follow the new quota from the next one
drawn, and a resumed Trainer draws the batches of an uninterrupted one."""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")
pytest.importorskip("datasets")

from replaybank.hf import ControllerCallback, MixError, MixSpec, mix, recipe  # noqa: E402
from replaybank.llm.config.recipe import Recipe  # noqa: E402


def _rows(tok, n, offset=0):
    rows = []
    for i in range(offset, offset + n):
        p, a = tok(f"q{i} =")["input_ids"], tok(f" {i % 5}")["input_ids"] + [tok.eos_token_id]
        rows.append({"input_ids": p + a, "labels": [-100] * len(p) + a})
    return rows


def _trainer(tiny_lm, out, cb, steps, save_steps=None):
    model_dir, tok = tiny_lm
    torch.manual_seed(0)
    base = transformers.AutoModelForCausalLM.from_pretrained(model_dir)
    model = peft.get_peft_model(base, peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM"))
    train = mix(_rows(tok, 40), _rows(tok, 12, 100), MixSpec(cb.ratio, batch_size=4, seed=0, world_size=1), steer=cb.schedule)
    seen: list[list[int]] = []
    collate = transformers.DataCollatorForSeq2Seq(tok, padding=True)

    def collator(features):
        if "source" in features[0]:  # a training batch (the eval rows have no source column)
            seen.append([int(f.pop("source")) for f in features])
        return collate(features)

    args = transformers.TrainingArguments(
        str(out), per_device_train_batch_size=4, max_steps=steps, learning_rate=5e-2, report_to=[], use_cpu=True,
        eval_strategy="steps", eval_steps=2, eval_on_start=True, per_device_eval_batch_size=4,
        save_strategy="steps" if save_steps else "no", save_steps=save_steps or 500, logging_steps=1,
        remove_unused_columns=False,
    )  # fmt: skip
    trainer = transformers.Trainer(
        model=model, args=args, train_dataset=train, data_collator=collator,
        eval_dataset={"domain": _rows(tok, 8, 200), "rehearsal": _rows(tok, 8, 300)},
    )  # fmt: skip
    trainer.add_callback(cb)
    return trainer, seen


def _bandit():
    spec = Recipe(source=["general"], ratio=0.1, controller="bandit", max_share=0.6, floor=0.05,
                  controller_params={"lr": 20.0, "tolerance": 0.0, "scale": 0.01})
    return ControllerCallback.from_recipe(spec, seed=0)


def test_eval_losses_steer_the_quota_of_the_next_batches(tiny_lm, tmp_path):
    cb = _bandit()
    trainer, seen = _trainer(tiny_lm, tmp_path / "a", cb, steps=6)
    trainer.train()
    traj = cb.trajectory
    assert [e["step"] for e in traj] == [0, 2, 4, 6]  # eval_on_start, then every 2 steps
    assert len(cb.history) == 4 and all(len(r) == 2 for r in cb.history)
    shares = [e["shares"]["rehearsal"] for e in traj]
    assert all(0.05 - 1e-9 <= s <= 0.6 + 1e-9 for s in shares)
    assert len(set(np.round(shares, 6))) > 1  # the controller moved the share
    # every batch drawn from a change on holds the exact quota of that change's share
    batches = seen[: len(seen)]
    for e, nxt in zip(traj, [*traj[1:], None], strict=True):
        end = nxt["batch"] if nxt else len(batches)
        for b in batches[e["batch"]:end]:
            assert int(np.floor(4 * e["shares"]["rehearsal"])) <= sum(b) <= int(np.ceil(4 * e["shares"]["rehearsal"]))


def test_resumed_trainer_draws_the_batches_of_an_uninterrupted_one(tiny_lm, tmp_path):
    whole_cb = _bandit()
    trainer, whole = _trainer(tiny_lm, tmp_path / "whole", whole_cb, steps=8)
    trainer.train()
    part_cb = _bandit()
    trainer, _ = _trainer(tiny_lm, tmp_path / "part", part_cb, steps=8, save_steps=4)
    trainer.train()
    assert (tmp_path / "part" / "checkpoint-4" / "replaybank_controller.json").is_file()
    again_cb = _bandit()  # a fresh process: a new callback and stream, resumed from step 4
    trainer, resumed = _trainer(tiny_lm, tmp_path / "part", again_cb, steps=8, save_steps=4)
    trainer.train(resume_from_checkpoint=str(tmp_path / "part" / "checkpoint-4"))
    assert resumed[-4:] == whole[-4:]  # steps 5..8 drew the same sources
    assert again_cb.trajectory == whole_cb.trajectory
    assert again_cb.controller.state_dict() == whole_cb.controller.state_dict()


def test_bad_input_is_refused_naming_it(tmp_path):
    with pytest.raises(MixError, match="exactly one source"):
        ControllerCallback.from_recipe(Recipe(source=["a", "b"], controller="bandit"), seed=0)
    with pytest.raises(MixError, match="needs a controller"):
        ControllerCallback.from_recipe(recipe("rehearsal-self"), seed=0)
    cb = _bandit()
    state = cb.state_dict()
    state["controller"]["config"]["sources"] = ["other"]
    (tmp_path / "replaybank_controller.json").write_text(json.dumps(state))
    with pytest.raises(ValueError, match=r"config\['sources'\]"):
        cb.load(tmp_path)


def test_each_eval_loss_is_read_as_its_own_source():
    # the domain's loss falls while the rehearsal source's rises: the controller must read the
    # rise on the rehearsal side (its share grows); read swapped it would see the domain forgotten
    from types import SimpleNamespace

    cb = _bandit()
    evals = [(0, 2.0, 1.0), (2, 1.5, 1.4), (4, 1.2, 1.8)]
    for step, domain, rehearsal in evals:
        metrics = {"eval_rehearsal_loss": rehearsal, "eval_runtime": 0.1}
        cb.on_evaluate(None, SimpleNamespace(global_step=step), None, metrics=metrics)
        cb.on_evaluate(None, SimpleNamespace(global_step=step), None, metrics={"eval_domain_loss": domain})
    assert cb.history == [[2.0, 1.0], [1.5, 1.4], [1.2, 1.8]]
    shares = [e["shares"]["rehearsal"] for e in cb.trajectory]
    assert shares[-1] > shares[0] + 0.1  # the forgotten rehearsal source gained share


def test_a_fifo_state_file_is_refused_at_once(tmp_path, alarm):
    import os
    from types import SimpleNamespace

    cb = _bandit()
    folder = tmp_path / "checkpoint-4"
    folder.mkdir()
    os.mkfifo(folder / "replaybank_controller.json")
    with pytest.raises(MixError, match=r"replaybank_controller.json: is a FIFO \(named pipe\), not a regular file; name a controller state file"):
        cb.load(folder)
    # resuming from that checkpoint reads it (a FIFO is refused, not skipped)
    with pytest.raises(MixError, match="is a FIFO"):
        cb.on_train_begin(SimpleNamespace(output_dir=str(tmp_path)), SimpleNamespace(global_step=4), None)
    # and a save does not write into it
    with pytest.raises(MixError, match="is a FIFO"):
        cb.on_save(SimpleNamespace(output_dir=str(tmp_path)), SimpleNamespace(global_step=4), None)
    with pytest.raises(MixError, match=r"checkpoint folder = .*: the path holds a NUL byte"):
        cb.load(str(tmp_path) + "\0x")


def test_a_state_file_that_is_a_link_is_neither_written_through_nor_read(tmp_path):
    import os
    from types import SimpleNamespace

    cb = _bandit()
    folder = tmp_path / "out" / "checkpoint-4"
    folder.mkdir(parents=True)
    precious = tmp_path / "precious.json"
    precious.write_text('{"mine": true}\n')
    os.symlink(precious, folder / "replaybank_controller.json")
    args, state = SimpleNamespace(output_dir=str(tmp_path / "out")), SimpleNamespace(global_step=4)
    with pytest.raises(MixError, match=r"checkpoint-4/replaybank_controller.json: is a symbolic link, not a regular file"):
        cb.on_save(args, state, None)
    assert precious.read_text() == '{"mine": true}\n'  # the file the link points to, outside the output folder
    with pytest.raises(MixError, match="is a symbolic link"):
        cb.on_train_begin(args, state, None)
    (folder / "replaybank_controller.json").unlink()
    cb.on_save(args, state, None)  # a plain checkpoint: written, and read back on resume
    resumed = _bandit()
    resumed.on_train_begin(args, state, None)
    assert resumed.state_dict() == cb.state_dict()
