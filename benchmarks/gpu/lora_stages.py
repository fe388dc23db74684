"""The device check's LoRA stages: step speed (replaybank vs ``transformers.Trainer``) and peak memory.

Every model is random (seeded) in the shape of a real one: weights never travel to the device, and
speed and memory depend on the shape only. Every row has the same length (``prompt`` unlabelled
tokens, then ``completion`` labelled ones), so both runners train on the same tokens per step with
no padding. The LoRA is the same for both: r32 / alpha 32 / dropout 0.05 on every linear layer
(:func:`replaybank.llm.train.add_lora`, adapters in the base's bf16, one seeded init put back before
each runner).

    >>> [s.name for s in speed_shapes(tiny=False)]
    ['smollm2-135m', 'qwen2.5-1.5b', 'qwen2.5-7b']
"""

from __future__ import annotations

import gc
import statistics
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from typing import Any

import numpy as np

ALL_LINEAR = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
LORA: dict[str, Any] = {"lora_rank": 32, "lora_alpha": 32, "lora_dropout": 0.05, "lora_target_modules": ALL_LINEAR}
MEMORY_ROWS = (1, 2, 4, 8)
REHEARSAL_SHARE = 0.1


@dataclass(frozen=True)
class Shape:
    """A random model of a real model's dimensions, and the rows it is timed on."""

    name: str
    arch: str  # "llama" or "qwen2"
    dims: dict[str, Any]
    rows: int
    seq: int
    like: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def prompt(self) -> int:
        """Unlabelled tokens per row (a quarter of the row); the rest are labelled."""
        return self.seq // 4


def _dims(h: int, inter: int, layers: int, heads: int, kv: int, vocab: int, tied: bool) -> dict[str, Any]:
    return {"hidden_size": h, "intermediate_size": inter, "num_hidden_layers": layers, "num_attention_heads": heads,
            "num_key_value_heads": kv, "vocab_size": vocab, "tie_word_embeddings": tied}  # fmt: skip


SMOLLM2 = _dims(576, 1536, 30, 9, 3, 49152, True)
QWEN15 = _dims(1536, 8960, 28, 12, 2, 151936, True)
QWEN7 = _dims(3584, 18944, 28, 28, 4, 152064, False)


def speed_shapes(tiny: bool) -> list[Shape]:
    """The three timed shapes: SmolLM2-135M, Qwen2.5-1.5B and Qwen2.5-7B (``tiny``: 2-layer stand-ins)."""
    if tiny:
        return [Shape("tiny-llama", "llama", _dims(32, 64, 2, 4, 2, 512, True), 2, 32),
                Shape("tiny-qwen2", "qwen2", _dims(48, 96, 2, 4, 2, 512, True), 2, 48),
                Shape("tiny-qwen2-untied", "qwen2", _dims(64, 128, 2, 4, 2, 512, False), 2, 64)]  # fmt: skip
    return [Shape("smollm2-135m", "llama", SMOLLM2, 8, 512, "HuggingFaceTB/SmolLM2-135M-Instruct"),
            Shape("qwen2.5-1.5b", "qwen2", QWEN15, 8, 1024, "Qwen/Qwen2.5-1.5B-Instruct"),
            Shape("qwen2.5-7b", "qwen2", QWEN7, 4, 2048, "Qwen/Qwen2.5-Coder-7B-Instruct")]  # fmt: skip


def memory_shape(tiny: bool) -> Shape:
    """The 7B shape of the memory stage (rows vary; 2048 tokens each; ``tiny``: 64)."""
    if tiny:
        return Shape("tiny-qwen2-untied", "qwen2", _dims(64, 128, 2, 4, 2, 512, False), 8, 64)
    return Shape("qwen2.5-7b", "qwen2", QWEN7, 8, 2048, "Qwen/Qwen2.5-Coder-7B-Instruct")


