"""The ``peer-sdft`` arm: TRL's self-distillation fine-tuning (``trl.experimental.sdft.SDFTTrainer``)
in place of the LoRA loop, on the main job's domain rows and budget.

SDFT (Shenfeld et al., arXiv 2601.19897) trains on the student's own sampled answers: for each
domain request the adapted model generates a completion, and the loss pulls its token
distribution towards a teacher's on that completion, the teacher being the base model (adapter
off, ``teacher_model_kind = "base"``) shown the request together with the domain row's answer as
a demonstration (``privileged_context``). TRL's trainer does all of it; this module turns the
job's rows and ``[training]`` keys into its dataset and :class:`SDFTConfig`, and its step log into
a :class:`~replaybank.llm.train.log.TrainLog`, so the job measures the adapter as it measures
every arm (:func:`replaybank.llm.recipes.rehearsal.train_arm`).

What matches the LoRA loop: the optimizer steps (:func:`lora_steps`: what :func:`.lora.train_lora`
takes for the same rows, capped by ``max_steps``), rows per micro-batch, accumulation, learning
rate (constant, AdamW), weight decay, clipping, the seed and the adapter itself: the arm's
adapter is the one :func:`.lora.add_lora` puts on every arm (``[training] lora_*``), handed to
TRL already wrapped. TRL's top-k distillation takes the smaller of its default k and the vocabulary. TRL refuses a PEFT model together with a ``peft_config`` (``ValueError``),
and wrapping the bare base through ``peft_config`` would put a second adapter beside the job's;
the PEFT model carries the same ``LoraConfig``. What does not match: the loss (distillation on
sampled completions, not cross-entropy on the rows), the answers trained on (generated, at most
``[evaluation] max_new_tokens`` tokens), the checkpoint (an interrupted generation of this arm
starts again), and the ``[training] precision`` of the step (TRL's fp32 on a CPU).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from replaybank.llm.config import Training
from replaybank.llm.model import peft_wrapping
from replaybank.llm.train.log import TrainLog

__all__ = ["SDFT_ARM", "TRL_REQUIRED", "lora_steps", "sdft_missing", "sdft_rows", "train_sdft"]

SDFT_ARM = "peer-sdft"
"""The arm's name in ``[evaluation] arms``."""
TRL_REQUIRED = "trl >= 1.16 (trl.experimental.sdft.SDFTTrainer with teacher_model_kind and privileged_context)"
"""What the arm needs: 1.16 is the release it is tested with; older experimental SDFT trainers
took other dataset columns."""

#: the SDFTConfig fields this module sets beyond the Trainer's own
_SDFT_FIELDS = ("teacher_model_kind", "teacher_prompt_template", "num_generations", "max_completion_length")


def sdft_missing() -> str | None:
    """Why TRL's SDFT trainer cannot be used here (None when it can): TRL absent, or a TRL
    without ``trl.experimental.sdft`` or without the fields this arm sets."""
    import importlib.util
    from dataclasses import fields
    from importlib.metadata import PackageNotFoundError, version

    try:
        found = version("trl")
    except PackageNotFoundError:
        return (f"TRL is not installed; the arm needs {TRL_REQUIRED}: install the `hf` extra "
                "(pip install 'replaybank[hf]'; in a checkout, bash scripts/bootstrap.sh installs every extra, "
                "scripts/main.sh only the main job's)")
    if importlib.util.find_spec("trl") is None:
        return f"TRL {found} is recorded as installed but cannot be imported; the arm needs {TRL_REQUIRED}"
    try:
        from trl.experimental.sdft import SDFTConfig, SDFTTrainer  # noqa: F401
    except ImportError as exc:
        return f"TRL {found} has no SDFTTrainer ({exc}); the arm needs {TRL_REQUIRED}"
    have = {f.name for f in fields(SDFTConfig)}
    lacking = [f for f in _SDFT_FIELDS if f not in have]
    if lacking:
        return f"TRL {found}'s SDFTConfig has no {', '.join(lacking)}; the arm needs {TRL_REQUIRED}"
    return None


