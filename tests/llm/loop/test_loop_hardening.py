"""A resume checks what it recorded (the adapter's hash per
generation, the rehearsal rows, the base model), ``state.json`` is schema-checked whole, adapters
that do not fit are refused before the model is touched, and nothing is written through a link."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from replaybank.episodic.store import StoreError
from replaybank.errors import ReplayBankError
from replaybank.llm.config.loop import LoopConfig
from replaybank.llm.config.names import UnsafePathError, refuse_links, safe_folder
from replaybank.llm.loop.consolidate import AdapterError, load_adapter, save_adapter
from replaybank.llm.loop.state import StateError, new_state, read_state, write_state
from replaybank.llm.recipes.loop import run_loop

from .conftest import tiny_loop_config  # type: ignore[import-not-found]

torch = pytest.importorskip("torch")
peft = pytest.importorskip("peft")


@pytest.fixture(scope="module")
def finished(tiny_model_dir: Path, tmp_path_factory: Any) -> tuple[dict[str, Any], Path, Path]:
    """A finished two-generation run of the tiny model: (config dict, run folder, cache), to copy."""
    tmp = tmp_path_factory.mktemp("loop-hardening")
    cache = tmp / "cache"
    old = os.environ.get("REPLAYBANK_CACHE")
    os.environ["REPLAYBANK_CACHE"] = str(cache)
    try:
        data = tiny_loop_config(tiny_model_dir, tmp, generations=2)
        run_loop(LoopConfig.from_dict(data), tmp / "run", log=lambda m: None)
    finally:
        if old is None:
            os.environ.pop("REPLAYBANK_CACHE", None)
        else:
            os.environ["REPLAYBANK_CACHE"] = old
    return data, tmp / "run", cache


@pytest.fixture
def run_copy(finished: tuple[dict[str, Any], Path, Path], tmp_path: Path, monkeypatch: Any) -> tuple[dict[str, Any], Path]:
    data, run, cache = finished
    monkeypatch.setenv("REPLAYBANK_CACHE", str(cache))
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    return data, copy


def _more(data: dict[str, Any], generations: int = 3) -> LoopConfig:
    return LoopConfig.from_dict({**data, "loop": {**data["loop"], "generations": generations}})


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file() and not p.name.startswith("store.db")}


def test_an_adapter_copied_from_another_generation_is_refused(run_copy):
    data, run = run_copy
    for name in ("adapter_model.safetensors", "replaybank.json"):  # gen1's files, self-consistent, in gen2's place
        shutil.copy(run / "adapters" / "gen1" / name, run / "adapters" / "gen2" / name)
    before = _snapshot(run)
    with pytest.raises(AdapterError, match=r"gen2/adapter_model.safetensors: holds adapter \w{16}, but state.json records \w{16}"):
        run_loop(_more(data), run, log=lambda m: None)
    assert _snapshot(run) == before and not (run / "adapters" / "gen3").exists()


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        (lambda s: s.update(finished=1), r"field 'generations' has 3 rows but 'finished' is 1"),  # resumed as [0, 1, 2, 2]
        (lambda s: s.update(adapter="../../../../etc/passwd"), r"field 'adapter' is '../../../../etc/passwd', expected '\w{16}'"),
        (lambda s: s["generations"][1].pop("validation"), r"field 'generations\[1\].validation' is missing"),
        (lambda s: s["generations"].__setitem__(1, "x"), r"field 'generations\[1\]' is str, expected an object"),
        (lambda s: s["generations"][2]["no_context"].update(credit="high"), r"'generations\[2\].no_context.credit' is 'high'"),
        (lambda s: s["generations"][2].update(adapter="../gen1"), r"'generations\[2\].adapter' is '../gen1', expected 16 hex"),
        (lambda s: s["generations"][1].update(generation=2), r"'generations\[1\].generation' is 2, expected 1"),
        (lambda s: s["generations"][2].update(lineage=[0, 9]), r"'generations\[2\].lineage' is a list, expected a list of generations in 1..2"),
        (lambda s: s["config"]["loop"].update(seed="zero"), r"field 'config': \[loop\] seed = 'zero': expected an integer"),
        (lambda s: s["config"].update(loop=[]), r"field 'config': \[loop\] must be a table"),
        (lambda s: s.update(base_model="x"), r"field 'base_model' is 'x', expected 64 hex digits"),
    ],
)
def test_a_state_json_that_fails_its_schema_is_refused_before_anything_loads(run_copy, edit, match):
    data, run = run_copy
    state = json.loads((run / "state.json").read_text())
    edit(state)
    (run / "state.json").write_text(json.dumps(state))
    before = _snapshot(run)
    with pytest.raises(StateError, match=match):
        read_state(run)
    with pytest.raises(StateError, match=match):
        run_loop(_more(data), run, log=lambda m: None)
    assert _snapshot(run) == before


@pytest.mark.parametrize(
    "text",
    ["[" * 100_000 + "]" * 100_000, '{"schema": 1, "finished": NaN}', '{"schema": 1, "finished": ' + "9" * 5000 + "}", "\xff"],
)
def test_unreadable_state_json_is_a_state_error(tmp_path, text):
    (tmp_path / "state.json").write_bytes(text.encode("utf-8", "surrogateescape") if text != "\xff" else b"\xff")
    with pytest.raises(StateError, match=r"state.json: not a loop state file"):
        read_state(tmp_path)


def test_state_json_links_are_refused_on_read_and_not_followed_on_write(tmp_path):
    outside = tmp_path / "outside.json"
    outside.write_text("{}")
    run = tmp_path / "run"
    run.mkdir()
    (run / "state.json").symlink_to(outside)
    with pytest.raises(StateError, match=r"state.json: is a symbolic link"):
        read_state(run)
    (run / "state.json").unlink()
    os.mkfifo(run / "state.json")  # reading a FIFO would block forever
    with pytest.raises(StateError, match=r"state.json: is not a regular file"):
        read_state(run)
    (run / "state.json").unlink()
    (run / "state.json.tmp").symlink_to(outside)  # a leftover temporary name pointing outside
    write_state(run, new_state(LoopConfig().to_dict()))
    assert outside.read_text() == "{}" and read_state(run) == new_state(LoopConfig().to_dict())


def test_rehearsal_rows_or_base_model_changed_under_the_same_path_are_refused(tiny_model_dir, tmp_path, isolated_cache):
    model = tmp_path / "model"
    shutil.copytree(tiny_model_dir, model)
    data = tiny_loop_config(model, tmp_path, generations=1)
    run = tmp_path / "run"
    run_loop(LoopConfig.from_dict(data), run, log=lambda m: None)
    state = json.loads((run / "state.json").read_text())
    assert len(state["base_model"]) == 64 and len(state["rehearsal"]["sha256"]) == 64

    rehearsal = Path(data["loop"]["rehearsal"])
    original = rehearsal.read_bytes()
    rehearsal.write_text(json.dumps({"prompt": "Name a colour.", "response": "Red, always."}) + "\n", encoding="utf-8")
    before = _snapshot(run)
    with pytest.raises(StateError, match=r"the rehearsal rows \(.*rehearsal.jsonl\) changed since this run started"):
        run_loop(_more(data, 2), run, log=lambda m: None)
    assert _snapshot(run) == before
    rehearsal.write_bytes(original)

    from transformers import LlamaForCausalLM

    weights = LlamaForCausalLM.from_pretrained(model)
    with torch.no_grad():
        next(weights.parameters()).mul_(-1.0)
    weights.save_pretrained(model)
    with pytest.raises(StateError, match=r"\[training\] base_model = '.*model' is not the model this run started with"):
        run_loop(_more(data, 2), run, log=lambda m: None)
    assert _snapshot(run) == before


def test_links_in_the_run_folder_are_refused_on_write(run_copy, tmp_path):
    data, run = run_copy
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (run / "adapters" / "gen3").symlink_to(elsewhere)
    with pytest.raises(UnsafePathError, match=r"adapters/gen3: is a symbolic link"):
        run_loop(_more(data), run, log=lambda m: None)
    assert list(elsewhere.iterdir()) == []  # nothing written there
    assert json.loads((run / "state.json").read_text())["finished"] == 2
    # the store: a link (also a dangling one) is refused before anything opens it
    for target in (elsewhere / "store.db", tmp_path / "missing.db"):
        fresh = tmp_path / f"fresh-{target.name}"
        fresh.mkdir()
        (fresh / "store.db").symlink_to(target)
        with pytest.raises(StoreError, match=r"store.db: is a symlink"):
            run_loop(LoopConfig.from_dict(data), fresh, log=lambda m: None)
    assert list(elsewhere.iterdir()) == []


def test_safe_folder_and_refuse_links(tmp_path):
    root = tmp_path / "out"
    root.mkdir()
    assert safe_folder(root, "adapters", "arm", "seed0").is_dir()
    (tmp_path / "elsewhere").mkdir()
    (root / "adapters" / "arm" / "seed1").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(UnsafePathError, match=r"seed1: is a symbolic link"):
        safe_folder(root, "adapters", "arm", "seed1", "gen0")
    for bad in ("..", "../x", "/abs", ""):
        with pytest.raises(UnsafePathError, match=r"is not a name"):
            safe_folder(root, "adapters", bad)
    (root / "file").write_text("x")
    with pytest.raises(UnsafePathError, match=r"file: exists and is not a folder"):
        safe_folder(root, "file", "x")
    (root / "adapters" / "link.json").symlink_to(tmp_path / "elsewhere" / "x.json")
    with pytest.raises(UnsafePathError, match=r"link.json: is a symbolic link"):
        refuse_links(root / "adapters", "absent.json", "link.json")
    os.mkfifo(root / "adapters" / "fifo.json")
    with pytest.raises(UnsafePathError, match=r"fifo.json: exists and is not a regular file"):
        refuse_links(root / "adapters", "fifo.json")


def test_a_loop_adapter_is_a_peft_folder_that_from_pretrained_loads(finished, tiny_model_dir):
    """PeftModel.from_pretrained loads a loop-written adapter and gives the loop's logits."""
    from transformers import LlamaForCausalLM

    from replaybank.llm.train import add_lora
    from replaybank.llm.train.peft_files import sha256_file

    data, run, _ = finished
    folder = run / "adapters" / "gen2"
    assert sorted(p.name for p in folder.iterdir()) == ["adapter_config.json", "adapter_model.safetensors", "replaybank.json"]
    meta = json.loads((folder / "replaybank.json").read_text())
    assert meta["sha256"] == sha256_file(folder / "adapter_model.safetensors") and meta["base_model"]["fingerprint"]
    cfg = LoopConfig.from_dict(data)
    ours = add_lora(LlamaForCausalLM.from_pretrained(tiny_model_dir).eval(), cfg.training)
    load_adapter(ours, folder, generation=2)
    theirs = peft.PeftModel.from_pretrained(LlamaForCausalLM.from_pretrained(tiny_model_dir).eval(), folder)
    ids = torch.tensor([[5, 17, 300, 42, 9, 1000]])
    with torch.no_grad():
        a, b = ours.eval()(input_ids=ids).logits, theirs(input_ids=ids).logits
        with theirs.disable_adapter():
            bare = theirs(input_ids=ids).logits
    assert torch.allclose(a, b, atol=1e-5), float((a - b).abs().max())
    assert not torch.allclose(a, bare, atol=1e-4)  # the adapter is really there


