"""The experiment config: a TOML schema, defaults, and validation with "did you mean".

Every key lives in one section; the reference's ``[orchestration]`` and ``[training]`` keys are
accepted as written. Defaults are the embedded default experiment (SmolLM2-135M-Instruct taught a
fictional tool API, Python's documentation as the rehearsal corpus, 10% of every batch).

Validation runs before anything heavy: a wrong type, a value out of range or an unknown key raises
:class:`ConfigError` naming the file, ``[section] key``, the value and what was expected.

Example:
    >>> cfg = Config.from_dict({"training": {"learning_rate": 1e-3}})
    >>> cfg.training.learning_rate, cfg.training.lora_rank
    (0.001, 16)
    >>> Config.from_dict({"training": {"learnig_rate": 1e-3}})
    Traceback (most recent call last):
    ...
    replaybank.llm.config.ConfigError: <config>: unknown key [training] learnig_rate; did you mean 'learning_rate'?
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal, get_args, get_type_hints

import tomllib

from replaybank.errors import ReplayBankError

Lineage = Literal["window", "all", "best"]
Arm = Literal["base", "naive", "rehearsal"]
Device = Literal["auto", "cpu", "cuda"]
MixBy = Literal["rows", "tokens"]
KLOn = Literal["rehearsal", "all"]
ARM_SOURCES = ("corpus", "self", "replay")
BUILTIN_AGENDA = "builtin:agenda"
DEFAULT_ARMS = ["base", "naive", "rehearsal-corpus", "rehearsal-self", "rehearsal-self-kl"]
ALL_LINEAR = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
BUILTIN_TOOLAPI = "builtin:toolapi"
BUILTIN_PROBE = "builtin"


class ConfigError(ReplayBankError):
    """An invalid config: the message names the file, the key, the value and what was expected."""


def _f(default: Any, help: str, **kw: Any) -> Any:
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata={"help": help, **kw})
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
    learning_rate: float = _f(2e-3, "AdamW learning rate", gt=0)
    weight_decay: float = _f(0.0, "AdamW weight decay", min=0)
    num_train_epochs: int = _f(1, "passes over the domain data", min=1, max=10_000)
    batch_size: int = _f(8, "rows per micro-batch (the mixing quota applies to each)", min=1, max=65_536)
    gradient_accumulation_steps: int = _f(1, "micro-batches per optimizer step", min=1, max=65_536)
    max_grad_norm: float = _f(1.0, "gradient clipping norm (0 = off)", min=0)
    mixing_ratio: float = _f(0.1, "share of every batch taken from the rehearsal corpus, in [0, 1)", min=0, lt=1)
    mix_by: MixBy = _f("rows", "what the rehearsal share is a share of: rows of every batch, or labelled tokens (= of the loss)")
    rehearsal_dataset: str = _f("python-docs", "python-docs (embedded), a .txt/.jsonl/.parquet file or folder, or a locally cached HF dataset", nonempty=True)
    rehearsal_split: str = _f("train", "split of an HF dataset", nonempty=True)
    rehearsal_text_field: str = _f("text", "JSONL field / Parquet column holding the text", nonempty=True)
    rehearsal_rows_per_epoch: int = _f(500, "size of each virtual epoch's seeded slice of the rehearsal pool; if set without mixing_ratio it also sets the share", min=1, max=100_000_000)
    rehearsal_prompt: str = _f("Continue the following passage", "instruction placed before the passage excerpt")
    rehearsal_prompt_chars: int = _f(128, "characters of the passage shown in the prompt (less than rehearsal_max_chars)", min=0, max=100_000_000)
    rehearsal_max_chars: int = _f(400, "passages are cut to this many characters", min=1, max=100_000_000)
    max_seq_length: int = _f(256, "rows are truncated to this many tokens", min=8, max=1_048_576)
    seed: int = _f(0, "seed of data order, slices and LoRA init", min=0, max=2**31 - 1)
    device: Device = _f("auto", "auto = cuda when available (bf16), else cpu (fp32)")
    num_threads: int = _f(0, "torch CPU threads; 0 = auto: every CPU when the 1-minute load average is below 0.5, else 1", min=0, max=4096)
    save_every: int = _f(0, "save a resumable checkpoint every N optimizer steps (0 = only at the end)", min=0)


@dataclass
class Data:
    domain_train: list[str] = _f([BUILTIN_TOOLAPI], "domain training data, one file or folder per generation (JSONL prompt/response or messages, or text); builtin:toolapi = the embedded fictional tool API", nonempty=True)
    domain_eval: list[str] = _f([BUILTIN_TOOLAPI], "held-out domain data (same formats), one for all generations or one per generation", nonempty=True)
    domain_train_rows: int = _f(120, "rows generated per generation for builtin:toolapi", min=1, max=10_000_000)
    domain_eval_rows: int = _f(16, "held-out domain rows (cap for files; count for builtin)", min=1, max=10_000_000)
    general_eval: str = _f("", "held-out general text; empty = hold out whole documents of the rehearsal corpus")
    general_eval_rows: int = _f(16, "held-out general passages", min=1, max=10_000_000)
    probe: str = _f(BUILTIN_PROBE, "general-skill probe: builtin, or a JSONL file of {prompt, answer}", nonempty=True)
    suite: str = _f("builtin", "general-capability suite (conversation, leakage, arithmetic, code): builtin or a JSONL file", nonempty=True)
    self_prompts: str = _f("builtin", "prompt pool the base model answers for self-synthesized rehearsal: builtin or a JSONL/text file", nonempty=True)
    self_rows: int = _f(32, "self-synthesized rehearsal rows generated (once per seed, cached)", min=1, max=1_000_000)


@dataclass
class Evaluation:
    arms: list[str] = _f(DEFAULT_ARMS, "arms to run: base, naive, rehearsal(-corpus), rehearsal-self, rehearsal-replay, rehearsal-self-kl, or any [arms.NAME]", nonempty=True)
    eval_points: int = _f(1, "held-out loss evaluations per trained arm and generation, evenly spaced, the last at the end", min=1, max=10_000)
    probe_pairs: int = _f(2, "batch pairs for the interference probe (`replaybank probe`, and per source inside `replaybank run`)", min=1, max=100_000)
    suite_per_family: int = _f(8, "suite items evaluated per family and seed (a seeded sample; 0 = every item)", min=0, max=1_000_000)
    seeds: int = _f(1, "seeds per arm (training.seed, +1, ...); the report gives mean and std", min=1, max=1_000)
    max_new_tokens: int = _f(48, "generation budget per suite / domain item (stops at end of turn)", min=1, max=65_536)
    generation_batch_size: int = _f(64, "prompts generated together (left-padded; on CPU, 64 ran 2.4x faster than 16)", min=1, max=65_536)
    probe_sources: bool = _f(True, "run the interference probe per rehearsal source inside `replaybank run`")


@dataclass
class Output:
    out_dir: str = _f("runs/default", "where report.md, metrics.json, the plot and adapters go", nonempty=True)
    save_adapters: bool = _f(True, "save each trained adapter with its config and data manifest")


@dataclass
class ArmSpec:
    """A trained arm: which rehearsal sources, how much, mixed how, with or without KL to base."""

    source: list[str] = _f([], "rehearsal sources: corpus, self, replay (empty = naive)")
    ratio: float = _f(0.1, "total rehearsal share of every batch, split evenly over the sources, in [0, 1)", min=0, lt=1)
    mix_by: MixBy = _f("rows", "rows: share of the rows; tokens: share of the labelled tokens (the loss)")
    kl_to_base: float = _f(0.0, "weight of the KL(base || adapted) term (0 = off)", min=0)
    kl_temperature: float = _f(1.0, "temperature of both distributions in the KL term", gt=0)
    kl_on: KLOn = _f("rehearsal", "KL positions: rehearsal completions, or also the prompts of domain rows (all)")


SECTIONS: dict[str, type] = {
    "orchestration": Orchestration,
    "training": Training,
    "data": Data,
    "evaluation": Evaluation,
    "output": Output,
}


@dataclass
class Config:
    """The whole experiment config; see :data:`SECTIONS` for the keys."""

    orchestration: Orchestration = field(default_factory=Orchestration)
    training: Training = field(default_factory=Training)
    data: Data = field(default_factory=Data)
    evaluation: Evaluation = field(default_factory=Evaluation)
    output: Output = field(default_factory=Output)
    arms: dict[str, ArmSpec] = field(default_factory=dict)
    source: str = "<defaults>"
    explicit: frozenset[str] = frozenset()

    @classmethod
    def from_toml(cls, path: str | Path) -> Config:
        """Read and validate a TOML file.

        A file that sets no key at all (zero bytes, only comments or empty ``[section]`` headers)
        is refused: leave the config argument out to run with the defaults.

        Raises:
            ConfigError: missing or empty file, TOML syntax error, or any invalid key or value.
        """
        p = Path(path)
        try:
            raw = p.read_bytes()
        except FileNotFoundError:
            raise ConfigError(f"{p}: config file not found") from None
        except OSError as exc:
            raise ConfigError(f"{p}: cannot read ({exc.strerror or exc})") from None
        try:
            data = tomllib.loads(raw.decode("utf-8"))
        except UnicodeDecodeError:
            raise ConfigError(f"{p}: not valid UTF-8") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{p}: invalid TOML ({exc})") from None
        cfg = cls.from_dict(data, source=str(p))
        if not cfg.explicit and not cfg.arms:  # a zero-byte or comments-only file is far more often a mistake than a choice
            raise ConfigError(_empty_file_message(p))
        return cfg

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "<config>") -> Config:
        """Validate a nested dict ``{section: {key: value}}``.

        Raises:
            ConfigError: an unknown section or key (with a "did you mean"), a wrong type or range.
        """
        sections: dict[str, Any] = {}
        explicit: set[str] = set()
        data = dict(data)
        declared = _parse_arms(data.pop("arms", {}), source)
        for name, values in data.items():
            if name not in SECTIONS:
                raise ConfigError(f"{source}: unknown section [{name}]{_did_you_mean(name, SECTIONS)}")
            if not isinstance(values, dict):
                raise ConfigError(f"{source}: [{name}] must be a table, got {values!r}")
        for name, klass in SECTIONS.items():
            values = data.get(name, {})
            hints = get_type_hints(klass)
            known = {f.name: f for f in fields(klass)}
            kwargs = {}
            for key, value in values.items():
                if key not in known:
                    raise ConfigError(
                        f"{source}: unknown key [{name}] {key}{_did_you_mean(key, known)}"
                    )
                kwargs[key] = _check_value(source, name, key, value, hints[key], known[key].metadata)
                explicit.add(f"{name}.{key}")
            sections[name] = klass(**kwargs)
        if declared and "evaluation.arms" not in explicit:
            sections["evaluation"].arms = sections["evaluation"].arms + [a for a in declared if a not in sections["evaluation"].arms]
        cfg = cls(**sections, arms=declared, source=source, explicit=frozenset(explicit))
        cfg._cross_check()
        cfg._check_arms()
        return cfg

    def _cross_check(self) -> None:
        where = self.source
        if not self.evaluation.arms:
            raise ConfigError(f"{where}: [evaluation] arms is empty; expected one or more of base, naive, rehearsal")
        for arm in self.evaluation.arms:
            if arm not in self.arm_specs() and arm != "base":
                raise ConfigError(
                    f"{where}: [evaluation] arms contains {arm!r}; expected base, a built-in arm or an [arms.NAME] table"
                    f"{_did_you_mean(arm, ['base', *self.arm_specs()])}"
                )
        if len(set(self.evaluation.arms)) != len(self.evaluation.arms):
            raise ConfigError(f"{where}: [evaluation] arms = {self.evaluation.arms!r} lists an arm twice; list each once")
        t = self.training
        if t.rehearsal_prompt_chars >= t.rehearsal_max_chars:
            raise ConfigError(
                f"{where}: [training] rehearsal_prompt_chars = {t.rehearsal_prompt_chars} is not below "
                f"[training] rehearsal_max_chars = {t.rehearsal_max_chars}: the prompt would show the whole "
                "passage and the completion only repeat it; expected rehearsal_prompt_chars < rehearsal_max_chars"
            )
        converts = "training.rehearsal_rows_per_epoch" in self.explicit and "training.mixing_ratio" not in self.explicit
        specs = self.arm_specs()
        zero = [a for a in self.evaluation.arms if a in specs and specs[a].source and specs[a].ratio == 0]
        if zero and not converts:
            knob = "[training] mixing_ratio = 0" if zero[0] not in self.arms else f"[arms.{zero[0]}] ratio = 0"
            raise ConfigError(
                f"{where}: {knob} makes the rehearsal arm {zero[0]!r} the naive arm again; "
                f"expected a share > 0, or drop {zero[0]!r} from [evaluation] arms"
            )
        if not self.training.lora_target_modules:
            raise ConfigError(f"{where}: [training] lora_target_modules is empty; name at least one module")
        if not self.data.domain_train:
            raise ConfigError(f"{where}: [data] domain_train is empty; give one file or folder per generation")
        n_gen, n_files = self.orchestration.num_generations, len(self.data.domain_train)
        if n_files not in (1, n_gen) or (n_files == 1 and n_gen > 1 and self.data.domain_train[0] != BUILTIN_TOOLAPI):
            raise ConfigError(
                f"{where}: [data] domain_train has {n_files} entries but [orchestration] "
                f"num_generations = {n_gen}; give one file or folder per generation"
            )

    def _check_arms(self) -> None:
        where = self.source
        if len(set(self.evaluation.arms)) != len(self.evaluation.arms):
            raise ConfigError(f"{where}: [evaluation] arms lists an arm twice: {self.evaluation.arms}")
        if self.data.domain_eval and len(self.data.domain_eval) not in (1, self.orchestration.num_generations):
            raise ConfigError(
                f"{where}: [data] domain_eval has {len(self.data.domain_eval)} entries but [orchestration] "
                f"num_generations = {self.orchestration.num_generations}; give one for all or one per generation"
            )
        if not self.data.domain_eval:
            raise ConfigError(f"{where}: [data] domain_eval is empty; give one file (or builtin) for all generations")

    def arm_specs(self) -> dict[str, ArmSpec]:
        """Every arm this config can run by name: the built-in ones, then ``[arms.NAME]`` tables.

        Built-in rehearsal arms take ``[training] mixing_ratio`` and ``mix_by``; ``rehearsal`` is the
        historical name of ``rehearsal-corpus``. A table with a built-in name replaces it.

        Example:
            >>> specs = Config().arm_specs()
            >>> specs["rehearsal-self"].source, specs["rehearsal-self"].ratio, specs["naive"].source
            (['self'], 0.1, [])
        """
        t = self.training
        def arm(source: list[str], kl: float = 0.0) -> ArmSpec:
            return ArmSpec(source=source, ratio=t.mixing_ratio if source else 0.0, mix_by=t.mix_by, kl_to_base=kl)

        builtin = {
            "naive": arm([]),
            "rehearsal": arm(["corpus"]),
            "rehearsal-corpus": arm(["corpus"]),
            "rehearsal-self": arm(["self"]),
            "rehearsal-replay": arm(["replay"]),
            "rehearsal-self-kl": arm(["self"], kl=1.0),
        }
        return {**builtin, **self.arms}

    def effective_mixing_ratio(self, n_domain_rows: int) -> tuple[float, str]:
        """The share of every batch given to rehearsal, and how it was decided.

        When the config sets ``rehearsal_rows_per_epoch`` but not ``mixing_ratio`` (the reference's
        form), the share is ``rows / (rows + domain rows per epoch)``.
        """
        t = self.training
        if "training.rehearsal_rows_per_epoch" in self.explicit and "training.mixing_ratio" not in self.explicit:
            share = t.rehearsal_rows_per_epoch / (t.rehearsal_rows_per_epoch + n_domain_rows)
            return share, (
                f"converted from rehearsal_rows_per_epoch={t.rehearsal_rows_per_epoch} over "
                f"{n_domain_rows} domain rows per epoch"
            )
        return t.mixing_ratio, "mixing_ratio"

    def to_dict(self) -> dict[str, Any]:
        """``{section: {key: value}}`` for every key, defaults included; declared ``[arms.NAME]`` tables too."""
        out = {name: dataclasses.asdict(getattr(self, name)) for name in SECTIONS}
        if self.arms:
            out["arms"] = {name: dataclasses.asdict(spec) for name, spec in self.arms.items()}
        return out

    def to_toml(self, with_help: bool = True) -> str:
        """The effective config as TOML, each key with its help as a comment."""
        lines = [f"# effective config (from {self.source})"]
        for name, klass in SECTIONS.items():
            lines.append(f"\n[{name}]")
            section = getattr(self, name)
            for f in fields(klass):
                value = _toml_value(getattr(section, f.name))
                comment = f"  # {f.metadata['help']}" if with_help else ""
                lines.append(f"{f.name} = {value}{comment}")
        for arm, spec in self.arms.items():
            lines.append(f"\n[arms.{json.dumps(arm)}]")
            for f in fields(ArmSpec):
                comment = f"  # {f.metadata['help']}" if with_help else ""
                lines.append(f"{f.name} = {_toml_value(getattr(spec, f.name))}{comment}")
        return "\n".join(lines) + "\n"


def _parse_arms(raw: Any, source: str) -> dict[str, ArmSpec]:
    """``[arms.NAME]`` tables -> :class:`ArmSpec` per name, each key checked like any other."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: [arms] must hold tables [arms.NAME], got {raw!r}")
    hints = get_type_hints(ArmSpec)
    known = {f.name: f for f in fields(ArmSpec)}
    out: dict[str, ArmSpec] = {}
    for name, values in raw.items():
        if name == "base":
            raise ConfigError(f"{source}: [arms.base] cannot be declared; base is the untouched model")
        if not isinstance(values, dict):
            raise ConfigError(f"{source}: [arms.{name}] must be a table, got {values!r}")
        kwargs = {}
        for key, value in values.items():
            if key not in known:
                raise ConfigError(f"{source}: unknown key [arms.{name}] {key}{_did_you_mean(key, known)}")
            kwargs[key] = _check_value(source, f"arms.{name}", key, value, hints[key], known[key].metadata)
        spec = ArmSpec(**kwargs)
        for src in spec.source:
            if src not in ARM_SOURCES:
                raise ConfigError(
                    f"{source}: [arms.{name}] source contains {src!r}; expected some of "
                    f"{', '.join(ARM_SOURCES)}{_did_you_mean(src, ARM_SOURCES)}"
                )
        if len(set(spec.source)) != len(spec.source):
            raise ConfigError(f"{source}: [arms.{name}] source lists a source twice: {spec.source}")
        if spec.source and spec.ratio == 0:
            raise ConfigError(f"{source}: [arms.{name}] has sources {spec.source} but ratio = 0; give a ratio in (0, 1)")
        if spec.kl_to_base > 0 and not spec.source and spec.kl_on == "rehearsal":
            raise ConfigError(
                f"{source}: [arms.{name}] kl_to_base = {spec.kl_to_base} applies to rehearsal rows, but the arm has "
                "no source; add a source or set kl_on = \"all\""
            )
        out[name] = spec
    return out


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (int, str, list)):
        return json.dumps(value)
    raise TypeError(f"cannot write {value!r} as TOML")


