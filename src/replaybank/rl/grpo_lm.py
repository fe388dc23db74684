"""GRPO pieces for a causal LM with LoRA: the policy, per-token log-probs, the clipped loss, the KL.

The learner scores a batch of rollouts (whole groups from a ``RolloutBuffer``) by one forward pass
over ``prompt + completion`` rows, left padded so that every completion ends at the right edge and
only the last ``max completion + 1`` positions go through the LM head (the vocabulary projection
is a fifth of SmolLM2-135M's compute per token). The loss is GRPO's token-level clipped surrogate
(DAPO-style: averaged over all completion tokens of the batch, not per sequence first)::

    rho_t = exp(log pi(y_t) - log mu(y_t))          mu = the behaviour policy, recorded at sampling
    loss  = -mean_t min(rho_t A, clip(rho_t, 1 - eps, 1 + eps) A) + beta * mean_t KL_t

with ``A`` the group-relative advantage of the rollout, and ``KL_t`` the project's one KL term
(:func:`replaybank.llm.train.kl.kl_to_base`: exact ``T**2 KL(p_base || p_policy)`` over the whole
vocabulary at each completion position, both at the sampling temperature ``T``, the base being the
same model with its adapter disabled), off unless ``beta > 0``. It is the same term the rehearsal
job anchors its rehearsal rows with; being exact, it needs no sampled estimator (such as k3).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import numpy as np

from replaybank.rl.rollouts import RolloutBatch, importance_ratio
from replaybank.rl.sampling import left_pad


def add_lora(model: Any, rank: int, alpha: int, targets: Sequence[str], last_layers: int, seed: int) -> Any:
    """Wrap ``model`` in fresh LoRA adapters on ``targets`` of its last ``last_layers`` decoder
    layers (0 = all). Adapting only the top layers also stops backpropagation there, which is the
    main saving on a CPU. The adapter init is seeded by ``seed`` without touching torch's global RNG.
    """
    import torch
    from peft import LoraConfig, get_peft_model

    from replaybank.llm.model import check_target_modules, peft_wrapping

    check_target_modules(model, list(targets))
    n = int(model.config.num_hidden_layers)
    layers = list(range(max(0, n - last_layers), n)) if last_layers else None
    config = LoraConfig(r=rank, lora_alpha=alpha, lora_dropout=0.0, target_modules=list(targets), bias="none",
                        layers_to_transform=layers, task_type="CAUSAL_LM")
    with torch.random.fork_rng():
        torch.manual_seed(seed)  # PEFT draws its init from the global generator
        with peft_wrapping():
            return get_peft_model(model, config)


def lora_parameters(model: Any) -> list[tuple[str, Any]]:
    """The trainable (adapter) parameters, by name, in a fixed order."""
    return [(n, p) for n, p in model.named_parameters() if p.requires_grad]


def make_actor(policy: Any) -> Any:
    """A frozen copy of the policy for a generation thread (async mode): it samples with the
    weights of the last sync while the learner updates the policy's."""
    actor = copy.deepcopy(policy)
    for p in actor.parameters():
        p.requires_grad_(False)
    return actor.eval()


def sync_actor(actor: Any, policy: Any) -> None:
    """Copy the policy's adapter weights into the actor (the base weights never change)."""
    import torch

    src = dict(lora_parameters(policy))
    with torch.no_grad():
        for name, p in actor.named_parameters():
            if name in src:
                p.copy_(src[name])


def completion_logits(model: Any, prompts: Sequence[Sequence[int]], completions: Sequence[np.ndarray],
                      pad_id: int) -> tuple[Any, Any]:
    """Logits that predict every completion token, ``(tokens, vocab)``, flat and row-major (aligned
    with ``RolloutBatch.tokens.values``), and those tokens; carries gradients when the model does."""
    import torch

    rows = [list(p) + [int(t) for t in c] for p, c in zip(prompts, completions)]
    ids, mask = left_pad(rows, pad_id)
    device = next(model.parameters()).device
    ids, mask = ids.to(device), mask.to(device)
    lengths = torch.as_tensor([len(c) for c in completions], device=device)
    keep = int(lengths.max()) + 1
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    logits = model(input_ids=ids, attention_mask=mask, position_ids=positions, logits_to_keep=keep).logits
    targets = ids[:, -keep + 1:]  # position j predicts token j + 1; completions are right-aligned
    col = torch.arange(keep - 1, device=device)[None]
    in_completion = col >= (keep - 1 - lengths)[:, None]
    return logits[:, :-1][in_completion], targets[in_completion]


def _picked_logprobs(logits: Any, targets: Any, temperature: float) -> Any:
    logp = (logits.float() / temperature).log_softmax(-1)
    return logp.gather(1, targets[:, None]).squeeze(1)


def token_logprobs(model: Any, prompts: Sequence[Sequence[int]], completions: Sequence[np.ndarray], pad_id: int,
                   temperature: float) -> Any:
    """Log-probs of every completion token under ``model`` at ``temperature``, flat and row-major
    (aligned with ``RolloutBatch.tokens.values``); carries gradients when the model does."""
    logits, targets = completion_logits(model, prompts, completions, pad_id)
    return _picked_logprobs(logits, targets, temperature)


def kl_to_base(model: Any, prompts: Sequence[Sequence[int]], completions: Sequence[np.ndarray], pad_id: int,
               temperature: float, logits: Any) -> Any:
    """Mean per completion token of the project's KL term (:mod:`replaybank.llm.train.kl`) between
    the base model (this model with its adapter disabled, no second copy) and ``logits``, the
    policy's :func:`completion_logits` of the same rows."""
    import torch

    from replaybank.llm.train.kl import kl_to_base as kl_term

    with torch.no_grad(), model.disable_adapter():
        base, _ = completion_logits(model, prompts, completions, pad_id)
    return kl_term(logits, base, temperature) / max(int(logits.shape[0]), 1)


def grpo_loss(model: Any, batch: RolloutBatch, prompts: Sequence[Sequence[int]], pad_id: int, temperature: float,
              clip: float, kl_coef: float = 0.0) -> tuple[Any, dict[str, float]]:
    """The token-level clipped GRPO loss on ``batch`` (``prompts[i]`` is row ``i``'s prompt).

    Returns:
        ``(loss, stats)``; stats: ``ratio_mean``, ``clip_frac`` (share of tokens whose ratio is
        outside ``1 +- clip``), ``kl`` (0 when off) and ``tokens``.
    """
    import torch

    completions = [batch.tokens[i] for i in range(len(batch))]
    logits, targets = completion_logits(model, prompts, completions, pad_id)
    current = _picked_logprobs(logits, targets, temperature)
    ratio = importance_ratio(current, batch.logprobs.values)
    adv = torch.as_tensor(np.repeat(batch.advantage, batch.tokens.lengths), device=current.device)
    surrogate = torch.minimum(ratio * adv, ratio.clamp(1 - clip, 1 + clip) * adv)
    loss = -surrogate.mean()
    kl = torch.zeros(())
    if kl_coef > 0:
        kl = kl_to_base(model, prompts, completions, pad_id, temperature, logits)
        loss = loss + kl_coef * kl
    with torch.no_grad():
        stats = {
            "ratio_mean": float(ratio.mean()),
            "clip_frac": float(((ratio - 1).abs() > clip).float().mean()),
            "kl": float(kl),
            "tokens": int(len(current)),
        }
    return loss, stats
