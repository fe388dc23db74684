"""GRPO on short arithmetic with and without rollout replay: tokens generated to reach a reward.

Task: the prompt is two digits ``a, b < operand_limit`` (default 5); the completion must be the
decimal digits of ``a + b`` followed by ``EOS`` (``3 + 4`` -> ``7 EOS``; at most 3 tokens are
generated). The reward is verifiable: the share of target tokens produced correctly before the
first mistake (1.0 = the exact answer). The policy is a tiny
autoregressive torch model (prompt, previous token and position in, next-token logits out), small
enough that generation and training run in milliseconds on a CPU.

Both arms run the same loop with the same batch of ``batch_groups`` groups of ``group_size``
completions per update; they differ only in where the batch comes from:

* ``no replay``: every update generates ``batch_groups`` fresh groups and uses them once
  (``max_staleness=0``, ``max_reuse=1``): on-policy GRPO;
* ``replay``: every update generates only ``fresh_groups`` groups; the rest of the batch is drawn
  from a ``RolloutBuffer`` (staleness bound, reuse limit, ``min_fresh`` share of the newest), and the
  clipped-ratio loss corrects for the policy having moved since a rollout was generated.

The run reports, per arm and seed, generated tokens until greedy exact-match accuracy over all
prompts first reaches ``target``, and the accuracy at the end.

    replaybank rl grpo-toy --out runs/rl/grpo

(``replaybank rl grpo`` is the same comparison on a real language model, :mod:`replaybank.rl.grpo_trainer`.)
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from replaybank.errors import ReplayBankError
from replaybank.rl.rollouts import RolloutBuffer, importance_ratio

EOS, BOS, VOCAB, MAX_LEN = 10, 11, 11, 3  # tokens 0-9 are digits; BOS only ever as input


@dataclass
class GrpoArgs:
    """The GRPO demo: the same updates with fresh rollouts only, or with rollout replay."""

    operand_limit: int = field(default=5, metadata={"help": "operands a, b are drawn from 0..limit-1 (<= 10)"})
    group_size: int = field(default=8, metadata={"help": "completions per prompt (one GRPO group)"})
    batch_groups: int = field(default=8, metadata={"help": "groups per update"})
    fresh_groups: int = field(default=2, metadata={"help": "groups generated per update with replay"})
    max_staleness: int = field(default=4, metadata={"help": "policy versions a replayed rollout may lag"})
    max_reuse: int = field(default=4, metadata={"help": "times a rollout may be used"})
    min_fresh: float = field(default=0.25, metadata={"help": "share of each batch from the newest version"})
    capacity: int = field(default=4096, metadata={"help": "rollout buffer capacity"})
    learning_rate: float = field(default=3e-3, metadata={"help": "Adam step size"})
    clip: float = field(default=0.2, metadata={"help": "PPO/GRPO ratio clip"})
    entropy_coef: float = field(default=0.01, metadata={"help": "entropy bonus (keeps groups from collapsing)"})
    hidden: int = field(default=64, metadata={"help": "policy width"})
    target: float = field(default=0.95, metadata={"help": "greedy exact-match accuracy to reach"})
    max_updates: int = field(default=3000, metadata={"help": "updates per run at most"})
    eval_every: int = field(default=25, metadata={"help": "updates between greedy evaluations"})
    seeds: int = field(default=3, metadata={"help": "seeds 0..N-1 per arm"})
    out: str = field(default="runs/rl/grpo", metadata={"help": "output directory"})


def check_args(args: GrpoArgs) -> None:
    for name in ("group_size", "batch_groups", "fresh_groups", "max_reuse", "capacity", "max_updates",
                 "eval_every", "seeds"):
        if getattr(args, name) <= 0:
            raise ReplayBankError(f"{name} must be positive, got {getattr(args, name)!r}")
    if not 1 <= args.operand_limit <= 10:
        raise ReplayBankError(f"operand_limit must lie in 1..10 (operands are digits), got {args.operand_limit}")
    if args.max_staleness < 0:
        raise ReplayBankError(f"max_staleness must be >= 0, got {args.max_staleness}")
    if args.fresh_groups > args.batch_groups:
        raise ReplayBankError(f"fresh_groups ({args.fresh_groups}) exceeds batch_groups ({args.batch_groups})")
    if args.fresh_groups < args.min_fresh * args.batch_groups:
        raise ReplayBankError(
            f"fresh_groups ({args.fresh_groups}) cannot supply min_fresh={args.min_fresh} of {args.batch_groups} groups"
        )


def answer_tokens(a: int, b: int) -> list[int]:
    """The target completion: the decimal digits of ``a + b``, then EOS."""
    return [int(c) for c in str(a + b)] + [EOS]


def reward(tokens: np.ndarray, target: list[int]) -> float:
    """Share of target tokens matched before the first mistake (1.0 = exact answer)."""
    k = 0
    while k < min(len(tokens), len(target)) and tokens[k] == target[k]:
        k += 1
    return k / len(target)


def make_policy(hidden: int) -> Any:
    import torch
    import torch.nn as nn

    class TinyPolicy(nn.Module):
        """Next-token logits from (prompt, previous token, position). The prompt is one embedding
        per ``(a, b)`` pair: sharing operand embeddings lets wrong answers on unsolved prompts
        harden from the solved ones, and a group of identical wrong answers has no gradient."""

        def __init__(self) -> None:
            super().__init__()
            self.prompt = nn.Embedding(100, 32)
            self.prev, self.pos = nn.Embedding(VOCAB + 1, 16), nn.Embedding(MAX_LEN, 16)
            self.mlp = nn.Sequential(nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, VOCAB))

        def forward(self, prompts: torch.Tensor, prev: torch.Tensor) -> torch.Tensor:
            """prompts (B, 2) digits, prev (B, T) tokens -> logits (B, T, VOCAB)."""
            b, t = prev.shape
            h = torch.cat([
                self.prompt(prompts[:, 0] * 10 + prompts[:, 1])[:, None].expand(-1, t, -1),
                self.prev(prev), self.pos(torch.arange(t))[None].expand(b, -1, -1),
            ], dim=-1)
            return self.mlp(h)

    return TinyPolicy()


def generate(policy: Any, prompts: np.ndarray, generator: Any, greedy: bool = False) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Sample one completion per prompt row; stops at EOS or MAX_LEN. Returns per row the tokens
    and their log-probs under ``policy`` (the behaviour log-probs)."""
    import torch

    p = torch.as_tensor(prompts)
    prev = torch.full((len(p), 1), BOS)
    toks, lps = [], []
    with torch.no_grad():
        for _ in range(MAX_LEN):
            logp = policy(p, prev)[:, -1].log_softmax(-1)
            nxt = logp.argmax(-1) if greedy else torch.multinomial(logp.exp(), 1, generator=generator).squeeze(1)
            toks.append(nxt)
            lps.append(logp.gather(1, nxt[:, None]).squeeze(1))
            prev = torch.cat([prev, nxt[:, None]], dim=1)
    tokens = torch.stack(toks, 1).numpy()
    logprobs = torch.stack(lps, 1).numpy()
    out_t, out_lp = [], []
    for row, lp in zip(tokens, logprobs):
        end = int(np.argmax(row == EOS)) + 1 if (row == EOS).any() else MAX_LEN
        out_t.append(row[:end])
        out_lp.append(lp[:end])
    return out_t, out_lp


