"""An adversarial campaign over the hardened surfaces: bad files, bad arguments, odd paths.

Each case is a small function that sets up a sandbox folder, does one bad thing through the public
API or the ``replaybank`` CLI, and says what happened. Every case runs in its own Python process
under a timeout (:data:`TIMEOUT` seconds), and is classified:

* ``refused``: a replaybank error (a ``ReplayBankError``; for the CLI a non-zero exit with a
  message and no Python traceback on stderr);
* ``ok``: accepted, and the acceptance is correct (each such case says why);
* ``silent``: accepted where it should have been refused;
* ``traceback``: any other exception, a traceback printed, or a signal;
* ``hang``: the process ran past the timeout (killed).

Two integrity checks apply to every case that arms them (:meth:`Ctx.arm`, after its set-up and
before the bad call): ``data_loss`` (a file that existed before is gone or changed, outside the
folders the call may change, or among the files named as kept) and ``outside_write`` (a path
appeared or changed in the case's sandbox outside the folders the call names). Temporary files,
``$HOME`` and ``$REPLAYBANK_CACHE`` of each case live beside its sandbox, not in it.

Base models are tiny random Llamas (2 layers, hidden 32, vocabulary 64, seed 0); one LoRA adapter
folder and two libraries (one signed) are built once into a template folder and copied per case.

Run ``python benchmarks/campaign.py [--only SURFACE] [--case NAME] [--json PATH]``: prints a table
per surface (cases, refused, ok, silent, traceback, hang, data_loss, outside_write) and writes
``benchmarks/results/campaign.json`` (the commit, the date, and per case: surface, name, what was
done, outcome, the first line of the error message). About 5 minutes on 2 CPUs.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import math
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"
RESULTS = ROOT / "benchmarks" / "results"
TIMEOUT = 60.0
CLI_TIMEOUT = 45.0
MARK = "@@CAMPAIGN@@ "
KEY = "a library key of 32 bytes, test!"
SURFACES = ("adapters", "traces", "controllers", "sb3", "hf", "files")
OUTCOMES = ("refused", "ok", "silent", "traceback", "hang")


# -- what a case returns -------------------------------------------------------------------------

@dataclass(frozen=True)
class Outcome:
    """What one case found: ``outcome`` (one of :data:`OUTCOMES`), the first line of the error
    message (or of the reason an acceptance is correct), and extra detail."""

    outcome: str
    message: str = ""
    detail: str = ""


class Traceback(Exception):
    """A CLI printed a Python traceback or died of a signal."""


class Hang(Exception):
    """A CLI ran past its timeout."""


def first_line(text: str) -> str:
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    return lines[0][:400] if lines else ""


def refused(message: str) -> Outcome:
    return Outcome("refused", first_line(message))


def ok(reason: str) -> Outcome:
    """Accepted, correctly: ``reason`` says why (a documented choice, or the right answer)."""
    return Outcome("ok", first_line(reason))


def silent(what: str) -> Outcome:
    return Outcome("silent", first_line(what))


def attempt(fn: Callable[[], Any]) -> Outcome | None:
    """Run ``fn``: a ``ReplayBankError`` is ``refused``; another exception propagates (the case's
    process reports it as a traceback); a return is None (accepted: the case decides)."""
    from replaybank.errors import ReplayBankError

    try:
        fn()
    except ReplayBankError as exc:
        return refused(f"{type(exc).__name__}: {exc}")
    return None


def must_refuse(fn: Callable[[], Any], what: str) -> Outcome:
    """``refused`` when ``fn`` raises a replaybank error, else ``silent`` (``what`` was accepted)."""
    return attempt(fn) or silent(f"accepted: {what}")


@dataclass(frozen=True)
class CliResult:
    rc: int
    out: str
    err: str


def cli(args: list[str], timeout: float = CLI_TIMEOUT, env: dict[str, str] | None = None) -> CliResult:
    """Run ``replaybank ARGS`` in a fresh process. Raises :class:`Hang` past ``timeout`` and
    :class:`Traceback` on a signal or a Python traceback on stderr."""
    code = "import sys; from replaybank.cli import main; sys.exit(main(sys.argv[1:]))"
    proc = subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True, env=env)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise Hang(f"replaybank {' '.join(args)}: still running after {timeout:.0f} s") from None
    if proc.returncode < 0:
        raise Traceback(f"replaybank {' '.join(args)}: killed by signal {-proc.returncode}")
    if "Traceback (most recent call last)" in err:
        raise Traceback(f"replaybank {' '.join(args)}: printed a traceback: {err.strip().splitlines()[-1]}")
    return CliResult(proc.returncode, out, err)


def cli_must_refuse(args: list[str], what: str) -> Outcome:
    r = cli(args)
    if r.rc == 0:
        return silent(f"accepted (exit 0): {what}")
    lines = [line for line in r.err.splitlines() if line.strip() and not line.lstrip().startswith(("usage:", "warn"))]
    return refused(lines[-1] if lines else f"exit {r.rc} with no message")


# -- the sandbox and its integrity checks ---------------------------------------------------------

def tree(folder: Path) -> dict[str, str]:
    """Every path under ``folder`` (links not followed) -> its kind and, for a file, its SHA-256."""
    found: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(folder):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            rel = p.relative_to(folder).as_posix()
            st = os.lstat(p)
            if stat.S_ISLNK(st.st_mode):
                found[rel] = "link:" + os.readlink(p)
            elif stat.S_ISREG(st.st_mode):
                with open(p, "rb") as f:
                    found[rel] = "file:" + hashlib.sha256(f.read()).hexdigest()
            elif stat.S_ISDIR(st.st_mode):
                found[rel] = "dir"
            else:
                found[rel] = f"other:{stat.S_IFMT(st.st_mode)}"
    return found


class Ctx:
    """One case's folders: ``sb`` (the sandbox, checked), ``tpl`` (the shared template, read only),
    and the integrity snapshot taken by :meth:`arm`."""

    def __init__(self, sb: Path, tpl: Path) -> None:
        self.sb, self.tpl = sb, tpl
        self.before: dict[str, str] | None = None
        self.named: tuple[str, ...] = ()
        self.keep: tuple[str, ...] = ()

    def arm(self, named: Iterable[Path] = (), keep: Iterable[Path] = ()) -> None:
        """Snapshot the sandbox now: afterwards only paths under ``named`` may change, and the files
        under ``keep`` (inside a named folder) must still be there, unchanged."""
        self.named = tuple(Path(p).relative_to(self.sb).as_posix() for p in named)
        self.keep = tuple(Path(p).relative_to(self.sb).as_posix() for p in keep)
        self.before = tree(self.sb)

    def check(self) -> tuple[bool, bool, str]:
        """(data_loss, outside_write, detail) against the armed snapshot."""
        if self.before is None:
            return False, False, ""
        after = tree(self.sb)

        def inside(rel: str, roots: tuple[str, ...]) -> bool:
            return any(rel == r or rel.startswith(r + "/") for r in roots)

        lost = [p for p, v in self.before.items()
                if (not inside(p, self.named) or inside(p, self.keep)) and after.get(p) != v
                and not (v == "dir" and p in after)]
        outside = [p for p, v in after.items() if not inside(p, self.named) and self.before.get(p) != v]
        detail = "; ".join(filter(None, [f"changed or gone: {lost[:4]}" if lost else "",
                                         f"written outside: {outside[:4]}" if outside else ""]))
        return bool(lost), bool(outside), detail


# -- shared template: a tiny Llama, a LoRA folder, two libraries ----------------------------------

def tiny_llama() -> Any:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    return LlamaForCausalLM(config).eval()


def lora(seed: int, base: Any = None) -> Any:
    import peft
    import torch

    base = tiny_llama() if base is None else base
    torch.manual_seed(seed)
    cfg = peft.LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False,
                          task_type="CAUSAL_LM")
    return peft.get_peft_model(base, cfg).eval()


def build_template(tpl: Path) -> None:
    """``src1``, ``src2``: PEFT folders of two random LoRAs on the tiny Llama; ``lib``: a library
    holding ``gen1`` (from src1); ``signed``: the same, signed with :data:`KEY`."""
    import warnings

    from replaybank.llm.adapters import AdapterLibrary, Registration
    from replaybank.llm.eval.decode import model_fingerprint
    from replaybank.llm.train.peft_files import write_adapter_folder

    warnings.simplefilter("ignore")
    for seed in (1, 2):
        model = lora(seed)
        folder = tpl / f"src{seed}"
        folder.mkdir(parents=True)
        write_adapter_folder(model, folder, {"base_model": {"fingerprint": model_fingerprint(model), "name": "tiny"}})
    AdapterLibrary(tpl / "lib", create=True).add(
        tpl / "src1", Registration("gen1", skill="lists", examples=["list the files", "show the folder"]))
    AdapterLibrary(tpl / "signed", create=True, key=KEY).add(
        tpl / "src1", Registration("gen1", skill="lists", examples=["list the files"]))


def copy(ctx: Ctx, name: str, to: str | None = None) -> Path:
    dst = ctx.sb / (to or name)
    shutil.copytree(ctx.tpl / name, dst, symlinks=True)
    return dst


def edit_json(path: Path, fn: Callable[[dict[str, Any]], Any]) -> None:
    data = json.loads(path.read_text())
    fn(data)
    path.write_text(json.dumps(data))


def rehash_config(lib: Path, name: str, fn: Callable[[dict[str, Any]], Any]) -> None:
    """Edit ``name``'s adapter_config.json and record its new SHA-256 in the (unsigned) manifest,
    as someone who can write the library would: only the key checks can catch it then."""
    cfg = lib / name / "adapter_config.json"
    edit_json(cfg, fn)
    digest = hashlib.sha256(cfg.read_bytes()).hexdigest()
    edit_json(lib / name / "replaybank.json", lambda m: m.update(config_sha256=digest))


def state_of(model: Any) -> dict[str, Any]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def same_state(a: dict[str, Any], b: dict[str, Any]) -> bool:
    import torch

    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


# == adapters ======================================================================================

def _add(ctx: Ctx, src: Path, name: str = "gen2", lib: Path | None = None, **kw: Any) -> Callable[[], Any]:
    from replaybank.llm.adapters import AdapterLibrary, Registration

    lib = lib or ctx.sb / "lib"
    return lambda: AdapterLibrary(lib, create=True).add(src, Registration(name, skill="s", examples=["a b"]), **kw)


def _config_at_add(edit: Callable[[dict[str, Any]], Any], what: str) -> Callable[[Ctx], Outcome]:
    def case(ctx: Ctx) -> Outcome:
        copy(ctx, "lib")
        src = copy(ctx, "src2")
        edit_json(src / "adapter_config.json", edit)
        base = tiny_llama()
        before = state_of(base)
        ctx.arm(named=[ctx.sb / "lib"], keep=[ctx.sb / "lib" / "gen1"])
        result = must_refuse(_add(ctx, src, base_model=base), what)
        if not same_state(before, state_of(base)):
            return Outcome("silent", f"the base model's weights changed ({result.message})")
        return result
    case.__doc__ = f"`add` of a PEFT folder whose adapter_config.json has {what}, with the base model given"
    return case


def _config_at_load(edit: Callable[[dict[str, Any]], Any], what: str) -> Callable[[Ctx], Outcome]:
    def case(ctx: Ctx) -> Outcome:
        from replaybank.llm.adapters import AdapterLibrary

        lib = copy(ctx, "lib")
        rehash_config(lib, "gen1", edit)
        base = tiny_llama()
        before = state_of(base)
        ctx.arm(named=[lib])
        result = must_refuse(lambda: AdapterLibrary(lib).load("gen1", base), what)
        if not same_state(before, state_of(base)):
            return Outcome("silent", f"the base model's weights changed ({result.message})")
        return result
    case.__doc__ = f"a registered adapter_config.json edited to {what} and re-hashed (no key), then `load`"
    return case


def a_alpha_x100_registered(ctx: Ctx) -> Outcome:
    """lora_alpha x100 in a registered adapter's adapter_config.json (hash not updated), then `load`"""
    from replaybank.llm.adapters import AdapterLibrary

    lib = copy(ctx, "lib")
    edit_json(lib / "gen1" / "adapter_config.json", lambda c: c.update(lora_alpha=c["lora_alpha"] * 100))
    ctx.arm(named=[lib])
    return must_refuse(lambda: AdapterLibrary(lib).load("gen1", tiny_llama()), "an edited config")


