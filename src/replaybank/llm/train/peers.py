"""Peer methods: other ways to fine-tune that forget less, each run through PEFT's own code.

An arm whose recipe sets ``peer`` trains its adapter with one of these in place of plain LoRA,
on the same rows, steps and optimizer settings (docs/llm.md, "Peer methods"):

* ``osf``: orthogonal subspace fine-tuning (``peft.OSFConfig``): the top singular directions of
  every target weight are frozen; only the rest train, with gradients projected off the frozen ones.
* ``corda``: LoRA initialised by CorDA's knowledge-preserving mode (``init_lora_weights="corda"``,
  ``CordaConfig(corda_method="kpm")``, ``peft.tuners.lora.corda.preprocess_corda``) over the
  covariance of general prompts (the self-synthesis prompt pool).
* ``intruder``: plain LoRA, then after every generation's training its intruder dimensions are
  reduced (``peft.tuners.lora.intruders.reduce_intruder_dimension``) before it is scored.
* ``attn-lowrank``: plain LoRA on the attention projections only, at rank :data:`LOWRANK_RANK`
  ("LoRA learns less and forgets less").

The job calls :func:`peer_model` where it would call :func:`~.lora.add_lora`, :meth:`PeerHooks.after_training`
after each generation's training, and :meth:`PeerHooks.saved` for what goes to the adapter folder.
A PEFT without the call a peer needs is found by :func:`missing_library` when the config is checked.

Example:
    >>> sorted(PEERS)
    ['attn-lowrank', 'corda', 'intruder', 'osf']
    >>> missing_library("osf") is None  # the installed PEFT has OSFConfig
    True
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from replaybank.llm.config import Training
from replaybank.llm.config.schema import PeerName

__all__ = [
    "ATTENTION", "CORDA_PROMPTS", "LOWRANK_RANK", "PEERS", "PeerHooks", "calibration_ids", "missing_library", "peer_calibration",
    "peer_model", "peer_training",
]

#: what each peer needs of PEFT: (module, attribute, the release that added it)
PEERS: dict[str, tuple[str, str, str]] = {
    "osf": ("peft", "OSFConfig", "0.18"),
    "corda": ("peft.tuners.lora.corda", "preprocess_corda", "0.15"),
    "intruder": ("peft.tuners.lora.intruders", "reduce_intruder_dimension", "0.19"),
    "attn-lowrank": ("peft", "LoraConfig", "0.4"),
}
#: the attention projections ``attn-lowrank`` adapts (Llama names)
ATTENTION = ("q_proj", "k_proj", "v_proj", "o_proj")
#: ``attn-lowrank``'s LoRA rank; its alpha keeps ``[training]`` lora_alpha / lora_rank
LOWRANK_RANK = 4
#: general prompts whose activations make CorDA's covariance (one forward pass each)
CORDA_PROMPTS = 128
#: the adapter the intruder reduction writes before its weights are copied back into ``default``
REDUCED = "intruder_reduced"


def missing_library(peer: str) -> str | None:
    """Why ``peer`` cannot run with the installed PEFT (None when it can).

    Example:
        >>> missing_library("intruder") is None
        True
    """
    import importlib

    module, attr, since = PEERS[peer]
    try:
        import peft

        version = peft.__version__
        found = getattr(importlib.import_module(module), attr, None)
    except ImportError as exc:
        return f"needs PEFT {since} or newer with {module}.{attr} ({exc}); install the llm extra"
    if found is None:
        return f"needs {module}.{attr}, added in PEFT {since} (installed: PEFT {version}); upgrade peft"
    return None


def peer_model(base_model: Any, cfg: Training, peer: PeerName, calibration: Sequence[Any] = ()) -> Any:
    """``base_model`` wrapped with the adapter of ``peer``, seeded by ``cfg.seed`` as :func:`~.lora.add_lora` is.

    Args:
        base_model: the model to wrap (``corda`` rewrites its target weights into residuals; the
            caller restores them, see :func:`~.adapter.fresh_adapter`).
        cfg: the ``[training]`` section: targets, rank, alpha, dropout, seed.
        peer: one of :data:`PEERS`.
        calibration: ``corda`` only: token-id tensors of shape ``(1, n)``, run one at a time
            through ``base_model`` to build each target's input covariance.

    Raises:
        ModelError: a target module the model does not have.
        ValueError: ``corda`` without calibration prompts.
    """
    import torch
    from peft import LoraConfig, get_peft_model

    from replaybank.llm.model import (
        check_target_modules,
        enable_gradient_checkpointing,
        peft_wrapping,
    )
    from replaybank.llm.train.lora import add_lora

    if peer == "attn-lowrank":
        alpha = max(1, round(cfg.lora_alpha * LOWRANK_RANK / cfg.lora_rank))  # the naive arm's scaling alpha / r
        return add_lora(base_model, replace(cfg, lora_rank=LOWRANK_RANK, lora_alpha=alpha, lora_target_modules=list(ATTENTION)))
    if peer == "intruder":
        return add_lora(base_model, cfg)
    check_target_modules(base_model, list(cfg.lora_target_modules))
    if cfg.gradient_checkpointing:
        enable_gradient_checkpointing(base_model)
    config: Any
    if peer == "osf":
        from peft import OSFConfig

        config = OSFConfig(target_modules=list(cfg.lora_target_modules), task_type="CAUSAL_LM")
    elif peer == "corda":
        from peft.tuners.lora.config import CordaConfig
        from peft.tuners.lora.corda import preprocess_corda

        if not calibration:
            raise ValueError("peer corda needs calibration prompts for its covariance; got none")
        config = LoraConfig(
            r=cfg.lora_rank, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout,
            target_modules=list(cfg.lora_target_modules), bias="none", task_type="CAUSAL_LM",
            init_lora_weights="corda", corda_config=CordaConfig(corda_method="kpm"),
        )

        def run_model() -> None:
            for ids in calibration:
                base_model(input_ids=ids.to(base_model.device))

        was_training = base_model.training
        preprocess_corda(base_model, config, run_model=run_model)
        base_model.train(was_training)
    else:
        raise ValueError(f"unknown peer {peer!r}; expected one of {', '.join(PEERS)}")
    torch.manual_seed(cfg.seed)  # as add_lora: PEFT draws any random init from torch's global generator
    with peft_wrapping():
        return get_peft_model(base_model, config)


def peer_training(peer: PeerName, cfg: Training) -> Training:
    """The ``[training]`` section ``peer`` trains with: ``osf`` in fp32 arithmetic, every other as given.

    OSF's gradient projection (PEFT's hooks on its ``U_low`` and ``V_low``) runs inside the bf16
    autocast of the training step and hands back bf16 gradients for fp32 parameters, which torch
    refuses; without autocast it runs as PEFT means it to.

    Example:
        >>> peer_training("osf", Training(precision="auto")).precision, peer_training("corda", Training()).precision
        ('fp32', 'auto')
    """
    return replace(cfg, precision="fp32") if peer == "osf" else cfg


def peer_calibration(peer: PeerName, tokenizer: Any, prompts: str, *, seed: int, exclude: Sequence[str] = ()) -> list[Any]:
    """CorDA's calibration prompts (:func:`calibration_ids`) from the prompt pool ``prompts``
    (``[data] self_prompts``: ``builtin`` is the shipped self-synthesis pool), leaving out any that
    overlaps a prompt of ``exclude`` (the evaluation suite); empty for every other peer."""
    if peer != "corda":
        return []
    from replaybank.llm.data.selfsynth import load_prompt_pool
    from replaybank.llm.eval.suite import overlap_key, overlaps

    pool, _ = load_prompt_pool(prompts)
    held = [overlap_key(e) for e in exclude if overlap_key(e)]
    general = [p for p in pool if not any(overlaps(overlap_key(p), e) for e in held)]
    return calibration_ids(tokenizer, general, seed=seed)


def calibration_ids(tokenizer: Any, prompts: Sequence[str], *, seed: int, n: int = CORDA_PROMPTS,
                    max_tokens: int = 256) -> list[Any]:
    """Up to ``n`` of ``prompts``, drawn with ``seed``, rendered as user turns of the chat template
    with the generation prompt, as ``(1, tokens)`` tensors of at most ``max_tokens``."""
    import numpy as np
    import torch

    picked = np.random.default_rng(seed).permutation(len(prompts))[:n]
    out = []
    for i in sorted(picked.tolist()):
        text = tokenizer.apply_chat_template([{"role": "user", "content": prompts[i]}], tokenize=False,
                                             add_generation_prompt=True) if tokenizer.chat_template else prompts[i]
        ids = tokenizer(text, add_special_tokens=False)["input_ids"][:max_tokens]
        out.append(torch.tensor([ids], dtype=torch.long))
    return out


@dataclass
class PeerHooks:
    """What the job does for a peer beyond building its model: post-process after training, and
    what the adapter folder holds.

    Attributes:
        peer: the arm's peer (``none``: plain LoRA, every hook a no-op).
        initial: ``corda``: the adapter's initial A and B by parameter name; the folder holds the
            trained adapter minus this initial one, a plain LoRA of twice the rank on the
            untouched base (PEFT's conversion for CorDA, ``subtract_mutated_init``).
    """

    peer: PeerName
    initial: dict[str, Any] | None = None

    @classmethod
    def of(cls, peer: PeerName, model: Any) -> PeerHooks:
        """The hooks of ``peer`` for the freshly wrapped ``model``."""
        if peer != "corda":
            return cls(peer)
        return cls(peer, {n: p.detach().clone() for n, p in model.named_parameters() if "lora_" in n})

    def after_training(self, model: Any, log: Callable[[str], None] = print) -> bool:
        """Post-process ``model``'s adapter once a generation has trained; return whether it changed.

        ``intruder``: :func:`peft.tuners.lora.intruders.reduce_intruder_dimension` (its default
        ``top_k``, ``threshold_epsilon``, ``mitigation_lambda``) writes a reduced copy of
        ``default``; its weights are copied back into ``default`` and the copy deleted, so the
        adapter trained on, saved and scored is the reduced one.
        """
        if self.peer != "intruder":
            return False
        import torch
        from peft.tuners.lora.intruders import reduce_intruder_dimension

        counts: list[str] = []
        reduce_intruder_dimension(model, old_adapter_name="default", new_adapter_name=REDUCED, logging_sink=counts.append)
        with torch.no_grad():
            params = dict(model.named_parameters())
            for name, p in params.items():
                if f".{REDUCED}." in name:
                    params[name.replace(f".{REDUCED}.", ".default.")].copy_(p)
        model.set_adapter("default")
        model.delete_adapter(REDUCED)
        reduced = sum(1 for c in counts if ": Intruders:" in c)
        log(f"intruder reduction: {reduced} of {sum(1 for c in counts if ': ' in c and 'Enabling' not in c)} layers had intruders")
        return True

    def saved(self, model: Any) -> tuple[dict[str, Any], dict[str, Any]] | None:
        """``corda``: the adapter's tensors and PEFT config as a plain LoRA on the untouched base
        (None for every other peer: the adapter is saved as it is).

        The trained CorDA adapter applies ``s B A`` to the residual weight ``W - s B0 A0``, so on
        the untouched ``W`` it is ``s (B A - B0 A0)``: the rank-2r LoRA ``B' = [B, -B0]``,
        ``A' = [A; A0]`` with alpha doubled to keep ``s``.
        """
        if self.initial is None:
            return None
        import torch
        from peft import get_peft_model_state_dict

        from replaybank.llm.train.peft_files import peft_config_dict

        state = get_peft_model_state_dict(model)
        initial = {k.replace(".default.", "."): v for k, v in self.initial.items()}
        out = {}
        for key, value in state.items():
            start = initial[key]
            joined = torch.cat([value, start], 0) if "lora_A" in key else torch.cat([value, -start], 1)
            out[key] = joined.detach()
        config = peft_config_dict(model)
        config.update(r=2 * config["r"], lora_alpha=2 * config["lora_alpha"], init_lora_weights=True, corda_config=None)
        return out, config