def _did_you_mean(word: str, options: Any) -> str:
    close = difflib.get_close_matches(word, list(options), n=1, cutoff=0.6)
    if close:
        return f"; did you mean {close[0]!r}?"
    return f"; expected one of: {', '.join(sorted(options))}"


def _check_value(source: str, section: str, key: str, value: Any, hint: Any, meta: Any) -> Any:
    where = f"{source}: [{section}] {key} = {value!r}"
    choices = get_args(hint) if getattr(hint, "__origin__", None) is Literal else ()
    if choices:
        if value not in choices:
            raise ConfigError(f"{where}: expected one of {', '.join(map(repr, choices))}{_did_you_mean(str(value), choices)}")
        return value
    if hint is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: expected true or false")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where}: expected an integer")
        if "max" not in meta and not -(2**63) <= value < 2**63:  # keys with a max say their range below
            raise ConfigError(f"{where}: expected an integer that fits in 64 bits")
    elif hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{where}: expected a number")
        try:
            value = float(value)
        except OverflowError:  # an integer beyond float range
            raise ConfigError(f"{where}: expected a finite number") from None
        if not math.isfinite(value):
            raise ConfigError(f"{where}: expected a finite number, got {value}")
    elif hint is str:
        if not isinstance(value, str):
            raise ConfigError(f"{where}: expected a string")
        if meta.get("nonempty") and not value.strip():
            raise ConfigError(f"{where}: expected a non-empty string")
    elif hint == list[str]:
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{where}: expected a list of strings")
        if meta.get("nonempty") and any(not v.strip() for v in value):
            raise ConfigError(f"{where}: expected non-empty strings, got an empty entry")
        return list(value)
    if isinstance(value, (int, float)):
        lo = meta.get("min", meta.get("gt"))
        if "min" in meta and value < meta["min"]:
            raise ConfigError(f"{where}: expected a value >= {meta['min']}" + _upper(meta))
        if "gt" in meta and value <= meta["gt"]:
            raise ConfigError(f"{where}: expected a value > {meta['gt']}" + _upper(meta))
        if "lt" in meta and value >= meta["lt"]:
            raise ConfigError(f"{where}: expected a value in [{lo}, {meta['lt']})")
        if "max" in meta and value > meta["max"]:
            bracket = "[" if "min" in meta else "("
            raise ConfigError(f"{where}: expected a value in {bracket}{lo}, {meta['max']}]")
    return value


def _upper(meta: Any) -> str:
    return f" and <= {meta['max']}" if "max" in meta else ""


def _empty_file_message(path: Path) -> str:
    return (
        f"{path}: config file sets no keys (it is empty, or holds only comments or empty [section] "
        "headers); to run with the defaults leave the config argument out, or write them to a file "
        f"to edit with `replaybank config > {path.name}`"
    )