def build_model(shape: Shape, device: str, seed: int) -> Any:
    """A random bf16 model of ``shape``, built directly on ``device`` (no CPU copy of a 7B model)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    classes: tuple[Any, Any] = (LlamaForCausalLM, LlamaConfig) if shape.arch == "llama" else (Qwen2ForCausalLM, Qwen2Config)
    klass, config_class = classes
    config = config_class(**shape.dims, max_position_embeddings=max(4096, shape.seq), pad_token_id=0, eos_token_id=1)
    torch.manual_seed(seed)
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device(device):
            model = klass(config)
    finally:
        torch.set_default_dtype(before)
    return model  # bf16 parameters; the rotary buffers stay fp32, as from_pretrained(dtype=bf16) leaves them


def make_rows(n: int, prompt: int, completion: int, vocab: int, rng: np.random.Generator) -> list[tuple[np.ndarray, np.ndarray]]:
    """``n`` rows of random ids: ``prompt`` unlabelled tokens, then ``completion`` labelled ones.

    >>> ids, labels = make_rows(1, 2, 3, 50, np.random.default_rng(0))[0]
    >>> len(ids), labels[:2].tolist(), bool((labels[2:] == ids[2:]).all())
    (5, [-100, -100], True)
    """
    out = []
    for _ in range(n):
        ids = rng.integers(3, vocab, prompt + completion)
        out.append((ids, np.concatenate([np.full(prompt, -100), ids[prompt:]])))
    return out


class StepClock:
    """Wall time at every optimizer step (one global torch hook, the same for both runners); on a GPU
    the queue is drained first, so a step's time is the GPU's, not the host's."""

    def __init__(self, cuda: bool) -> None:
        from torch.optim.optimizer import register_optimizer_step_post_hook

        self.cuda = cuda
        self.marks: list[float] = []
        self.handle = register_optimizer_step_post_hook(self._mark)

    def _mark(self, *_: Any) -> None:
        if self.cuda:
            import torch

            torch.cuda.synchronize()
        self.marks.append(time.perf_counter())

    def take(self, warmup: int) -> list[float]:
        """Seconds of each step after the first ``warmup`` (>= 1: the first step has no start mark);
        resets the marks."""
        marks, self.marks = self.marks[max(warmup - 1, 0) :], []
        return [b - a for a, b in zip(marks, marks[1:])]


def _training(rows: int, seq: int, device: str, checkpointing: bool = False) -> Any:
    from replaybank.llm.config import Training

    return Training(batch_size=rows, mixing_ratio=REHEARSAL_SHARE, rehearsal_rows_per_epoch=16, learning_rate=2e-4,
                    max_seq_length=seq, device=device, gradient_checkpointing=checkpointing, num_threads=1, **LORA)  # fmt: skip


def _replaybank_steps(model: Any, shape: Shape, rows: int, steps: int, device: str, rng: np.random.Generator,
                      checkpointing: bool = False) -> None:  # fmt: skip
    from replaybank.llm.data.rows import token_rows
    from replaybank.llm.train import Source, train_lora

    vocab = int(model.get_input_embeddings().weight.shape[0])
    completion = shape.seq - shape.prompt
    domain = token_rows(make_rows((steps + 2) * rows, shape.prompt, completion, vocab, rng))
    rehearsal = token_rows(make_rows(16, shape.prompt, completion, vocab, rng))
    cfg = _training(rows, shape.seq, device, checkpointing)
    train_lora(model, 0, domain, cfg, max_steps=steps, desc="replaybank",
               sources=[Source("corpus", rehearsal, REHEARSAL_SHARE, sliced=True)])


def _trainer_steps(model: Any, shape: Shape, steps: int, device: str, rng: np.random.Generator) -> str:
    from transformers import Trainer, TrainingArguments, default_data_collator

    vocab = int(model.get_input_embeddings().weight.shape[0])
    rows = make_rows((steps + 2) * shape.rows, shape.prompt, shape.seq - shape.prompt, vocab, rng)
    data = [{"input_ids": ids.tolist(), "attention_mask": [1] * len(ids), "labels": lab.tolist()} for ids, lab in rows]
    with tempfile.TemporaryDirectory() as out:
        args = TrainingArguments(
            output_dir=out, per_device_train_batch_size=shape.rows, max_steps=steps, learning_rate=2e-4,
            lr_scheduler_type="constant", max_grad_norm=1.0, bf16=True, use_cpu=device == "cpu",
            logging_steps=1_000_000, save_strategy="no", report_to=[], disable_tqdm=True, dataloader_num_workers=0,
            remove_unused_columns=False, seed=0,
        )  # fmt: skip
        Trainer(model=model, args=args, train_dataset=data, data_collator=default_data_collator).train()
    return str(args.optim)