def a_alpha_x100_at_add(ctx: Ctx) -> Outcome:
    """`add` of a PEFT folder with lora_alpha x100 (400): a finite positive alpha"""
    src = copy(ctx, "src2")
    edit_json(src / "adapter_config.json", lambda c: c.update(lora_alpha=c["lora_alpha"] * 100))
    copy(ctx, "lib")
    ctx.arm(named=[ctx.sb / "lib"], keep=[ctx.sb / "lib" / "gen1"])
    return attempt(_add(ctx, src)) or ok(
        "accepted by choice: any finite lora_alpha > 0 is a valid LoRA scale (docs/trust.md); it is hashed at "
        "registration, so a later edit is refused (case a_alpha_x100_registered)")


def a_staging_link_outside(ctx: Ctx) -> Outcome:
    """the library's `.staging` is a symbolic link to a folder outside the library; then `add`"""
    lib = copy(ctx, "lib")
    outside = ctx.sb / "outside"
    outside.mkdir()
    shutil.rmtree(lib / ".staging", ignore_errors=True)
    os.symlink(outside, lib / ".staging")
    ctx.arm(named=[lib])
    return must_refuse(_add(ctx, ctx.tpl / "src2"), "a .staging link out of the library")


def _own_path(part: str, make: Callable[[Path], Any], what: str, call: str = "add") -> Callable[[Ctx], Outcome]:
    def case(ctx: Ctx) -> Outcome:
        from replaybank.llm.adapters import AdapterLibrary

        lib = copy(ctx, "lib")
        target = lib / part
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
        elif target.exists() or target.is_symlink():
            target.unlink()
        make(target)
        ctx.arm(named=[lib], keep=[lib / "gen1", lib / "index.json"])
        if call == "add":
            return must_refuse(_add(ctx, ctx.tpl / "src2"), what)
        return must_refuse(lambda: AdapterLibrary(lib).remove("gen1"), what)
    case.__doc__ = f"the library's `{part}` is {what}; then `add`"
    return case


def a_orphaned_file(ctx: Ctx) -> Outcome:
    """the library's `.orphaned` is a regular file while a torn folder (garbage manifest, not in the
    index) waits to be moved aside there; then `add`"""
    lib = copy(ctx, "lib")
    shutil.rmtree(lib / ".orphaned", ignore_errors=True)
    (lib / ".orphaned").write_text("the user's notes\n")
    shutil.copytree(lib / "gen1", lib / "torn")
    (lib / "torn" / "replaybank.json").write_text("{garbage")
    ctx.arm(named=[lib], keep=[lib / "gen1", lib / "index.json", lib / ".orphaned", lib / "torn"])
    return must_refuse(_add(ctx, ctx.tpl / "src2"), "an .orphaned that is a file")


def a_add_nan_data_signed(ctx: Ctx) -> Outcome:
    """`add` to a signed library with `Registration(data={"rows": NaN})`"""
    from replaybank.llm.adapters import AdapterLibrary, Registration

    lib = copy(ctx, "signed")
    ctx.arm(named=[lib], keep=[lib / "gen1", lib / "index.json"])
    return must_refuse(lambda: AdapterLibrary(lib, key=KEY).add(
        ctx.tpl / "src2", Registration("gen2", skill="s", data={"rows": math.nan})), "NaN in the data record")


def _loop(p: Path) -> None:
    os.symlink(p.name + ".b", p)
    os.symlink(p.name, p.parent / (p.name + ".b"))


