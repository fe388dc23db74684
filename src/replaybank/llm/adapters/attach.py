"""A library adapter put onto a base model (and taken off again), without executing anything it ships.

``adapter_config.json`` is read as data and checked here (a LoRA config, no ``auto_mapping`` to
custom classes, only keys this PEFT's ``LoraConfig`` has); the weights come through
``safetensors`` (never pickle, never PEFT's ``.bin`` fallback), and every tensor is checked against
the adapter the config describes before anything is copied in.

Example:
    >>> check_adapter_config({"peft_type": "LORA", "r": 4, "lora_alpha": 8, "target_modules": ["q_proj"]},
    ...                      "lib/a/adapter_config.json", "a")["r"]
    4
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from replaybank.llm.adapters.errors import ManifestError
from replaybank.llm.model import peft_wrapping
from replaybank.llm.train.peft_files import check_tensors, read_tensors

__all__ = ["attach", "check_adapter_config", "detach", "lora_config", "rank_of"]


def check_adapter_config(cfg: Any, where: str, name: str) -> dict[str, Any]:
    """``cfg`` (a parsed ``adapter_config.json``) when it is a LoRA config replaybank can load.

    Checked without importing PEFT (so registering from a folder stays light): an object, ``peft_type``
    ``LORA``, no ``auto_mapping``, ``r`` a positive integer, ``lora_alpha`` a number,
    ``target_modules`` a name or a list of names. :func:`lora_config` also refuses keys this PEFT
    does not know.

    Raises:
        ManifestError: naming the adapter and the field.
    """
    def bad(key: str, message: str) -> ManifestError:
        return ManifestError(f"{where}: {message}", adapter=name, field=f"adapter_config.{key}")

    if not isinstance(cfg, dict):
        raise bad("", f"expected a JSON object, got {type(cfg).__name__}")
    if cfg.get("peft_type") != "LORA":
        raise bad("peft_type", f"is {cfg.get('peft_type')!r}; the library holds LoRA adapters ('LORA')")
    if cfg.get("auto_mapping") is not None:
        raise bad("auto_mapping", "names custom classes; the library never loads code, only LoRA tensors")
    r = cfg.get("r")
    if isinstance(r, bool) or not isinstance(r, int) or r < 1:
        raise bad("r", f"expected a positive integer rank, got {r!r}")
    alpha = cfg.get("lora_alpha")
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)):
        raise bad("lora_alpha", f"expected a number, got {alpha!r}")
    targets = cfg.get("target_modules")
    if not (isinstance(targets, str) or (isinstance(targets, list) and targets and all(isinstance(t, str) for t in targets))):
        raise bad("target_modules", f"expected a module name or a list of them, got {targets!r}")
    return cfg


def rank_of(cfg: dict[str, Any]) -> int:
    """The largest rank an adapter config allocates (``r``, or its ``rank_pattern``'s largest)."""
    pattern = cfg.get("rank_pattern") or {}
    return max([int(cfg["r"]), *(int(v) for v in pattern.values())])


def lora_config(cfg: dict[str, Any], where: str, name: str) -> Any:
    """A ``peft.LoraConfig`` from a checked config dict.

    Raises:
        ManifestError: a key this PEFT's ``LoraConfig`` lacks, or values it refuses.
    """
    import dataclasses

    from peft import LoraConfig

    known = {f.name for f in dataclasses.fields(LoraConfig)}
    for key in cfg:
        if key not in known:
            raise ManifestError(f"{where}: unknown key for this PEFT's LoraConfig (written by a newer PEFT?)",
                                adapter=name, field=f"adapter_config.{key}")
    try:
        return LoraConfig(**{**cfg, "inference_mode": True})
    except (TypeError, ValueError) as exc:
        raise ManifestError(f"{where}: LoraConfig refuses it: {exc}", adapter=name, field="adapter_config") from None


def attach(model: Any, weights: Path, config: Any, adapter_name: str) -> tuple[Any, bool]:
    """Put the adapter in ``weights`` onto ``model`` as ``adapter_name`` and make it the active one.

    ``model`` is a bare base model (it is wrapped, in place, as PEFT does) or a PEFT model that
    already holds other adapters. The tensors are checked against the adapter ``config`` describes
    before they are copied in; on any error the adapter is taken off again.

    Returns:
        ``(peft_model, wrapped)``: ``wrapped`` is True when ``model`` was bare (see :func:`detach`).

    Raises:
        AdapterError: an unreadable weights file, tensors missing, extra, of another shape, not
            floating point or not finite.
    """
    from peft import PeftModel, get_peft_model, get_peft_model_state_dict, set_peft_model_state_dict

    state = read_tensors(weights)
    wrapped = not isinstance(model, PeftModel)
    if wrapped:
        flags = [p.requires_grad for p in model.parameters()]
        with peft_wrapping():
            peft_model = get_peft_model(model, config, adapter_name=adapter_name)
        peft_model.replaybank_flags = flags  # put back by detach
    else:
        peft_model = model
        peft_model.add_adapter(adapter_name, config)
    try:
        check_tensors(weights, state, get_peft_model_state_dict(peft_model, adapter_name=adapter_name),
                      what=f"adapter {adapter_name!r} as its config describes it")
        set_peft_model_state_dict(peft_model, state, adapter_name=adapter_name)
        peft_model.set_adapter(adapter_name)
    except BaseException:
        detach(peft_model, adapter_name, wrapped)
        raise
    peft_model.eval()
    return peft_model, wrapped


def detach(peft_model: Any, adapter_name: str, wrapped: bool) -> Any:
    """Take ``adapter_name`` off again; returns the bare base model when ``wrapped`` (the
    ``requires_grad`` flags as they were), else the PEFT model without it."""
    if wrapped:
        base = peft_model.unload()
        for p, flag in zip(base.parameters(), getattr(peft_model, "replaybank_flags", []), strict=False):
            p.requires_grad_(flag)
        return base
    peft_model.delete_adapter(adapter_name)
    return peft_model
