"""The adapter library's trust boundary: adapter configs hashed and checked key by key, manifests
checked whole, the library's own names and folders, a registration killed half-way, bounded
example files, lists of names, route thresholds, and the optional HMAC signature. Every refusal
is a project error naming the file and the key."""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from replaybank.cli import main
from replaybank.llm.adapters import (
    AdapterLibrary,
    HashMismatchError,
    LibraryError,
    LibraryRepairWarning,
    ManifestError,
    MergeError,
    Registration,
    Router,
    SignatureError,
    load_all,
    merge,
)
from replaybank.llm.adapters.attach import check_adapter_config, check_config_fits
from replaybank.llm.adapters.merge import COMBINATIONS, DENSITY
from replaybank.llm.eval.decode import model_fingerprint
from replaybank.llm.train.peft_files import peft_config_dict, write_adapter_folder

from .conftest import make_adapter, make_base, snapshot  # type: ignore[import-not-found]

torch = pytest.importorskip("torch")
peft = pytest.importorskip("peft")

SRC = Path(__file__).resolve().parents[3] / "src"
KEY = "a library key of 32 bytes, test!"


def _folder(tmp_path: Path, name: str = "src", seed: int = 1, edit: Any = None) -> Path:
    """A PEFT folder as the loop writes it; ``edit(cfg)`` changes its adapter_config.json."""
    folder = tmp_path / name
    folder.mkdir()
    model = make_adapter(2, seed)
    write_adapter_folder(model, folder, {"base_model": {"fingerprint": model_fingerprint(model), "name": "net"}})
    if edit is not None:
        cfg = json.loads((folder / "adapter_config.json").read_text())
        edit(cfg)
        (folder / "adapter_config.json").write_text(json.dumps(cfg))
    return folder


def _unchanged(lib: AdapterLibrary) -> dict[str, bytes]:
    return snapshot(lib.root)


# -- 1. adapter_config.json: hashed, and checked key by key ------------------------------------

@pytest.mark.parametrize(("edit", "key"), [
    (lambda c: c.update(r=10**6), "r"),
    (lambda c: c.update(r=True), "r"),
    (lambda c: c.update(r=2.0), "r"),
    (lambda c: c.update(lora_alpha=math.nan), "lora_alpha"),
    (lambda c: c.update(lora_alpha=math.inf), "lora_alpha"),
    (lambda c: c.update(lora_alpha=-4), "lora_alpha"),
    (lambda c: c.update(lora_alpha=0), "lora_alpha"),
    (lambda c: c.update(init_lora_weights="pissa"), "init_lora_weights"),
    (lambda c: c.update(init_lora_weights="olora"), "init_lora_weights"),
    (lambda c: c.update(init_lora_weights="corda"), "init_lora_weights"),
    (lambda c: c.update(init_lora_weights="eva"), "init_lora_weights"),
    (lambda c: c.update(init_lora_weights="loftq"), "init_lora_weights"),
    (lambda c: c.update(init_lora_weights="pissa_niter_4"), "init_lora_weights"),
    (lambda c: c.update(task_type="SEQ_CLS"), "task_type"),
    (lambda c: c.update(use_dora=True), "use_dora"),
    (lambda c: c.update(use_rslora=True), "use_rslora"),
    (lambda c: c.update(megatron_core="this"), "megatron_core"),
    (lambda c: c.update(colour="blue"), "colour"),
    (lambda c: c.update(target_modules="proj"), "target_modules"),
    (lambda c: c.update(target_modules=["../proj"]), "target_modules"),
    (lambda c: c.update(layers_to_transform=[-1]), "layers_to_transform"),
    (lambda c: c.update(bias="all"), "bias"),
    (lambda c: c.update(modules_to_save=["proj"]), "modules_to_save"),
    (lambda c: c.update(layer_replication=[[0, 1]]), "layer_replication"),
    (lambda c: c.update(lora_dropout=1.5), "lora_dropout"),
])
def test_an_adapter_config_key_out_of_bounds_is_refused_at_registration(lib, tmp_path, edit, key):
    src = _folder(tmp_path, edit=edit)
    before = _unchanged(lib)
    with pytest.raises(ManifestError, match=rf"adapter 'gen1', field 'adapter_config\.{key}': .*src/adapter_config\.json: "):
        lib.add(src, Registration("gen1", skill="s"))
    assert _unchanged(lib) == before and lib.names() == []