def _root_kind(kind: str) -> Callable[[Ctx], Outcome]:
    def case(ctx: Ctx) -> Outcome:
        from replaybank.llm.adapters import AdapterLibrary

        root = ctx.sb / "lib"
        if kind == "file":
            root.write_text("not a library\n")
        else:
            os.mkfifo(root)
        ctx.arm(named=[])
        api = must_refuse(lambda: AdapterLibrary(root, create=True).names(), f"a library root that is a {kind}")
        if api.outcome != "refused":
            return api
        return cli_must_refuse(["adapters", "list", str(root)], f"a library root that is a {kind}")
    case.__doc__ = f"the library root is a {kind}: `AdapterLibrary(root, create=True)` and `adapters list`"
    return case


def a_name_index_tmp(ctx: Ctx) -> Outcome:
    """`add` of an adapter named `index.json.tmp` (the index's own temporary name)"""
    lib = copy(ctx, "lib")
    ctx.arm(named=[lib], keep=[lib / "gen1", lib / "index.json"])
    return must_refuse(_add(ctx, ctx.tpl / "src2", name="index.json.tmp"), "a reserved name")


def _examples(kind: str) -> Callable[[Ctx], Outcome]:
    def case(ctx: Ctx) -> Outcome:
        lib = copy(ctx, "lib")
        if kind == "fifo":
            path = ctx.sb / "examples.txt"
            os.mkfifo(path)
        else:
            path = Path("/dev/zero")
        ctx.arm(named=[lib], keep=[lib / "gen1", lib / "index.json"])
        return cli_must_refuse(["adapters", "add", str(lib), "gen2", "--from", str(ctx.tpl / "src2"), "--skill", "s",
                                "--examples", str(path)], f"--examples {kind}")
    case.__doc__ = f"`adapters add --examples` naming a {'FIFO with no writer' if kind == 'fifo' else '/dev/zero'}"
    return case


KILL_WORKER = """
import os, signal, sys
from pathlib import Path
from replaybank.llm.adapters import library as m
def killed(self, index):
    os.kill(os.getpid(), signal.SIGKILL)
m.AdapterLibrary._write_index = killed
m.AdapterLibrary(sys.argv[1]).add(Path(sys.argv[2]), m.Registration("gen2", skill="s", examples=["a b"]))
"""


def a_kill_between_rename_and_index(ctx: Ctx) -> Outcome:
    """`add` killed (SIGKILL) between the folder's rename and the index write; then the next `add`
    repairs, and re-adding the name works"""
    import warnings

    from replaybank.llm.adapters import AdapterLibrary, LibraryRepairWarning, Registration

    lib = copy(ctx, "lib")
    proc = subprocess.run([sys.executable, "-c", KILL_WORKER, str(lib), str(ctx.tpl / "src2")], capture_output=True,
                          text=True, timeout=CLI_TIMEOUT)
    if proc.returncode != -signal.SIGKILL:
        return Outcome("traceback", f"the worker was not killed: exit {proc.returncode}: {first_line(proc.stderr)}")
    # a second torn folder whose manifest is garbage: it must go to .orphaned/, freeing its name
    shutil.copytree(lib / "gen1", lib / "gen3")
    (lib / "gen3" / "replaybank.json").write_text("{garbage")
    ctx.arm(named=[lib], keep=[lib / "gen1"])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        library = AdapterLibrary(lib)
        library.add(ctx.tpl / "src1", Registration("gen4", skill="s", examples=["x y"]))
    repaired = [w for w in caught if issubclass(w.category, LibraryRepairWarning)]
    names = library.names()
    if "gen2" not in names or "gen3" in names or not repaired:
        return silent(f"not repaired: names {names}, {len(repaired)} repair warnings")
    library.add(ctx.tpl / "src2", Registration("gen3", skill="s", examples=["x y"]))  # the name is free again
    library.verify("gen2")
    library.verify("gen3")
    return ok(f"repaired as documented: gen2 re-indexed, the garbage gen3 moved aside, gen3 re-added "
              f"({first_line(str(repaired[0].message))})")


def _manifest(edit: Callable[[dict[str, Any]], Any] | None, what: str, raw: Callable[[str], str] | None = None) -> Callable[[Ctx], Outcome]:
    def case(ctx: Ctx) -> Outcome:
        lib = copy(ctx, "lib")
        path = lib / "gen1" / "replaybank.json"
        if edit is not None:
            edit_json(path, edit)
        if raw is not None:
            path.write_text(raw(path.read_text()))
        ctx.arm(named=[lib])
        return cli_must_refuse(["adapters", "show", str(lib), "gen1", "--verify"], what)
    case.__doc__ = f"`adapters show --verify` of a manifest with {what}"
    return case


def _figures(**kw: Any) -> Callable[[dict[str, Any]], Any]:
    def edit(m: dict[str, Any]) -> None:
        m["figures"] = {"retention": 0.95, "domain": 0.5, "per_family": {"code": 0.9}, "n": 10, "floor": 0.9,
                        "passed": True, "forced": False, **kw}
    return edit


def _repeat_key(text: str) -> str:
    return text.replace('"skill": "lists"', '"skill": "lists", "skill": "evil"', 1)


def a_weights_swapped_signed(ctx: Ctx) -> Outcome:
    """signed library: weights replaced by another adapter's, and the manifest's sha256 re-hashed"""
    from replaybank.llm.adapters import AdapterLibrary

    lib = copy(ctx, "signed")
    weights = lib / "gen1" / "adapter_model.safetensors"
    shutil.copyfile(ctx.tpl / "src2" / "adapter_model.safetensors", weights)
    edit_json(lib / "gen1" / "replaybank.json", lambda m: m.update(sha256=hashlib.sha256(weights.read_bytes()).hexdigest()))
    ctx.arm(named=[lib])
    return must_refuse(lambda: AdapterLibrary(lib, key=KEY).load("gen1", tiny_llama()), "swapped, re-hashed weights")


def a_remove_dotdot(ctx: Ctx) -> Outcome:
    """`AdapterLibrary.remove("../victim")`: a name that leaves the library"""
    from replaybank.llm.adapters import AdapterLibrary

    lib = copy(ctx, "lib")
    victim = ctx.sb / "victim"
    victim.mkdir()
    (victim / "notes.txt").write_text("mine\n")
    ctx.arm(named=[lib], keep=[lib / "gen1", lib / "index.json"])
    return must_refuse(lambda: AdapterLibrary(lib).remove("../victim"), "a name with ..")


def a_figures_fifo(ctx: Ctx) -> Outcome:
    """`adapters add --figures` naming a FIFO with no writer"""
    lib = copy(ctx, "lib")
    os.mkfifo(ctx.sb / "figures.json")
    ctx.arm(named=[lib], keep=[lib / "gen1", lib / "index.json"])
    return cli_must_refuse(["adapters", "add", str(lib), "gen2", "--from", str(ctx.tpl / "src2"), "--skill", "s",
                            "--figures", str(ctx.sb / "figures.json")], "--figures a FIFO")


def a_registration_skill_none(ctx: Ctx) -> Outcome:
    """`add` with `Registration("gen2", skill=None)`"""
    from replaybank.llm.adapters import AdapterLibrary, Registration

    lib = copy(ctx, "lib")
    ctx.arm(named=[lib], keep=[lib / "gen1", lib / "index.json"])
    return must_refuse(lambda: AdapterLibrary(lib).add(ctx.tpl / "src2", Registration("gen2", skill=None)),
                       "skill None")


def a_merge_string(ctx: Ctx) -> Outcome:
    """`merge(lib, "ab", ...)`: one string where a list of names is meant"""
    from replaybank.llm.adapters import AdapterLibrary, merge

    lib = copy(ctx, "lib")
    ctx.arm(named=[lib], keep=[lib / "gen1", lib / "index.json"])
    return must_refuse(lambda: merge(AdapterLibrary(lib), "ab", into="m", base_model=tiny_llama()), "a string of names")


def a_route_top_k_0(ctx: Ctx) -> Outcome:
    """`adapters route --top-k 0`"""
    lib = copy(ctx, "lib")
    ctx.arm(named=[])
    return cli_must_refuse(["adapters", "route", str(lib), "list the files", "--top-k", "0"], "--top-k 0")


