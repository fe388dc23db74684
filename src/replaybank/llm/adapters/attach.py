"""A library adapter put onto a base model (and taken off again), without executing anything it ships.

``adapter_config.json`` is read as data and checked here, key by key, against what replaybank
writes (:func:`check_adapter_config`) and against the model it goes onto (:func:`check_config_fits`)
before PEFT sees it; the weights come through
``safetensors`` (never pickle, never PEFT's ``.bin`` fallback), and every tensor is checked against
the adapter the config describes before anything is copied in.

Example:
    >>> check_adapter_config({"peft_type": "LORA", "r": 4, "lora_alpha": 8, "target_modules": ["q_proj"]},
    ...                      "lib/a/adapter_config.json", "a")["r"]
    4
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from replaybank.llm.adapters.errors import ManifestError
from replaybank.llm.adapters.manifest import MAX_RANK
from replaybank.llm.model import peft_wrapping
from replaybank.llm.train.peft_files import check_tensors, read_tensors

__all__ = ["KNOWN_KEYS", "SAFE_INITS", "attach", "check_adapter_config", "check_config_fits", "detach", "lora_config",
           "rank_of"]


#: ``init_lora_weights`` values that leave the base model alone (random or zero LoRA matrices, overwritten
#: by the adapter's tensors); PiSSA, OLoRA, CorDA, EVA, LoftQ and the like compute the LoRA matrices
#: from the base weights and rewrite those weights while PEFT loads the config
SAFE_INITS: tuple[Any, ...] = (True, False, "gaussian")
#: keys whose value is informative only (PEFT does not act on them when loading)
_TEXT_KEYS = ("base_model_name_or_path", "revision", "peft_version")
#: keys that must be off: the features replaybank never writes (code, extra trainable modules,
#: changed base layers, other initialisations, quantisation, Megatron)
_OFF_KEYS = ("auto_mapping", "modules_to_save", "exclude_modules", "layer_replication", "trainable_token_indices",
             "target_parameters", "alora_invocation_tokens", "arrow_config", "corda_config", "eva_config", "lora_ga_config",
             "kasa_config", "monteclora_config", "velora_config", "use_bdlora", "megatron_config", "loftq_config",
             "use_rslora", "use_dora", "use_qalora", "lora_bias", "ensure_weight_tying")
#: the keys the table below checks one by one
KNOWN_KEYS = frozenset((
    "peft_type", "task_type", "r", "lora_alpha", "lora_dropout", "target_modules", "init_lora_weights", "bias",
    "fan_in_fan_out", "inference_mode", "layers_to_transform", "layers_pattern", "rank_pattern", "alpha_pattern",
    "megatron_core", "qalora_group_size", *_TEXT_KEYS, *_OFF_KEYS,
))
_MODULE = re.compile(r"[A-Za-z0-9_]+(?:\.[A-Za-z0-9_]+)*")
_MAX_TARGETS = 1024
_MAX_LAYER = 1 << 20
#: the numbered-layer containers PEFT looks for when ``layers_pattern`` is not set
_LAYER_CONTAINERS = ("layers", "h", "block", "blocks", "layer")
#: submodules of a PEFT LoRA layer (not modules of the base model)
_LORA_PARTS = frozenset(("base_layer", "lora_A", "lora_B", "lora_embedding_A", "lora_embedding_B", "lora_dropout",
                         "lora_magnitude_vector"))


def _off(value: Any) -> bool:
    return value is None or value is False or value == [] or value == {}


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _positive(value: Any) -> bool:
    return _number(value) and float(value) > 0


def _rank(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_RANK


def check_adapter_config(cfg: Any, where: str, name: str) -> dict[str, Any]:
    """``cfg`` (a parsed ``adapter_config.json``) when it is a LoRA config as replaybank writes it.

    Checked without importing PEFT (so registering from a folder stays light), key by key:

    * ``peft_type`` ``LORA``; ``task_type`` ``CAUSAL_LM`` or null;
    * ``r`` an integer in ``[1, MAX_RANK]``, ``rank_pattern`` values too; ``lora_alpha`` (and
      ``alpha_pattern`` values) finite and > 0; ``lora_dropout`` in ``[0, 1)``;
    * ``target_modules`` a list of module names (never one string: PEFT reads a string as a
      regular expression); ``rank_pattern`` / ``alpha_pattern`` keys and ``layers_pattern`` names too;
    * ``init_lora_weights`` one of :data:`SAFE_INITS`: an initialisation from the base weights
      (``"pissa"``, ``"olora"``, ``"corda"``, ``"eva"``, ``"loftq"``, ...) rewrites the caller's base
      model while PEFT loads the config;
    * ``bias`` ``"none"`` (else PEFT would load base biases from the adapter);
    * ``layers_to_transform`` null, a layer index or a list of distinct ones;
    * ``megatron_core`` null or PEFT's default ``"megatron.core"`` (it names a module PEFT imports);
    * the features replaybank never writes off (null, false or empty): ``auto_mapping`` (custom
      classes), ``use_dora``, ``use_rslora``, ``modules_to_save``, ``layer_replication``,
      ``loftq_config``, ... (see ``_OFF_KEYS``);
    * ``base_model_name_or_path``, ``revision``, ``peft_version`` text or null (informative);
    * any other key: refused unless off (null, false, empty), the value a newer PEFT writes for a
      feature it added and that is not in use. :func:`lora_config` then also refuses a key this
      PEFT's ``LoraConfig`` lacks or holds at another value than its default.

    What needs the base model (the target modules exist, ``r`` within their widths,
    ``layers_to_transform`` within the model's layers) is :func:`check_config_fits`.

    Raises:
        ManifestError: naming the file, the adapter and the key (``adapter_config.KEY``).
    """
    def bad(key: str, message: str) -> ManifestError:
        return ManifestError(f"{where}: {message}", adapter=name, field=f"adapter_config.{key}" if key else "adapter_config")

    if not isinstance(cfg, dict):
        raise bad("", f"expected a JSON object, got {type(cfg).__name__}")
    if cfg.get("peft_type") != "LORA":
        raise bad("peft_type", f"is {cfg.get('peft_type')!r}; the library holds LoRA adapters ('LORA')")
    if not _off(cfg.get("auto_mapping")):
        raise bad("auto_mapping", "names custom classes; the library never loads code, only LoRA tensors")
    for key, value in cfg.items():
        if key not in KNOWN_KEYS and not _off(value):
            raise bad(key, f"{value!r}: not a key of the LoRA configs replaybank writes (a key it does not know is "
                      "accepted only when off: null, false or empty)")
    if cfg.get("task_type") not in (None, "CAUSAL_LM"):
        raise bad("task_type", f"is {cfg['task_type']!r}; replaybank's adapters are 'CAUSAL_LM' (or null)")
    r = cfg.get("r")
    if not _rank(r):
        raise bad("r", f"expected a positive integer rank up to {MAX_RANK}, got {r!r}")
    alpha = cfg.get("lora_alpha")
    if not _positive(alpha):
        raise bad("lora_alpha", f"expected a finite number > 0, got {alpha!r}")
    dropout = cfg.get("lora_dropout", 0.0)
    if not _number(dropout) or not 0 <= dropout < 1:
        raise bad("lora_dropout", f"expected a share in [0, 1), got {dropout!r}")
    targets = cfg.get("target_modules")
    if isinstance(targets, str):
        raise bad("target_modules", f"is one string {targets!r}, which PEFT reads as a regular expression; "
                  "replaybank writes a list of module names")
    if not (isinstance(targets, list) and 0 < len(targets) <= _MAX_TARGETS and all(_module(t) for t in targets)):
        raise bad("target_modules", f"expected a list of module names (letters, digits, '_', '.'), got {targets!r}")
    init = cfg.get("init_lora_weights", True)
    if not any(init is v if isinstance(v, bool) else init == v for v in SAFE_INITS):
        raise bad("init_lora_weights", f"is {init!r}; only {', '.join(map(repr, SAFE_INITS))} load without touching the "
                  "base model (an initialisation from the base weights, such as 'pissa', 'olora', 'corda', 'eva' or "
                  "'loftq', rewrites them while PEFT loads the config)")
    if cfg.get("bias", "none") != "none":
        raise bad("bias", f"is {cfg['bias']!r}; replaybank's adapters train no biases ('none')")
    for key in ("fan_in_fan_out", "inference_mode"):
        if not isinstance(cfg.get(key, False), bool):
            raise bad(key, f"expected true or false, got {cfg[key]!r}")
    for key in _OFF_KEYS:
        if not _off(cfg.get(key)):
            raise bad(key, f"is {cfg[key]!r}; replaybank never writes this feature, so it must be off (null, false or empty)")
    for key in _TEXT_KEYS:
        value = cfg.get(key)
        if value is not None and not (isinstance(value, str) and len(value) <= 4096):
            raise bad(key, f"expected text or null, got {type(value).__name__}")
    if cfg.get("megatron_core") not in (None, "megatron.core"):
        raise bad("megatron_core", f"is {cfg['megatron_core']!r}; it names a module PEFT imports, so only PEFT's default "
                  "'megatron.core' (unused without megatron_config) or null is accepted")
    group = cfg.get("qalora_group_size", 16)
    if isinstance(group, bool) or not isinstance(group, int) or group < 1:
        raise bad("qalora_group_size", f"expected a positive integer, got {group!r}")
    layers = cfg.get("layers_to_transform")
    if layers is not None:
        listed = [layers] if isinstance(layers, int) and not isinstance(layers, bool) else layers
        if not (isinstance(listed, list) and listed and len(set(listed)) == len(listed) and all(
                isinstance(i, int) and not isinstance(i, bool) and 0 <= i < _MAX_LAYER for i in listed)):
            raise bad("layers_to_transform", f"expected null, a layer index or a list of distinct ones, got {layers!r}")
    pattern = cfg.get("layers_pattern")
    if pattern is not None and not (_module(pattern) or (isinstance(pattern, list) and pattern and all(_module(p) for p in pattern))):
        raise bad("layers_pattern", f"expected null, a module name or a list of them, got {pattern!r}")
    for key, ok, what in (("rank_pattern", _rank, f"a rank in [1, {MAX_RANK}]"),
                          ("alpha_pattern", _positive, "a finite number > 0")):
        value = cfg.get(key) or {}
        if not isinstance(value, dict) or not all(_module(k) and ok(v) for k, v in value.items()):
            raise bad(key, f"expected {{module name: {what}}}, got {value!r}")
    return cfg


def _module(value: Any) -> bool:
    return isinstance(value, str) and len(value) <= 256 and _MODULE.fullmatch(value) is not None


def check_config_fits(cfg: dict[str, Any], model: Any, where: str, name: str) -> None:
    """A checked config (:func:`check_adapter_config`) against the model it is about to be put on,
    before PEFT sees it: every ``target_modules`` name is a layer of the model with a weight, the
    largest rank (``r``, ``rank_pattern``) at most the larger width of every targeted layer, and
    ``layers_to_transform`` indices of numbered layers that hold targeted modules.

    ``model`` is a bare base model or a PEFT model (its LoRA submodules are not counted).

    Raises:
        ManifestError: naming the file, the adapter and the key.
    """
    def bad(key: str, message: str) -> ManifestError:
        return ManifestError(f"{where}: {message}", adapter=name, field=f"adapter_config.{key}")

    modules = [(n, m) for n, m in model.named_modules() if n and not _LORA_PARTS.intersection(n.split("."))]
    rank = rank_of(cfg)
    targeted: list[str] = []
    for target in cfg["target_modules"]:
        hits = [(n, m) for n, m in modules if n == target or n.endswith("." + target)]
        if not hits:
            shown = sorted({n.rsplit(".", 1)[-1] for n, m in modules if getattr(m, "weight", None) is not None})
            raise bad("target_modules", f"{target!r} names no module of this base model (its layers with weights: "
                      f"{', '.join(shown[:12]) or 'none'})")
        for n, m in hits:
            weight = getattr(m, "weight", None)
            shape = tuple(getattr(weight, "shape", ()))
            if len(shape) < 2:
                raise bad("target_modules", f"{target!r} matches {n!r}, which is not a layer LoRA adapts (no 2-D weight)")
            if rank > max(shape[:2]):
                raise bad("r", f"rank {rank} is larger than layer {n!r}'s widths {shape[1]} -> {shape[0]}")
            targeted.append(n)
    layers = cfg.get("layers_to_transform")
    if layers is None:
        return
    wanted = [layers] if isinstance(layers, int) else list(layers)
    pattern = cfg.get("layers_pattern") or _LAYER_CONTAINERS
    containers = "|".join(re.escape(p) for p in ([pattern] if isinstance(pattern, str) else pattern))
    numbered = re.compile(rf"(?:^|\.)(?:{containers})\.(\d+)(?:\.|$)")
    present = {int(found.group(1)) for n in targeted if (found := numbered.search(n)) is not None}
    if not present:
        raise bad("layers_to_transform", f"{layers!r}: the targeted modules are not in numbered layers of this model")
    outside = sorted(set(wanted) - present)
    if outside:
        raise bad("layers_to_transform", f"layers {outside} are out of range: the targeted modules are in layers "
                  f"{min(present)} to {max(present)}")


def rank_of(cfg: dict[str, Any]) -> int:
    """The largest rank an adapter config allocates (``r``, or its ``rank_pattern``'s largest)."""
    pattern = cfg.get("rank_pattern") or {}
    return max([int(cfg["r"]), *(int(v) for v in pattern.values())])


def lora_config(cfg: dict[str, Any], where: str, name: str) -> Any:
    """A ``peft.LoraConfig`` from a checked config dict.

    Raises:
        ManifestError: a key this PEFT's ``LoraConfig`` lacks, a key :func:`check_adapter_config`
            does not know set to another value than this PEFT's default, or values it refuses.
    """
    import dataclasses

    from peft import LoraConfig

    fields = {f.name: f for f in dataclasses.fields(LoraConfig)}
    for key, value in cfg.items():
        if key not in fields:
            raise ManifestError(f"{where}: unknown key for this PEFT's LoraConfig (written by a newer PEFT?)",
                                adapter=name, field=f"adapter_config.{key}")
        if key not in KNOWN_KEYS:
            f = fields[key]
            default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
            if value != default:
                raise ManifestError(f"{where}: {value!r} is not this PEFT's default {default!r} for a key replaybank does "
                                    "not write", adapter=name, field=f"adapter_config.{key}")
    try:
        return LoraConfig(**{**cfg, "inference_mode": True})
    except (TypeError, ValueError) as exc:
        raise ManifestError(f"{where}: LoraConfig refuses it: {exc}", adapter=name, field="adapter_config") from None


def attach(model: Any, weights: Path, config: Any, adapter_name: str, *, state: dict[str, Any] | None = None) -> tuple[Any, bool]:
    """Put the adapter in ``weights`` onto ``model`` as ``adapter_name`` and make it the active one.

    ``model`` is a bare base model (it is wrapped, in place, as PEFT does) or a PEFT model that
    already holds other adapters. The tensors (``state`` when given: read and hashed by the caller,
    so what is loaded is what was checked; else read from ``weights``) are checked against the
    adapter ``config`` describes before they are copied in; on any error the adapter is taken off again.

    Returns:
        ``(peft_model, wrapped)``: ``wrapped`` is True when ``model`` was bare (see :func:`detach`).

    Raises:
        AdapterError: an unreadable weights file, tensors missing, extra, of another shape, not
            floating point or not finite.
    """
    from peft import PeftModel, get_peft_model, get_peft_model_state_dict, set_peft_model_state_dict

    if state is None:
        state = read_tensors(weights)
    wrapped = not isinstance(model, PeftModel)
    if wrapped:
        flags = [p.requires_grad for p in model.parameters()]
        with peft_wrapping():
            peft_model = get_peft_model(model, config, adapter_name=adapter_name)
        peft_model.replaybank_flags = flags  # put back by detach
    else:
        peft_model = model
        with peft_wrapping():
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