def test_the_configs_replaybank_writes_pass():
    cfg = peft_config_dict(make_adapter())
    assert check_adapter_config(cfg, "x", "a") is cfg
    check_config_fits(cfg, make_base(), "x", "a")
    for init in (True, False, "gaussian"):
        check_adapter_config({**cfg, "init_lora_weights": init}, "x", "a")


def test_a_changed_adapter_config_fails_its_hash(lib, tmp_path):
    lib.add(_folder(tmp_path), Registration("gen1", skill="s"))
    path = lib.root / "gen1" / "adapter_config.json"
    cfg = json.loads(path.read_text())
    cfg["lora_alpha"] = 400.0  # a valid config, so only the hash can tell
    path.write_text(json.dumps(cfg))
    for call in (lambda: lib.verify("gen1"), lambda: lib.load("gen1", make_base()), lambda: lib.adapter_config("gen1")):
        with pytest.raises(HashMismatchError, match=r"adapter 'gen1', field 'config_sha256': .*gen1/adapter_config\.json: "
                                                     r"sha256 .* adapter config changed since registration"):
            call()


@pytest.mark.parametrize(("edit", "key", "match"), [
    (lambda c: c.update(target_modules=["nope"]), "target_modules", r"'nope' names no module of this base model"),
    (lambda c: c.update(r=64), "r", r"rank 64 is larger than layer 'proj'"),
    (lambda c: c.update(layers_to_transform=[0]), "layers_to_transform", r"not in numbered layers"),
])
def test_a_config_that_does_not_fit_the_model_is_refused_before_peft_sees_it(lib, tmp_path, edit, key, match):
    lib.add(_folder(tmp_path, edit=edit), Registration("gen1", skill="s"))  # no base model: not checked yet
    base = make_base()
    state = {k: v.clone() for k, v in base.state_dict().items()}
    with pytest.raises(ManifestError, match=rf"adapter 'gen1', field 'adapter_config\.{key}': .*gen1/adapter_config\.json: .*{match}"):
        lib.load("gen1", base)
    assert not any("lora" in n for n, _ in base.named_modules())
    assert all(torch.equal(v, base.state_dict()[k]) for k, v in state.items())
    with pytest.raises(ManifestError, match=rf"adapter 'gen2', field 'adapter_config\.{key}': .*src2/adapter_config\.json: .*{match}"):
        lib.add(_folder(tmp_path, name="src2", edit=edit), Registration("gen2", skill="s"), base_model=make_base())