def _route(threshold: float) -> Callable[[Ctx], Outcome]:
    def case(ctx: Ctx) -> Outcome:
        from replaybank.llm.adapters import Router

        lib = copy(ctx, "lib")
        ctx.arm(named=[])
        api = must_refuse(lambda: Router({"gen1": ["list the files"]}, threshold=threshold), f"threshold {threshold}")
        if api.outcome != "refused":
            return api
        return cli_must_refuse(["adapters", "route", str(lib), "list the files", "--threshold", str(threshold)],
                               f"--threshold {threshold}")
    case.__doc__ = f"route threshold {threshold}: `Router(..., threshold=)` and `adapters route --threshold`"
    return case


# == traces ========================================================================================

def _trace(ctx: Ctx, name: str = "t") -> Path:
    from replaybank.traces import save_trace, synthetic_trace

    t = synthetic_trace(requests=3, prompt_tokens=4, decode_tokens=5, layers=2, experts=8, top_k=2, seed=0)
    save_trace(t, ctx.sb / name)
    return ctx.sb / name


def _trace_manifest(key: str, value: Any) -> Callable[[Ctx], Outcome]:
    def case(ctx: Ctx) -> Outcome:
        from replaybank.traces import load_trace
        from replaybank.traces.store import _digest

        root = _trace(ctx)
        manifest = json.loads((root / "manifest.json").read_text())
        manifest[key] = value
        manifest["manifest_sha256"] = _digest(manifest)
        (root / "manifest.json").write_text(json.dumps(manifest))
        ctx.arm(named=[])
        api = must_refuse(lambda: load_trace(root), f"{key} = {value!r}")
        if api.outcome != "refused":
            return api
        return cli_must_refuse(["traces", "inspect", str(root)], f"{key} = {value!r}")
    case.__doc__ = f"a trace manifest (re-signed) with `{key}` = {value!r}: `load_trace` and `traces inspect`"
    return case


def t_token_overflow(ctx: Ctx) -> Outcome:
    """`Trace(...)` with 17 steps of 2**60 tokens each over 2**60 (broadcast) token rows: the running
    sum wraps int64 to a consistent-looking 2**60"""
    import numpy as np

    from replaybank.traces import Trace

    n = 2**60
    ctx.arm(named=[])
    return must_refuse(lambda: Trace(
        request=np.arange(17, dtype=np.int64), kind=np.zeros(17, np.uint8), start=np.zeros(17, np.int64),
        tokens=np.full(17, n, np.int64), experts=np.broadcast_to(np.zeros((1, 1, 1), np.int16), (1, n, 1)),
        gates=np.broadcast_to(np.ones((1, 1, 1), np.float32), (1, n, 1)), num_experts=(4,), layers=(0,)),
        "token counts overflowing int64")


def t_token_overflow_big(ctx: Ctx) -> Outcome:
    """`Trace.build` with steps of 2**63 - 1, 2**63 - 1 and 3 tokens (the sum wraps to 1 token row)"""
    from replaybank.traces import Trace

    big = 2**63 - 1
    ctx.arm(named=[])
    return must_refuse(lambda: Trace.build(request=[0, 1, 2], kind=[0, 0, 0], start=[0, 0, 0], tokens=[big, big, 3],
                                           experts=[[[0, 1]]], num_experts=[4]), "token counts wrapping int64")


def t_negative_tokens(ctx: Ctx) -> Outcome:
    """`Trace.build` with a step of -1 tokens"""
    from replaybank.traces import Trace

    ctx.arm(named=[])
    return must_refuse(lambda: Trace.build(request=[0, 1], kind=[0, 0], start=[0, 0], tokens=[2, -1],
                                           experts=[[[0], [1]]], num_experts=[4]), "tokens -1")


def t_negative_seed_api(ctx: Ctx) -> Outcome:
    """`synthetic_trace(..., seed=-1)`"""
    from replaybank.traces import synthetic_trace

    ctx.arm(named=[])
    return must_refuse(lambda: synthetic_trace(requests=2, prompt_tokens=2, decode_tokens=2, layers=1, experts=4,
                                               top_k=1, seed=-1), "seed -1")


def _trace_cli(args: Callable[[Ctx], list[str]], what: str) -> Callable[[Ctx], Outcome]:
    def case(ctx: Ctx) -> Outcome:
        argv = args(ctx)
        ctx.arm(named=[])
        return cli_must_refuse(argv, what)
    case.__doc__ = f"`replaybank traces ...` with {what}"
    return case


def _sim(ctx: Ctx, *extra: str) -> list[str]:
    return ["traces", "simulate", str(_trace(ctx)), "--capacity", "4", *extra]


def _cmp(ctx: Ctx, *extra: str) -> list[str]:
    return ["traces", "compare", str(_trace(ctx)), "--out", str(ctx.sb / "report"), *extra]


def t_simulate_json_fifo(ctx: Ctx) -> Outcome:
    """`traces simulate --json` naming a FIFO with no reader"""
    argv = _sim(ctx, "--json", str(ctx.sb / "out.json"))
    os.mkfifo(ctx.sb / "out.json")
    ctx.arm(named=[])
    return cli_must_refuse(argv, "--json a FIFO")


def t_inspect_fifo(ctx: Ctx) -> Outcome:
    """`traces inspect` of a trace whose manifest.json is a FIFO"""
    root = _trace(ctx)
    (root / "manifest.json").unlink()
    os.mkfifo(root / "manifest.json")
    ctx.arm(named=[])
    return cli_must_refuse(["traces", "inspect", str(root)], "a FIFO manifest")


def t_overwrite_link(ctx: Ctx) -> Outcome:
    """`save_trace(..., overwrite=True)` onto a symbolic link to a trace folder elsewhere (the link
    is the named path; what it points to is not)"""
    from replaybank.traces import save_trace, synthetic_trace

    target = _trace(ctx, "elsewhere")
    (ctx.sb / "named").mkdir()
    os.symlink(target, ctx.sb / "named" / "t")
    t = synthetic_trace(requests=2, prompt_tokens=2, decode_tokens=2, layers=1, experts=4, top_k=1, seed=1)
    ctx.arm(named=[ctx.sb / "named"])
    return must_refuse(lambda: save_trace(t, ctx.sb / "named" / "t", overwrite=True), "overwrite through a link")


def t_overwrite_user_folder(ctx: Ctx) -> Outcome:
    """`traces synth --overwrite` onto a folder of the user's files (not a trace)"""
    out = ctx.sb / "mine"
    out.mkdir()
    (out / "thesis.tex").write_text("three years of work\n")
    (out / "data.csv").write_text("a,b\n1,2\n")
    ctx.arm(named=[out], keep=[out])
    return cli_must_refuse(["traces", "synth", str(out), "--requests", "2", "--overwrite"], "overwrite of user files")


# == controllers ===================================================================================

def _limits(n: int = 1) -> Any:
    from replaybank.controllers import MixLimits

    return MixLimits(tuple(f"s{i}" for i in range(n)), floor=0.0, max_share=0.5)


def c_fixed_string_share(ctx: Ctx) -> Outcome:
    """`FixedController(limits, shares="0.1")`"""
    from replaybank.controllers import FixedController

    ctx.arm(named=[])
    return must_refuse(lambda: FixedController(_limits(), shares="0.1"), "a string share")


def c_fixed_string_list(ctx: Ctx) -> Outcome:
    """`FixedController(limits, shares=["0.1", "0.1"])`"""
    from replaybank.controllers import FixedController

    ctx.arm(named=[])
    return must_refuse(lambda: FixedController(_limits(2), shares=["0.1", "0.1"]), "string shares")


def c_limits_string_floor(ctx: Ctx) -> Outcome:
    """`MixLimits(("s0",), floor="0.1")`"""
    from replaybank.controllers import MixLimits

    ctx.arm(named=[])
    return must_refuse(lambda: MixLimits(("s0",), floor="0.1", max_share=0.5), "a string floor")


