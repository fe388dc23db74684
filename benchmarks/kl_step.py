"""What ``replaybank.hf.KLToBase`` adds to a LoRA step: the base pass on the rehearsal rows only,
against the base pass on the whole batch (the plain way) and against no KL term.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/kl_step.py [--tiny] [--steps 4] [--batch-size 8]

One step = the adapted forward, ``KLToBase``'s loss (cross-entropy + KL to the base on the
rehearsal rows) and the backward, on the embedded SmolLM2-135M-Instruct (``--tiny``: a random
2-layer Llama) with LoRA r=16 on q/k/v/o, a batch of ``--batch-size`` rows of ``--prompt`` +
``--completion`` random tokens with one rehearsal row (10% of 8, the issue's case). Modes,
interleaved step by step in one process on one torch thread:

* ``no KL``: ``KLToBase(weight=0)`` (cross-entropy only);
* ``KL, base pass on every row``: the base pass given the whole batch (the old behaviour);
* ``KL, base pass on rehearsal rows``: as shipped.

Prints the median CPU seconds of this process per step (wall alongside) and each KL mode's cost
over ``no KL``; writes ``benchmarks/results/kl_step.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[var] = "1"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true", help="a random 2-layer Llama instead of SmolLM2")
    parser.add_argument("--steps", type=int, default=4, help="timed steps per mode")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--prompt", type=int, default=32, help="prompt tokens per row")
    parser.add_argument("--completion", type=int, default=64, help="labelled tokens per row")
    parser.add_argument("--out", default="benchmarks/results/kl_step.json")
    args = parser.parse_args()

    import torch
    import transformers
    from peft import LoraConfig, get_peft_model

    import replaybank.llm.train.kl as kl_module
    from replaybank.hf import KLToBase

    torch.set_num_threads(1)
    torch.manual_seed(0)
    if args.tiny:
        config = transformers.LlamaConfig(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                          num_attention_heads=4, num_key_value_heads=2)  # fmt: skip
        base = transformers.LlamaForCausalLM(config)
        name = "tiny random Llama"
    else:
        from replaybank.hf import embedded_model

        base = transformers.AutoModelForCausalLM.from_pretrained(embedded_model(), dtype=torch.float32)
        name = "SmolLM2-135M-Instruct (fp32)"
    lora = LoraConfig(r=16, lora_alpha=16, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"], task_type="CAUSAL_LM")
    model = get_peft_model(base, lora)
    model.train()
    with torch.no_grad():  # a moved adapter, so the KL is not trivially 0
        for pname, p in model.named_parameters():
            if "lora_B" in pname:
                p.normal_(0, 0.02)
    rows, length = args.batch_size, args.prompt + args.completion
    vocab = model.config.vocab_size
    ids = torch.randint(3, vocab, (rows, length), generator=torch.Generator().manual_seed(1))
    att = torch.ones_like(ids)
    labels = ids.clone()
    labels[:, : args.prompt] = -100
    source = torch.zeros(rows, dtype=torch.long)
    source[0] = 1

    real_base = kl_module.base_logits_at

    def whole_batch_base(model_, ids_, att_, mask):
        # the old behaviour: the base forward on every row, the head on the KL positions
        from replaybank.llm.eval.losses import logits_at

        with torch.no_grad(), model_.disable_adapter():
            return logits_at(model_, ids_, att_, mask)

    modes = {
        "no KL": (KLToBase(model, 0.0), real_base),
        "KL, base pass on every row": (KLToBase(model, 0.1), whole_batch_base),
        "KL, base pass on rehearsal rows": (KLToBase(model, 0.1), real_base),
    }
    import replaybank.hf.kl as hf_kl

    times: dict[str, list[tuple[float, float]]] = {m: [] for m in modes}
    for step in range(args.steps + 1):  # step 0 warms up
        for mode, (loss_fn, base_fn) in modes.items():
            hf_kl.base_logits_at = base_fn
            loss_fn.install()
            cpu0, wall0 = time.process_time(), time.perf_counter()
            out = model(input_ids=ids, attention_mask=att, source=source)
            loss = loss_fn(out, labels)
            loss.backward()
            cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
            loss_fn.remove()
            model.zero_grad(set_to_none=True)
            if step:
                times[mode].append((cpu, wall))
    hf_kl.base_logits_at = real_base
    load = os.getloadavg()
    med = {m: (statistics.median(c for c, _ in t), statistics.median(w for _, w in t)) for m, t in times.items()}
    plain = med["no KL"][0]
    print(f"{name}, LoRA r=16, {rows} rows x {length} tokens, 1 rehearsal row; load average {load[0]:.2f}\n")
    print(f"{'mode':34s} {'CPU s/step':>11s} {'wall s/step':>12s} {'vs no KL':>9s}")
    for mode, (cpu, wall) in med.items():
        print(f"{mode:34s} {cpu:11.3f} {wall:12.3f} {cpu / plain - 1:+9.1%}")
    out_json = {
        "model": name, "rows": rows, "prompt": args.prompt, "completion": args.completion, "steps": args.steps,
        "machine": platform.platform(), "load_average": load, "median_cpu_s": {m: v[0] for m, v in med.items()},
        "median_wall_s": {m: v[1] for m, v in med.items()}, "torch": torch.__version__,
    }  # fmt: skip
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out_json, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