def test_the_main_jobs_adapter_save_refuses_links(tmp_path):
    from replaybank.llm.train.peft_files import write_adapter_folder

    # what the main job does after each generation: a checked folder inside OUT.partial, then the write
    outside = tmp_path / "outside"
    outside.write_text("keep")
    where = safe_folder(tmp_path, "OUT.partial", "adapters", "naive", "seed0", "gen0")
    (where / "adapter_model.safetensors").symlink_to(outside)
    with pytest.raises(UnsafePathError, match=r"adapter_model.safetensors: is a symbolic link"):
        write_adapter_folder(_lora(), where, {"arm": "naive"})
    assert outside.read_text() == "keep" and sorted(p.name for p in where.iterdir()) == ["adapter_model.safetensors"]
    (where / "adapter_model.safetensors").unlink()
    write_adapter_folder(_lora(), where, {"arm": "naive"})
    assert (where / "adapter_model.safetensors").is_file() and (where / "replaybank.json").is_file()


# -- the adapter files themselves, against a small PEFT model -----------------------------------


class _Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(4, 4)

    def forward(self, x: Any) -> Any:
        return self.proj(x)


def _lora(rank: int = 2) -> Any:
    torch.manual_seed(0)
    return peft.get_peft_model(_Net(), peft.LoraConfig(r=rank, lora_alpha=2, target_modules=["proj"], init_lora_weights=False))