def c_fixed_nan_share(ctx: Ctx) -> Outcome:
    """`FixedController(limits, shares=float("nan"))`"""
    from replaybank.controllers import FixedController

    ctx.arm(named=[])
    return must_refuse(lambda: FixedController(_limits(), shares=math.nan), "a NaN share")


def c_proxy_string_weights(ctx: Ctx) -> Outcome:
    """`ProxyController(limits, weights=["1"] * 7)`"""
    from replaybank.controllers import ProxyController

    ctx.arm(named=[])
    return must_refuse(lambda: ProxyController(_limits(), weights=["1"] * 7), "string weights")


def c_summarize_ragged(ctx: Ctx) -> Outcome:
    """`summarize([[1.0, 2.0], [1.0]])`: a ragged loss history"""
    from replaybank.controllers import summarize

    ctx.arm(named=[])
    return must_refuse(lambda: summarize([[1.0, 2.0], [1.0]]), "a ragged history")


def c_summarize_strings(ctx: Ctx) -> Outcome:
    """`summarize([["1", "2"], ["1", "2"], ["1", "2"]])`: a history of strings"""
    from replaybank.controllers import summarize

    ctx.arm(named=[])
    return must_refuse(lambda: summarize([["1", "2"]] * 3), "string statistics")


def c_source_stats_strings(ctx: Ctx) -> Outcome:
    """a bandit `update` with `SourceStats` whose fields are strings"""
    import numpy as np

    from replaybank.controllers import BanditController, SourceStats

    c = BanditController(_limits(), np.random.default_rng(0))
    ctx.arm(named=[])
    return must_refuse(lambda: c.update(SourceStats(loss=["1", "1"], trend=["0", "0"]), [True]),
                       "string statistics")


def c_huge_rng_state(ctx: Ctx) -> Outcome:
    """a bandit state whose PCG64 state is 2**300"""
    import numpy as np

    from replaybank.controllers import BanditController

    c = BanditController(_limits(), np.random.default_rng(0))
    state = c.state_dict()
    state["rng"] = {**state["rng"], "state": {"state": 2**300, "inc": 1}}
    ctx.arm(named=[])
    return must_refuse(lambda: c.load_state_dict(state), "a 2**300 rng state")


def _collide(key: str) -> Callable[[Ctx], Outcome]:
    def case(ctx: Ctx) -> Outcome:
        from replaybank.llm.config.recipe import load_recipes

        path = ctx.sb / "recipes.toml"
        path.write_text(f'[recipes.a]\nsource = "corpus"\ncontroller = "bandit"\ncontroller_params = {{{key} = 1}}\n')
        ctx.arm(named=[])
        return must_refuse(lambda: load_recipes(path), f"controller_params {key}")
    case.__doc__ = f"a TOML recipe whose `controller_params` sets `{key}`"
    return case


def c_callback_make_rng(ctx: Ctx) -> Outcome:
    """`ControllerCallback.make("bandit", seed=0, limits=1)`"""
    from replaybank.hf import ControllerCallback

    ctx.arm(named=[])
    return must_refuse(lambda: ControllerCallback.make("bandit", seed=0, limits=1), "limits among the params")


# == SB3 ===========================================================================================

def _buf(cls: str = "ReplayBuffer", n_envs: int = 1, action: str = "discrete", **kw: Any) -> Any:
    import numpy as np
    from gymnasium import spaces

    import replaybank.sb3 as rsb3

    act = spaces.Discrete(2) if action == "discrete" else spaces.Box(-1, 1, (1,), np.float32)
    return getattr(rsb3, cls)(16, spaces.Box(-1, 1, (3,), np.float32), act, "cpu", n_envs=n_envs, **kw)


def _add_args(n: int = 1, **over: Any) -> dict[str, Any]:
    import numpy as np

    args = dict(obs=np.zeros((n, 3), np.float32), next_obs=np.zeros((n, 3), np.float32), action=np.zeros((n, 1), np.int64),
                reward=np.zeros(n, np.float32), done=np.zeros(n, np.float32), infos=[{} for _ in range(n)])
    args.update(over)
    return args


def _sb3_add(what: str, n_envs: int = 1, space: str = "discrete", **over: Any) -> Callable[[Ctx], Outcome]:
    def case(ctx: Ctx) -> Outcome:
        buf = _buf(n_envs=n_envs, action=space)
        args = _add_args(n_envs, **{k: (v() if callable(v) else v) for k, v in over.items()})
        ctx.arm(named=[])
        return must_refuse(lambda: buf.add(**args), what)
    case.__doc__ = f"`replaybank.sb3.ReplayBuffer.add` with {what}"
    return case


def _sb3_make(what: str, cls: str = "ReplayBuffer", size: int = 16, **kw: Any) -> Callable[[Ctx], Outcome]:
    def case(ctx: Ctx) -> Outcome:
        import numpy as np
        from gymnasium import spaces

        import replaybank.sb3 as rsb3

        ctx.arm(named=[])
        return must_refuse(lambda: getattr(rsb3, cls)(size, spaces.Box(-1, 1, (3,), np.float32), spaces.Discrete(2),
                                                      "cpu", **kw), what)
    case.__doc__ = f"`replaybank.sb3.{cls}` built with {what}"
    return case


def _sb3_sample(what: str, batch: Any, fill: int) -> Callable[[Ctx], Outcome]:
    def case(ctx: Ctx) -> Outcome:
        buf = _buf(cls="PrioritizedReplayBuffer")
        for _ in range(fill):
            buf.add(**_add_args())
        ctx.arm(named=[])
        return must_refuse(lambda: buf.sample(batch), what)
    case.__doc__ = f"`replaybank.sb3.PrioritizedReplayBuffer.sample` with {what}"
    return case


def _perdqn(what: str, **kw: Any) -> Callable[[Ctx], Outcome]:
    def case(ctx: Ctx) -> Outcome:
        from replaybank.sb3 import PERDQN

        ctx.arm(named=[])
        return must_refuse(lambda: PERDQN("MlpPolicy", "CartPole-v1", device="cpu", **kw), what)
    case.__doc__ = f"`PERDQN('MlpPolicy', 'CartPole-v1', ...)` with {what}"
    return case


# == hf ============================================================================================

def h_attach_none(ctx: Ctx) -> Outcome:
    """`SourceTap().attach(None)`"""
    from replaybank.hf import SourceTap

    ctx.arm(named=[])
    return must_refuse(lambda: SourceTap().attach(None), "attach(None)")


def _source_value(value: Any) -> Callable[[Ctx], Outcome]:
    def case(ctx: Ctx) -> Outcome:
        from replaybank.hf import SourceTap

        collate = SourceTap().collator(lambda rows: {"n": len(rows)})
        ctx.arm(named=[])
        return must_refuse(lambda: collate([{"source": 0}, {"source": value}]), f"source = {value!r}")
    case.__doc__ = f"a batch through `SourceTap().collator(...)` whose source column holds {value!r}"
    return case


def h_controller_fifo(ctx: Ctx) -> Outcome:
    """`ControllerCallback` resuming from a checkpoint whose state file is a FIFO with no writer"""
    from types import SimpleNamespace

    from replaybank.hf import ControllerCallback

    cb = ControllerCallback.make("bandit", seed=0)
    folder = ctx.sb / "out" / "checkpoint-4"
    folder.mkdir(parents=True)
    os.mkfifo(folder / "replaybank_controller.json")
    ctx.arm(named=[])
    return must_refuse(lambda: cb.on_train_begin(SimpleNamespace(output_dir=str(ctx.sb / "out")),
                                                 SimpleNamespace(global_step=4), None), "a FIFO state file")


def h_controller_link_save(ctx: Ctx) -> Outcome:
    """`ControllerCallback.on_save` where the checkpoint's state file is a symbolic link to a file
    outside the output folder"""
    from types import SimpleNamespace

    from replaybank.hf import ControllerCallback

    cb = ControllerCallback.make("bandit", seed=0)
    folder = ctx.sb / "out" / "checkpoint-4"
    folder.mkdir(parents=True)
    (ctx.sb / "precious.json").write_text('{"mine": true}\n')
    os.symlink(ctx.sb / "precious.json", folder / "replaybank_controller.json")
    ctx.arm(named=[ctx.sb / "out"])
    return must_refuse(lambda: cb.on_save(SimpleNamespace(output_dir=str(ctx.sb / "out")),
                                          SimpleNamespace(global_step=4), None), "a save through a link")


