"""The config schema of every LLM job: its sections, every key's type, default, help and range.

Each section is a dataclass whose fields carry their help and bounds in ``metadata`` (``min``,
``max``, ``gt``, ``lt``, ``nonempty``); :func:`.values.read_section` reads them to check a file,
and each job writes its effective config with their help. Defaults are the embedded default
experiment (SmolLM2-135M-Instruct taught a fictional tool API, Python's documentation as the
rehearsal corpus, 10% of every batch).

The sections both jobs read are declared once, here, with the main job's defaults:

=====================  ==========================  ===================================
section                replaybank run              replaybank loop (its defaults)
=====================  ==========================  ===================================
``[training]``         :class:`Training`           :class:`Training` (:data:`LOOP_TRAINING`)
``[evaluation]``       :class:`Evaluation`         :class:`SharedEvaluation` (:data:`LOOP_EVALUATION`)
``[data]``             :class:`Data`               :class:`SharedData`
``[recipes.NAME]``     :class:`.recipe.Recipe`     :class:`.recipe.Recipe`
=====================  ==========================  ===================================

A job's own keys sit beside them: the main job's :class:`Orchestration` and :class:`Output`
and the run-only keys of :class:`Data` and :class:`Evaluation` (subclasses of the shared
ones), the loop's ``[loop]`` (:mod:`.loop`). A job's different defaults are a table of
overrides (:data:`LOOP_TRAINING`, :data:`LOOP_EVALUATION`); types and bounds are never
declared twice.

Example:
    >>> from dataclasses import fields
    >>> rate = next(f for f in fields(Training) if f.name == "learning_rate")
    >>> rate.default, dict(rate.metadata)
    (0.002, {'help': 'AdamW learning rate', 'gt': 0, 'max': 10})
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from replaybank.llm.runtime import Precision

Lineage = Literal["window", "all", "best"]
#: ``auto``, ``cpu``, ``cuda`` or ``cuda:N`` (checked by :func:`.values.parse_device`).
Device = str
MixBy = Literal["rows", "tokens"]
KLOn = Literal["rehearsal", "all"]
#: ``[evaluation] choose``: the adapter as trained, or the operating point chosen against the floor
Choose = Literal["last", "floor"]
#: the keys of choosing an operating point; written into the effective config only with ``choose = "floor"``
CHOOSE_KEYS = ("choose", "scales", "scale_profiles", "keep_skill", "checkpoints")
#: a recipe's replay controller (:mod:`replaybank.controllers`); ``none``: the fixed ``ratio``, unmeasured
ControllerName = Literal["none", "fixed", "bandit", "proxy"]
#: a recipe's peer method (:mod:`replaybank.llm.train.peers`, run through PEFT); ``none``: plain LoRA
PeerName = Literal["none", "osf", "corda", "intruder", "attn-lowrank"]
ARM_SOURCES = ("corpus", "self", "replay", "onpolicy", "selfgen")
BUILTIN_AGENDA = "builtin:agenda"
BUILTIN_LEDGER = "builtin:ledger"
DEFAULT_ARMS = ["base", "naive", "self-distill", "routed"]
ALL_LINEAR = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
BUILTIN_TOOLAPI = "builtin:toolapi"
BUILTIN_PROBE = "builtin"
BUILTIN_VALIDATION_SUITE = "builtin:validation"  # the shipped split, as replaybank.llm.eval.suite names it
RETENTION_FLOOR = 0.9


def _f(default: Any, help: str, **kw: Any) -> Any:
    """A dataclass field with its help and bounds (``min``, ``max``, ``gt``, ``lt``, ``nonempty``)."""
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: type(default)(default), metadata={"help": help, **kw})
    return field(default=default, metadata={"help": help, **kw})


@dataclass
class Orchestration:
    num_generations: int = _f(1, "generations of domain data trained one after another", min=1, max=10_000)
    training_window_size: int = _f(3, "K: generations of domain data each generation trains on", min=1, max=10_000)
    lineage: Lineage = _f("window", "which earlier generations join: window (last K), all, best (K best by score)")


@dataclass
class Training:
    base_model: str = _f("SmolLM2-135M-Instruct", "the embedded SmolLM2, a local model folder, a .gguf file or a locally cached HF id", nonempty=True)
    inner_loss: Literal["sft"] = _f("sft", "training loss; sft = completion-only cross-entropy")
    lora_rank: int = _f(16, "LoRA rank r", min=1, max=65_536)
    lora_alpha: int = _f(16, "LoRA scaling alpha (the update is scaled by alpha / r)", min=1, max=65_536)
    lora_dropout: float = _f(0.0, "dropout on the LoRA input", min=0, lt=1)
    lora_target_modules: list[str] = _f(ALL_LINEAR, "names of the linear modules that get adapters", nonempty=True)
    learning_rate: float = _f(2e-3, "AdamW learning rate", gt=0, max=10)
    weight_decay: float = _f(0.0, "AdamW weight decay", min=0, max=10)
    num_train_epochs: int = _f(2, "passes over the domain data (2 x 240 rows: chosen on a validation split, benchmarks/domain_budget.py)", min=1, max=10_000)
    batch_size: int = _f(8, "rows per micro-batch (the mixing quota applies to each)", min=1, max=65_536)
    gradient_accumulation_steps: int = _f(1, "micro-batches per optimizer step", min=1, max=65_536)
    max_grad_norm: float = _f(1.0, "gradient clipping norm (0 = off)", min=0, max=1e6)
    precision: Precision = _f("auto", "arithmetic of the LoRA training step: auto (bf16 autocast on a CPU with bfloat16 units, else fp32), fp32 or bf16; LoRA weights and AdamW state stay fp32")
    gradient_checkpointing: bool = _f(False, "recompute each decoder layer's activations in the backward pass instead of keeping them (less memory, more compute); an error for a model without support")
    mixing_ratio: float = _f(0.1, "share of every batch taken from the rehearsal corpus, in [0, 1)", min=0, lt=1)
    mix_by: MixBy = _f("rows", "what the rehearsal share is a share of: rows of every batch, or labelled tokens (= of the loss)")
    rehearsal_dataset: str = _f("python-docs", "python-docs (embedded), a .txt/.jsonl/.parquet file or folder, a save_to_disk folder, or a locally cached HF dataset", nonempty=True)
    rehearsal_split: str = _f("train", "split of an HF dataset", nonempty=True)
    rehearsal_text_field: str = _f("text", "JSONL field / Parquet column holding the text", nonempty=True)
    rehearsal_rows_per_epoch: int = _f(500, "size of each virtual epoch's seeded slice of the rehearsal pool; if set without mixing_ratio it also sets the share", min=1, max=100_000_000)
    rehearsal_prompt: str = _f("Continue the following passage", "instruction placed before the passage excerpt")
    rehearsal_prompt_chars: int = _f(128, "characters of the passage shown in the prompt (less than rehearsal_max_chars)", min=0, max=100_000_000)
    rehearsal_max_chars: int = _f(400, "passages are cut to this many characters", min=1, max=100_000_000)
    max_seq_length: int = _f(256, "rows are truncated to this many tokens", min=8, max=1_048_576)
    seed: int = _f(0, "seed of data order, slices and LoRA init", min=0, max=2**31 - 1)
    device: Device = _f("auto", "auto = cuda when available (bf16), else cpu (fp32); cpu, cuda or cuda:N; with --jobs a bare cuda puts worker k on GPU k mod n_gpus", device=True)
    num_threads: int = _f(0, "torch CPU threads; 0 = auto: the CPUs other processes leave free over 0.4 s at the start (/proc/stat), at least 1", min=0, max=4096)
    save_every: int = _f(0, "save a resumable checkpoint every N optimizer steps (0 = none: an arm cut short restarts; finished arms are kept in OUT.partial either way)", min=0)


@dataclass
class SharedData:
    """The ``[data]`` keys every job reads: the self-synthesized rehearsal rows (``replaybank run``'s
    ``[data]`` adds its domain and held-out data, :class:`Data`; the loop reads these alone)."""

    self_rows: int = _f(96, "self-synthesized rehearsal rows generated (once per seed, cached)", min=1, max=1_000_000)
    self_open_rows: bool = _f(True, "keep the base model's self-synthesized answers that hit the generation budget, as open rows without an end of turn (false drops them)")


@dataclass
class Data(SharedData):
    """``replaybank run``'s ``[data]``: the shared keys (:class:`SharedData`) and the main job's data."""

    domain_train: list[str] = _f([BUILTIN_TOOLAPI], "domain training data, one source per generation: a JSONL/Parquet/.txt/.md file or folder, a saved or cached HF dataset, or builtin:toolapi/agenda/ledger", nonempty=True)
    domain_eval: list[str] = _f([BUILTIN_TOOLAPI], "held-out domain data (same formats), one for all generations or one per generation", nonempty=True)
    domain_train_rows: int = _f(240, "rows generated per generation for a builtin domain (builtin:toolapi, builtin:agenda, builtin:ledger)", min=1, max=10_000_000)
    domain_eval_rows: int = _f(48, "held-out domain rows (cap for files; count for builtin)", min=1, max=10_000_000)
    domain_split: str = _f("train", "split read from a saved DatasetDict folder or a cached HF dataset named in domain_train / domain_eval", nonempty=True)
    general_eval: str = _f("", "held-out general text; empty = hold out whole documents of the rehearsal corpus")
    general_eval_rows: int = _f(16, "held-out general passages", min=1, max=10_000_000)
    probe: str = _f(BUILTIN_PROBE, "general-skill probe: builtin, or a JSONL file of {prompt, answer}", nonempty=True)
    suite: str = _f("builtin", "general-capability suite (conversation, instruction, arithmetic, code; open = agreement with the base; tool-call leakage): builtin or a JSONL file", nonempty=True)
    validation_suite: str = _f(BUILTIN_VALIDATION_SUITE, "the suite's validation split, where choices made from suite scores (checkpoint, scale, threshold, an arm's operating point) are made, so the test split (suite) is only scored: builtin:validation (other requests in the same families, about two thirds of the size, every item one the base model passes) or a JSONL file of suite items sharing no id or prompt with suite; empty = no validation split (a chooser then refuses)")
    self_prompts: str = _f("builtin", "prompt pool the base model answers for self-synthesized rehearsal: builtin or a JSONL/text file", nonempty=True)


@dataclass
class SharedEvaluation:
    """The ``[evaluation]`` keys every job reads: generation budget and batch, the suite's sample
    (``replaybank run``'s ``[evaluation]`` adds its arms, seeds and gate, :class:`Evaluation`)."""

    max_new_tokens: int = _f(48, "generation budget per domain answer (the main job's held-out requests; each turn of the loop's tasks, acting and evaluation), stops at the end of turn", min=1, max=65_536)
    generation_batch_size: int = _f(64, "prompts generated together (left-padded; on CPU, 64 ran 2.4x faster than 16)", min=1, max=65_536)
    suite_per_family: int = _f(0, "general-capability suite items evaluated per family and seed (a seeded sample; 0 = every item)", min=0, max=1_000_000)


@dataclass
class Evaluation(SharedEvaluation):
    """``replaybank run``'s ``[evaluation]``: the shared keys (:class:`SharedEvaluation`) and the
    main job's arms, seeds, probe and retention gate."""

    arms: list[str] = _f(DEFAULT_ARMS, "arms to run: base, or rehearsal recipes: naive, rehearsal-corpus, rehearsal-self, rehearsal-replay, rehearsal-self-kl, self-distill, self-distill-onpolicy, control; routed (naive behind a router with base fallback); peer methods peer-osf, peer-corda, peer-intruder, peer-attn-lowrank, peer-sdft; any [recipes.NAME]", nonempty=True)
    eval_points: int = _f(1, "held-out loss evaluations per trained arm and generation, evenly spaced, the last at the end", min=1, max=10_000)
    probe_pairs: int = _f(2, "batch pairs for the interference probe (`replaybank probe`, and per source inside `replaybank run`)", min=1, max=100_000)
    seeds: int = _f(1, "seeds per arm (training.seed, +1, ...); the report gives mean and std", min=1, max=1_000)
    arm_processes: int = _f(0, "worker processes that train a seed's arms side by side, one torch thread each (each loads the model); 0 = auto: one per thread num_threads picks, on a CPU, when the copies fit in half the free memory", min=0, max=64)
    generation_precision: Precision = _f("auto", "arithmetic of generated answers and held-out losses: auto (bf16 autocast on a CPU with bfloat16 units, else fp32), fp32 or bf16; base and arms always match")
    probe_sources: bool = _f(False, "also run the interference probe per rehearsal source inside `replaybank run` (its first-order figures beside the measured forgetting in report.md; they have not predicted it, docs/llm.md)")
    retention_floor: float | dict[str, float] = _f(RETENTION_FLOOR, "least mean retention over seeds each family must keep, in [0, 1]: one number, or a table {family = number} (others keep 0.9); gates --require-floor")
    gate_arm: str = _f("", "the arm --require-floor gates (one of arms, not base); empty = the best rehearsal arm of the targets")
    choose: Choose = _f("last", "the operating point each trained arm runs at: last (the adapter as trained) or floor (of post-hoc scales measured on the validation split and validation domain requests, the best domain exact match whose retention keeps retention_floor and whose domain score keeps keep_skill of the adapter's as trained)")
    scales: list[float] = _f([0.25, 0.5, 0.75, 1.0], "choose = floor: the post-hoc scales of the adapter tried, each in (0, 2]")
    scale_profiles: list[str] = _f(["uniform"], "choose = floor: how a scale applies over depth: uniform (every layer) and/or depth (the first layer at the scale, linear to 1 at the last)")
    keep_skill: float = _f(0.5, "choose = floor: a point is eligible only if its validation domain exact match is at least keep_skill x the adapter's as trained (0 = no such rule)", min=0, max=1)
    checkpoints: int = _f(0, "choose = floor: the adapter's states at this many evenly spaced steps of the last generation's training, before its end, kept in memory and measured as frontier points (0 = none; a shorter training keeps one per step)", min=0, max=1_000)


@dataclass
class Output:
    out_dir: str = _f("runs/default", "where report.md, metrics.json, the plot and adapters go", nonempty=True)
    save_adapters: bool = _f(True, "save each trained adapter with its config and data manifest")


#: ``[training]`` defaults of the consolidation loop (``replaybank loop``): a small, fast adapter.
#: Every other key, and every type and bound, is :class:`Training`'s, shared by both jobs.
LOOP_TRAINING: dict[str, Any] = {
    "lora_rank": 8,
    "lora_alpha": 16,
    "learning_rate": 1e-3,
    "batch_size": 8,
    "num_train_epochs": 1,
    "max_seq_length": 160,
    "num_threads": 1,
    "precision": "fp32",  # the loop's published figures were measured in fp32
}


#: ``[evaluation]`` of the loop: the keys it reads (:class:`SharedEvaluation`) with its defaults,
#: which are the ones its published tables were measured with (benchmarks/results/loop_config.toml).
LOOP_EVALUATION: dict[str, Any] = {
    "max_new_tokens": 40,  # a qx call takes at most ~30 tokens
    "generation_batch_size": 32,
    "suite_per_family": 16,
}


SECTIONS: dict[str, type] = {
    "orchestration": Orchestration,
    "training": Training,
    "data": Data,
    "evaluation": Evaluation,
    "output": Output,
}
