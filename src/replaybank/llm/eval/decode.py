"""Batched greedy generation for chat models, stopped at the end of the assistant turn.

Prompts are rendered with the tokenizer's chat template (generation prompt added), sorted by
length and left-padded into batches, decoded greedily with a KV cache (or sampled with a seeded
generator, for Magpie-style prompt writing), and stopped per row at the end-of-turn marker
(``<|im_end|>`` for SmolLM2) or EOS. A row that stopped leaves the batch (its KV-cache rows are
dropped), and the batch ends when every row has stopped. Answers are the same as one prompt at a
time (tested), only faster.

``precision`` chooses the arithmetic of generation: ``fp32``, ``bf16`` (autocast: the matmuls in
bfloat16, the weights unchanged) or ``auto`` (bf16 on a CPU with native bfloat16 units, AMX or
AVX512-BF16, where a 64-prompt prefill of SmolLM2-135M ran 5x faster than fp32 on this project's
machine; fp32 elsewhere: on a GPU the model's own dtype decides). Greedy answers in bf16 are not
bit-identical to fp32 ones; compare only answers generated at the same precision.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from replaybank.errors import ReplayBankError
from replaybank.llm.data.rows import render_chat
from replaybank.llm.runtime import (
    PRECISIONS,
    FrozenBf16,
    Precision,
    PrecisionError,
    device_type,
    resolve_precision,
)

__all__ = ["PRECISIONS", "Generation", "GenerationError", "Precision", "generate", "generate_detailed",
           "resolve_precision"]

END_OF_TURN = "<|im_end|>"


class GenerationError(ReplayBankError):
    """Generation cannot run with these arguments."""


@dataclass(frozen=True)
class Generation:
    """One generated answer.

    Attributes:
        text: the assistant text, special tokens removed, surrounding whitespace stripped.
        truncated: True when the row hit ``max_new_tokens`` before an end-of-turn or EOS token.
        n_tokens: generated tokens, the stop token included.
    """

    text: str
    truncated: bool
    n_tokens: int


def stop_token_ids(tokenizer: Any) -> list[int]:
    """Token ids that end an assistant turn: the end-of-turn marker (when in the vocabulary) and EOS."""
    ids: list[int] = []
    unk = getattr(tokenizer, "unk_token_id", None)
    vocab = tokenizer.get_vocab() if hasattr(tokenizer, "get_vocab") else {}
    if END_OF_TURN in vocab:
        ids.append(int(vocab[END_OF_TURN]))
    eos = getattr(tokenizer, "eos_token_id", None)
    if eos is not None and eos != unk and int(eos) not in ids:
        ids.append(int(eos))
    if not ids:
        raise GenerationError("the tokenizer has neither an end-of-turn token nor an EOS token to stop at")
    return ids


def render_prompt(tokenizer: Any, prompt: str) -> str:
    """A user prompt in the chat template, ending with the assistant header."""
    return render_chat(tokenizer, [{"role": "user", "content": prompt}], add_generation_prompt=True)


def user_turn_prefix(tokenizer: Any) -> str:
    """The chat template's text up to where a user message begins (Magpie-style prompt writing:
    the model continues it with a request of its own, up to its end-of-turn token)."""
    marker = "\x00REPLAYBANK-USER\x00"
    text = render_chat(tokenizer, [{"role": "user", "content": marker}], add_generation_prompt=False)
    if marker not in text:
        raise GenerationError("the chat template drops the user message; cannot find where a user turn starts")
    return text[: text.index(marker)]


def generate_detailed(
    model: Any,
    tokenizer: Any,
    prompts: Sequence[str],
    *,
    max_new_tokens: int = 64,
    batch_size: int = 16,
    desc: str | None = None,
    rendered: bool = False,
    temperature: float = 0.0,
    seed: int = 0,
    stop_when: Callable[[list[int]], bool] | None = None,
    precision: Precision = "fp32",
) -> list[Generation]:
    """Greedy answers to ``prompts`` (one user turn each), in the order given.

    Args:
        model: a causal LM (a PEFT model generates with its adapter on).
        tokenizer: its tokenizer.
        prompts: user messages.
        max_new_tokens: the most tokens generated per answer.
        batch_size: rows per batch (batches hold prompts of similar length).
        desc: label of a tqdm progress bar over prompts; no bar when None.
        rendered: the prompts are already text in the chat format (generation continues them as
            they are), e.g. the start of a user turn for Magpie-style prompt writing.
        temperature: 0 for greedy decoding; above 0, tokens are sampled from the softmax at this
            temperature with a ``torch.Generator`` seeded with ``seed``.
        seed: seed of the sampler (ignored when greedy).
        stop_when: an extra per-row stop rule, called with the row's generated token ids after
            each new token; the row stops (not truncated) when it returns True. Used to stop at
            the end of a tool call (``>>``) instead of the end of the turn.
        precision: ``fp32``, ``bf16`` or ``auto`` (see :func:`resolve_precision`).

    Returns:
        One :class:`Generation` per prompt.

    Raises:
        GenerationError: on ``max_new_tokens < 1``, ``batch_size < 1``, ``temperature < 0`` or an
            unknown ``precision``.
    """
    import torch

    if temperature < 0:
        raise GenerationError(f"temperature must be >= 0, got {temperature}")
    if max_new_tokens < 1:
        raise GenerationError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    if batch_size < 1:
        raise GenerationError(f"batch_size must be >= 1, got {batch_size}")
    if not prompts:
        return []
    device = next(model.parameters()).device
    try:
        resolve_precision(precision, device.type)
    except PrecisionError as exc:
        raise GenerationError(str(exc)) from None
    autocast = FrozenBf16(model, precision)  # the base's frozen weights cast once, not at every token
    stops = stop_token_ids(tokenizer)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else stops[0]
    texts = list(prompts) if rendered else [render_prompt(tokenizer, p) for p in prompts]
    encoded = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
    order = sorted(range(len(prompts)), key=lambda i: len(encoded[i]))
    out: list[Generation | None] = [None] * len(prompts)
    sampler = torch.Generator(device=device).manual_seed(seed) if temperature > 0 else None
    was_training = model.training
    model.eval()
    bar = _progress(len(prompts), desc)
    try:
        with torch.no_grad(), autocast:
            for start in range(0, len(order), batch_size):
                idx = order[start : start + batch_size]
                width = max(len(encoded[i]) for i in idx)
                ids = torch.full((len(idx), width), pad_id, dtype=torch.long)
                att = torch.zeros((len(idx), width), dtype=torch.long)
                for r, i in enumerate(idx):
                    row = encoded[i]
                    ids[r, width - len(row) :] = torch.tensor(row, dtype=torch.long)
                    att[r, width - len(row) :] = 1
                halted: set[int] = set()
                new = _decode(model, ids.to(device), att.to(device), max_new_tokens, stops, pad_id, temperature,
                              sampler, stop_when, halted)
                for r, i in enumerate(idx):
                    out[i] = _finish(tokenizer, new[r], stops, r in halted)
                if bar is not None:
                    bar.update(len(idx))
    finally:
        model.train(was_training)
        if bar is not None:
            bar.close()
    return [g for g in out if g is not None]


def precision_key(precision: Precision, model: Any) -> dict[str, str]:
    """A cache key's entry for answers generated at ``precision`` by ``model``: empty for fp32
    (keys written before precision existed stay valid), else ``{"precision": "bf16"}``."""
    resolved = resolve_precision(precision, device_type(model))
    return {} if resolved == "fp32" else {"precision": resolved}


def generate(
    model: Any,
    tokenizer: Any,
    prompts: Sequence[str],
    *,
    max_new_tokens: int = 64,
    batch_size: int = 16,
    desc: str | None = None,
    rendered: bool = False,
    temperature: float = 0.0,
    seed: int = 0,
    precision: Precision = "fp32",
) -> list[str]:
    """The texts of :func:`generate_detailed` (same arguments)."""
    gens = generate_detailed(
        model, tokenizer, prompts, max_new_tokens=max_new_tokens, batch_size=batch_size, desc=desc,
        rendered=rendered, temperature=temperature, seed=seed, precision=precision,
    )
    return [g.text for g in gens]


def _decode(
    model: Any, ids: Any, att: Any, max_new_tokens: int, stops: list[int], pad_id: int,
    temperature: float, sampler: Any, stop_when: Callable[[list[int]], bool] | None = None,
    halted: set[int] | None = None,
) -> list[list[int]]:
    # A plain KV-cached decoding loop: no sampling settings are inherited from the model's
    # generation_config. Rows that reached a stop token leave the batch (their cache rows are
    # dropped), so the rest decode at the cost of the rows still running; the loop ends when
    # every row has stopped.
    import torch

    stop = torch.tensor(stops, device=ids.device)
    out: list[list[int]] = [[] for _ in range(ids.shape[0])]
    alive = torch.arange(ids.shape[0], device=ids.device)  # original row of each running row
    done = torch.zeros(ids.shape[0], dtype=torch.bool, device=ids.device)
    step_ids, step_pos = ids, (att.cumsum(-1) - 1).clamp(min=0)
    from replaybank.llm.model import cache_argument, output_cache

    cache, cache_name = None, cache_argument(model)
    for _ in range(max_new_tokens):
        res = model(
            input_ids=step_ids, attention_mask=att, position_ids=step_pos, **{cache_name: cache},
            use_cache=True, logits_to_keep=1,
        )
        cache = output_cache(res)
        logits = res.logits[:, -1].float()
        if temperature > 0:
            nxt = torch.multinomial(torch.softmax(logits / temperature, -1), 1, generator=sampler).squeeze(1)
        else:
            nxt = logits.argmax(-1)
        by_rule: list[bool] = []
        for row, tok, finished in zip(alive.tolist(), nxt.tolist(), done.tolist(), strict=True):
            if not finished:
                out[row].append(int(tok))
            rule = stop_when is not None and not finished and stop_when(out[row])
            if rule and halted is not None:
                halted.add(row)
            by_rule.append(bool(rule))
        done = done | torch.isin(nxt, stop)
        if stop_when is not None:
            done = done | torch.tensor(by_rule, dtype=torch.bool, device=done.device)
        if bool(done.all()):
            break
        step_ids = torch.where(done, torch.full_like(nxt, pad_id), nxt)[:, None]
        step_pos = step_pos[:, -1:] + 1
        att = torch.cat([att, torch.ones_like(att[:, :1])], dim=1)
        if bool(done.any()) and hasattr(cache, "batch_select_indices"):
            keep = (~done).nonzero().squeeze(1)
            cache.batch_select_indices(keep)
            alive, done, att, step_ids, step_pos = alive[keep], done[keep], att[keep], step_ids[keep], step_pos[keep]
    return out


def _finish(tokenizer: Any, new: list[int], stops: list[int], halted: bool = False) -> Generation:
    stop_at = next((k for k, t in enumerate(new) if t in stops), None)
    body = new if stop_at is None else new[:stop_at]
    text = tokenizer.decode(body, skip_special_tokens=True).strip()
    n = len(new) if stop_at is None else stop_at + 1
    return Generation(text=text, truncated=stop_at is None and not halted, n_tokens=n)


def model_fingerprint(model: Any) -> str:
    """SHA-256 of a model's config and a strided sample of every base parameter (cheap, content-based).

    LoRA weights are left out and PEFT's ``base_layer`` names mapped back, so a PEFT model has the
    fingerprint of its base model (the one ``disable_adapter()`` runs).
    """
    import torch

    h = hashlib.sha256()
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    config = getattr(base, "config", None)
    if config is not None:
        h.update(config.to_json_string(use_diff=False).encode())
    with torch.no_grad():
        for name, p in base.named_parameters():
            if "lora_" in name:
                continue
            flat = p.detach().reshape(-1)
            sample = flat[:: max(1, flat.numel() // 4096)].float().cpu().numpy()
            h.update(f"{name.replace('.base_layer', '')}:{tuple(p.shape)}".encode())
            h.update(sample.tobytes())
    return h.hexdigest()


def base_model_context(model: Any) -> Any:
    """``model.disable_adapter()`` for a PEFT model (its base weights, no copy); else a no-op."""
    import contextlib

    return model.disable_adapter() if hasattr(model, "disable_adapter") else contextlib.nullcontext()


def _progress(total: int, desc: str | None) -> Any:
    if desc is None:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit="prompt", leave=False)
