"""GRPO with LoRA on a chat LM, with and without rollout replay, synchronous or asynchronous.

Both arms run the same loop with the same batch of ``batch_groups`` groups of ``group_size``
completions per update (group-relative advantages, token-level clipped ratio, see
:mod:`replaybank.rl.grpo_lm`); they differ only in where the batch comes from:

* ``no_replay``: every update generates ``batch_groups`` fresh groups and uses them once
  (``max_reuse=1``; ``max_staleness=0``, or 1 in async mode where a batch is always one version
  old): on-policy GRPO;
* ``replay``: every update generates ``fresh_groups`` groups; the rest of the batch comes from the
  ``RolloutBuffer`` (``max_staleness``, ``max_reuse``, ``min_fresh`` share of the newest version),
  and the behaviour log-probs recorded at sampling time correct for the policy having moved.

Asynchronous mode (``async_mode=True``): a generation thread samples the groups for update ``t+1``
with a frozen copy of the policy (the *actor*, synced after every update) while the learner
updates on batch ``t``; the learner draws its batch before the thread starts, so which rollouts it
sees does not depend on thread timing. The cost measure is the number of generated completion
tokens (and seconds) until the held-out accuracy (mean reward over ``eval_samples`` samples per
held-out problem at the rollout temperature, drawn with a fixed generator) first reaches ``target``.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from replaybank.errors import ReplayBankError
from replaybank.rl.grpo_lm import add_lora, grpo_loss, lora_parameters, make_actor, sync_actor
from replaybank.rl.grpo_task import ArithmeticTask
from replaybank.rl.rollouts import RolloutBuffer
from replaybank.rl.sampling import generator_for, sample

Arm = Literal["no_replay", "replay"]
ARMS: tuple[Arm, ...] = ("no_replay", "replay")


@dataclass
class GrpoLmArgs:
    """GRPO with LoRA on a chat LM: fresh rollouts only vs rollout replay, same seeds."""

    model: str = field(default="SmolLM2-135M-Instruct", metadata={"help": "base model (name, folder or .gguf)"})
    digits: int = field(default=1, metadata={"help": "operand digits of the arithmetic task (1-3)"})
    ops: str = field(default="+-", metadata={"help": "operators, a subset of '+-'"})
    n_heldout: int = field(default=32, metadata={"help": "held-out problems (never trained on)"})
    group_size: int = field(default=4, metadata={"help": "completions per prompt (one GRPO group)"})
    batch_groups: int = field(default=4, metadata={"help": "groups per update"})
    fresh_groups: int = field(default=3, metadata={"help": "groups generated per update with replay (3 of 4: measured, docs/rl.md)"})
    max_staleness: int = field(default=2, metadata={"help": "policy versions a replayed rollout may lag"})
    max_reuse: int = field(default=2, metadata={"help": "times a rollout may be used"})
    min_fresh: float = field(default=0.5, metadata={"help": "share of each batch from the newest version"})
    capacity: int = field(default=1024, metadata={"help": "rollout buffer capacity"})
    temperature: float = field(default=0.8, metadata={"help": "rollout (and held-out) sampling temperature"})
    top_p: float = field(default=1.0, metadata={"help": "nucleus sampling mass (1 = off, exact ratios)"})
    max_new_tokens: int = field(default=8, metadata={"help": "tokens per completion at most"})
    learning_rate: float = field(default=2e-3, metadata={"help": "AdamW step size"})
    clip: float = field(default=0.2, metadata={"help": "ratio clip epsilon"})
    kl_coef: float = field(default=0.0, metadata={"help": "KL-to-base coefficient (0 = off)"})
    lora_rank: int = field(default=8, metadata={"help": "LoRA rank"})
    lora_targets: str = field(default="q_proj,v_proj", metadata={"help": "LoRA target modules, comma-separated"})
    lora_layers: int = field(default=8, metadata={"help": "adapt only the last N decoder layers (0 = all)"})
    target: float = field(default=0.3, metadata={"help": "held-out accuracy to reach"})
    eval_samples: int = field(default=2, metadata={"help": "samples per held-out problem"})
    eval_every: int = field(default=4, metadata={"help": "updates between held-out evaluations"})
    max_updates: int = field(default=24, metadata={"help": "updates per run at most"})
    stop_at_target: bool = field(default=False, metadata={"help": "end a run at its first evaluation >= target"})
    async_mode: bool = field(default=False, metadata={"help": "generate update t+1 in a thread during update t"})
    arms: str = field(default="no_replay,replay", metadata={"help": "arms to run: no_replay, replay"})
    seeds: int = field(default=3, metadata={"help": "seeds 0..N-1 per arm"})
    device: str = field(default="cpu", metadata={"help": "torch device"})
    out: str = field(default="runs/rl/grpo_lm", metadata={"help": "output directory"})


def check_args(args: GrpoLmArgs) -> list[Arm]:
    """Validate; returns the arms to run.

    Raises:
        ReplayBankError: naming the bad option and its value.
    """
    for name in ("group_size", "batch_groups", "fresh_groups", "max_reuse", "capacity", "max_new_tokens",
                 "lora_rank", "eval_samples", "eval_every", "max_updates", "seeds"):
        if getattr(args, name) <= 0:
            raise ReplayBankError(f"{name} must be positive, got {getattr(args, name)!r}")
    if args.max_staleness < 0:
        raise ReplayBankError(f"max_staleness must be >= 0, got {args.max_staleness}")
    if args.async_mode and args.max_staleness < 1:
        raise ReplayBankError("async_mode trains on rollouts one version old: max_staleness must be >= 1")
    if args.group_size < 2:
        raise ReplayBankError(f"group_size must be >= 2 (advantages are relative to the group), got {args.group_size}")
    if args.fresh_groups > args.batch_groups:
        raise ReplayBankError(f"fresh_groups ({args.fresh_groups}) exceeds batch_groups ({args.batch_groups})")
    if args.fresh_groups < args.min_fresh * args.batch_groups:
        raise ReplayBankError(
            f"fresh_groups ({args.fresh_groups}) cannot supply min_fresh={args.min_fresh} of {args.batch_groups} groups"
        )
    if args.temperature <= 0 or args.kl_coef < 0 or not 0 < args.clip < 1:
        raise ReplayBankError(
            f"need temperature > 0, kl_coef >= 0, 0 < clip < 1; got {args.temperature}, {args.kl_coef}, {args.clip}"
        )
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    bad = [a for a in arms if a not in ARMS]
    if bad or not arms:
        raise ReplayBankError(f"arms: unknown {bad or arms!r}; valid arms: {', '.join(ARMS)}")
    return arms  # type: ignore[return-value]


class _Policy:
    """The model, tokenizer, task prompts and sampling settings one run shares."""

    def __init__(self, args: GrpoLmArgs, seed: int, task: ArithmeticTask, base: tuple[Any, Any]) -> None:
        import torch

        model, self.tok = base
        self.model = add_lora(model, args.lora_rank, 2 * args.lora_rank, args.lora_targets.split(","),
                              args.lora_layers, seed)
        self.task, self.args = task, args
        self.pad_id = int(self.tok.pad_token_id)
        self.stop_ids = sorted({int(self.tok.eos_token_id), int(self.tok.convert_tokens_to_ids("<|im_end|>"))}
                               - {int(self.tok.unk_token_id or -1)})
        self.prompts: dict[int, list[int]] = {}
        self.tok_lock = threading.Lock()  # a fast tokenizer may not be used from two threads at once
        self.optimizer = torch.optim.AdamW([p for _, p in lora_parameters(self.model)], lr=args.learning_rate)

    def prompt(self, pid: int) -> list[int]:
        with self.tok_lock:
            if pid not in self.prompts:
                self.prompts[pid] = self.task.prompt_tokens(self.tok, pid)
            return self.prompts[pid]

    def score(self, pid: int, completion: np.ndarray) -> float:
        with self.tok_lock:
            return self.task.score(self.tok, pid, completion)

    def rollouts(self, model: Any, pids: np.ndarray, generator: Any) -> tuple[list[tuple[int, Any, list[float]]], int]:
        """Sample ``group_size`` completions per problem; returns the groups and tokens generated."""
        g = self.args.group_size
        rows = [self.prompt(int(p)) for p in pids for _ in range(g)]
        out = sample(model, rows, max_new_tokens=self.args.max_new_tokens, stop_ids=self.stop_ids,
                     pad_id=self.pad_id, temperature=self.args.temperature, top_p=self.args.top_p,
                     generator=generator)
        groups = []
        for k, pid in enumerate(pids.tolist()):
            sl = slice(k * g, (k + 1) * g)
            rewards = [self.score(pid, t) for t in out.tokens[sl]]
            groups.append((pid, (out.tokens[sl], out.logprobs[sl]), rewards))
        return groups, out.generated

    def heldout_accuracy(self) -> float:

        pids = np.repeat(self.task.heldout_ids, self.args.eval_samples)
        generator = generator_for(self.model, 12345)  # the same draws at every evaluation
        out = sample(self.model, [self.prompt(int(p)) for p in pids], max_new_tokens=self.args.max_new_tokens,
                     stop_ids=self.stop_ids, pad_id=self.pad_id, temperature=self.args.temperature,
                     top_p=self.args.top_p, generator=generator)
        return float(np.mean([self.score(int(p), t) for p, t in zip(pids, out.tokens)]))


def train_arm(args: GrpoLmArgs, arm: Arm, seed: int, base: tuple[Any, Any], progress: Any = None) -> dict[str, Any]:
    """One run of ``arm`` with ``seed`` on a fresh LoRA over ``base = (model, tokenizer)`` (the base
    weights are not modified); returns its costs, accuracy curve and buffer counters."""
    import torch

    task = ArithmeticTask(args.digits, args.ops, args.n_heldout, seed=0)  # one split for every run
    pol = _Policy(args, seed, task, base)
    rng = np.random.default_rng(seed)
    generator = generator_for(pol.model, seed)  # on the model's device: CUDA sampling refuses a CPU generator
    if arm == "replay":
        buf = RolloutBuffer(args.capacity, max_staleness=args.max_staleness, max_reuse=args.max_reuse,
                            min_fresh=args.min_fresh, seed=seed)
        fresh = args.fresh_groups
    else:
        buf = RolloutBuffer(args.capacity, max_staleness=1 if args.async_mode else 0, max_reuse=1, min_fresh=1.0,
                            seed=seed)
        fresh = args.batch_groups
    actor = make_actor(pol.model) if args.async_mode else pol.model
    counters = {"tokens": 0, "gen_s": 0.0}

    def generate(model: Any, n: int, version: int) -> None:
        start = time.perf_counter()
        groups, tokens = pol.rollouts(model, rng.choice(task.train_ids, size=n, replace=False), generator)
        for pid, (toks, lps), rewards in groups:
            buf.add_group(pid, toks, rewards, lps, version=version)
        counters["tokens"] += tokens
        counters["gen_s"] += time.perf_counter() - start

    curve = [{"update": 0, "tokens_generated": 0, "seconds": 0.0, "accuracy": pol.heldout_accuracy()}]
    learn_s = eval_s = 0.0
    reached: dict[str, Any] | None = None
    stats: list[dict[str, float]] = []
    start = time.perf_counter()
    if args.async_mode:
        generate(actor, args.batch_groups, 0)
    for update in range(1, args.max_updates + 1):
        version = update - 1  # optimizer steps done so far
        buf.set_policy_version(version)
        if not args.async_mode:
            generate(pol.model, max(fresh, args.batch_groups - buf.live_groups), version)
        elif buf.live_groups < args.batch_groups:  # staleness evicted too much: top up in line
            generate(actor, args.batch_groups - buf.live_groups, version)
        batch = buf.sample(args.batch_groups * args.group_size)
        thread = None
        if args.async_mode:  # the next update's rollouts, from the weights of this version
            sync_actor(actor, pol.model)
            n_next = max(fresh, args.batch_groups - buf.live_groups)
            thread = threading.Thread(target=generate, args=(actor, n_next, version))
            thread.start()
        t0 = time.perf_counter()
        loss, st = grpo_loss(pol.model, batch, [pol.prompt(int(p)) for p in batch.prompt_id], pol.pad_id,
                             args.temperature, args.clip, args.kl_coef)
        pol.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_([p for _, p in lora_parameters(pol.model)], 1.0)
        pol.optimizer.step()
        learn_s += time.perf_counter() - t0
        if thread is not None:
            thread.join()
        stats.append({**st, "loss": float(loss.detach()), "staleness": float(batch.staleness.mean()),
                      "reward": float(batch.reward.mean())})
        if progress is not None:
            progress.update(1)
        if update % args.eval_every == 0 or update == args.max_updates:
            t0 = time.perf_counter()
            acc = pol.heldout_accuracy()
            eval_s += time.perf_counter() - t0
            point = {"update": update, "tokens_generated": counters["tokens"],
                     "seconds": round(time.perf_counter() - start - eval_s, 2), "accuracy": acc}
            curve.append(point)
            if reached is None and acc >= args.target:
                reached = point
                if args.stop_at_target:
                    break
    wall = time.perf_counter() - start - eval_s
    pol.model.unload()  # give the base model back without adapters for the next run
    return {
        "arm": arm, "seed": seed, "async": args.async_mode, "updates": update,
        "tokens_generated": counters["tokens"],
        "tokens_to_target": reached["tokens_generated"] if reached else None,
        "seconds_to_target": reached["seconds"] if reached else None,
        "updates_to_target": reached["update"] if reached else None,
        "initial_accuracy": curve[0]["accuracy"], "final_accuracy": curve[-1]["accuracy"],
        "wall_seconds": round(wall, 2), "generation_seconds": round(counters["gen_s"], 2),
        "learn_seconds": round(learn_s, 2), "eval_seconds": round(eval_s, 2),
        "generation_share": round(counters["gen_s"] / wall, 4) if wall else None,
        "evicted": dict(buf.evicted), "mean_staleness": float(np.mean([s["staleness"] for s in stats])),
        "mean_clip_frac": float(np.mean([s["clip_frac"] for s in stats])),
        "mean_train_reward": float(np.mean([s["reward"] for s in stats])), "curve": curve,
    }


def load_base(args: GrpoLmArgs) -> tuple[Any, Any]:
    """``(model, tokenizer)`` of ``args.model`` on ``args.device``, frozen (the LoRA is per run)."""
    from replaybank.llm.model import load_model
    from replaybank.llm.runtime import pick_device

    model, tok = load_model(args.model, pick_device(args.device, where="--device"), log=lambda *_: None)
    model.requires_grad_(False)
    return model, tok


def _median(values: list[Any]) -> float | None:
    """Median with unreached (``None``) runs counted as infinitely expensive; ``None`` if that is
    where the median falls."""
    xs = sorted(float("inf") if v is None else float(v) for v in values)
    m = float(np.median(xs)) if xs else float("inf")
    return None if not np.isfinite(m) else m


def tokens_to(curve: list[dict[str, Any]], threshold: float) -> int | None:
    """Generated tokens at the first evaluation whose accuracy reaches ``threshold``.

    >>> tokens_to([{"tokens_generated": 0, "accuracy": 0.1}, {"tokens_generated": 640, "accuracy": 0.3}], 0.25)
    640
    """
    return next((int(c["tokens_generated"]) for c in curve if c["accuracy"] >= threshold), None)


def summarize(runs: list[dict[str, Any]], target: float,
              thresholds: tuple[float, ...] = (0.2, 0.3, 0.4, 0.5), last: int = 3) -> dict[str, Any]:
    """Per arm: per-seed costs and accuracies, medians and spreads; ``replay_vs_no_replay``: the
    ratio of median tokens (and seconds) to target; ``thresholds``: median tokens to each of
    several accuracies (how much the conclusion depends on the one target); ``last_accuracy``: each
    run's mean over its last ``last`` evaluations (less noisy than the final one alone)."""
    summary: dict[str, Any] = {"target_accuracy": target}
    for arm in ARMS:
        rs = [r for r in runs if r["arm"] == arm]
        if not rs:
            continue
        final = [r["final_accuracy"] for r in rs]
        tail = [float(np.mean([c["accuracy"] for c in r["curve"][1:][-last:]])) for r in rs]
        summary[arm] = {
            f"last{last}_accuracy": tail,
            f"last{last}_accuracy_mean": float(np.mean(tail)),
            f"last{last}_accuracy_std": float(np.std(tail, ddof=1)) if len(tail) > 1 else 0.0,
            "best_accuracy": [max(c["accuracy"] for c in r["curve"]) for r in rs],
            "seeds": [r["seed"] for r in rs],
            "tokens_to_target": [r["tokens_to_target"] for r in rs],
            "seconds_to_target": [r["seconds_to_target"] for r in rs],
            "reached": sum(r["tokens_to_target"] is not None for r in rs),
            "median_tokens_to_target": _median([r["tokens_to_target"] for r in rs]),
            "median_seconds_to_target": _median([r["seconds_to_target"] for r in rs]),
            "final_accuracy": final,
            "final_accuracy_mean": float(np.mean(final)),
            "final_accuracy_std": float(np.std(final, ddof=1)) if len(final) > 1 else 0.0,
            "tokens_generated": [r["tokens_generated"] for r in rs],
            "generation_share": float(np.mean([r["generation_share"] for r in rs])),
            "seconds_per_update": float(np.mean([r["wall_seconds"] / r["updates"] for r in rs])),
            "median_tokens_to": {str(t): _median([tokens_to(r["curve"], t) for r in rs]) for t in thresholds},
        }
    if "replay" in summary and "no_replay" in summary:
        ratio = {}
        for key in ("median_tokens_to_target", "median_seconds_to_target"):
            a, b = summary["replay"][key], summary["no_replay"][key]
            ratio[key] = round(a / b, 3) if a is not None and b else None
        summary["replay_vs_no_replay"] = ratio
    return summary