def test_layers_to_transform_must_name_layers_of_the_model():
    class Stack(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = torch.nn.ModuleList([torch.nn.Linear(6, 6) for _ in range(3)])

    cfg = {"peft_type": "LORA", "r": 2, "lora_alpha": 4, "target_modules": ["layers.0", "layers.1", "layers.2"]}
    targets = {**cfg, "target_modules": ["0", "1", "2"]}
    check_config_fits({**targets, "layers_to_transform": [0, 2]}, Stack(), "x", "a")
    with pytest.raises(ManifestError, match=r"field 'adapter_config\.layers_to_transform': x: layers \[3\] are out of range: "
                                            r"the targeted modules are in layers 0 to 2"):
        check_config_fits({**targets, "layers_to_transform": [1, 3]}, Stack(), "x", "a")
    check_config_fits(cfg, Stack(), "x", "a")


# -- 2. manifests checked whole ------------------------------------------------------------------

def _figures(**kw: Any) -> dict[str, Any]:
    return {"retention": 0.95, "domain": 0.5, "per_family": {"code": 0.9}, "n": 10, "floor": 0.9, "passed": True,
            "forced": False, **kw}


@pytest.mark.parametrize(("edit", "key"), [
    (lambda m: m.update(figures=_figures(retention=1e9, passed=True)), "figures.retention"),
    (lambda m: m.update(figures=_figures(retention=-0.5, passed=False, forced=True)), "figures.retention"),
    (lambda m: m.update(figures=_figures(n=-1)), "figures.n"),
    (lambda m: m.update(figures=_figures(n=2.5)), "figures.n"),
    (lambda m: m.update(figures=_figures(per_family={"code": math.inf})), "figures.per_family"),
    (lambda m: m.update(figures=_figures(floor=math.nan)), "figures.floor"),
    (lambda m: m.update(figures=_figures(retention=0.5)), "figures.passed"),  # below the floor, yet passed
    (lambda m: m.update(figures=_figures(retention=0.5, passed=False)), "figures.forced"),  # failed, not forced
    (lambda m: m.update(figures=_figures(floor=None)), "figures.passed"),  # passed with no floor
    (lambda m: m.update(parents=["a", "b"]), "merge"),
    (lambda m: m.update(parents=["a", "b"], merge={"combination_type": "evil", "weights": [1, 1], "density": None,
                                                   "svd_rank": None}), "merge.combination_type"),
    (lambda m: m.update(parents=["a", "b"], merge={"combination_type": "cat", "weights": [1], "density": None,
                                                   "svd_rank": None}), "merge.weights"),
    (lambda m: m.update(parents=["a", "b"], merge={"combination_type": "ties", "weights": [1, 1], "density": None,
                                                   "svd_rank": None}), "merge.density"),
    (lambda m: m.update(parents=["a", "a"]), "parents"),
    (lambda m: m.update(created="yesterday"), "created"),
    (lambda m: m.update(config_sha256="0" * 63), "config_sha256"),
])
def test_a_manifest_out_of_range_is_refused_by_show_verify_and_load(lib, tmp_path, capsys, edit, key):
    lib.add(_folder(tmp_path), Registration("gen1", skill="s"))
    path = lib.root / "gen1" / "replaybank.json"
    manifest = json.loads(path.read_text())
    edit(manifest)
    path.write_text(json.dumps(manifest))
    for call in (lambda: lib.verify("gen1"), lambda: lib.load("gen1", make_base())):
        with pytest.raises(ManifestError, match=rf"adapter 'gen1', field '{key}': .*gen1/replaybank\.json: "):
            call()
    assert main(["adapters", "show", str(lib.root), "gen1", "--verify"]) == 2
    err = capsys.readouterr().err
    assert f"field '{key}'" in err and "Traceback" not in err


def test_a_manifest_of_the_schema_without_a_config_hash_is_refused_by_its_schema(lib, tmp_path):
    lib.add(_folder(tmp_path), Registration("gen1", skill="s"))
    path = lib.root / "gen1" / "replaybank.json"
    manifest = json.loads(path.read_text())
    del manifest["config_sha256"], manifest["signature"]
    path.write_text(json.dumps({**manifest, "schema": "replaybank.adapter/1"}))
    with pytest.raises(ManifestError, match=r"field 'schema': .*is 'replaybank.adapter/1', expected 'replaybank.adapter/2' "
                                            r"\(written by another replaybank version\? register the adapter again\)"):
        lib.verify("gen1")


def test_figures_the_gate_writes_pass_the_manifest_check(lib, tmp_path):
    passed = lib.add(_folder(tmp_path), Registration("a", skill="s", figures={"retention": 0.95}), floor=0.9)
    forced = lib.add(_folder(tmp_path, name="src2"), Registration("b", skill="s", figures={"retention": 0.5}), floor=0.9,
                     force=True)
    plain = lib.add(_folder(tmp_path, name="src3"), Registration("c", skill="s", figures={"retention": 0.5}))
    assert [lib.verify(n).figures for n in "abc"] == [passed.figures, forced.figures, plain.figures]
    assert (passed.figures["passed"], forced.figures["forced"], plain.figures["passed"]) == (True, True, None)


def test_a_key_repeated_in_a_json_file_is_refused(lib, tmp_path):
    lib.add(_folder(tmp_path), Registration("gen1", skill="s"))
    path = lib.root / "gen1" / "replaybank.json"
    path.write_text(path.read_text().replace('"skill": "s"', '"skill": "s", "skill": "t"'))
    with pytest.raises(ManifestError, match=r"gen1/replaybank\.json: the adapter's manifest names the key 'skill' more than once"):
        lib.verify("gen1")
    src = _folder(tmp_path, name="src2")  # the config's keys: checked at registration (later, its hash catches any edit)
    cfg = src / "adapter_config.json"
    cfg.write_text(cfg.read_text().replace('"peft_type": "LORA"', '"peft_type": "LORA", "r": 64'))
    with pytest.raises(ManifestError, match=r"adapter 'gen2', field 'adapter_config': .*src2/adapter_config\.json: adapter_config\.json names the key 'r' "
                                            r"more than once"):
        lib.add(src, Registration("gen2", skill="s"))


def test_merge_types_are_one_list():
    from replaybank.llm.adapters.manifest import COMBINATION_TYPES, DENSITY_TYPES

    assert COMBINATIONS == COMBINATION_TYPES and DENSITY == DENSITY_TYPES


# -- 3. names of the library's own files ---------------------------------------------------------

@pytest.mark.parametrize("name", ["index.json", "index.json.tmp", "INDEX.JSON", "x.tmp", "a.TMP"])
def test_a_name_of_the_librarys_own_files_is_refused(lib, tmp_path, name):
    with pytest.raises(LibraryError, match=rf"adapter '{name}', field 'name': is the name of one of the library's own files"):
        Registration(name, skill="s")
    for dotted in (".lock", ".staging", ".orphaned"):
        with pytest.raises(LibraryError, match=r"field 'name'"):
            Registration(dotted, skill="s")
    assert main(["adapters", "add", str(lib.root), name, "--from", str(_folder(tmp_path)), "--skill", "s"]) == 2
    assert lib.names() == [] and not (lib.root / "index.json").exists()


# -- 4. the library's folders and lock: real ones, inside it ---------------------------------------

def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


@pytest.mark.parametrize(("make", "match"), [
    (lambda root, out: (root / ".staging").symlink_to(out, target_is_directory=True), r"\.staging: is a symbolic link"),
    (lambda root, out: (root / ".staging").write_text("x"), r"\.staging: is not a regular file|\.staging: is .*must be a folder"),
    (lambda root, out: (root / ".staging").symlink_to(root / ".staging"), r"\.staging: is a symbolic link"),
    (lambda root, out: (root / ".lock").symlink_to(out / "lock"), r"\.lock: the library's lock file is a symbolic link"),
    (lambda root, out: (root / ".lock").mkdir(), r"\.lock: the library's lock file is a folder"),
    (lambda root, out: _fifo(root / ".lock"), r"\.lock: the library's lock file is a FIFO"),
])
def test_the_staging_folder_and_the_lock_must_be_the_librarys_own(lib, tmp_path, alarm, make, match):
    outside = tmp_path / "outside"
    outside.mkdir()
    make(lib.root, outside)
    with pytest.raises(LibraryError, match=match):
        lib.add(_folder(tmp_path), Registration("gen1", skill="s"))
    assert list(outside.iterdir()) == [] and lib.names() == []
    assert not (lib.root / "gen1").exists()


@pytest.mark.parametrize(("make", "match"), [
    (lambda p: p.write_text("x"), r"is not a regular file, not an adapter library folder|is .*not an adapter library folder"),
    (lambda p: os.mkfifo(p), r"is a FIFO \(named pipe\), not an adapter library folder"),
    (lambda p: p.symlink_to(p), r"not a library folder \(Too many levels of symbolic links\)"),
    (lambda p: p.symlink_to(p.parent / "nowhere"), r"cannot create the library here"),
])
def test_a_library_root_that_is_not_a_folder_is_a_clear_error(tmp_path, capsys, alarm, make, match):
    root = tmp_path / "lib"
    make(root)
    for create in (False, True):
        with pytest.raises(LibraryError, match=rf"field 'library': .*lib: ({match}|no adapter library here)"):
            AdapterLibrary(root, create=create)
    assert main(["adapters", "add", str(root), "a", "--from", str(_folder(tmp_path)), "--skill", "s"]) == 2
    assert main(["adapters", "list", str(root)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "lib" in err


# -- 5. a registration killed between the rename and the index write ------------------------------

def _killed_registration(tmp_path: Path, lib_path: Path, name: str) -> None:
    folder = _folder(tmp_path, name=f"src-{name}")
    env = {**os.environ, "PYTHONPATH": str(SRC), "OMP_NUM_THREADS": "1"}
    worker = Path(__file__).with_name("crash_worker.py")
    done = subprocess.run([sys.executable, str(worker), str(lib_path), str(folder), name], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == -9, done.stderr[-2000:]
    assert (lib_path / name / "replaybank.json").is_file() and name not in AdapterLibrary(lib_path).names()


def test_a_registration_killed_before_the_index_write_is_repaired_by_the_next_change(tmp_path):
    lib_path = tmp_path / "lib"
    _killed_registration(tmp_path, lib_path, "tools")
    lib = AdapterLibrary(lib_path)
    with pytest.warns(LibraryRepairWarning, match=r"lib/tools: a registration killed before its index write; its manifest "
                                                  r"and hashes check, so it is now in the index"):
        lib.add(_folder(tmp_path, name="other"), Registration("other", skill="s"))
    assert lib.names() == ["other", "tools"] and lib.verify("tools").skill == "crashed"
    lib.load("tools", make_base())
    lib.remove("tools")
    lib.add(_folder(tmp_path, name="again"), Registration("tools", skill="again"))  # the name is free again
    assert lib.verify("tools").skill == "again"


def test_a_killed_registration_that_fails_its_checks_is_moved_aside(tmp_path):
    lib_path = tmp_path / "lib"
    _killed_registration(tmp_path, lib_path, "tools")
    weights = lib_path / "tools" / "adapter_model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-8])  # torn by the crash
    lib = AdapterLibrary(lib_path)
    with pytest.warns(LibraryRepairWarning, match=r"lib/tools: a folder not in the library's index .*fails its checks "
                                                  r"\(.*sha256.*\); moved to .*lib/\.orphaned/tools-.*/tools"):
        lib.add(_folder(tmp_path, name="again"), Registration("tools", skill="again"))
    assert lib.names() == ["tools"] and lib.verify("tools").skill == "again"
    assert len(list((lib_path / ".orphaned").iterdir())) == 1


# -- 6. --examples: a regular file, bounded -----------------------------------------------------

@pytest.mark.parametrize("kind", ["fifo", "zero", "large"])
def test_examples_that_are_not_a_bounded_regular_file_are_refused(tmp_path, capsys, alarm, monkeypatch, kind):
    from replaybank.llm.adapters import cli

    if kind == "fifo":
        examples = _fifo(tmp_path / "prompts")
    elif kind == "zero":
        examples = Path("/dev/zero")
    else:
        examples = tmp_path / "prompts.txt"
        examples.write_text("list the files\n" * 100)
        monkeypatch.setattr(cli, "MAX_EXAMPLES_BYTES", 1000)
    lib = tmp_path / "lib"
    assert main(["adapters", "add", str(lib), "a", "--from", str(_folder(tmp_path)), "--skill", "s",
                 "--examples", str(examples)]) == 2
    err = capsys.readouterr().err
    expected = {"fifo": "is a FIFO (named pipe), not a regular file", "zero": "is a character device, not a regular file",
                "large": "example prompts file is larger than 1000 bytes"}[kind]
    assert expected in err and "Traceback" not in err


# -- 7. one string where a list of names is meant; route thresholds ------------------------------

def test_one_string_where_names_are_meant_is_refused(lib, tmp_path):
    for n in "ab":
        lib.add(_folder(tmp_path, name=f"src-{n}", seed=ord(n)), Registration(n, skill="s", examples=[f"{n} prompt"]))
    before = _unchanged(lib)
    with pytest.raises(MergeError, match=r"field 'adapters': adapters must be a list of adapter names, got one string 'ab'"):
        merge(lib, "ab", into="ab-merged", base_model=make_base())
    with pytest.raises(MergeError, match=r"field 'weights': weights must be a list of numbers, got one string"):
        merge(lib, ["a", "b"], into="ab-merged", base_model=make_base(), weights="11")
    with pytest.raises(MergeError, match=r"field 'density': density 5 is not a share"):
        merge(lib, ["a", "b"], into="ab-merged", base_model=make_base(), density=5)
    with pytest.raises(LibraryError, match=r"field 'names': names must be a list of adapter names, got one string"):
        load_all(lib, make_base(), names="ab")
    with pytest.raises(LibraryError, match=r"field 'names'"):
        Router.from_library(lib, names="ab")
    assert _unchanged(lib) == before


@pytest.mark.parametrize("threshold", [5, math.inf, -0.1, math.nan, True, "0.3"])
def test_a_threshold_outside_zero_to_one_is_refused(threshold):
    with pytest.raises(LibraryError, match=r"field 'threshold': threshold .* is not a confidence in \[0, 1\]"):
        Router({"a": ["list the files"]}, threshold=threshold)
    with pytest.raises(LibraryError, match=r"field 'thresholds'"):
        Router.calibrated({"a": ["list the files"]}, ["hello"], thresholds=(0.3, threshold))


def test_route_threshold_from_the_shell_is_checked(lib, tmp_path, capsys):
    lib.add(_folder(tmp_path), Registration("a", skill="s", examples=["list the files"]))
    assert main(["adapters", "route", str(lib.root), "list the files", "--threshold", "inf"]) == 2
    assert "field 'threshold'" in capsys.readouterr().err


# -- 8. the optional signature -------------------------------------------------------------------

def _swap_weights(lib_path: Path, name: str, tmp_path: Path) -> None:
    """Weights swapped for another adapter's, and the manifest's hash rewritten to match."""
    other = _folder(tmp_path, name="swap", seed=99)
    data = (other / "adapter_model.safetensors").read_bytes()
    (lib_path / name / "adapter_model.safetensors").write_bytes(data)
    path = lib_path / name / "replaybank.json"
    manifest = json.loads(path.read_text())
    manifest["sha256"] = hashlib.sha256(data).hexdigest()
    path.write_text(json.dumps(manifest))


def test_a_keyed_library_catches_weights_swapped_and_rehashed(tmp_path):
    lib = AdapterLibrary(tmp_path / "lib", create=True, key=KEY)
    m = lib.add(_folder(tmp_path), Registration("gen1", skill="s"))
    assert m.signature is not None and len(m.signature) == 64
    lib.load("gen1", make_base())
    _swap_weights(lib.root, "gen1", tmp_path)
    assert AdapterLibrary(lib.root).verify("gen1").name == "gen1"  # without the key, the rewritten hash passes
    for call in (lambda: lib.verify("gen1"), lambda: lib.load("gen1", make_base()), lambda: lib.manifest("gen1")):
        with pytest.raises(SignatureError, match=r"adapter 'gen1', field 'signature': .*gen1/replaybank\.json: the "
                                                 r"signature is not this library key's"):
            call()
    with pytest.raises(SignatureError, match=r"signature is not this library key's"):
        AdapterLibrary(lib.root, key=KEY.upper()).verify("gen1")


def test_a_keyed_library_refuses_unsigned_entries_and_reads_its_key_from_the_environment(tmp_path, monkeypatch):
    plain = AdapterLibrary(tmp_path / "lib", create=True)
    assert plain.add(_folder(tmp_path), Registration("gen1", skill="s")).signature is None
    monkeypatch.setenv("REPLAYBANK_ADAPTER_KEY", KEY)
    keyed = AdapterLibrary(tmp_path / "lib")
    with pytest.raises(SignatureError, match=r"field 'signature': .*unsigned, and this library has a key"):
        keyed.verify("gen1")
    assert keyed.add(_folder(tmp_path, name="src2"), Registration("gen2", skill="s")).signature is not None
    assert AdapterLibrary(tmp_path / "lib", key=KEY).verify("gen2").name == "gen2"
    monkeypatch.setenv("REPLAYBANK_ADAPTER_KEY", "short")
    with pytest.raises(LibraryError, match=r"field 'key': REPLAYBANK_ADAPTER_KEY: a signing key must be .* at least 16 bytes"):
        AdapterLibrary(tmp_path / "lib")


@pytest.mark.parametrize("data", [{"rows": math.nan}, {"split": {"rows": [1, math.inf]}}])
def test_a_non_finite_number_in_a_data_record_is_refused_on_read_and_before_signing(lib, tmp_path, capsys, data):
    lib.add(_folder(tmp_path), Registration("gen1", skill="s"))
    path = lib.root / "gen1" / "replaybank.json"
    manifest = json.loads(path.read_text())
    manifest["data"] = data
    path.write_text(json.dumps(manifest))
    with pytest.raises(ManifestError, match=r"adapter 'gen1', field 'data\.[a-z.\[\]0-9]+': .*is (nan|inf): expected a finite number"):
        lib.verify("gen1")
    assert main(["adapters", "show", str(lib.root), "gen1", "--verify"]) == 2
    assert "Traceback" not in capsys.readouterr().err
    signed = AdapterLibrary(tmp_path / "signed", create=True, key=KEY)
    before = snapshot(signed.root)
    # signing needs canonical JSON: a NaN reached json.dumps(allow_nan=False) as a bare ValueError
    with pytest.raises(ManifestError, match=r"adapter 'gen2', field 'data\..*expected a finite number"):
        signed.add(_folder(tmp_path, name="src2"), Registration("gen2", skill="s", data=data))
    with pytest.raises(ManifestError, match=r"field 'data\.rows': .*is a set: expected a JSON value"):
        signed.add(_folder(tmp_path, name="src3"), Registration("gen3", skill="s", data={"rows": {1}}))
    assert snapshot(signed.root) == before and signed.names() == []


def test_a_library_path_with_a_nul_byte_or_a_file_where_a_folder_belongs_is_named(tmp_path):
    with pytest.raises(LibraryError, match=r"library = '.*a\\x00b': the path holds a NUL byte"):
        AdapterLibrary(str(tmp_path / "a\x00b"), create=True)
    lib = AdapterLibrary(tmp_path / "lib", create=True)
    lib.add(_folder(tmp_path), Registration("gen1", skill="s"))
    shutil.copytree(lib.root / "gen1", lib.root / "torn")  # a folder the index lacks: to move aside
    (lib.root / "torn" / "replaybank.json").write_text("{garbage")
    (lib.root / ".orphaned").write_text("notes\n")
    with pytest.raises(LibraryError, match=r"field '\.orphaned': .*\.orphaned: is a regular file; the library's "
                                           r"\.orphaned must be a folder"):
        lib.add(_folder(tmp_path, name="src2"), Registration("gen2", skill="s"))
    assert (lib.root / ".orphaned").read_text() == "notes\n" and (lib.root / "torn").is_dir()
