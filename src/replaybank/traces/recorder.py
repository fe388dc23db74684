"""Record routing traces from Hugging Face transformers MoE models (torch imported lazily).

``RouterHooks`` puts a forward hook on the router of every sparse MoE block: a module with
``gate`` and ``experts`` children (Mixtral, Qwen2/Qwen3-MoE, OLMoE, PhiMoE, ... in transformers
5). The router returns ``(logits, top-k weights, top-k ids)``; the hook keeps the ids and the
weights, so the trace holds the experts the model really ran, after any renormalization. A
router that returns bare logits (older transformers) is read as ``softmax`` then top-k.

``record`` serves requests one at a time with a KV cache: each request is one prefill step
(the prompt) and then one decode step per generated token (greedy), every forward pass one step
of the trace. Dense layers (Qwen-MoE's ``mlp_only_layers``) are not traced; ``Trace.layers``
says which model layers are.

Example (a tiny random Mixtral; needs torch and transformers)::

    from transformers import MixtralConfig, MixtralForCausalLM
    model = MixtralForCausalLM(MixtralConfig(vocab_size=64, hidden_size=32, intermediate_size=64,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        num_local_experts=8, num_experts_per_tok=2))
    trace = record(model, [[1, 5, 9], [2, 7]], decode_steps=4)
    trace.num_steps, trace.experts.shape   # (10, (2, 13, 2))
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import ReplayBankError
from .trace import DECODE, PREFILL, Trace

_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)(?:\.|$)")


def find_routers(model: Any) -> list[tuple[int, Any, int, int]]:
    """``(model layer, router module, num_experts, top_k)`` of every sparse MoE block, by layer.

    Raises:
        ReplayBankError: the model has no MoE block this recorder recognizes.
    """
    found = []
    for name, module in model.named_modules():
        gate = getattr(module, "gate", None)
        if gate is None or not hasattr(module, "experts"):
            continue
        match = _LAYER.search(name)
        weight = getattr(gate, "weight", None)
        experts = getattr(gate, "num_experts", None) or (
            weight.shape[0] if weight is not None else None
        )
        top_k = getattr(gate, "top_k", None) or getattr(module, "top_k", None)
        if match is None or experts is None or top_k is None:
            continue
        found.append((int(match.group(1)), gate, int(experts), int(top_k)))
    if not found:
        raise ReplayBankError(
            f"{type(model).__name__}: no sparse MoE block found (a module with 'gate' and 'experts' "
            "inside 'layers.N'); record needs a transformers MoE model such as Mixtral or Qwen-MoE"
        )
    return sorted(found, key=lambda f: f[0])


class RouterHooks:
    """Forward hooks on every router; ``take()`` returns and clears what the hooks saw since the
    last call: per traced layer, ``(ids, weights)`` of shape ``(tokens, top_k)``.

    Use as a context manager so the hooks are removed however the block ends."""

    def __init__(self, model: Any) -> None:
        self.routers = find_routers(model)
        self._seen: list[list[tuple[np.ndarray, np.ndarray]]] = [[] for _ in self.routers]
        self._handles: list[Any] = []

    def __enter__(self) -> RouterHooks:
        for i, (_, router, _, top_k) in enumerate(self.routers):
            self._handles.append(router.register_forward_hook(self._hook(i, top_k)))
        return self

    def __exit__(self, *exc: object) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    def _hook(self, i: int, top_k: int) -> Any:
        import torch

        def hook(module: Any, inputs: Any, output: Any) -> None:
            if isinstance(output, tuple) and len(output) == 3:
                _, weights, ids = output
            else:  # bare logits
                probs = torch.softmax(output.float(), dim=-1)
                weights, ids = torch.topk(probs, top_k, dim=-1)
            ids = ids.reshape(-1, ids.shape[-1]).detach().cpu().numpy()
            weights = weights.reshape(-1, weights.shape[-1]).detach().float().cpu().numpy()
            self._seen[i].append((ids, weights))

        return hook

    def take(self) -> list[tuple[np.ndarray, np.ndarray]]:
        out = []
        for layer, seen in enumerate(self._seen):
            if len(seen) != 1:
                raise ReplayBankError(
                    f"model layer {self.routers[layer][0]}: the router ran {len(seen)} times in one "
                    "forward pass (expected once)"
                )
            out.append(seen[0])
            seen.clear()
        return out


def _cache_of(out: Any) -> Any:
    cache = getattr(out, "cache", None)
    return cache if cache is not None else out.past_key_values


def record(
    model: Any,
    prompts: Sequence[Sequence[int]],
    *,
    decode_steps: int = 0,
    stop_at_eos: bool = False,
    request_ids: Sequence[int] | None = None,
    meta: Mapping[str, str] | None = None,
    prefill_chunk: int | None = None,
    continuations: Sequence[Sequence[int]] | None = None,
) -> Trace:
    """The routing trace of serving ``prompts`` (token id lists) one after another: one prefill step
    each (or one per ``prefill_chunk`` tokens: chunked prefill), then ``decode_steps`` greedy decode
    steps, each feeding back the token the previous step chose (fewer if ``stop_at_eos`` and the
    model chooses its EOS token). With ``continuations``, request ``r``'s decode steps feed
    ``continuations[r]`` instead (teacher forcing: the routing of the text itself, one token per
    step; ``decode_steps`` is then ignored).

    Raises:
        ReplayBankError: an empty prompt, ``decode_steps < 0``, ``prefill_chunk < 1``, a count of
            continuations other than the prompts', or no MoE block in ``model``.
    """
    import torch

    if decode_steps < 0:
        raise ReplayBankError(f"decode_steps = {decode_steps}: expected >= 0")
    if prefill_chunk is not None and prefill_chunk < 1:
        raise ReplayBankError(f"prefill_chunk = {prefill_chunk}: expected >= 1 (or None)")
    if continuations is not None and len(continuations) != len(prompts):
        raise ReplayBankError(
            f"continuations: {len(continuations)} for {len(prompts)} prompts (one per prompt)"
        )
    ids = list(range(len(prompts))) if request_ids is None else list(request_ids)
    if len(ids) != len(prompts):
        raise ReplayBankError(f"request_ids: {len(ids)} ids for {len(prompts)} prompts")
    # transformers 5.x renamed past_key_values to cache (the old name warns, then goes)
    cache_arg = (
        "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    )
    eos = getattr(model.config, "eos_token_id", None)
    eos_ids = set(eos if isinstance(eos, list) else [] if eos is None else [eos])
    steps: list[tuple[int, int, int, int]] = []  # request, kind, start, tokens
    rows: list[list[tuple[np.ndarray, np.ndarray]]] = []
    was_training = model.training
    model.eval()
    try:
        with RouterHooks(model) as hooks, torch.no_grad():
            for r, (rid, prompt) in enumerate(zip(ids, prompts)):
                if len(prompt) == 0:
                    raise ReplayBankError(f"prompt of request {rid} is empty")
                device = next(model.parameters()).device
                chunk = prefill_chunk or len(prompt)
                out: Any = None
                for first in range(0, len(prompt), chunk):
                    part = list(prompt[first : first + chunk])
                    x = torch.tensor([part], dtype=torch.long, device=device)
                    cached: dict[str, Any] = {} if out is None else {cache_arg: _cache_of(out)}
                    out = model(input_ids=x, use_cache=True, **cached)
                    steps.append((rid, PREFILL, first, len(part)))
                    rows.append(hooks.take())
                position = len(prompt)
                forced = None if continuations is None else list(continuations[r])
                for d in range(decode_steps if forced is None else len(forced)):
                    token = int(out.logits[0, -1].argmax()) if forced is None else forced[d]
                    if forced is None and stop_at_eos and token in eos_ids:
                        break
                    x = torch.tensor([[token]], dtype=torch.long, device=device)
                    out = model(input_ids=x, use_cache=True, **{cache_arg: _cache_of(out)})
                    steps.append((rid, DECODE, position, 1))
                    rows.append(hooks.take())
                    position += 1
            routers = hooks.routers
    finally:
        model.train(was_training)
    experts = np.stack([np.concatenate([r[i][0] for r in rows]) for i in range(len(routers))])
    gates = np.stack([np.concatenate([r[i][1] for r in rows]) for i in range(len(routers))])
    return Trace.build(
        request=[s[0] for s in steps],
        kind=[s[1] for s in steps],
        start=[s[2] for s in steps],
        tokens=[s[3] for s in steps],
        experts=experts,
        gates=gates,
        num_experts=[r[2] for r in routers],
        layers=[r[0] for r in routers],
        meta={"source": "recorded", "model": type(model).__name__, **(meta or {})},
    )