def run(args: GrpoLmArgs, progress: bool = True) -> dict[str, Any]:
    """Every arm x seed (seed-major, so an interrupted run still has paired seeds); writes
    ``DIR/grpo_lm.json`` and returns ``{"args", "summary", "runs"}``."""
    import json
    from dataclasses import asdict
    from pathlib import Path

    import torch
    from tqdm.auto import tqdm

    arms = check_args(args)
    torch.set_num_threads(1)
    start = time.perf_counter()
    base = load_base(args)
    bar = tqdm(total=args.seeds * len(arms) * args.max_updates, desc="grpo", unit="update", disable=not progress,
               dynamic_ncols=True)
    runs = []
    for seed in range(args.seeds):
        for arm in arms:
            bar.set_postfix(arm=arm, seed=seed, refresh=True)
            runs.append(train_arm(args, arm, seed, base, bar))
    bar.close()
    result = {"args": asdict(args), "summary": summarize(runs, args.target), "runs": runs,
              "seconds": round(time.perf_counter() - start, 1)}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "grpo_lm.json").write_text(json.dumps(result, indent=2) + "\n")
    return result


def format_table(summary: dict[str, Any]) -> str:
    """The summary as a Markdown table: one row per arm, per-seed values and medians."""

    def fmt(v: Any, spec: str = ",.0f") -> str:
        return "not reached" if v is None else format(v, spec)

    lines = [
        f"target held-out accuracy {summary['target_accuracy']:.2f}",
        "",
        "| arm | tokens to target (per seed) | median | seconds to target (per seed) | median | "
        "final accuracy (per seed) | mean +- sd | generation share | s/update |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for arm in ARMS:
        s = summary.get(arm)
        if s is None:
            continue
        lines.append(
            f"| {arm} | {', '.join(fmt(v) for v in s['tokens_to_target'])} | {fmt(s['median_tokens_to_target'])} | "
            f"{', '.join(fmt(v, '.0f') for v in s['seconds_to_target'])} | {fmt(s['median_seconds_to_target'], '.0f')} | "
            f"{', '.join(f'{v:.3f}' for v in s['final_accuracy'])} | "
            f"{s['final_accuracy_mean']:.3f} +- {s['final_accuracy_std']:.3f} | {s['generation_share']:.0%} | "
            f"{s['seconds_per_update']:.1f} |"
        )
    for arm in ARMS:
        if arm in summary:
            to = summary[arm]["median_tokens_to"]
            lines.append(f"{'' if arm != ARMS[0] else chr(10)}median tokens to accuracy, {arm}: "
                         + ", ".join(f"{t}: {fmt(v)}" for t, v in to.items()))
    for arm in ARMS:
        s = summary.get(arm, {})
        if "last3_accuracy" in s:
            lines.append(f"mean of the last 3 evaluations, {arm}: {', '.join(f'{v:.3f}' for v in s['last3_accuracy'])} "
                         f"({s['last3_accuracy_mean']:.3f} +- {s['last3_accuracy_std']:.3f})")
    ratio = summary.get("replay_vs_no_replay")
    if ratio:
        lines += ["", f"replay / no replay, median tokens to target: {fmt(ratio['median_tokens_to_target'], '.3f')}; "
                      f"median seconds to target: {fmt(ratio['median_seconds_to_target'], '.3f')}"]
    return "\n".join(lines)