def sdft_rows(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The SDFT dataset of domain records: the request as a one-turn conversation (``prompt``) and
    the record's answer as the teacher's demonstration (``privileged_context``).

    A ``{prompt, response}`` record gives both; a ``{messages}`` record gives its turns before the
    last assistant turn and that turn's text.

    Example:
        >>> sdft_rows([{"prompt": "List files", "response": "ls()"}])
        [{'prompt': [{'role': 'user', 'content': 'List files'}], 'privileged_context': 'ls()'}]

    Raises:
        ValueError: a ``{text}`` record (no request to answer) or a conversation without an
            assistant turn after a user turn, naming the record's ``where``.
    """
    out = []
    for i, rec in enumerate(records):
        where = rec.get("where", f"record {i}")
        if "messages" in rec:
            msgs = list(rec["messages"])
            last = max((k for k, m in enumerate(msgs) if m.get("role") == "assistant"), default=-1)
            if last < 1:
                raise ValueError(f"{where}: {SDFT_ARM} needs a conversation with an assistant turn after a user turn")
            out.append({"prompt": [dict(m) for m in msgs[:last]], "privileged_context": str(msgs[last]["content"])})
        elif "prompt" in rec:
            out.append({"prompt": [{"role": "user", "content": str(rec["prompt"])}],
                        "privileged_context": str(rec["response"])})
        else:
            raise ValueError(f"{where}: {SDFT_ARM} needs request/answer rows ({{prompt, response}} or {{messages}}), "
                             "not plain text")
    return out


def lora_steps(rows: int, cfg: Training, max_steps: int | None = None) -> int:
    """The optimizer steps :func:`.lora.train_lora` takes on ``rows`` domain rows alone (no
    rehearsal), capped by ``max_steps``.

    Example:
        >>> from replaybank.llm.config import Config
        >>> t = Config.from_dict({"training": {"batch_size": 8, "num_train_epochs": 2}}).training
        >>> lora_steps(20, t), lora_steps(20, t, max_steps=4)
        (6, 4)
    """
    from replaybank.mixing import Mixer

    per_epoch = Mixer([rows], [1.0], cfg.batch_size, seed=cfg.seed).batches_per_epoch()
    total = math.ceil(per_epoch / cfg.gradient_accumulation_steps) * cfg.num_train_epochs
    return total if max_steps is None else min(total, max_steps)


class _DropMessage:
    """A logging filter that drops the records whose message holds ``text``."""

    def __init__(self, text: str) -> None:
        self.text = text

    def filter(self, record: Any) -> bool:
        return self.text not in record.getMessage()


def train_sdft(
    model: Any, tokenizer: Any, records: Sequence[dict[str, Any]], cfg: Training, *, out_dir: Path,
    max_completion_length: int, on_eval: Callable[[int], dict[str, float]] | None = None, eval_points: int = 1,
    max_steps: int | None = None, desc: str = SDFT_ARM,
) -> TrainLog:
    """Train the job's LoRA-wrapped ``model`` in place with ``SDFTTrainer`` on ``records``.

    Args:
        model: the arm's PEFT model (:func:`.lora.add_lora`); its adapter-off forward is the teacher.
        tokenizer: the base model's tokenizer (its chat template renders the prompts).
        records: the generation's domain records (its lineage's).
        cfg: the ``[training]`` section.
        out_dir: TRL's ``output_dir`` (nothing is saved there: ``save_strategy = "no"``).
        max_completion_length: tokens sampled per answer.
        on_eval: called with the optimizer step at ``eval_points`` evenly spaced steps, as the LoRA
            loop calls it; what it returns is logged.
        max_steps: cap on optimizer steps.
        desc: progress bar label (the bar counts optimizer steps, with TRL's loss).

    Returns:
        A :class:`TrainLog`: per step TRL's logged loss (also as ``domain_loss``, the key the
        report plots), distillation loss and mean completion length, and the rows it drew.

    Raises:
        RuntimeError: TRL's SDFT trainer is not usable here (:func:`sdft_missing`).
        ValueError: records SDFT cannot train on (:func:`sdft_rows`).
    """
    import logging
    import time

    from tqdm.auto import tqdm

    missing = sdft_missing()
    if missing is not None:
        raise RuntimeError(f"{SDFT_ARM}: {missing}")
    from datasets import Dataset
    from transformers import PrinterCallback, TrainerCallback
    from trl.experimental.sdft import SDFTConfig, SDFTTrainer

    steps = lora_steps(len(records), cfg, max_steps)
    eval_at = {round(steps * (k + 1) / eval_points) for k in range(eval_points)}
    log = TrainLog()
    rows_per_step = cfg.batch_size * cfg.gradient_accumulation_steps

    class _Record(TrainerCallback):  # type: ignore[misc]
        """Each logged step into the TrainLog; the job's evaluations at its points."""

        def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, float] | None = None, **kw: Any) -> None:
            if logs and "loss" in logs:
                length = float(logs.get("completions/mean_length", 0.0))
                log.tokens += int(round(length * rows_per_step))
                log.steps.append({  # the step keys of the LoRA loop; the loss is SDFT's, not cross-entropy
                    "step": state.global_step, "epoch": logs.get("epoch"), "loss": float(logs["loss"]),
                    "domain_loss": float(logs["loss"]), "rehearsal_loss": None,
                    "distillation_loss": logs.get("self_distillation/distillation_loss"),
                    "completion_mean_length": length, "source_rows": {"domain": rows_per_step},
                })

        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            bar.update(state.global_step - bar.n)
            if log.steps:
                bar.set_postfix(loss=f"{log.steps[-1]['loss']:.3f}", refresh=False)
            if on_eval is not None and state.global_step in eval_at:
                t0 = time.perf_counter()
                log.evals.append({**on_eval(state.global_step), "step": state.global_step})
                evaluated[0] += time.perf_counter() - t0
                model.train()

    evaluated = [0.0]
    device = next(model.parameters()).device
    topk = SDFTConfig.distillation_topk or 100  # the class attribute holds the field's default
    args = SDFTConfig(
        output_dir=str(out_dir), max_steps=steps, per_device_train_batch_size=cfg.batch_size,
        gradient_accumulation_steps=cfg.gradient_accumulation_steps, learning_rate=cfg.learning_rate,
        lr_scheduler_type="constant", warmup_steps=0, weight_decay=cfg.weight_decay, max_grad_norm=cfg.max_grad_norm,
        optim="adamw_torch", seed=cfg.seed, use_cpu=device.type == "cpu", save_strategy="no", report_to="none",
        logging_steps=1, disable_tqdm=True, dataloader_num_workers=0, activation_checkpointing=cfg.gradient_checkpointing,
        disable_dropout=False,  # the base model is shared with the other arms: its modules are left as they are
        teacher_model_kind="base", num_generations=1, max_completion_length=max_completion_length,
        max_prompt_length=cfg.max_seq_length, distillation_topk=min(topk, int(model.config.vocab_size)),
    )
    # TRL warns that a student already wrapped in PEFT makes teacher_model_kind = "base" the
    # weights under the adapter: that is the teacher this arm wants (see the module docstring).
    trl_logger = logging.getLogger("trl.experimental.sdft.sdft_trainer")
    wanted = _DropMessage("already contains a PEFT adapter")
    trl_logger.addFilter(wanted)
    try:
        trainer = SDFTTrainer(model=model, args=args, train_dataset=Dataset.from_list(sdft_rows(records)),
                              processing_class=tokenizer, callbacks=[_Record()])
    finally:
        trl_logger.removeFilter(wanted)
    trainer.remove_callback(PrinterCallback)  # the job logs its own lines; TRL's per-step dicts stay in the TrainLog
    bar = tqdm(total=steps, desc=desc, unit="step", dynamic_ncols=True, leave=False)
    t0 = time.perf_counter()
    try:
        with peft_wrapping():  # TRL's generation unwraps the PEFT model, which reads the deprecated name
            trainer.train()
    finally:
        bar.close()
    log.seconds = time.perf_counter() - t0 - evaluated[0]
    return log
