"""A LoRA adapter on disk: a standard PEFT folder with replaybank's manifest beside it.

Every adapter replaybank writes is a folder that ``peft.PeftModel.from_pretrained`` loads:

* ``adapter_model.safetensors``: the LoRA tensors (``get_peft_model_state_dict``: the adapter's name
  taken out of the keys, as PEFT saves them);
* ``adapter_config.json``: the adapter's ``LoraConfig`` as PEFT writes it (sets as lists,
  ``inference_mode`` true);
* ``replaybank.json``: what replaybank knows about it (the writer's fields plus the weights'
  ``sha256``). It is written last, so a folder whose manifest is missing was never finished.

Each file goes to a temporary name first and is renamed into place; a link (or FIFO, folder) at any
name written here is refused, never written through. Reading is the other half: regular files
only, tensors through ``safetensors`` (never pickle), every tensor checked against the model's.

Example:
    >>> sorted(FILES)
    ['adapter_config.json', 'adapter_model.safetensors', 'replaybank.json']
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from replaybank.errors import ReplayBankError
from replaybank.files import open_regular, read_regular
from replaybank.jsonl import RepeatedKeyError, strict_loads
from replaybank.llm.config.names import refuse_links

__all__ = [
    "CONFIG", "FILES", "MANIFEST", "WEIGHTS", "AdapterError", "check_tensors", "parse_json_object", "peft_config_dict",
    "read_json_object", "read_tensors", "sha256_file", "tensors_from_bytes", "write_adapter_folder", "write_json_atomic",
    "write_tensors",
]

WEIGHTS = "adapter_model.safetensors"
CONFIG = "adapter_config.json"
MANIFEST = "replaybank.json"
FILES = (WEIGHTS, CONFIG, MANIFEST)


class AdapterError(ReplayBankError):
    """A saved adapter is missing, damaged or does not fit the model."""


def peft_config_dict(model: Any, adapter_name: str = "default") -> dict[str, Any]:
    """The adapter's ``LoraConfig`` as PEFT's ``save_pretrained`` writes it (sets as sorted lists)."""
    out = model.peft_config[adapter_name].to_dict()
    for key, value in out.items():
        if isinstance(value, set):
            out[key] = sorted(value)
    out["inference_mode"] = True
    return out


def write_adapter_folder(
    model: Any, folder: Path, manifest: dict[str, Any], *, adapter_name: str = "default",
    converted: tuple[dict[str, Any], dict[str, Any]] | None = None,
) -> str:
    """Write ``model``'s adapter ``adapter_name`` into ``folder`` as a PEFT folder; return the
    weights' SHA-256 (64 hex digits, also recorded as the manifest's ``sha256``).

    ``folder`` must exist and be a real folder (see :func:`replaybank.llm.config.names.safe_folder`).
    ``converted`` (tensors, PEFT config) is written instead of the adapter as it is: a peer
    method's adapter turned into one that loads on the untouched base
    (:meth:`replaybank.llm.train.peers.PeerHooks.saved`).

    Raises:
        UnsafePathError: a symbolic link (or a FIFO, a folder) at a file name written here.
    """
    from peft import get_peft_model_state_dict

    refuse_links(folder, *FILES, *(f"{n}.tmp" for n in FILES))
    tensors, config = converted if converted is not None else (get_peft_model_state_dict(model, adapter_name=adapter_name), None)
    digest = write_tensors(folder / WEIGHTS, tensors)
    write_json_atomic(folder / CONFIG, config if config is not None else peft_config_dict(model, adapter_name))
    write_json_atomic(folder / MANIFEST, {**manifest, "sha256": digest})
    return digest


def write_tensors(path: Path, tensors: dict[str, Any]) -> str:
    """``tensors`` as the safetensors file ``path`` (on the CPU, written to ``path.tmp``, then
    renamed over ``path``); return the file's SHA-256. The caller refuses links at both names
    (:func:`replaybank.llm.config.names.refuse_links`)."""
    from safetensors.torch import save_file

    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)
    save_file({k: v.detach().contiguous().cpu() for k, v in tensors.items()}, str(tmp), metadata={"format": "pt"})
    digest = sha256_file(tmp)
    os.replace(tmp, path)
    return digest


def write_json_atomic(path: Path, obj: Any) -> None:
    """``obj`` as JSON at ``path``: written to ``path.tmp`` (created anew, never through a link),
    flushed to disk, renamed over ``path``."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)
    with open(tmp, "x", encoding="utf-8") as f:
        f.write(json.dumps(obj, indent=1, sort_keys=True))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_json_object(
    path: Path, what: str, error: type[ReplayBankError] = AdapterError, *, max_bytes: int | None = None,
) -> dict[str, Any]:
    """The JSON object in the regular file ``path`` (``what`` names it in errors); at most
    ``max_bytes`` long when given. A key repeated in any object of the file is refused (the
    parser would keep the last one silently, so two readers could see two different files).

    Raises:
        error: a link, a missing, unreadable or too large file, bad JSON, a repeated key, or not an object.
    """
    if path.is_symlink() or not path.is_file():
        raise error(f"{path}: {what} is missing or not a regular file")
    # swapped for a link or FIFO since: still refused
    raw = read_regular(path, error=error, follow_links=False, what=what, max_bytes=max_bytes)
    return parse_json_object(raw, path, what, error)