def h_rows_to_link(ctx: Ctx) -> Outcome:
    """`write_rows` to a .jsonl name that is a symbolic link to a file of the user's elsewhere"""
    from replaybank.hf.embedded import write_rows

    (ctx.sb / "named").mkdir()
    (ctx.sb / "mine.jsonl").write_text('{"prompt": "mine"}\n')
    os.symlink(ctx.sb / "mine.jsonl", ctx.sb / "named" / "rows.jsonl")
    ctx.arm(named=[ctx.sb / "named"])
    return must_refuse(lambda: write_rows([{"prompt": "a", "completion": "b"}], ctx.sb / "named" / "rows.jsonl"),
                       "rows written through a link")


def _kl(what: str, **kw: Any) -> Callable[[Ctx], Outcome]:
    def case(ctx: Ctx) -> Outcome:
        from replaybank.hf import KLToBase

        model = lora(1)
        ctx.arm(named=[])
        return must_refuse(lambda: KLToBase(model, **kw), what)
    case.__doc__ = f"`KLToBase(peft_model, {', '.join(f'{k}={v!r}' for k, v in kw.items())})`"
    return case


def _model_path(kind: str) -> Callable[[Ctx], Outcome]:
    def case(ctx: Ctx) -> Outcome:
        from replaybank.llm.model import _gguf_cache_path, smollm2_gguf

        cache = ctx.sb / "cache"
        env = {**os.environ, "REPLAYBANK_CACHE": str(cache)}
        os.environ["REPLAYBANK_CACHE"] = str(cache)
        target = _gguf_cache_path(smollm2_gguf())
        target.mkdir(parents=True)
        if kind == "truncated":
            (target / "config.json").write_text('{"architectures": ["LlamaForCausalLM"], "hidden_si')
        ctx.arm(named=[cache])
        r = cli(["model", "path"], env=env)
        if r.rc == 0:
            return silent(f"accepted (exit 0): printed {first_line(r.out)} for a cached folder that is {kind}")
        lines = [line for line in r.err.splitlines() if line.strip()]
        return refused(lines[-1] if lines else f"exit {r.rc}")
    case.__doc__ = f"`replaybank model path` with the cached fp32 folder {'empty' if kind == 'empty' else 'holding a truncated config.json'} ($REPLAYBANK_CACHE in the sandbox)"
    return case


def _mixspec(ratio: Any) -> Callable[[Ctx], Outcome]:
    def case(ctx: Ctx) -> Outcome:
        from replaybank.hf import MixSpec

        ctx.arm(named=[])
        return must_refuse(lambda: MixSpec(ratio, batch_size=4, seed=0, world_size=1), f"ratio {ratio!r}")
    case.__doc__ = f"`MixSpec({ratio!r}, batch_size=4, ...)`"
    return case


def h_synth_rows_0(ctx: Ctx) -> Outcome:
    """`replaybank synth --out rows.jsonl --rows 0`"""
    ctx.arm(named=[])
    return cli_must_refuse(["synth", "--out", str(ctx.sb / "rows.jsonl"), "--rows", "0"], "--rows 0")


def h_rows_unserialisable(ctx: Ctx) -> Outcome:
    """`write_rows` (what `replaybank synth --out` writes with) of rows holding a value JSON cannot hold (a set)"""
    from replaybank.hf.embedded import write_rows

    out = ctx.sb / "rows.jsonl"
    ctx.arm(named=[])
    return must_refuse(lambda: write_rows([{"prompt": "a", "completion": {"b"}}], out), "a set in a row")


def h_rows_unserialisable_parquet(ctx: Ctx) -> Outcome:
    """`write_rows` to .parquet of rows whose column mixes types (a string, then an object)"""
    from replaybank.hf.embedded import write_rows

    out = ctx.sb / "rows.parquet"
    ctx.arm(named=[])
    return must_refuse(lambda: write_rows([{"prompt": "a", "completion": "b"}, {"prompt": object(), "completion": "c"}],
                                          out), "an object in a row")


# == files =========================================================================================

def _nul(call: str) -> Callable[[Ctx], Outcome]:
    def case(ctx: Ctx) -> Outcome:
        path = str(ctx.sb / "a\x00b")
        ctx.arm(named=[])
        if call == "read_regular":
            from replaybank.files import read_regular
            return must_refuse(lambda: read_regular(path, what="campaign file"), "a NUL byte")
        if call == "load_trace":
            from replaybank.traces import load_trace
            return must_refuse(lambda: load_trace(path), "a NUL byte")
        if call == "save_trace":
            from replaybank.traces import save_trace, synthetic_trace
            t = synthetic_trace(requests=2, prompt_tokens=2, decode_tokens=2, layers=1, experts=4, top_k=1, seed=0)
            return must_refuse(lambda: save_trace(t, path), "a NUL byte")
        from replaybank.llm.adapters import AdapterLibrary
        return must_refuse(lambda: AdapterLibrary(path, create=True), "a NUL byte")
    case.__doc__ = f"a path holding a NUL byte, to `{call}`"
    return case


# -- the list of cases ----------------------------------------------------------------------------

CASES: dict[str, tuple[str, Callable[[Ctx], Outcome]]] = {}


def _register(surface: str, cases: dict[str, Callable[[Ctx], Outcome]]) -> None:
    for name, fn in cases.items():
        CASES[name] = (surface, fn)


