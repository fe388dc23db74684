"""LoRA fine-tuning with Transformers' ``Trainer``, 10% rehearsal mixed in by replaybank.

An ordinary Trainer + PEFT script; the replaybank part is one ``mix(..., MixSpec(...))``: every batch
of ``--batch-size`` rows (per device; under torchrun every global batch) holds exactly
``round(ratio * batch)`` rehearsal rows by replaybank's quota rule, each epoch a fresh seeded
permutation of the domain rows and, with ``--rows-per-epoch``, a fresh seeded slice of the pool.

Data: two JSONL files of ``{"prompt": ..., "answer": ...}`` rows (domain task, general rehearsal
pool); the loss is on the answer tokens only.

    python examples/hf_trainer_rehearsal.py --model MODEL_DIR --domain task.jsonl \
        --rehearsal general.jsonl --ratio 0.1 --max-steps 200 --output-dir runs/hf-trainer
    torchrun --nproc-per-node 2 examples/hf_trainer_rehearsal.py ...   # same, on 2 ranks

``--kl-weight W`` adds the main job's KL to the base model on the rehearsal rows
(``replaybank.hf.KLToBase``); examples/trl_sft_rehearsal.py also shows the retention callback.
"""

from __future__ import annotations

import argparse
import json
from typing import Any


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="local model folder (or hub id when online)")
    p.add_argument("--domain", required=True, help="JSONL of {prompt, answer} task rows")
    p.add_argument("--rehearsal", required=True, help="JSONL of {prompt, answer} general rows")
    p.add_argument("--ratio", type=float, default=0.1, help="rehearsal share of every batch")
    p.add_argument("--kl-weight", type=float, default=0.0, help="KL to the base on rehearsal rows (0: off)")
    p.add_argument("--rows-per-epoch", type=int, default=None, help="seeded rehearsal slice per epoch")
    p.add_argument("--batch-size", type=int, default=8, help="rows per device per step")
    p.add_argument("--max-steps", type=int, default=100)
    p.add_argument("--learning-rate", type=float, default=2e-4)
    p.add_argument("--lora-rank", type=int, default=8)
    p.add_argument("--max-length", type=int, default=512)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--output-dir", required=True)
    p.add_argument("--save-steps", type=int, default=500)
    p.add_argument("--resume", default=None, help="checkpoint folder to resume from")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> Any:
    args = parse_args(argv)
    from datasets import Dataset
    from peft import LoraConfig, get_peft_model
    from transformers import (
        AutoModelForCausalLM,
        AutoTokenizer,
        DataCollatorForSeq2Seq,
        Trainer,
        TrainingArguments,
    )

    import replaybank.hf

    tok = AutoTokenizer.from_pretrained(args.model)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token

    def encode(row: dict[str, str]) -> dict[str, list[int]]:
        prompt = tok(row["prompt"] + "\n", add_special_tokens=False)["input_ids"]
        answer = tok(row["answer"] + tok.eos_token, add_special_tokens=False)["input_ids"]
        ids = (prompt + answer)[: args.max_length]
        return {"input_ids": ids, "labels": ([-100] * len(prompt) + answer)[: args.max_length]}

    def load(path: str) -> Dataset:
        with open(path, encoding="utf-8") as f:
            rows = [json.loads(line) for line in f if line.strip()]
        return Dataset.from_list(rows).map(encode, remove_columns=["prompt", "answer"])

    # The replaybank line: an exact rehearsal quota in every batch, resumable, rank-aware.
    spec = replaybank.hf.MixSpec(
        args.ratio, batch_size=args.batch_size, seed=args.seed, rows_per_epoch=args.rows_per_epoch
    )
    train = replaybank.hf.mix(load(args.domain), load(args.rehearsal), spec)

    model = AutoModelForCausalLM.from_pretrained(args.model)
    lora = LoraConfig(r=args.lora_rank, lora_alpha=2 * args.lora_rank, target_modules="all-linear",
                      task_type="CAUSAL_LM")  # fmt: skip
    model = get_peft_model(model, lora)
    training_args = TrainingArguments(
        output_dir=args.output_dir,
        per_device_train_batch_size=args.batch_size,
        max_steps=args.max_steps,  # an iterable dataset has no length: steps, not epochs
        learning_rate=args.learning_rate,
        logging_steps=1,
        save_steps=args.save_steps,
        seed=args.seed,
        report_to=[],
        use_cpu=not __import__("torch").cuda.is_available(),
        # Under torchrun each rank pads its own batch; accelerate's default for iterable datasets
        # (rank 0 reads and dispatches) would need every rank's batch padded to one shape.
        accelerator_config={"dispatch_batches": False},
        remove_unused_columns=args.kl_weight == 0,  # the KL term needs the rows' `source` column
    )
    trainer = Trainer(
        model=model,
        args=training_args,
        train_dataset=train,
        data_collator=DataCollatorForSeq2Seq(tok, padding=True),
    )
    if args.kl_weight > 0:
        replaybank.hf.KLToBase(model, args.kl_weight).attach(trainer)
    trainer.train(resume_from_checkpoint=args.resume)
    return trainer


if __name__ == "__main__":
    main()
    import torch.distributed as dist

    if dist.is_initialized():  # under torchrun: leave the process group together (gloo aborts otherwise)
        dist.barrier()
        dist.destroy_process_group()
