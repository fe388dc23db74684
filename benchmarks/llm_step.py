"""Tokens/s of LoRA training steps: replaybank's loop vs ``transformers.Trainer`` vs TRL ``SFTTrainer``.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/llm_step.py [--tiny] [--repeats 2] [--steps 3]

Same model (the embedded SmolLM2-135M-Instruct, fp32 copy from ``replaybank.llm.model``; ``--tiny``:
a random 2-layer Llama for a quick check), same LoRA adapters (``replaybank.llm.train.add_lora``
with the ``[training]`` defaults: r=16 on every linear layer, the same seeded init for every run),
same optimizer (AdamW, lr 2e-3, clipping at 1.0), same batch (``--batch-size`` rows, 10% rehearsal
by replaybank's quota rule: the loop's own ``Mixer``, ``replaybank.hf.mix`` for the two trainers)
and the same rows: every row has ``--prompt`` prompt tokens and ``--completion`` labelled
completion tokens (random ids), so every step of every runner trains on the same number of tokens
with no padding. Runners:

* ``replaybank``: ``replaybank.llm.train.train_lora`` (the LM head runs on labelled positions only);
* ``replaybank-fullhead``: the same loop with the LM head on every position (as a plain
  ``model(...).logits`` does), to show what that head saves;
* ``Trainer``: ``transformers.Trainer`` on ``replaybank.hf.mix`` (default loss);
* ``SFTTrainer``: TRL's, on the same stream, pre-tokenized (``input_ids`` + ``completion_mask``).

The runners are interleaved (``--repeats`` rounds, each running every runner once) in one process
with one torch thread. A step is timed between consecutive optimizer steps (a global optimizer
step hook, the same for all), after ``--warmup`` untimed steps; the table gives the median wall
seconds per step, tokens/s (tokens of the step / median), and CPU seconds of this process per step
(on a shared machine wall time also measures the neighbours). Mixing's own cost per batch is timed
apart: the loop's ``Mixer`` batch, and ``replaybank.hf.mix``'s index plan (``MixPlan``) and whole
stream (plan + datasets' generator + the row fetch); each as a share of its runner's step time.
Writes ``benchmarks/results/llm_step.json`` (``--out``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any

for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[var] = "1"
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

RUNNERS = ("replaybank", "replaybank-fullhead", "Trainer", "SFTTrainer")


class StepClock:
    """Wall and process-CPU time at every optimizer step (one global torch hook for all runners)."""

    def __init__(self) -> None:
        from torch.optim.optimizer import register_optimizer_step_post_hook

        self.marks: list[tuple[float, float]] = []
        self.handle = register_optimizer_step_post_hook(self._mark)

    def _mark(self, *_: Any) -> None:
        self.marks.append((time.perf_counter(), time.process_time()))

    def take(self, warmup: int) -> tuple[list[float], list[float]]:
        marks, self.marks = self.marks, []
        marks = marks[warmup - 1 :] if warmup > 0 else marks
        wall = [b[0] - a[0] for a, b in zip(marks, marks[1:], strict=False)]
        cpu = [b[1] - a[1] for a, b in zip(marks, marks[1:], strict=False)]
        return wall, cpu


def tiny_model_and_tokenizer() -> tuple[Any, Any]:
    import tokenizers
    import torch
    import transformers

    vocab = {"<pad>": 0, "<eos>": 1, "<unk>": 2, **{f"t{i}": 3 + i for i in range(509)}}
    tk = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="<unk>"))
    tk.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    tok = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tk, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>"
    )
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=len(vocab), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
        pad_token_id=0, eos_token_id=1, tie_word_embeddings=True,
    )  # fmt: skip
    return transformers.LlamaForCausalLM(config), tok


def make_rows(n: int, prompt: int, completion: int, vocab: int, seed: int) -> list[dict[str, list[int]]]:
    import numpy as np

    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(n):
        ids = rng.integers(3, vocab, prompt + completion).tolist()
        rows.append({
            "input_ids": ids,
            "labels": [-100] * prompt + ids[prompt:],
            "completion_mask": [0] * prompt + [1] * completion,
        })  # fmt: skip
    return rows


def run_replaybank(model: Any, tok: Any, cfg: Any, domain: Any, rehearsal: Any, steps: int, full_head: bool) -> None:
    from replaybank.llm.eval import losses
    from replaybank.llm.train import Source, train_lora

    real = losses.fast_head
    if full_head:
        losses.fast_head = lambda model: None  # logits_at then runs model(...).logits
    try:
        train_lora(model, tok.pad_token_id, domain, cfg, max_steps=steps, desc="replaybank",
                   sources=[Source("corpus", rehearsal, cfg.mixing_ratio, sliced=True)])  # fmt: skip
    finally:
        losses.fast_head = real


def run_trainer(model: Any, tok: Any, cfg: Any, stream: Any, steps: int, out: str, sft: bool) -> None:
    common = dict(
        output_dir=out, per_device_train_batch_size=cfg.batch_size, max_steps=steps,
        learning_rate=cfg.learning_rate, weight_decay=cfg.weight_decay, max_grad_norm=cfg.max_grad_norm,
        lr_scheduler_type="constant", optim="adamw_torch", logging_steps=10_000, save_strategy="no",
        report_to=[], use_cpu=True, disable_tqdm=True, dataloader_num_workers=0, seed=cfg.seed,
        gradient_checkpointing=False,
    )  # fmt: skip
    if sft:
        from trl import SFTConfig, SFTTrainer

        args = SFTConfig(**common, max_length=None, packing=False, completion_only_loss=True)
        SFTTrainer(model=model, args=args, train_dataset=stream, processing_class=tok).train()
    else:
        from transformers import DataCollatorForSeq2Seq, Trainer, TrainingArguments

        Trainer(model=model, args=TrainingArguments(**common), train_dataset=stream,
                data_collator=DataCollatorForSeq2Seq(tok, padding=True)).train()  # fmt: skip


def mixing_seconds(cfg: Any, n_domain: int, n_rehearsal: int, domain: Any, rehearsal: Any, batches: int) -> dict[str, float]:
    """Seconds per batch of the mixing alone: the loop's Mixer, mix()'s MixPlan and whole stream."""
    from replaybank.hf import MixPlan, MixSpec, mix
    from replaybank.mixing import Mixer

    mixer = Mixer([n_domain, cfg.rehearsal_rows_per_epoch], [1 - cfg.mixing_ratio, cfg.mixing_ratio],
                  cfg.batch_size, seed=cfg.seed)  # fmt: skip
    t0 = time.perf_counter()
    k = 0
    while k < batches:
        for _ in mixer:
            k += 1
            if k == batches:
                break
    loop = (time.perf_counter() - t0) / batches
    plan = iter(MixPlan(n_domain, n_rehearsal, cfg.mixing_ratio, batch_size=cfg.batch_size, seed=cfg.seed))
    t0 = time.perf_counter()
    for _ in range(batches):
        next(plan)
    plan_s = (time.perf_counter() - t0) / batches
    spec = MixSpec(cfg.mixing_ratio, batch_size=cfg.batch_size, seed=cfg.seed, world_size=1)
    stream = iter(mix(domain, rehearsal, spec))
    next(stream)
    t0 = time.perf_counter()
    for _ in range(batches * cfg.batch_size):
        next(stream)
    stream_s = (time.perf_counter() - t0) / batches
    return {"loop_mixer": loop, "hf_plan": plan_s, "hf_stream": stream_s}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tiny", action="store_true", help="a random 2-layer Llama instead of SmolLM2-135M")
    p.add_argument("--repeats", type=int, default=2, help="interleaved rounds over the runners")
    p.add_argument("--steps", type=int, default=3, help="timed optimizer steps per run")
    p.add_argument("--warmup", type=int, default=1, help="untimed steps at the start of each run")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--prompt", type=int, default=48, help="prompt tokens per row (no loss)")
    p.add_argument("--completion", type=int, default=16, help="labelled completion tokens per row")
    p.add_argument("--runners", default=",".join(RUNNERS))
    p.add_argument("--out", default="benchmarks/results/llm_step.json")
    args = p.parse_args()

    import numpy as np
    import torch
    from datasets import Dataset
    from peft import get_peft_model_state_dict, set_peft_model_state_dict

    from replaybank.hf import MixSpec, mix
    from replaybank.llm.config import Training
    from replaybank.llm.data.rows import token_rows
    from replaybank.llm.train import add_lora

    torch.set_num_threads(1)
    if args.tiny:
        base, tok = tiny_model_and_tokenizer()
        name = "tiny random Llama (2 layers, hidden 64, vocab 512)"
    else:
        from replaybank.llm.model import load_model

        base, tok = load_model("SmolLM2-135M-Instruct", log=lambda *a: None)
        name = "SmolLM2-135M-Instruct (embedded GGUF, fp32 copy)"
    cfg = Training(batch_size=args.batch_size, mixing_ratio=0.1, rehearsal_rows_per_epoch=64)
    model = add_lora(base, cfg)
    init = {k: v.clone() for k, v in get_peft_model_state_dict(model).items()}
    vocab = int(model.get_input_embeddings().weight.shape[0])
    steps_total = args.warmup + args.steps
    n_dom = (steps_total + 1) * args.batch_size * 2
    dom_rows = make_rows(n_dom, args.prompt, args.completion, vocab, seed=1)
    reh_rows = make_rows(64, args.prompt, args.completion, vocab, seed=2)
    as_np = [(np.asarray(r["input_ids"]), np.asarray(r["labels"])) for r in dom_rows]
    domain_tr = token_rows(as_np)
    rehearsal_tr = token_rows([(np.asarray(r["input_ids"]), np.asarray(r["labels"])) for r in reh_rows])
    dom_ds, reh_ds = Dataset.from_list(dom_rows), Dataset.from_list(reh_rows)

    def stream(cols: list[str]) -> Any:
        spec = MixSpec(cfg.mixing_ratio, batch_size=cfg.batch_size, seed=cfg.seed, world_size=1)
        return mix(dom_ds, reh_ds, spec, columns=cols)

    runners = [r for r in args.runners.split(",") if r]
    clock = StepClock()
    wall: dict[str, list[float]] = {r: [] for r in runners}
    cpu: dict[str, list[float]] = {r: [] for r in runners}
    load_before = os.getloadavg()
    t_start = time.time()
    out_dir = Path("runs/llm_step")
    for rep in range(args.repeats):
        order = runners if rep % 2 == 0 else runners[::-1]
        for r in order:
            set_peft_model_state_dict(model, init)  # the same adapter init for every run
            torch.manual_seed(cfg.seed)
            model.train()
            if r.startswith("replaybank"):
                run_replaybank(model, tok, cfg, domain_tr, rehearsal_tr, steps_total, r.endswith("fullhead"))
            elif r == "Trainer":
                run_trainer(model, tok, cfg, stream(["input_ids", "labels"]), steps_total, str(out_dir), sft=False)
            else:
                run_trainer(model, tok, cfg, stream(["input_ids", "completion_mask"]), steps_total, str(out_dir),
                            sft=True)  # fmt: skip
            w, c = clock.take(args.warmup)
            if len(w) != args.steps:
                raise RuntimeError(f"{r}: timed {len(w)} steps, expected {args.steps}")
            wall[r] += w
            cpu[r] += c
            print(f"round {rep + 1} {r}: {statistics.median(w):.3f} s/step", flush=True)
    load_after = os.getloadavg()
    mixing = mixing_seconds(cfg, n_dom, len(reh_rows), dom_ds, reh_ds, batches=200)
    tokens = args.batch_size * (args.prompt + args.completion)
    rows = []
    for r in runners:
        med = statistics.median(wall[r])
        mix_s = mixing["loop_mixer"] if r.startswith("replaybank") else mixing["hf_stream"]
        rows.append({
            "runner": r, "steps": len(wall[r]), "s_per_step": med, "tokens_per_s": tokens / med,
            "cpu_s_per_step": statistics.median(cpu[r]), "mixing_s_per_batch": mix_s, "mixing_share": mix_s / med,
        })  # fmt: skip
    ref = {r["runner"]: r for r in rows}
    base_tps = ref["Trainer"]["tokens_per_s"] if "Trainer" in ref else None
    print(f"\nmodel: {name}; batch {args.batch_size} rows x ({args.prompt} prompt + {args.completion} "
          f"completion) tokens = {tokens} tokens/step, 10% rehearsal; {args.repeats} interleaved rounds x "
          f"{args.steps} timed steps; 1 torch thread")  # fmt: skip
    print(f"load average before {load_before[0]:.2f}, after {load_after[0]:.2f} ({os.cpu_count()} CPUs)\n")
    print("| runner | s/step (median) | tokens/s | vs Trainer | CPU s/step | mixing per batch | mixing share |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        speed = f"{row['tokens_per_s'] / base_tps:.2f}x" if base_tps else "-"
        print(f"| {row['runner']} | {row['s_per_step']:.3f} | {row['tokens_per_s']:.0f} | {speed} | "
              f"{row['cpu_s_per_step']:.3f} | {row['mixing_s_per_batch'] * 1e3:.3f} ms | "
              f"{row['mixing_share'] * 100:.3f}% |")  # fmt: skip
    print(f"\nmixing alone per batch: loop Mixer {mixing['loop_mixer'] * 1e3:.3f} ms; hf.mix plan "
          f"{mixing['hf_plan'] * 1e3:.3f} ms, whole stream (plan + datasets generator + row fetch) "
          f"{mixing['hf_stream'] * 1e3:.3f} ms")  # fmt: skip
    result = {
        "model": name, "tiny": args.tiny, "batch_size": args.batch_size, "prompt": args.prompt,
        "completion": args.completion, "tokens_per_step": tokens, "repeats": args.repeats, "steps": args.steps,
        "warmup": args.warmup, "rows": rows, "mixing": mixing, "wall_per_step": wall, "cpu_per_step": cpu,
        "load_average_before": load_before, "load_average_after": load_after, "cpus": os.cpu_count(),
        "seconds": round(time.time() - t_start, 1), "python": platform.python_version(),
        "torch": torch.__version__, "when_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }  # fmt: skip
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
