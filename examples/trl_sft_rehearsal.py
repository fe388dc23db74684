"""LoRA fine-tuning with TRL's ``SFTTrainer``: 10% rehearsal and KL to the base model by replaybank.

An ordinary TRL + PEFT script; the replaybank part is three calls: ``mix(..., MixSpec(...))`` (every batch of
``--batch-size`` rows holds exactly ``round(ratio * batch)`` rehearsal rows, by the main job's
quota rule), ``KLToBase(...).attach(trainer)`` (the main job's KL-to-base term on the rehearsal
rows, the base distribution from the adapter switched off) and, with ``--retention-every``, the
main job's general-capability suite as a ``RetentionCallback``.

Runs offline on the embedded SmolLM2-135M-Instruct with the main job's embedded data (the
fictional tool API as the domain task, Python documentation passages as the rehearsal pool):

    python examples/trl_sft_rehearsal.py --output-dir runs/trl-sft --max-steps 50

or on your own model and JSONL files of ``{"prompt": ..., "completion": ...}`` rows:

    python examples/trl_sft_rehearsal.py --model MODEL_DIR --domain task.jsonl \
        --rehearsal general.jsonl --ratio 0.1 --kl-weight 0.1 --output-dir runs/trl-sft
"""

from __future__ import annotations

import argparse
import json
from typing import Any


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="SmolLM2-135M-Instruct", help="local model folder (default: embedded)")
    p.add_argument("--domain", default=None, help="JSONL of {prompt, completion} task rows (default: tool API)")
    p.add_argument("--rehearsal", default=None, help="JSONL of {prompt, completion} general rows (default: docs)")
    p.add_argument("--ratio", type=float, default=0.1, help="rehearsal share of every batch")
    p.add_argument("--kl-weight", type=float, default=0.1, help="weight of KL to the base on rehearsal rows")
    p.add_argument("--retention-every", type=int, default=0, help="suite retention every N steps (0: off)")
    p.add_argument("--batch-size", type=int, default=8, help="rows per device per step")
    p.add_argument("--max-steps", type=int, default=50)
    p.add_argument("--learning-rate", type=float, default=2e-4)
    p.add_argument("--lora-rank", type=int, default=16)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--output-dir", required=True)
    return p.parse_args(argv)


def builtin_rows(n_domain: int = 200, n_general: int = 200) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The main job's embedded data as conversational {prompt, completion} rows (rendered with the
    model's chat template by SFTTrainer): tool-API requests and calls; Python documentation
    passages, each prompted by its first 128 characters, as the main job's rehearsal rows are."""
    from replaybank.llm.data.corpus import python_docs_corpus
    from replaybank.llm.data.rows import rehearsal_prompt
    from replaybank.llm.data.toolapi import generate_examples

    def turn(prompt: str, answer: str) -> dict[str, Any]:
        return {"prompt": [{"role": "user", "content": prompt}],
                "completion": [{"role": "assistant", "content": answer}]}  # fmt: skip

    domain = [turn(r["prompt"], r["response"]) for r in generate_examples(n_domain, seed=0)]
    texts = [t[:400] for t in python_docs_corpus().texts[:n_general]]
    general = [turn(rehearsal_prompt(t, "Continue the following passage", 128), t) for t in texts]
    return domain, general


def main(argv: list[str] | None = None) -> Any:
    args = parse_args(argv)
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    import replaybank.hf
    from replaybank.llm.model import resolve_base_model

    def load(path: str) -> list[dict[str, str]]:
        with open(path, encoding="utf-8") as f:
            return [json.loads(line) for line in f if line.strip()]

    domain, general = builtin_rows() if not (args.domain and args.rehearsal) else ([], [])
    domain = load(args.domain) if args.domain else domain
    general = load(args.rehearsal) if args.rehearsal else general
    where = str(resolve_base_model(args.model, log=lambda *a: None))  # a local folder, offline
    tok = AutoTokenizer.from_pretrained(where)
    model = AutoModelForCausalLM.from_pretrained(where)

    # replaybank 1/3: an exact rehearsal quota in every batch (resumable, rank-aware).
    spec = replaybank.hf.MixSpec(args.ratio, batch_size=args.batch_size, seed=args.seed)
    train = replaybank.hf.mix(Dataset.from_list(domain), Dataset.from_list(general), spec)

    config = SFTConfig(
        output_dir=args.output_dir,
        per_device_train_batch_size=args.batch_size,
        max_steps=args.max_steps,  # an iterable dataset has no length: steps, not epochs
        learning_rate=args.learning_rate,
        logging_steps=1,
        save_strategy="no",
        seed=args.seed,
        report_to=[],
        use_cpu=not __import__("torch").cuda.is_available(),
        remove_unused_columns=False,  # keep the rows' `source` column for the KL term
        accelerator_config={"dispatch_batches": False},  # under torchrun: each rank pads its own batch
        activation_checkpointing=True,  # TRL's default, under the name transformers 5 uses
    )
    lora = LoraConfig(r=args.lora_rank, lora_alpha=args.lora_rank, target_modules="all-linear",
                      task_type="CAUSAL_LM")  # fmt: skip
    trainer = SFTTrainer(model=model, args=config, train_dataset=train, processing_class=tok, peft_config=lora)

    # replaybank 2/3: KL(base || adapted) on the rehearsal rows, base = the adapter switched off.
    replaybank.hf.KLToBase(trainer.model, args.kl_weight).attach(trainer)
    # replaybank 3/3 (optional): the general-capability suite's retention, logged every N steps.
    if args.retention_every:
        replaybank.hf.RetentionCallback.from_suite(tok, every=args.retention_every, threshold=0.8,
                                                   cache_dir=f"{args.output_dir}/suite-cache").attach(trainer)  # fmt: skip
    trainer.train()
    return trainer


if __name__ == "__main__":
    main()