_register("adapters", {
    "a_alpha_x100_registered": a_alpha_x100_registered,
    "a_alpha_x100_at_add": a_alpha_x100_at_add,
    "a_alpha_nan": _config_at_add(lambda c: c.update(lora_alpha=math.nan), "lora_alpha NaN"),
    "a_alpha_inf": _config_at_add(lambda c: c.update(lora_alpha=math.inf), "lora_alpha inf"),
    "a_alpha_neg": _config_at_add(lambda c: c.update(lora_alpha=-400), "lora_alpha -400"),
    "a_rslora": _config_at_add(lambda c: c.update(use_rslora=True), "use_rslora true"),
    "a_seq_cls": _config_at_add(lambda c: c.update(task_type="SEQ_CLS"), "task_type SEQ_CLS"),
    "a_pissa_add": _config_at_add(lambda c: c.update(init_lora_weights="pissa"), 'init_lora_weights "pissa"'),
    "a_olora_add": _config_at_add(lambda c: c.update(init_lora_weights="olora"), 'init_lora_weights "olora"'),
    "a_pissa_load": _config_at_load(lambda c: c.update(init_lora_weights="pissa"), 'init_lora_weights "pissa"'),
    "a_olora_load": _config_at_load(lambda c: c.update(init_lora_weights="olora"), 'init_lora_weights "olora"'),
    "a_rank_1e9": _config_at_add(lambda c: c.update(r=10**9), "r = 1e9"),
    "a_targets_nothing": _config_at_add(lambda c: c.update(target_modules=["nothing_here"]), "target_modules naming nothing"),
    "a_targets_nothing_load": _config_at_load(lambda c: c.update(target_modules=["nothing_here"]), "target_modules naming nothing"),
    "a_layers_99": _config_at_add(lambda c: c.update(layers_to_transform=[99]), "layers_to_transform [99]"),
    "a_layers_99_load": _config_at_load(lambda c: c.update(layers_to_transform=[99]), "layers_to_transform [99]"),
    "a_megatron": _config_at_add(lambda c: c.update(megatron_core="this"), 'megatron_core "this"'),
    "a_staging_link_outside": a_staging_link_outside,
    "a_lock_folder": _own_path(".lock", lambda p: p.mkdir(), "a folder"),
    "a_lock_loop": _own_path(".lock", _loop, "a link loop"),
    "a_lock_loop_remove": _own_path(".lock", _loop, "a link loop (then `remove`)", call="remove"),
    "a_staging_file": _own_path(".staging", lambda p: p.write_text("x"), "a regular file"),
    "a_staging_loop": _own_path(".staging", _loop, "a link loop"),
    "a_orphaned_file": a_orphaned_file,
    "a_add_nan_data_signed": a_add_nan_data_signed,
    "a_root_file": _root_kind("file"),
    "a_root_fifo": _root_kind("FIFO"),
    "a_name_index_tmp": a_name_index_tmp,
    "a_examples_fifo": _examples("fifo"),
    "a_examples_dev_zero": _examples("zero"),
    "a_kill_between_rename_and_index": a_kill_between_rename_and_index,
    "a_manifest_retention_neg": _manifest(_figures(retention=-0.5, passed=False, forced=True), "retention -0.5"),
    "a_manifest_retention_1e308": _manifest(_figures(retention=1e308), "retention 1e308"),
    "a_manifest_passed_below_floor": _manifest(_figures(retention=0.5), "passed true below the floor"),
    "a_manifest_nan_n": _manifest(_figures(n=math.nan), "NaN data count n"),
    "a_manifest_nan_data": _manifest(lambda m: m.update(data={"rows": math.nan}), "NaN in the data record"),
    "a_manifest_repeated_key": _manifest(None, "a key written twice", raw=_repeat_key),
    "a_manifest_garbage_merge": _manifest(lambda m: m.update(parents=["a", "b"], merge={"combination_type": "evil", "weights": ["x"]}),
                                          "a garbage merge record"),
    "a_weights_swapped_signed": a_weights_swapped_signed,
    "a_merge_string": a_merge_string,
    "a_remove_dotdot": a_remove_dotdot,
    "a_registration_skill_none": a_registration_skill_none,
    "a_figures_fifo": a_figures_fifo,
    "a_route_threshold_5": _route(5.0),
    "a_route_threshold_inf": _route(math.inf),
    "a_route_top_k_0": a_route_top_k_0,
})
_register("traces", {
    "t_layers_int": _trace_manifest("layers", 2),
    "t_layers_null": _trace_manifest("layers", None),
    "t_num_experts_int": _trace_manifest("num_experts", 8),
    "t_num_experts_null": _trace_manifest("num_experts", None),
    "t_token_overflow": t_token_overflow,
    "t_token_overflow_big": t_token_overflow_big,
    "t_negative_seed_api": t_negative_seed_api,
    "t_negative_tokens": t_negative_tokens,
    "t_synth_seed_neg": _trace_cli(lambda c: ["traces", "synth", str(c.sb / "o"), "--seed", "-1"], "--seed -1"),
    "t_compare_seeds_nan": _trace_cli(lambda c: _cmp(c, "--seeds", "nan"), "compare --seeds nan"),
    "t_compare_seeds_inf": _trace_cli(lambda c: _cmp(c, "--seeds", "inf"), "compare --seeds inf"),
    "t_compare_seeds_neg": _trace_cli(lambda c: _cmp(c, "--seeds", "0,-1"), "compare --seeds 0,-1"),
    "t_compare_seeds_frac": _trace_cli(lambda c: _cmp(c, "--seeds", "1.5"), "compare --seeds 1.5"),
    "t_compare_requests_nan": _trace_cli(lambda c: _cmp(c, "--requests", "nan"), "compare --requests nan"),
    "t_simulate_seed_neg": _trace_cli(lambda c: ["traces", "simulate", str(_trace(c)), "--seed", "-2"],
                                      "simulate --seed -2"),
    "t_synth_requests_nan": _trace_cli(lambda c: ["traces", "synth", str(c.sb / "o"), "--requests", "nan"], "--requests nan"),
    "t_synth_requests_inf": _trace_cli(lambda c: ["traces", "synth", str(c.sb / "o"), "--requests", "inf"], "--requests inf"),
    "t_synth_requests_neg": _trace_cli(lambda c: ["traces", "synth", str(c.sb / "o"), "--requests", "-3"], "--requests -3"),
    "t_simulate_ratio_nan": _trace_cli(lambda c: ["traces", "simulate", str(_trace(c)), "--ratio", "nan"],
                                       "simulate --ratio nan"),
    "t_simulate_half_life_inf": _trace_cli(lambda c: _sim(c, "--half-life", "inf"), "simulate --half-life inf"),
    "t_simulate_json_fifo": t_simulate_json_fifo,
    "t_inspect_fifo": t_inspect_fifo,
    "t_overwrite_user_folder": t_overwrite_user_folder,
    "t_overwrite_link": t_overwrite_link,
})
_register("controllers", {
    "c_fixed_string_share": c_fixed_string_share,
    "c_fixed_string_list": c_fixed_string_list,
    "c_proxy_string_weights": c_proxy_string_weights,
    "c_limits_string_floor": c_limits_string_floor,
    "c_fixed_nan_share": c_fixed_nan_share,
    "c_summarize_ragged": c_summarize_ragged,
    "c_summarize_strings": c_summarize_strings,
    "c_source_stats_strings": c_source_stats_strings,
    "c_huge_rng_state": c_huge_rng_state,
    "c_toml_rng": _collide("rng"),
    "c_toml_limits": _collide("limits"),
    "c_callback_make_limits": c_callback_make_rng,
})


def _np(expr: str) -> Callable[[], Any]:
    def make() -> Any:
        import numpy as np
        return eval(expr, {"np": np})
    return make


_register("sb3", {
    "s_obs_wrong_shape": _sb3_add("obs of shape (1, 4) for a (3,) space", obs=_np("np.zeros((1, 4), np.float32)")),
    "s_obs_strings": _sb3_add("obs of strings", obs=_np("np.array([['a', 'b', 'c']])")),
    "s_infos_empty": _sb3_add("infos = []", infos=[]),
    "s_infos_none": _sb3_add("infos = None", infos=None),
    "s_n_envs_mismatch": _sb3_add("arrays of 2 transitions for n_envs = 1", obs=_np("np.zeros((2, 3), np.float32)"),
                                  next_obs=_np("np.zeros((2, 3), np.float32)"), action=_np("np.zeros((2, 1), np.int64)"),
                                  reward=_np("np.zeros(2, np.float32)"), done=_np("np.zeros(2, np.float32)"),
                                  infos=[{}, {}]),
    "s_reward_nan": _sb3_add("reward NaN", reward=_np("np.array([np.nan], np.float32)")),
    "s_reward_inf": _sb3_add("reward inf", reward=_np("np.array([np.inf], np.float32)")),
    "s_done_2": _sb3_add("done = 2", done=_np("np.array([2.0], np.float32)")),
    "s_done_nan": _sb3_add("done NaN", done=_np("np.array([np.nan], np.float32)")),
    "s_action_outside": _sb3_add("action 5 for Discrete(2)", action=_np("np.array([[5]])")),
    "s_action_float_discrete": _sb3_add("action 0.5 for Discrete(2)", action=_np("np.array([[0.5]])")),
    "s_box_action_nan": _sb3_add("a Box action NaN", space="box", action=_np("np.array([[np.nan]], np.float32)")),
    "s_sample_empty": _sb3_sample("an empty buffer", 4, 0),
    "s_sample_0": _sb3_sample("batch_size = 0", 0, 3),
    "s_sample_string": _sb3_sample('batch_size = "4"', "4", 3),
    "s_n_envs_0": _sb3_make("n_envs = 0", n_envs=0),
    "s_size_0": _sb3_make("buffer_size = 0", size=0),
    "s_size_neg": _sb3_make("buffer_size = -5", size=-5),
    "s_unknown_kwarg": _sb3_make("an unknown keyword `alpah`", cls="PrioritizedReplayBuffer", alpah=0.5),
    "s_eps_0": _sb3_make("eps = 0", cls="PrioritizedReplayBuffer", eps=0.0),
    "s_perdqn_unknown": _perdqn("an unknown keyword `learning_rat`", learning_rat=1e-3),
    "s_perdqn_string": _perdqn('learning_rate = "fast"', learning_rate="fast"),
    "s_perdqn_rb_kwargs": _perdqn("replay_buffer_kwargs {'alfa': 0.5}", replay_buffer_kwargs={"alfa": 0.5}),
    "s_perdqn_beta_1e300": _perdqn("per_beta_final = 1e300", per_beta_final=1e300),
})
_register("hf", {
    "h_attach_none": h_attach_none,
    "h_source_strings": _source_value("1"),
    "h_source_none": _source_value(None),
    "h_controller_fifo": h_controller_fifo,
    "h_controller_link_save": h_controller_link_save,
    "h_rows_to_link": h_rows_to_link,
    "h_kl_weight_1e308": _kl("weight 1e308", weight=1e308),
    "h_kl_temperature_1e-300": _kl("temperature 1e-300", weight=0.1, temperature=1e-300),
    "h_kl_weight_nan": _kl("weight NaN", weight=math.nan),
    "h_model_path_empty": _model_path("empty"),
    "h_model_path_truncated": _model_path("truncated"),
    "h_mixspec_ratio_nan": _mixspec(math.nan),
    "h_mixspec_ratio_string": _mixspec("0.1"),
    "h_synth_rows_0": h_synth_rows_0,
    "h_rows_unserialisable": h_rows_unserialisable,
    "h_rows_unserialisable_parquet": h_rows_unserialisable_parquet,
})
_register("files", {
    "f_nul_read_regular": _nul("read_regular"),
    "f_nul_load_trace": _nul("load_trace"),
    "f_nul_save_trace": _nul("save_trace"),
    "f_nul_library": _nul("AdapterLibrary"),
})