def _lora_weights(model: Any) -> dict[str, Any]:
    return {k: v.detach().clone() for k, v in model.state_dict().items() if "lora_" in k}


def _write(folder: Path, tensors: dict[str, Any], meta: Any = None) -> str:
    """An adapter folder whose adapter.json records the file's real hash (a consistent forgery)."""
    import hashlib

    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(folder / "adapter.safetensors"))
    digest = hashlib.sha256((folder / "adapter.safetensors").read_bytes()).hexdigest()
    (folder / "adapter.json").write_text(json.dumps({"generation": 1, "sha256": digest} if meta is None else meta))
    return digest[:16]


def test_save_and_load_round_trip_and_the_expected_hash(tmp_path):
    model = _lora()
    folder = safe_folder(tmp_path, "adapters", "gen1")
    digest = save_adapter(model, folder, {"generation": 1})
    other = _lora()
    with torch.no_grad():
        for name, p in other.named_parameters():
            if "lora_" in name:
                p.zero_()
    assert load_adapter(other, folder, expected=digest, generation=1) == digest
    assert all(torch.equal(a, b) for a, b in zip(_lora_weights(model).values(), _lora_weights(other).values(), strict=True))
    with pytest.raises(AdapterError, match=r"state.json records 0123456789abcdef"):
        load_adapter(other, folder, expected="0123456789abcdef", generation=1)
    with pytest.raises(AdapterError, match=r"is generation 1's adapter, expected 2's"):
        load_adapter(other, folder, expected=digest, generation=2)