def accuracy(policy: Any, limit: int) -> float:
    """Greedy exact-match accuracy over all ``limit**2`` prompts."""
    prompts = np.array([(a, b) for a in range(limit) for b in range(limit)])
    tokens, _ = generate(policy, prompts, None, greedy=True)
    return float(np.mean([reward(t, answer_tokens(a, b)) == 1.0 for t, (a, b) in zip(tokens, prompts)]))


def grpo_loss(policy: Any, batch: Any, prompts: np.ndarray, clip: float, entropy_coef: float) -> Any:
    """Token-level clipped surrogate: ``-mean(min(rho * A, clip(rho, 1-e, 1+e) * A))`` with
    ``rho = importance_ratio(current, behaviour)`` per token, minus an entropy bonus. Without the
    bonus a tiny policy soon answers some prompts deterministically wrong; a group of identical
    answers has zero advantage, so nothing would ever correct them."""
    import torch

    lengths = batch.tokens.lengths
    padded = torch.as_tensor(batch.tokens.pad(EOS, MAX_LEN))
    prev = torch.cat([torch.full((len(padded), 1), BOS), padded[:, :-1]], dim=1)
    all_logp = policy(torch.as_tensor(prompts), prev).log_softmax(-1)
    logp = all_logp.gather(2, padded[..., None]).squeeze(2)
    mask = torch.as_tensor(np.arange(MAX_LEN)[None] < lengths[:, None])
    entropy = -(all_logp.exp() * all_logp).sum(-1)[mask].mean()
    current = logp[mask]  # row-major, so aligned with batch.logprobs.values
    ratio = importance_ratio(current, batch.logprobs.values)
    adv = torch.as_tensor(np.repeat(batch.advantage, lengths))
    surrogate = torch.minimum(ratio * adv, ratio.clamp(1 - clip, 1 + clip) * adv)
    return -surrogate.mean() - entropy_coef * entropy