# -- running one case in its own process ----------------------------------------------------------

def run_in_child(name: str, work: Path, tpl: Path) -> None:
    """The child's side: run case ``name`` in ``work/sb`` and print its result after :data:`MARK`."""
    import warnings

    surface, fn = CASES[name]
    ctx = Ctx(work / "sb", tpl)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = fn(ctx)
    except Hang as exc:
        result = Outcome("hang", first_line(str(exc)))
    except Traceback as exc:
        result = Outcome("traceback", first_line(str(exc)))
    except Exception as exc:
        from replaybank.errors import ReplayBankError

        if isinstance(exc, ReplayBankError):
            result = refused(f"{type(exc).__name__}: {exc}")
        else:
            tb = traceback.format_exc().strip().splitlines()
            result = Outcome("traceback", first_line(f"{type(exc).__name__}: {exc}") or type(exc).__name__,
                             " | ".join(tb[-6:]))
    lost, outside, detail = ctx.check()
    print(MARK + json.dumps({**asdict(result), "data_loss": lost, "outside_write": outside,
                             "integrity": detail}), flush=True)


@dataclass
class CaseResult:
    surface: str
    name: str
    what: str
    outcome: str
    message: str
    data_loss: bool = False
    outside_write: bool = False
    detail: str = ""
    seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)


def run_case(name: str, root: Path, tpl: Path, timeout: float = TIMEOUT) -> CaseResult:
    """Run case ``name`` in a fresh process under ``timeout`` seconds, in ``root/name``."""
    surface, fn = CASES[name]
    what = " ".join((fn.__doc__ or name).split())
    work = root / name
    for sub in ("sb", "tmp", "home", "cache"):
        (work / sub).mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(SRC), os.environ.get("PYTHONPATH", "")])),
           "TMPDIR": str(work / "tmp"), "HOME": str(work / "home"), "REPLAYBANK_CACHE": str(work / "cache"),
           "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRL_EXPERIMENTAL_SILENCE": "1",
           "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    env.pop("REPLAYBANK_ADAPTER_KEY", None)
    start = time.monotonic()
    proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--child", name, str(work), str(tpl)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return CaseResult(surface, name, what, "hang", f"still running after {timeout:.0f} s (killed)",
                          seconds=time.monotonic() - start)
    seconds = time.monotonic() - start
    lines = [line for line in out.splitlines() if line.startswith(MARK)]
    if not lines:
        why = f"killed by signal {-proc.returncode}" if proc.returncode < 0 else f"exit {proc.returncode}"
        return CaseResult(surface, name, what, "traceback", f"{why}: {first_line(err.strip().splitlines()[-1] if err.strip() else '')}",
                          seconds=seconds)
    r = json.loads(lines[-1][len(MARK):])
    return CaseResult(surface, name, what, r["outcome"], scrub(r["message"], work, tpl), r["data_loss"],
                      r["outside_write"], scrub("; ".join(filter(None, [r.get("detail", ""), r.get("integrity", "")])),
                                                work, tpl), seconds)


def scrub(text: str, work: Path, tpl: Path) -> str:
    """``text`` with the case's temporary folders written as ``SANDBOX`` and ``TEMPLATE``."""
    return text.replace(str(work / "sb"), "SANDBOX").replace(str(tpl), "TEMPLATE")


def table(results: list[CaseResult]) -> list[dict[str, Any]]:
    rows = []
    for surface in [*SURFACES, "all"]:
        mine = [r for r in results if surface in ("all", r.surface)]
        if not mine:
            continue
        row: dict[str, Any] = {"surface": surface, "cases": len(mine)}
        row.update({o: sum(r.outcome == o for r in mine) for o in OUTCOMES})
        row["data_loss"] = sum(r.data_loss for r in mine)
        row["outside_write"] = sum(r.outside_write for r in mine)
        rows.append(row)
    return rows


def commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=SURFACES, help="run one surface's cases")
    parser.add_argument("--case", action="append", help="run this case (repeatable)")
    parser.add_argument("--json", type=Path, default=RESULTS / "campaign.json", help="where to write the results")
    parser.add_argument("--timeout", type=float, default=TIMEOUT, help="seconds per case before it counts as a hang")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        run_in_child(args.child[0], Path(args.child[1]), Path(args.child[2]))
        return 0
    names = [n for n, (s, _) in CASES.items() if (args.only is None or s == args.only)
             and (not args.case or n in args.case)]
    if args.case and set(args.case) - set(CASES):
        parser.error(f"unknown case(s): {sorted(set(args.case) - set(CASES))}")
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="campaign-") as tmp:
        root = Path(tmp)
        env = {**os.environ, "PYTHONPATH": str(SRC), "OMP_NUM_THREADS": "1", "REPLAYBANK_CACHE": str(root / "cache")}
        code = f"import sys; sys.path.insert(0, {str(ROOT / 'benchmarks')!r}); import campaign; campaign.build_template(__import__('pathlib').Path(sys.argv[1]))"
        if any(CASES[n][0] == "adapters" for n in names):  # only the adapter cases copy the template
            subprocess.run([sys.executable, "-c", code, str(root / "tpl")], check=True, env=env)
        results = []
        for name in names:
            r = run_case(name, root / "cases", root / "tpl", args.timeout)
            flags = " ".join(f for f, on in (("DATA_LOSS", r.data_loss), ("OUTSIDE_WRITE", r.outside_write)) if on)
            print(f"{r.seconds:5.1f}s {r.surface:11} {r.name:34} {r.outcome:9} {flags} {r.message[:110]}", flush=True)
            results.append(r)
    rows = table(results)
    cols = ["surface", "cases", *OUTCOMES, "data_loss", "outside_write"]
    print("\n| " + " | ".join(cols) + " |\n|" + "---|" * len(cols))
    for row in rows:
        print("| " + " | ".join(str(row[c]) for c in cols) + " |")
    wall = time.monotonic() - start
    print(f"\n{len(results)} cases in {wall:.0f} s")
    report = {
        "command": "python benchmarks/campaign.py" + (f" --only {args.only}" if args.only else ""),
        "commit": commit(), "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "timeout_s": args.timeout, "wall_s": round(wall, 1), "table": rows,
        "cases": [{k: v for k, v in asdict(r).items() if k != "extra"} | {"seconds": round(r.seconds, 1)} for r in results],
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {args.json}")
    bad = sum(row["traceback"] + row["hang"] + row["data_loss"] + row["outside_write"] for row in rows if row["surface"] == "all")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