def parse_json_object(raw: bytes, path: Path, what: str, error: type[ReplayBankError] = AdapterError) -> dict[str, Any]:
    """The JSON object in ``raw``, the bytes of ``path`` (as :func:`read_json_object` reads them).

    Raises:
        error: bad UTF-8 or JSON, a key repeated in an object, or not an object.
    """
    try:
        obj = strict_loads(raw, finite=False)  # each figure is checked, and named, by its reader
    except RepeatedKeyError as exc:
        raise error(f"{path}: {what} names the key {exc.key!r} more than once") from None
    except (ValueError, RecursionError) as exc:
        raise error(f"{path}: {what} is not readable JSON ({type(exc).__name__})") from None
    if not isinstance(obj, dict):
        raise error(f"{path}: {what} must be a JSON object, got {type(obj).__name__}")
    return obj


def read_tensors(path: Path) -> dict[str, Any]:
    """The tensors of a safetensors file (never pickle).

    Raises:
        AdapterError: not a readable safetensors file.
    """
    data = read_regular(path, error=AdapterError, follow_links=False)  # never a FIFO or a link out of the folder
    return tensors_from_bytes(data, path)


def tensors_from_bytes(data: bytes, path: Path) -> dict[str, Any]:
    """The tensors in ``data``, the bytes of the safetensors file ``path`` (never pickle).

    Raises:
        AdapterError: not a readable safetensors file.
    """
    from safetensors import SafetensorError
    from safetensors.torch import load

    try:
        return load(data)
    except (SafetensorError, OSError, ValueError, RuntimeError) as exc:
        raise AdapterError(f"{path}: not a readable safetensors file ({exc})") from None


def check_tensors(path: Path, state: dict[str, Any], mine: dict[str, Any], what: str = "the model's adapter") -> None:
    """``state`` holds exactly the tensors of ``mine`` (names, shapes), floating point and finite.

    Raises:
        AdapterError: naming ``path`` and the first tensor that differs.
    """
    import torch

    missing, extra = sorted(set(mine) - set(state)), sorted(set(state) - set(mine))
    if extra:
        raise AdapterError(f"{path}: tensors that are not in {what}: {extra[:3]}")
    if missing:
        raise AdapterError(f"{path}: {len(missing)} of {what}'s {len(mine)} tensors are missing, e.g. {missing[:2]}")
    for name, ref in mine.items():
        got = state[name]
        if not isinstance(got, torch.Tensor) or tuple(got.shape) != tuple(ref.shape):
            shape = tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__
            raise AdapterError(f"{path}: tensor {name} has shape {shape}, {what} has {tuple(ref.shape)}")
        if not got.is_floating_point():
            raise AdapterError(f"{path}: tensor {name} is {got.dtype}, expected floating point")
        if not bool(torch.isfinite(got).all()):
            raise AdapterError(f"{path}: tensor {name} holds NaN or infinite values")


def sha256_file(path: Path) -> str:
    """SHA-256 of a file's bytes (64 hex digits)."""
    h = hashlib.sha256()
    with open_regular(path, error=AdapterError) as f:  # a FIFO is refused, never waited on
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