def train_arm(args: GrpoArgs, replay: bool, seed: int) -> dict[str, Any]:
    """One run; returns tokens generated, when the target was reached, and the accuracy curve."""
    import torch

    torch.set_num_threads(1)
    rng = np.random.default_rng(seed)
    generator = torch.Generator().manual_seed(seed)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        policy = make_policy(args.hidden)
    optimizer = torch.optim.Adam(policy.parameters(), lr=args.learning_rate)
    if replay:
        buf = RolloutBuffer(args.capacity, max_staleness=args.max_staleness, max_reuse=args.max_reuse,
                            min_fresh=args.min_fresh, seed=seed)
        fresh = args.fresh_groups
    else:
        buf = RolloutBuffer(args.capacity, max_staleness=0, max_reuse=1, min_fresh=1.0, seed=seed)
        fresh = args.batch_groups
    tokens_generated, reached, curve = 0, None, []
    reward_sum = reward_n = 0.0
    for update in range(1, args.max_updates + 1):
        buf.set_policy_version(update)
        # until the buffer holds a batch, generate what is missing (counted like any generation)
        n_live = len(buf.groups)
        prompts = rng.integers(0, args.operand_limit, size=(max(fresh, args.batch_groups - n_live), 2))
        tokens, logprobs = generate(policy, np.repeat(prompts, args.group_size, axis=0), generator)
        tokens_generated += sum(len(t) for t in tokens)
        for k, (a, b) in enumerate(prompts):
            rows = slice(k * args.group_size, (k + 1) * args.group_size)
            rewards = [reward(t, answer_tokens(a, b)) for t in tokens[rows]]
            reward_sum, reward_n = reward_sum + sum(rewards), reward_n + len(rewards)
            buf.add_group(int(a * 10 + b), tokens[rows], rewards, logprobs[rows], version=update)
        batch = buf.sample(args.batch_groups * args.group_size)
        batch_prompts = np.stack([batch.prompt_id // 10, batch.prompt_id % 10], axis=1)
        loss = grpo_loss(policy, batch, batch_prompts, args.clip, args.entropy_coef)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if update % args.eval_every == 0:
            acc = accuracy(policy, args.operand_limit)
            curve.append({"update": update, "tokens_generated": tokens_generated, "accuracy": acc,
                          "train_reward": reward_sum / reward_n})
            reward_sum = reward_n = 0.0
            if acc >= args.target:
                reached = tokens_generated
                break
    return {
        "replay": replay, "seed": seed, "tokens_generated": tokens_generated,
        "tokens_to_target": reached, "updates": update, "final_accuracy": curve[-1]["accuracy"] if curve else accuracy(policy, args.operand_limit),
        "evicted": dict(buf.evicted), "curve": curve,
    }


def run(args: GrpoArgs) -> dict[str, Any]:
    """Both arms over ``seeds`` seeds; writes ``DIR/grpo.json`` and ``DIR/grpo.png``."""
    check_args(args)
    start = time.perf_counter()
    runs = [train_arm(args, replay, seed) for seed in range(args.seeds) for replay in (False, True)]
    summary: dict[str, Any] = {}
    for replay, name in ((False, "no_replay"), (True, "replay")):
        rs = [r for r in runs if r["replay"] is replay]
        reached = [r["tokens_to_target"] for r in rs]
        summary[name] = {
            "tokens_to_target": reached,
            "final_accuracy": [r["final_accuracy"] for r in rs],
            "tokens_generated": [r["tokens_generated"] for r in rs],
            "updates": [r["updates"] for r in rs],
            "mean_tokens_to_target": float(np.mean(reached)) if None not in reached else None,
        }
    summary["target_accuracy"] = args.target
    summary["seconds"] = time.perf_counter() - start
    result = {"args": asdict(args), "summary": summary, "runs": runs}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "grpo.json").write_text(json.dumps(result, indent=2) + "\n")
    _plot(out / "grpo.png", runs, args.target)
    return result


def _plot(path: Path, runs: list[dict[str, Any]], target: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for r in runs:
        xs = [c["tokens_generated"] for c in r["curve"]]
        ax.plot(xs, [c["accuracy"] for c in r["curve"]], color="C1" if r["replay"] else "C0", alpha=0.8,
                label=("replay" if r["replay"] else "no replay") if r["seed"] == 0 else None)
    ax.axhline(target, color="grey", ls="--", lw=1)
    ax.set_xlabel("completion tokens generated")
    ax.set_ylabel("greedy exact-match accuracy (all prompts)")
    ax.set_title("GRPO on a + b: fresh rollouts only vs rollout replay")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
