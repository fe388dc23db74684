"""The adapter states kept at evenly spaced steps of a training (``[evaluation] checkpoints``): the
steps, the copies (not views of the live weights), a too-short training, and the files they are
staged in."""

from __future__ import annotations

import pytest

from replaybank.llm.config import Training
from replaybank.llm.train.peft_files import AdapterError
from replaybank.llm.train.snapshots import Snapshots, snapshot_steps


def test_the_steps_are_evenly_spaced_before_the_end_and_a_short_training_keeps_fewer():
    assert snapshot_steps(2, 120) == [40, 80]
    assert snapshot_steps(1, 120) == [60]
    assert snapshot_steps(4, 10) == [2, 4, 6, 8]
    assert snapshot_steps(3, 3) == [1, 2]  # more asked than the training has steps before its end
    assert snapshot_steps(2, 1) == [] and snapshot_steps(0, 50) == []
    with pytest.raises(ValueError):
        snapshot_steps(-1, 10)


@pytest.fixture
def adapted(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    from replaybank.llm.train.lora import add_lora

    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    return add_lora(base, Training(lora_rank=4, lora_target_modules=["q_proj", "v_proj"]))


def _train_one_step(model, step):
    import torch

    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.add_(float(step))


def test_the_hook_keeps_copies_at_its_steps_and_they_survive_the_files(adapted, tmp_path):
    from peft import get_peft_model_state_dict

    snaps = Snapshots(3)
    hook = snaps.on_step(adapted)
    at: dict[int, dict] = {}
    for step in range(1, 9):  # 8 steps: kept at 2, 4, 6
        _train_one_step(adapted, step)
        at[step] = {k: v.clone() for k, v in get_peft_model_state_dict(adapted).items()}
        hook(step, 8)
    assert sorted(snaps.states) == [2, 4, 6] and snaps.last == 8
    for step in (2, 4, 6):  # copies: later steps did not move them
        assert all(snaps.states[step][k].equal(v) for k, v in at[step].items())
    assert not all(snaps.states[2][k].equal(v) for k, v in at[8].items())
    written = snaps.write(tmp_path)
    assert [p.name for p in written] == ["checkpoint-step2.safetensors", "checkpoint-step4.safetensors",
                                         "checkpoint-step6.safetensors"]
    back = Snapshots(3)
    back.read(tmp_path, [2, 4, 6])
    assert all(back.states[s][k].equal(v) for s in (2, 4, 6) for k, v in snaps.states[s].items())
    with pytest.raises(AdapterError, match="step 5"):
        back.read(tmp_path, [5])
    hook(1, 8)  # a new training forgets the states of the last one
    assert snaps.states == {}


def test_a_training_shorter_than_the_checkpoints_keeps_one_per_step(adapted):
    snaps = Snapshots(5)
    hook = snaps.on_step(adapted)
    for step in range(1, 4):
        hook(step, 3)
    assert sorted(snaps.states) == [1, 2]


def test_a_staged_record_is_read_back_checked(adapted, tmp_path):
    from peft import get_peft_model_state_dict

    snaps = Snapshots(1)
    hook = snaps.on_step(adapted)
    for step in (1, 2, 3, 4):
        _train_one_step(adapted, step)
        hook(step, 4)
    snaps.write(tmp_path)
    mine = get_peft_model_state_dict(adapted)
    back = Snapshots(1)
    back.read_staged(tmp_path, snaps.record(), mine)
    assert sorted(back.states) == [2] and back.last == 4
    for bad in ({"steps": ["2"], "last_step": 4}, {"steps": [2], "last_step": 2}, {"steps": [2]}, [2], {"steps": [True], "last_step": 4}):
        with pytest.raises(AdapterError, match="staged checkpoints"):
            Snapshots(1).read_staged(tmp_path, bad, mine)
    other = {k: v[:1] for k, v in mine.items()}  # another adapter's shapes
    with pytest.raises(AdapterError, match="shape"):
        Snapshots(1).read_staged(tmp_path, snaps.record(), other)
