"""The adapter library: registration (atomic, two processes at once), loading with its
checks (base model fingerprint, weights hash, config as data), list / show / remove."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from replaybank.llm.adapters import (
    AdapterExistsError,
    AdapterLibrary,
    AdapterNotFoundError,
    FingerprintError,
    HashMismatchError,
    LibraryError,
    LibraryRepairWarning,
    ManifestError,
    Registration,
)
from replaybank.llm.eval.decode import model_fingerprint
from replaybank.llm.train.peft_files import AdapterError, write_adapter_folder

from .conftest import inputs, make_adapter, make_base, snapshot  # type: ignore[import-not-found]

torch = pytest.importorskip("torch")
peft = pytest.importorskip("peft")

SRC = Path(__file__).resolve().parents[3] / "src"


def _folder(tmp_path: Path, rank: int = 2, seed: int = 1, name: str = "src") -> Path:
    """A PEFT folder as the loop writes it (its replaybank.json records the base model)."""
    folder = tmp_path / name
    folder.mkdir()
    model = make_adapter(rank, seed)
    write_adapter_folder(model, folder, {"generation": 1, "base_model": {"fingerprint": model_fingerprint(model), "name": "net"},
                                         "recipe": {"name": "self-distill"}})
    return folder


def test_register_from_a_model_and_load_gives_the_same_outputs(lib):
    model = make_adapter(rank=3)
    m = lib.add(model, Registration("tools", skill="tool calls", domain="qx", examples=["Add 3 eggs to my cart."], data={"rows": 12}), base_model=make_base())
    assert lib.names() == ["tools"] and m.skill == "tool calls" and m.parents == ()
    on_disk = sorted(p.name for p in (lib.root / "tools").iterdir())
    assert on_disk == ["adapter_config.json", "adapter_model.safetensors", "replaybank.json"]
    loaded = lib.load("tools", make_base())
    x = inputs()
    with torch.no_grad():
        assert torch.allclose(loaded(x), model(x), atol=1e-6)
        assert not torch.allclose(loaded(x), make_base()(x), atol=1e-3)
    # a stranger's tools load the folder too: it is a standard PEFT folder
    theirs = peft.PeftModel.from_pretrained(make_base(), lib.root / "tools")
    with torch.no_grad():
        assert torch.allclose(theirs(x), model(x), atol=1e-6)


def test_register_from_a_loop_folder_takes_its_fingerprint_and_recipe(lib, tmp_path):
    m = lib.add(_folder(tmp_path), Registration("gen1", skill="s"))
    assert m.fingerprint == model_fingerprint(make_base()) and m.base_name == "net"
    assert m.recipe == {"name": "self-distill"} and m.source == str(tmp_path / "src")
    assert lib.index()["gen1"]["sha256"] == m.sha256


def test_another_base_model_is_refused_naming_the_adapter_and_field(lib, tmp_path):
    lib.add(_folder(tmp_path), Registration("gen1", skill="s"))
    other = make_base()
    with torch.no_grad():
        other.proj.weight.add_(0.5)
    with pytest.raises(FingerprintError, match=r"adapter 'gen1', field 'base_model.fingerprint': recorded base model net"):
        lib.load("gen1", other)
    assert not isinstance(other, peft.PeftModel) and not any("lora" in n for n, _ in other.named_modules())
    with pytest.raises(FingerprintError, match=r"adapter 'again', field 'base_model.fingerprint'"):
        lib.add(_folder(tmp_path, name="src2"), Registration("again", skill="s"), base_model=other)


def test_a_changed_weights_file_is_refused(lib, tmp_path):
    lib.add(_folder(tmp_path), Registration("gen1", skill="s"))
    weights = lib.root / "gen1" / "adapter_model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1
    weights.write_bytes(bytes(data))
    with pytest.raises(HashMismatchError, match=r"adapter 'gen1', field 'sha256': .* is not the registered"):
        lib.load("gen1", make_base())
    # and a source folder whose weights do not match its own replaybank.json is not registered
    src = _folder(tmp_path, name="src2")
    (src / "adapter_model.safetensors").write_bytes(weights.read_bytes())
    with pytest.raises(HashMismatchError, match=r"adapter 'bad', field 'sha256'"):
        lib.add(src, Registration("bad", skill="s"))
    assert lib.names() == ["gen1"]


@pytest.mark.parametrize(("edit", "match"), [
    (lambda m: m.update(colour="red"), r"field 'colour': .*unknown key"),
    (lambda m: m["files"].update(weights="../../outside.safetensors"), r"field 'files.weights': .*'../../outside.safetensors' is not a file name inside the adapter's folder"),
    (lambda m: m["files"].update(config="/etc/passwd"), r"field 'files.config'"),
    (lambda m: m.update(sha256="abc"), r"field 'sha256': .*'abc' is not 64"),
    (lambda m: m["base_model"].update(fingerprint=None), r"field 'base_model.fingerprint'"),
    (lambda m: m.update(name="other"), r"field 'name': .*is 'other', expected the folder's name 'gen1'"),
    (lambda m: m.update(examples="one prompt"), r"field 'examples'"),
    (lambda m: m.update(figures={"retention": float("nan"), "domain": None, "per_family": {}, "floor": 0.9,
                                 "passed": True, "forced": False, "n": 3}), r"field 'figures.retention': .*finite number"),
    (lambda m: m.update(figures={"retention": 0.9}), r"field 'figures.domain': .*missing"),
    (lambda m: m.pop("skill"), r"field 'skill': .*missing"),
])
def test_a_manifest_that_fails_its_schema_is_refused(lib, tmp_path, edit, match):
    lib.add(_folder(tmp_path), Registration("gen1", skill="s"))
    path = lib.root / "gen1" / "replaybank.json"
    manifest = json.loads(path.read_text())
    edit(manifest)
    path.write_text(json.dumps(manifest))
    with pytest.raises(ManifestError, match=r"adapter 'gen1', " + match):
        lib.load("gen1", make_base())


def test_a_weights_file_that_is_a_link_out_of_the_library_is_refused(lib, tmp_path):
    lib.add(_folder(tmp_path), Registration("gen1", skill="s"))
    weights = lib.root / "gen1" / "adapter_model.safetensors"
    outside = tmp_path / "outside.safetensors"
    outside.write_bytes(weights.read_bytes())
    weights.unlink()
    weights.symlink_to(outside)
    with pytest.raises(ManifestError, match=r"field 'files.weights': .* not a regular file"):
        lib.load("gen1", make_base())


@pytest.mark.parametrize(("edit", "match"), [
    (lambda c: c.update(auto_mapping={"base_model_class": "Evil", "parent_library": "evil"}), r"field 'adapter_config.auto_mapping': .*src/adapter_config.json: names custom classes"),
    (lambda c: c.update(peft_type="PROMPT_TUNING"), r"field 'adapter_config.peft_type'"),
    (lambda c: c.update(r=0), r"field 'adapter_config.r'"),
])
def test_an_adapter_config_that_is_not_a_plain_lora_is_refused_at_registration(lib, tmp_path, edit, match):
    src = _folder(tmp_path)
    cfg = json.loads((src / "adapter_config.json").read_text())
    edit(cfg)
    (src / "adapter_config.json").write_text(json.dumps(cfg))
    before = snapshot(lib.root)
    with pytest.raises(ManifestError, match=r"adapter 'gen1', " + match):
        lib.add(src, Registration("gen1", skill="s"))
    assert snapshot(lib.root) == before and lib.names() == []


def test_tensors_that_do_not_fit_the_config_leave_the_model_bare(lib, tmp_path):
    src = _folder(tmp_path, rank=2)
    cfg_path = src / "adapter_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["r"] = 3  # the tensors are rank 2
    cfg_path.write_text(json.dumps(cfg))
    lib.add(src, Registration("gen1", skill="s"))  # without a base model the tensors are not read
    base = make_base()
    with pytest.raises(AdapterError, match=r"has shape \(2, 6\), adapter 'gen1' as its config describes it has \(3, 6\)"):
        lib.load("gen1", base)
    assert not any("lora" in n for n, _ in base.named_modules())


def test_failed_registrations_leave_the_library_unchanged(lib, tmp_path):
    lib.add(_folder(tmp_path), Registration("gen1", skill="s"))
    before = snapshot(lib.root)
    with pytest.raises(AdapterExistsError, match=r"adapter 'gen1', field 'name': .*already registered"):
        lib.add(_folder(tmp_path, name="src2"), Registration("gen1", skill="s"))
    with pytest.raises(LibraryError, match=r"adapter '../x', field 'name'"):
        lib.add(_folder(tmp_path, name="src3"), Registration("../x", skill="s"))
    with pytest.raises(LibraryError, match=r"field 'folder': .*missing or not a regular file"):
        lib.add(tmp_path / "nowhere", Registration("gen2", skill="s"))
    with pytest.raises(LibraryError, match=r"adapter 'gen2', field 'base_model.fingerprint': unknown base model"):
        lib.add(make_adapter(), Registration("gen2", skill="s"))

    def broken(model):  # the measurement itself fails half-way
        raise RuntimeError("suite crashed")

    with pytest.raises(RuntimeError, match="suite crashed"):
        lib.add(make_adapter(), Registration("gen2", skill="s"), base_model=make_base(), measure=broken)
    assert snapshot(lib.root) == before and lib.names() == ["gen1"]
    assert list((lib.root / ".staging").iterdir()) == []
    (lib.root / "orphan").mkdir()  # a folder outside the index that is no entry: moved aside, the name free again
    with pytest.warns(LibraryRepairWarning, match=r"lib/orphan: a folder not in the library's index .* moved to .*\.orphaned/orphan-"):
        lib.add(_folder(tmp_path, name="src4"), Registration("orphan", skill="s"))
    assert lib.names() == ["gen1", "orphan"] and lib.verify("orphan").name == "orphan"
    assert [[f.name for f in p.iterdir()] for p in (lib.root / ".orphaned").iterdir()] == [["orphan"]]
    (lib.root / "stray").write_text("x")  # a file is no entry: left alone, its name refused
    with pytest.raises(AdapterExistsError, match=r"adapter 'stray', field 'name': .*stray: exists and is not a folder"):
        lib.add(_folder(tmp_path, name="src5"), Registration("stray", skill="s"))


def test_list_show_remove(lib, tmp_path):
    for k in range(3):
        lib.add(_folder(tmp_path, name=f"src{k}", seed=k), Registration(f"a{k}", skill=f"skill {k}"))
    assert lib.names() == ["a0", "a1", "a2"] and lib.manifest("a1").skill == "skill 1"
    lib.remove("a1")
    assert lib.names() == ["a0", "a2"] and not (lib.root / "a1").exists()
    with pytest.raises(AdapterNotFoundError, match=r"adapter 'a1', field 'name': .*no such adapter \(registered: a0, a2\)"):
        lib.manifest("a1")
    with pytest.raises(AdapterNotFoundError, match=r"adapter '..', field 'name'"):
        lib.folder("..")


def test_two_processes_registering_at_once_lose_nothing(tmp_path):
    folder = _folder(tmp_path)
    lib_path = tmp_path / "lib"
    AdapterLibrary(lib_path, create=True)
    env = {**os.environ, "PYTHONPATH": str(SRC), "OMP_NUM_THREADS": "1"}
    worker = Path(__file__).with_name("register_worker.py")
    procs = [subprocess.Popen([sys.executable, str(worker), str(lib_path), str(folder), prefix, "4", "0.05"], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for prefix in ("p", "q")]
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err[-2000:]
    lib = AdapterLibrary(lib_path)
    expected = sorted(f"{p}{k}" for p in "pq" for k in range(4))
    assert lib.names() == expected
    assert sorted(p.name for p in lib_path.iterdir() if not p.name.startswith(".") and p.is_dir()) == expected
    assert all(lib.verify(n).skill == f"skill {n[0]}" for n in expected)


def test_registration_checks_its_fields():
    with pytest.raises(LibraryError, match=r"adapter '\.hidden', field 'name'"):
        Registration(".hidden", skill="s")
    with pytest.raises(LibraryError, match=r"field 'examples': examples must be a list of strings, got one string"):
        Registration("a", skill="s", examples="list the files")
    with pytest.raises(LibraryError, match=r"field 'parents'"):
        Registration("a", skill="s", parents="b")
    reg = Registration("a", skill="s", examples=["x", "y"], parents=["b"])
    assert (reg.examples, reg.parents) == (("x", "y"), ("b",))
    with pytest.raises(TypeError):
        Registration("a", "s")  # type: ignore[misc]  # only the name is positional


def test_add_takes_a_folder_or_a_model(lib, tmp_path):
    with pytest.raises(LibraryError, match=r"field 'adapter': adapter must be a PEFT folder"):
        lib.add(None, Registration("gen1", skill="s"))
    assert lib.add(str(_folder(tmp_path)), Registration("gen1", skill="s")).source == str(tmp_path / "src")