def test_a_folder_in_the_layout_before_issue_26_still_loads(tmp_path):
    model = _lora()
    digest = _write(tmp_path / "gen1", peft.get_peft_model_state_dict(model))  # adapter.safetensors + adapter.json
    other = _lora()
    with torch.no_grad():
        for name, p in other.named_parameters():
            if "lora_" in name:
                p.zero_()
    assert load_adapter(other, tmp_path / "gen1", expected=digest, generation=1) == digest
    assert all(torch.equal(a, b) for a, b in zip(_lora_weights(model).values(), _lora_weights(other).values(), strict=True))


def test_save_adapter_refuses_links_at_its_file_names(tmp_path):
    outside = tmp_path / "outside"
    outside.write_text("keep")
    folder = safe_folder(tmp_path, "run", "adapters", "gen1")
    for name in ("adapter_model.safetensors", "adapter_config.json.tmp", "replaybank.json.tmp"):
        (folder / name).symlink_to(outside)
        with pytest.raises(UnsafePathError, match=rf"{name}: is a symbolic link"):
            save_adapter(_lora(), folder, {"generation": 1})
        (folder / name).unlink()
    assert outside.read_text() == "keep"


def _cases() -> list[tuple[Any, str]]:
    model = _lora()
    good = {k: v.detach().clone() for k, v in peft.get_peft_model_state_dict(model).items()}
    nan = {k: torch.full_like(v, float("nan")) for k, v in good.items()}
    wide = {k: torch.zeros(v.shape[0] + 1, *v.shape[1:]) for k, v in good.items()}
    ints = {k: torch.zeros(v.shape, dtype=torch.int64) for k, v in good.items()}
    extra = {**good, "base_model.model.proj.lora_C.weight": torch.zeros(2)}
    return [
        ({}, r"2 of the model's adapter's 2 tensors are missing"),
        (nan, r"holds NaN or infinite values"),
        (wide, r"has shape \(\d, \d\), the model's adapter has"),
        (ints, r"is torch.int64, expected floating point"),
        (extra, r"tensors that are not in the model's adapter: \['base_model.model.proj.lora_C.weight'\]"),
    ]


@pytest.mark.parametrize("case", range(5))
def test_tensors_that_do_not_fit_are_refused_and_the_model_is_untouched(tmp_path, case):
    tensors, match = _cases()[case]
    digest = _write(tmp_path / "gen1", tensors)
    model = _lora()
    before = _lora_weights(model)
    with pytest.raises(AdapterError, match=match):
        load_adapter(model, tmp_path / "gen1", expected=digest, generation=1)
    assert all(torch.equal(before[k], v) for k, v in _lora_weights(model).items())


