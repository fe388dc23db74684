"""The LoRA loop's checkpoint: all or nothing. Every field is checked against the model,
optimizer and mixer it is restored into before any of them changes: a bad optimizer, mixer, RNG,
step or adapter tensor is a ReplayBankError naming the file and the field, and the LoRA weights,
optimizer, mixer, generator and log are left exactly as they were."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from replaybank.errors import ReplayBankError

torch = pytest.importorskip("torch")
peft = pytest.importorskip("peft")

from replaybank.llm.train.checkpoint import load_checkpoint, save_checkpoint  # noqa: E402
from replaybank.llm.train.log import TrainLog  # noqa: E402
from replaybank.mixing import Mixer  # noqa: E402

SIZES, SHARES, BATCH = [20, 8], [0.75, 0.25], 4


class _Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(4, 4)

    def forward(self, x: Any) -> Any:
        return self.proj(x)


def parts(seed: int) -> tuple[Any, Any, Mixer, TrainLog]:
    """A LoRA model, its AdamW after one step, a mixer one batch in, and a log of that step."""
    torch.manual_seed(seed)
    model = peft.get_peft_model(_Net(), peft.LoraConfig(r=2, lora_alpha=2, target_modules=["proj"], init_lora_weights=False))
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    step(model, opt)
    mixer = Mixer(SIZES, SHARES, BATCH, seed=3)
    next(iter(mixer.epoch(0)))
    return model, opt, mixer, TrainLog(steps=[{"step": 1, "loss": 0.5}], evals=[{"step": 1}], tokens=12, seconds=0.25)


def step(model: Any, opt: Any) -> None:
    model(torch.ones(3, 4)).pow(2).sum().backward()
    opt.step()
    opt.zero_grad()


def valid_state(tmp_path: Path) -> dict[str, Any]:
    """The dict a real checkpoint holds (saved and read back, as load_checkpoint reads it)."""
    path = tmp_path / "valid.pt"
    save_checkpoint(path, *parts(0), step=1)
    return torch.load(path, weights_only=True)


def snapshot(model: Any, opt: Any, mixer: Mixer, log: TrainLog) -> dict[str, Any]:
    return {
        "lora": {k: v.detach().clone() for k, v in model.state_dict().items() if "lora_" in k},
        "opt": copy.deepcopy(opt.state_dict()), "mixer": mixer.state_dict(), "rng": torch.get_rng_state(),
        "log": (copy.deepcopy(log.steps), copy.deepcopy(log.evals), log.tokens, log.seconds),
    }


def same(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.shape == b.shape and bool(torch.equal(a, b))
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def _adapter_key(s: dict[str, Any]) -> str:
    return sorted(s["adapter"])[0]


EDITS: list[tuple[str, Callable[[dict[str, Any]], None], str]] = [
    ("step 10**15", lambda s: s.update(step=10**15), r"field 'step' is 1000000000000000, but its log holds 1 steps"),
    ("step 2**70", lambda s: s.update(step=2**70), r"field 'step' is beyond 2\*\*53"),
    ("step beyond the log", lambda s: s.update(step=7), r"field 'step' is 7, but its log holds 1 steps"),
    ("NaN adapter", lambda s: s["adapter"][_adapter_key(s)].fill_(float("nan")), r"field 'adapter\..*lora_A.*' holds NaN"),
    ("adapter shape", lambda s: s["adapter"].update({_adapter_key(s): torch.zeros(3, 3)}), r"field 'adapter\..*' is torch.float32 \(3, 3\)"),
    ("adapter missing", lambda s: s["adapter"].pop(_adapter_key(s)), r"field 'adapter' has 1 tensors missing"),
    ("mixer taken -50", lambda s: s["mixer"].update(taken=-50), r"field 'mixer': .*taken"),
    ("mixer epoch -1", lambda s: s["mixer"].update(epoch=-1), r"field 'mixer': .*epoch"),
    ("mixer of another mixer", lambda s: s["mixer"].update(seed=4), r"field 'mixer': mixer state has seed=4"),
    ("optimizer NaN", lambda s: s["optimizer"]["state"][0]["exp_avg"].fill_(float("nan")), r"field 'optimizer.state\[0\].exp_avg' holds values that are not finite"),
    ("optimizer shape", lambda s: s["optimizer"]["state"][0].update(exp_avg=torch.zeros(9)), r"field 'optimizer.state\[0\].exp_avg' has shape \(9,\)"),
    ("optimizer slot missing", lambda s: s["optimizer"]["state"][0].pop("exp_avg_sq"), r"field 'optimizer.state\[0\]' holds \['exp_avg', 'step'\]"),
    ("optimizer step int", lambda s: s["optimizer"]["state"][0].update(step=3), r"field 'optimizer.state\[0\].step' is 3, expected a floating-point tensor"),
    ("optimizer lr", lambda s: s["optimizer"]["param_groups"][0].update(lr=1e300), r"field 'optimizer.param_groups\[0\].lr' is 1e\+300, this run's optimizer has 0.01"),
    ("optimizer setting gone", lambda s: s["optimizer"]["param_groups"][0].pop("foreach"), r"field 'optimizer.param_groups\[0\]' lacks key 'foreach'"),
    ("optimizer params", lambda s: s["optimizer"]["param_groups"][0].update(params=[0]), r"field 'optimizer.param_groups\[0\].params' does not list"),
    ("optimizer stranger entry", lambda s: s["optimizer"]["state"].update({99: {}}), r"field 'optimizer.state' has an entry 99 for no parameter"),
    ("optimizer not one", lambda s: s.update(optimizer={"x": 1}), r"field 'optimizer' is not an optimizer state"),
    ("rng size", lambda s: s.update(torch_rng=torch.zeros(10, dtype=torch.uint8)), r"field 'torch_rng' is a torch.uint8 tensor of shape \(10,\)"),
    ("rng dtype", lambda s: s.update(torch_rng=s["torch_rng"].float()), r"field 'torch_rng' is a torch.float32 tensor"),
    ("cuda rng", lambda s: s.update(cuda_rng=torch.zeros(2, 2, dtype=torch.uint8)), r"field 'cuda_rng' is a torch.uint8 tensor of shape \(2, 2\)"),
    ("log steps", lambda s: s["log"]["steps"].__setitem__(0, "x"), r"field 'log.steps\[0\]' is not the record of step 1"),
    ("log seconds", lambda s: s["log"].update(seconds=float("inf")), r"field 'log.seconds' is inf"),
    ("log tokens", lambda s: s["log"].update(tokens=-3), r"field 'log.tokens' is out of range"),
    ("unknown field", lambda s: s.update(extra=1), r"checkpoint has unknown field 'extra'"),
]


@pytest.mark.parametrize("case", [e[0] for e in EDITS])
def test_a_bad_field_is_refused_naming_it_and_nothing_is_restored(tmp_path, case):
    _, edit, match = next(e for e in EDITS if e[0] == case)
    state = valid_state(tmp_path)
    edit(state)
    path = tmp_path / "checkpoint.pt"
    torch.save(state, path)
    target = parts(1)  # another run's objects: any restore at all would show
    before = snapshot(*target)
    with pytest.raises(ReplayBankError, match=rf"checkpoint.pt: (checkpoint )?{match}"):
        load_checkpoint(path, *target)
    assert same(snapshot(*target), before), "a refused checkpoint changed the run"


def test_a_valid_checkpoint_still_restores_everything(tmp_path):
    path = tmp_path / "checkpoint.pt"
    source = parts(0)
    save_checkpoint(path, *source, step=1)
    target = parts(1)
    assert load_checkpoint(path, *target) == 1
    want, got = snapshot(*source), snapshot(*target)
    assert same(got["lora"], want["lora"]) and same(got["opt"], want["opt"]) and got["mixer"] == want["mixer"]


def test_a_restore_that_fails_after_the_checks_puts_back_what_it_changed(tmp_path, monkeypatch):
    path = tmp_path / "checkpoint.pt"
    save_checkpoint(path, *parts(0), step=1)
    model, opt, mixer, log = parts(1)
    before = snapshot(model, opt, mixer, log)

    def broken(state: Any) -> None:
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(torch, "set_rng_state", broken)  # the optimizer and mixer are restored by then
    with pytest.raises(ReplayBankError, match=r"checkpoint field 'torch_rng' could not be restored \(disk on fire\)"):
        load_checkpoint(path, model, opt, mixer, log)
    monkeypatch.undo()
    assert same(snapshot(model, opt, mixer, log), before)


def test_save_checkpoint_never_writes_through_a_link(tmp_path):
    outside = tmp_path / "outside"
    outside.write_text("keep")
    folder = tmp_path / "partial" / "arm-seed0-gen0"
    folder.mkdir(parents=True)
    (folder / "checkpoint.tmp").symlink_to(outside)  # a leftover temporary name pointing outside
    save_checkpoint(folder / "checkpoint.pt", *parts(0), step=1)
    assert outside.read_text() == "keep" and (folder / "checkpoint.pt").is_file()
    linked = tmp_path / "partial" / "arm-seed1-gen0"
    linked.symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    (tmp_path / "elsewhere").mkdir()
    with pytest.raises(ReplayBankError, match=r"arm-seed1-gen0: is a symbolic link"):
        save_checkpoint(linked / "checkpoint.pt", *parts(0), step=1)
    assert list((tmp_path / "elsewhere").iterdir()) == []