def stage_speed(device: str, tiny: bool, warmup: int, steps: int, log: Any = print) -> dict[str, Any]:
    """Median seconds per optimizer step and tokens/s of both runners at each shape."""
    from peft import get_peft_model_state_dict, set_peft_model_state_dict

    from replaybank.llm.train import add_lora

    cuda = device.startswith("cuda")
    clock = StepClock(cuda)
    results = []
    for shape in speed_shapes(tiny):
        model = add_lora(build_model(shape, device, seed=0), _training(shape.rows, shape.seq, device))
        init = {k: v.clone() for k, v in get_peft_model_state_dict(model).items()}
        row: dict[str, Any] = {"shape": shape.name, "like": shape.like, "rows": shape.rows, "seq": shape.seq,
                               "tokens_per_step": shape.rows * shape.seq}  # fmt: skip
        for runner in ("replaybank", "Trainer"):
            set_peft_model_state_dict(model, init)
            model.train()
            rng = np.random.default_rng(1)
            try:
                if runner == "replaybank":
                    _replaybank_steps(model, shape, shape.rows, warmup + steps, device, rng)
                else:
                    row["trainer_optim"] = _trainer_steps(model, shape, warmup + steps, device, rng)
                times = clock.take(warmup)
                med = statistics.median(times)
                row[runner] = {"s_per_step": med, "tokens_per_s": shape.rows * shape.seq / med, "steps": len(times)}
            except Exception as exc:  # one runner's failure (out of memory, an API change) leaves the others
                clock.take(0)
                row[runner] = {"error": _error(exc)}
                traceback.print_exc()
            log(f"speed {shape.name} {runner}: {row[runner]}")
        rb, tr = row["replaybank"].get("tokens_per_s"), row["Trainer"].get("tokens_per_s")
        row["ratio"] = rb / tr if rb and tr else None
        results.append(row)
        del model, init
        _free(cuda)
    clock.handle.remove()
    return {"shapes": results, "warmup": warmup, "steps": steps, "lora": LORA, "rehearsal_share": REHEARSAL_SHARE}


def _error(exc: BaseException) -> str:
    import torch

    first = (str(exc).splitlines() or [""])[0][:200]
    return f"out of memory: {first}" if isinstance(exc, torch.OutOfMemoryError) else f"{type(exc).__name__}: {first}"


def _free(cuda: bool) -> None:
    gc.collect()
    if cuda:
        import torch

        torch.cuda.empty_cache()


def stage_memory(device: str, tiny: bool, steps: int = 2, log: Any = print) -> dict[str, Any]:
    """Peak allocated GPU memory of LoRA steps on the 7B shape at 1, 2, 4, 8 rows, without and with
    gradient checkpointing. An out-of-memory step is recorded and the larger batches of that setting
    skipped. On a CPU the steps run and the memory columns are ``None``."""
    import torch

    from replaybank.llm.train.adapter import fresh_adapter

    cuda = device.startswith("cuda")
    shape = memory_shape(tiny)
    base = build_model(shape, device, seed=0)
    weights = torch.cuda.memory_allocated() if cuda else None
    runs = []
    for checkpointing in (False, True):
        failed = False
        for rows in MEMORY_ROWS:
            run: dict[str, Any] = {"checkpointing": checkpointing, "rows": rows, "seq": shape.seq}
            if failed:
                runs.append({**run, "error": "skipped: a smaller batch ran out of memory"})
                continue
            cfg = _training(rows, shape.seq, device, checkpointing)
            if cuda:
                torch.cuda.reset_peak_memory_stats()
            clock = StepClock(cuda)
            try:
                with fresh_adapter(base, cfg) as model:
                    _replaybank_steps(model, shape, rows, steps, device, np.random.default_rng(2), checkpointing)
                times = clock.take(1)
                run["s_per_step"] = statistics.median(times) if times else None
                run["peak_gib"] = torch.cuda.max_memory_allocated() / 2**30 if cuda else None
                run["reserved_gib"] = torch.cuda.max_memory_reserved() / 2**30 if cuda else None
            except Exception as exc:
                run["error"] = _error(exc)
                traceback.print_exc()
                failed = isinstance(exc, torch.OutOfMemoryError)
            finally:
                clock.handle.remove()
            log(f"memory {shape.name} checkpointing={checkpointing} rows={rows}: {run}")
            runs.append(run)
            _free(cuda)
    return {"shape": shape.name, "like": shape.like, "weights_gib": weights / 2**30 if weights is not None else None,
            "parameters": sum(p.numel() for p in base.parameters()), "lora": LORA, "steps": steps, "runs": runs}  # fmt: skip
