"""The loop's config: ``[loop]`` (acting, lineage, rehearsal, evaluation) and ``[training]``.

``[training]`` is the main job's section (:class:`replaybank.llm.config.Training`: LoRA, AdamW,
batch size, base model) with the loop's defaults (:data:`replaybank.llm.config.schema.LOOP_TRAINING`);
every key is read by the same reader as ``replaybank run``'s (:func:`.values.read_section`: a wrong
type, range or unknown key names the file, ``[section] key`` and the value, with a "did you mean").

Example:
    >>> cfg = LoopConfig.from_dict({"loop": {"generations": 3}, "training": {"learning_rate": 1e-3}})
    >>> cfg.loop.generations, cfg.training.learning_rate, cfg.loop.lineage
    (3, 0.001, 'window')
    >>> LoopConfig.from_dict({"loop": {"genrations": 3}})
    Traceback (most recent call last):
    ...
    replaybank.llm.config.ConfigError: <config>: unknown key [loop] genrations; did you mean 'generations'?
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

import tomllib

from replaybank.llm.config.schema import LOOP_TRAINING, Lineage, Training, _f
from replaybank.llm.config.values import ConfigError, did_you_mean, read_section, toml_value

Init = Literal["continue", "fresh"]

SYSTEM = (
    "You turn requests into qx tool calls. Answer with the calls only, each written "
    "<<qx tool.name; key=value; ...>>."
)
TRAINING_DEFAULTS = LOOP_TRAINING  # the name this module used to define

#: How a run written before a ``[loop]`` key existed behaved, for keys added after runs were
#: written: resuming such a run must not switch it silently, whatever the key's default becomes
#: (see ``state.check_same_config``). Both differ from today's defaults.
RAN_BEFORE_THE_KEY: dict[str, Any] = {"rehearsal_ce": True, "self_open_rows": False}


@dataclass
class Loop:
    generations: int = _f(5, "generations: act, record, consolidate, evaluate", min=1, max=1000)
    tasks: str = _f("builtin:qx", "task source: builtin:qx (the qx tool API ladder) or a JSONL task file (see docs/episodic.md)", nonempty=True)
    levels: list[int] = _f([1, 2], "ladder levels of builtin:qx: 1 copy, 2 convert, 3 two calls, 4 chain (the second call needs the first call's result)")
    demos: int = _f(16, "demonstrations the store is seeded with (train split), as a user would", min=0, max=16)
    tasks_per_generation: int = _f(24, "N: train tasks attempted per generation (a fresh seeded draw each generation)", min=1, max=100_000)
    samples_per_task: int = _f(2, "k: sampled attempts per task", min=1, max=64)
    temperature: float = _f(0.7, "sampling temperature of the attempts (evaluation is greedy)", min=0)
    system_prompt: str = _f(SYSTEM, "the agent's system prompt (acting, evaluation and consolidation rows; empty = the model's default)")
    context_examples: int = _f(3, "successful episodes retrieved (BM25 over the task text) into the context", min=0, max=64)
    max_new_tokens: int = _f(40, "generation budget per answer (per turn); rows stop at the end of the call (>>)", min=1, max=4096)
    max_turns: int = _f(4, "most turns of an episode: each turn is one call, executed, its result shown as a tool turn; an episode also ends after as many calls as the task expects, or at a turn without a call", min=1, max=64)
    generation_batch_size: int = _f(32, "prompts generated together", min=1, max=4096)
    lineage: Lineage = _f("window", "generations consolidated: window (last K), all, best (K best on the validation split)")
    window: int = _f(3, "K of window and best", min=1, max=1000)
    init: Init = _f("continue", "continue: the adapter carries over between generations; fresh: a new adapter each generation")
    rehearsal: str = _f("self", "rehearsal rows: self (the base model's answers, llm/data/selfsynth), a JSONL file of {prompt, response}, or none")
    rehearsal_ratio: float = _f(0.5, "rehearsal share of the rows of every batch (replaybank.mixing quota)", min=0, lt=1)
    kl_weight: float = _f(3.0, "weight of the KL-to-base term (llm.train.kl) on the rehearsal rows' answer tokens, added to the loss; 0 = off (then also rehearsal_ce = true); inactive with rehearsal = none", min=0, max=1000)
    rehearsal_ce: bool = _f(False, "true: train on the rehearsal rows' answers with cross-entropy as well as the KL term; false = through the KL term only (self-distillation: the base model's distribution on those prompts is kept, not sharpened toward one written answer); needs kl_weight > 0; inactive with rehearsal = none")
    self_rows: int = _f(96, "self-synthesized rehearsal rows (once per seed, cached)", min=1, max=100_000)
    self_open_rows: bool = _f(True, "keep the base model's self-synthesized answers that hit the 96-token budget, as open rows trained without an end of turn (dropping them leaves only short answers in rehearsal)")
    eval_tasks: int = _f(40, "held-out tasks of the evaluation (greedy, with and without replayed context)", min=1, max=100_000)
    validation_tasks: int = _f(24, "held-out tasks of the validation split (ranks generations for lineage best; disjoint from the evaluation tasks)", min=1, max=100_000)
    suite_per_family: int = _f(16, "general-capability suite items per family, seeded per run (0 = every item, 172 in the shipped suite; 8 per family moves retention by about 7 points from the sample alone)", min=0, max=100_000)
    seed: int = _f(0, "seed of tasks, sampling, LoRA init and data order", min=0, max=2**31 - 1)


@dataclass
class LoopConfig:
    """The whole loop config."""

    loop: Loop = field(default_factory=Loop)
    training: Training = field(default_factory=lambda: Training(**LOOP_TRAINING))
    source: str = "<defaults>"

    @classmethod
    def from_toml(cls, path: str | Path) -> LoopConfig:
        """Read and validate a TOML file.

        Raises:
            ConfigError: missing file, TOML syntax error, or an invalid section, key or value.
        """
        p = Path(path)
        try:
            data = tomllib.loads(p.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError(f"{p}: config file not found") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{p}: cannot read ({exc})") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{p}: invalid TOML ({exc})") from None
        return cls.from_dict(data, source=str(p))

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "<config>") -> LoopConfig:
        """Validate ``{section: {key: value}}`` (sections ``loop`` and ``training``).

        Raises:
            ConfigError: unknown section or key, wrong type or range, or inconsistent values.
        """
        sections = {"loop": Loop, "training": Training}
        for name, values in data.items():
            if name not in sections:
                raise ConfigError(f"{source}: unknown section [{name}]{did_you_mean(name, sections)}")
            if not isinstance(values, dict):
                raise ConfigError(f"{source}: [{name}] must be a table, got {values!r}")
        built: dict[str, Any] = {}
        for name, klass in sections.items():
            defaults = LOOP_TRAINING if name == "training" else None
            built[name], _ = read_section(source, name, klass, data.get(name, {}), defaults)
        cfg = cls(built["loop"], built["training"], source)
        cfg._cross_check()
        return cfg

    def _cross_check(self) -> None:
        lp = self.loop
        bad = [lv for lv in lp.levels if lv not in (1, 2, 3, 4)]
        if not lp.levels or bad:
            raise ConfigError(f"{self.source}: [loop] levels = {lp.levels!r}: expected some of 1, 2, 3, 4")
        if lp.rehearsal not in ("self", "none") and not lp.rehearsal.endswith(".jsonl"):
            raise ConfigError(
                f"{self.source}: [loop] rehearsal = {lp.rehearsal!r}: expected self, none or a .jsonl file of {{prompt, response}} rows"
            )
        if lp.rehearsal != "none" and lp.rehearsal_ratio == 0:
            raise ConfigError(f"{self.source}: [loop] rehearsal_ratio = 0 with rehearsal = {lp.rehearsal!r}; set rehearsal = \"none\" instead")

        if not lp.rehearsal_ce and lp.rehearsal != "none" and lp.kl_weight == 0:
            raise ConfigError(
                f"{self.source}: [loop] rehearsal_ce = false (the default) trains the rehearsal rows through the KL term "
                "only, and kl_weight = 0 turns that term off (the rows would train nothing); to train them with "
                "cross-entropy alone set rehearsal_ce = true as well, or set a kl_weight above 0"
            )

    def with_(self, **loop: Any) -> LoopConfig:
        """A copy with some ``[loop]`` keys replaced (the CLI's flags); values are re-validated."""
        data = self.to_dict()
        data["loop"].update(loop)
        return LoopConfig.from_dict(data, source=self.source)

    @staticmethod
    def before_keys_existed() -> dict[str, Any]:
        """The config a run written before a key existed ran with, per key: the defaults, except
        :data:`RAN_BEFORE_THE_KEY`."""
        data = LoopConfig().to_dict()
        data["loop"].update(RAN_BEFORE_THE_KEY)
        return data

    def to_dict(self) -> dict[str, Any]:
        return {"loop": dataclasses.asdict(self.loop), "training": dataclasses.asdict(self.training)}

    def to_toml(self) -> str:
        """The effective config as TOML, each key with its help as a comment."""
        lines = [f"# effective loop config (from {self.source})"]
        for name in ("loop", "training"):
            section = getattr(self, name)
            lines.append(f"\n[{name}]")
            for f in fields(section):
                value = getattr(section, f.name)
                text = json.dumps(value) if isinstance(value, list) else toml_value(value)
                lines.append(f"{f.name} = {text}  # {f.metadata['help']}")
        return "\n".join(lines) + "\n"
