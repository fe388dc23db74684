"""Batched sampled generation for RL rollouts: left padding, KV cache, temperature, top-p, stop ids.

Unlike greedy evaluation, a rollout needs the *behaviour* log-prob of every generated token: the
log-prob the policy gave it when it was sampled, which the learner later divides its own log-prob
by (the importance ratio of a replayed rollout). ``sample`` records it under the
temperature-scaled distribution ``log_softmax(logits / temperature)``, which is what
:func:`replaybank.rl.grpo_lm.token_logprobs` recomputes at learning time, so a rollout used at once
by the policy that generated it has a ratio of exactly 1. With ``top_p < 1`` tokens are drawn from
the nucleus only, while the recorded log-prob stays that of the full tempered distribution (as in
TRL and verl); keep ``top_p=1`` (the default) for exact ratios.

A completion ends with its stop token (included, so the policy learns to stop) or after
``max_new_tokens`` tokens (``truncated``). Rows that stopped are padded and no longer count.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from replaybank.errors import ReplayBankError


@dataclass
class Completions:
    """One completion per prompt row: tokens, behaviour log-probs (aligned), and whether it hit
    ``max_new_tokens`` before a stop token."""

    tokens: list[np.ndarray]
    logprobs: list[np.ndarray]
    truncated: np.ndarray

    @property
    def generated(self) -> int:
        """Tokens generated (the cost of this batch; padding after a stop is not counted)."""
        return int(sum(len(t) for t in self.tokens))


def generator_for(model: Any, seed: int) -> Any:
    """A seeded ``torch.Generator`` on ``model``'s device (``torch.multinomial`` on CUDA refuses a CPU one)."""
    import torch

    return torch.Generator(device=next(model.parameters()).device).manual_seed(seed)


def left_pad(prompts: Sequence[Sequence[int]], pad_id: int) -> tuple[Any, Any]:
    """``(ids, attention_mask)`` as (B, T) int64 tensors, prompts aligned to the right edge.

    >>> ids, mask = left_pad([[5, 6, 7], [8]], pad_id=0)
    >>> ids.tolist(), mask.tolist()
    ([[5, 6, 7], [0, 0, 8]], [[1, 1, 1], [0, 0, 1]])
    """
    import torch

    if not prompts or any(len(p) == 0 for p in prompts):
        raise ReplayBankError("left_pad: every prompt needs at least one token")
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, p in enumerate(prompts):
        ids[row, width - len(p):] = torch.as_tensor(list(p), dtype=torch.long)
        mask[row, width - len(p):] = 1
    return ids, mask


def nucleus(logprobs: Any, top_p: float) -> Any:
    """Log-probs with every token outside the top-``top_p`` nucleus set to ``-inf`` (the most
    likely token always stays)."""
    import torch

    if top_p >= 1.0:
        return logprobs
    sorted_lp, order = logprobs.sort(dim=-1, descending=True)
    before = sorted_lp.exp().cumsum(-1) - sorted_lp.exp()  # mass of the tokens ranked above
    drop_sorted = before >= top_p
    drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
    return logprobs.masked_fill(drop, float("-inf"))


def sample(
    model: Any,
    prompts: Sequence[Sequence[int]],
    *,
    max_new_tokens: int,
    stop_ids: Sequence[int],
    pad_id: int,
    temperature: float = 1.0,
    top_p: float = 1.0,
    generator: Any = None,
    greedy: bool = False,
) -> Completions:
    """Generate one completion per prompt (token id lists), all rows in one batch.

    Args:
        model: a causal LM (transformers or PEFT) taking ``input_ids``, ``attention_mask``,
            ``position_ids``, ``past_key_values``.
        prompts: token ids per row (not padded).
        max_new_tokens: tokens per completion at most.
        stop_ids: tokens that end a completion (e.g. ``<|im_end|>`` and EOS); kept in it.
        pad_id: padding token.
        temperature: sampling temperature (> 0); the behaviour log-probs are under it.
        top_p: nucleus sampling mass (1 = off).
        generator: a ``torch.Generator`` for the draws (randomness is passed in).
        greedy: take the argmax instead of sampling (evaluation); log-probs are then at T=1.

    Raises:
        ReplayBankError: on a non-positive ``max_new_tokens`` or ``temperature`` or a ``top_p``
            outside (0, 1].
    """
    import torch

    if max_new_tokens < 1:
        raise ReplayBankError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    if not greedy and temperature <= 0:
        raise ReplayBankError(f"temperature must be > 0 for sampling (use greedy=True for argmax), got {temperature}")
    if not 0 < top_p <= 1:
        raise ReplayBankError(f"top_p must lie in (0, 1], got {top_p}")
    from replaybank.llm.model import cache_argument, output_cache

    cache_name = cache_argument(model)
    ids, mask = left_pad(prompts, pad_id)
    device = next(model.parameters()).device
    ids, mask = ids.to(device), mask.to(device)
    stops = torch.as_tensor(list(stop_ids), dtype=torch.long, device=device)
    n = len(prompts)
    done = torch.zeros(n, dtype=torch.bool, device=device)
    lengths = torch.zeros(n, dtype=torch.long, device=device)
    out_tokens, out_lps = [], []
    was_training = model.training
    model.eval()
    past, step_ids = None, ids
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    try:
        with torch.no_grad():
            for _ in range(max_new_tokens):
                out = model(input_ids=step_ids, attention_mask=mask, position_ids=positions, **{cache_name: past},
                            use_cache=True, logits_to_keep=1)  # no vocabulary projection of the prompt
                past = output_cache(out)
                logits = out.logits[:, -1].float()
                if greedy:
                    lp = logits.log_softmax(-1)
                    nxt = lp.argmax(-1)
                else:
                    lp = (logits / temperature).log_softmax(-1)
                    nxt = torch.multinomial(nucleus(lp, top_p).exp(), 1, generator=generator).squeeze(1)
                nxt = torch.where(done, torch.full_like(nxt, pad_id), nxt)
                out_tokens.append(nxt)
                out_lps.append(lp.gather(1, nxt[:, None]).squeeze(1))
                lengths += (~done).long()
                done |= torch.isin(nxt, stops)
                if bool(done.all()):
                    break
                step_ids = nxt[:, None]
                mask = torch.cat([mask, torch.ones((n, 1), dtype=mask.dtype, device=device)], dim=1)
                positions = positions[:, -1:] + 1
    finally:
        model.train(was_training)
    toks = torch.stack(out_tokens, 1).cpu().numpy()
    lps = torch.stack(out_lps, 1).float().cpu().numpy()
    lens = lengths.cpu().numpy()
    return Completions(
        tokens=[toks[i, : lens[i]].astype(np.int64) for i in range(n)],
        logprobs=[lps[i, : lens[i]].astype(np.float32) for i in range(n)],
        truncated=~done.cpu().numpy(),
    )