@pytest.mark.parametrize(("meta", "match"), [
    (b"{not json", r"adapter.json: the adapter's manifest is not readable JSON \(JSONDecodeError\)"),
    (b"[1, 2]", r"adapter.json: the adapter's manifest must be a JSON object, got list"),
    (b"[" * 100_000, r"adapter.json: the adapter's manifest is not readable JSON \(RecursionError\)"),
    (b'{"sha256": 7}', r"adapter.json: field 'sha256' is not 64 hex digits"),
])
def test_an_adapter_json_that_is_not_a_record_is_an_adapter_error(tmp_path, meta, match):
    model = _lora()
    _write(tmp_path / "gen1", peft.get_peft_model_state_dict(model))
    (tmp_path / "gen1" / "adapter.json").write_bytes(meta)
    with pytest.raises(AdapterError, match=match):
        load_adapter(model, tmp_path / "gen1")


@pytest.mark.parametrize("key", ["tasks", "rehearsal"])
@pytest.mark.parametrize("kind", ["fifo", "folder", "device"])
def test_run_loop_refuses_a_task_or_rehearsal_file_that_is_not_regular(tiny_cfg, tmp_path, alarm, key, kind):
    """run_loop called directly (no CLI check first): a FIFO once blocked the JSONL reader forever."""
    data = tiny_cfg(demos=0)
    path = tmp_path / f"{key}.jsonl"
    if path.exists():
        path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "folder":
        path.mkdir()
    else:
        path.symlink_to("/dev/zero")  # never ends; a link the user named is followed, then refused
    data["loop"][key] = str(path)
    kinds = {"fifo": "a FIFO", "folder": "a folder", "device": "a character device"}
    with pytest.raises(ReplayBankError, match=rf"{path}: is {kinds[kind]}.*not a regular file"):
        run_loop(LoopConfig.from_dict(data), tmp_path / "run", log=lambda m: None)
    assert not (tmp_path / "run" / "adapters").exists()


@pytest.mark.parametrize("name", ["report.md", "metrics.json", "loop.png"])
def test_the_grid_report_is_never_written_through_a_link(run_copy, tmp_path, name):
    """report.md / metrics.json / loop.png stay inside the grid folder: a link at any of them is
    refused before the first is written (also by run_grid, before any run starts)."""
    from replaybank.llm.loop.report import write_report
    from replaybank.llm.recipes.loop import run_grid

    data, run = run_copy
    grid = tmp_path / "grid"
    grid.mkdir()
    shutil.move(run, grid / "window-rehearsal-s0")
    outside = tmp_path / "outside.txt"
    outside.write_text("mine")
    (grid / name).symlink_to(outside)
    with pytest.raises(UnsafePathError, match=rf"grid/{name}: is a symbolic link"):
        write_report(grid)
    with pytest.raises(UnsafePathError, match=rf"grid/{name}: is a symbolic link"):
        run_grid([("window-rehearsal-s0", _more(data))], grid, log=lambda m: None)
    assert outside.read_text() == "mine"
    assert sorted(p.name for p in grid.iterdir()) == sorted([name, "window-rehearsal-s0"])  # nothing written
    assert json.loads((grid / "window-rehearsal-s0" / "state.json").read_text())["finished"] == 2  # no run started
    (grid / name).unlink()
    (grid / f".{name}.tmp").symlink_to(outside)  # a link at the temporary name is removed, not followed
    assert write_report(grid) == grid / "report.md"
    assert outside.read_text() == "mine" and not (grid / f".{name}.tmp").exists()
    assert {p.name for p in grid.iterdir()} == {"report.md", "metrics.json", "loop.png", "window-rehearsal-s0"}
    assert (grid / "loop.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_grid_report_refuses_a_run_folder_that_is_a_link(run_copy, tmp_path):
    from replaybank.llm.loop.report import write_report

    _, run = run_copy
    grid = tmp_path / "grid"
    grid.mkdir()
    (grid / "window-rehearsal-s0").symlink_to(run)  # a run elsewhere, linked in
    with pytest.raises(UnsafePathError, match=r"window-rehearsal-s0: is a symbolic link"):
        write_report(grid)
    assert list(grid.iterdir()) == [grid / "window-rehearsal-s0"]
