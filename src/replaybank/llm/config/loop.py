"""The loop's config: ``[loop]`` (acting, lineage, held-out tasks, seed) beside the sections every
job shares: ``[training]``, ``[evaluation]``, ``[data]`` and ``[recipes.NAME]``.

The rehearsal is a recipe (:mod:`.recipe`, the one type every job shares): ``[loop] recipe``
names a built-in (default ``self-distill``: the base model's own answers, half of the rows,
through the KL term only) or a ``[recipes.NAME]`` table, or ``none``. The rows themselves are
the loop's data settings (``[data] self_rows``, ``self_open_rows``). The keys that set the
rehearsal before ``recipe`` existed (``rehearsal``, ``rehearsal_ratio``, ``kl_weight``,
``rehearsal_ce``) are still read and mapped onto a recipe, so old configs and run folders load.

The shared sections are declared once (:mod:`.schema`), with the loop's defaults as tables of
overrides: ``[training]`` is the main job's section (:class:`~.schema.Training`: LoRA, AdamW,
batch size, base model) at :data:`~.schema.LOOP_TRAINING`; ``[evaluation]`` holds the keys of
the main job's section the loop reads (:class:`~.schema.SharedEvaluation`: ``max_new_tokens``,
``generation_batch_size``, ``suite_per_family``) at :data:`~.schema.LOOP_EVALUATION`; ``[data]``
the self-synthesized rows' keys (:class:`~.schema.SharedData`: ``self_rows``,
``self_open_rows``). Those five keys were ``[loop]`` keys before the sections were shared; that
spelling is still read (:data:`MOVED`), so old configs and run folders load. Every key is read by
the same reader as ``replaybank run``'s (:func:`.values.read_section`: a wrong type, range or
unknown key names the file, ``[section] key`` and the value, with a "did you mean").

Example:
    >>> cfg = LoopConfig.from_dict({"loop": {"generations": 3}, "training": {"learning_rate": 1e-3}})
    >>> cfg.loop.generations, cfg.training.learning_rate, cfg.loop.lineage
    (3, 0.001, 'window')
    >>> cfg.evaluation.suite_per_family, LoopConfig.from_dict({"loop": {"suite_per_family": 8}}).evaluation.suite_per_family
    (16, 8)
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

from replaybank.episodic.redact import FIELD_NAME
from replaybank.llm.config.recipe import (
    BUILTIN_RECIPES,
    NONE,
    Recipe,
    is_file_source,
    parse_recipes,
    recipe_dict,
    refuse_arms_tables,
    resolve,
)
from replaybank.llm.config.schema import (
    LOOP_EVALUATION,
    LOOP_TRAINING,
    Data,
    Evaluation,
    Lineage,
    SharedData,
    SharedEvaluation,
    Training,
    _f,
)
from replaybank.llm.config.values import (
    ConfigError,
    at,
    did_you_mean,
    key_line,
    read_section,
    read_toml,
    shown,
    table_name,
    toml_value,
)

Init = Literal["continue", "fresh"]
#: What ``[loop] consolidate`` trains on (:func:`replaybank.llm.loop.consolidate.domain_rows`).
Consolidate = Literal["successes", "own", "insights"]
#: The levels of experience ``[loop] retrieve`` may name (:mod:`replaybank.llm.loop.context`).
RETRIEVE_LEVELS: tuple[str, ...] = ("episodes", "insights", "workflows")

SYSTEM = (
    "You turn requests into qx tool calls. Answer with the calls only, each written "
    "<<qx tool.name; key=value; ...>>."
)
TRAINING_DEFAULTS = LOOP_TRAINING  # an alias kept for code that imports this name

#: How a run written before a ``[loop]`` key existed behaved, for keys added after runs were
#: written: resuming such a run must not switch it silently, whatever the key's default becomes
#: (see ``state.check_same_config``). Both differ from the current defaults. ``rehearsal_ce`` is
#: a key of the recipe; the recipe's other keys (``mix_by``, ``kl_temperature``, ``kl_on``) ran
#: at their defaults before they existed.
RAN_BEFORE_THE_KEY: dict[str, Any] = {"rehearsal_ce": True, "self_open_rows": False}

#: ``[loop]`` keys a run's ``state.json`` records only when they are set away from their default:
#: a run with the defaults writes the same ``state.json`` as one written before the keys existed,
#: and resuming reads a key left out as its default (``state.check_same_config``).
WRITTEN_WHEN_SET = ("consolidate", "consolidation_steps")

#: The ``[loop]`` keys that set the rehearsal before ``[loop] recipe``, read into a recipe.
LEGACY_KEYS = ("rehearsal", "rehearsal_ratio", "kl_weight", "rehearsal_ce")
#: The name of the recipe the old keys give when it is no built-in one.
LEGACY_NAME = "loop-keys"
#: ``[loop]`` keys that are now keys of a shared section: key -> its section. A config (or a run
#: folder's saved config) that writes them under ``[loop]`` is read as if they were in the section.
MOVED: dict[str, str] = {
    "max_new_tokens": "evaluation", "generation_batch_size": "evaluation", "suite_per_family": "evaluation",
    "self_rows": "data", "self_open_rows": "data",
}  # fmt: skip
#: The shared sections of the loop's config: name -> (the keys the loop reads, the main job's
#: section, whose other keys the loop does not read).
SHARED: dict[str, tuple[type, type]] = {"evaluation": (SharedEvaluation, Evaluation), "data": (SharedData, Data)}


@dataclass
class Loop:
    generations: int = _f(5, "generations: act, record, consolidate, evaluate", min=1, max=1000)
    tasks: str = _f("builtin:qx", "task source: builtin:qx (the qx tool API ladder) or a JSONL task file (see docs/episodic.md)", nonempty=True)
    levels: list[int] = _f([1, 2], "ladder levels of builtin:qx: 1 copy, 2 convert, 3 two calls, 4 chain (the second call needs the first call's result)")
    demos: int = _f(16, "demonstrations the store is seeded with (train split), as a user would", min=0, max=16)
    demos_file: str = _f("", "a JSONL file of a person's demonstrations the store is also seeded with, every call checked (docs/episodic.md#importing-demonstrations); empty = none")
    private_fields: list[str] = _f([], "fields of the demos_file lines whose values are redacted to <private:FIELD> before anything is stored, trained on, saved or reported (docs/episodic.md#privacy)")
    tasks_per_generation: int = _f(24, "N: train tasks attempted per generation (a fresh seeded draw each generation)", min=1, max=100_000)
    samples_per_task: int = _f(2, "k: sampled attempts per task", min=1, max=64)
    temperature: float = _f(0.7, "sampling temperature of the attempts (evaluation is greedy)", min=0, max=100)
    system_prompt: str = _f(SYSTEM, "the agent's system prompt (acting, evaluation and consolidation rows; empty = the model's default)")
    context_examples: int = _f(3, "successful episodes retrieved (BM25 over the task text) into the context", min=0, max=64)
    max_turns: int = _f(4, "most turns of an episode (one call each); it also ends after the calls the task expects, or at a turn without a call", min=1, max=64)
    lineage: Lineage = _f("window", "generations consolidated: window (last K), all, best (K best on the validation split)")
    window: int = _f(3, "K of window and best", min=1, max=1000)
    init: Init = _f("continue", "continue: the adapter carries over between generations; fresh: a new adapter each generation")
    recipe: str = _f("self-distill", "rehearsal recipe: a built-in (self-distill, rehearsal-self, rehearsal-self-kl, ...; docs/llm.md#rehearsal-recipes), a [recipes.NAME] table, or none", nonempty=True)
    eval_tasks: int = _f(40, "held-out tasks of the evaluation (greedy, with and without replayed context)", min=1, max=100_000)
    validation_tasks: int = _f(24, "held-out tasks of the validation split (ranks generations for lineage best; disjoint from the evaluation tasks)", min=1, max=100_000)
    seed: int = _f(0, "seed of tasks, sampling, LoRA init and data order (the loop seeds training with it: [training] seed is not read)", min=0, max=2**31 - 1)
    replay_workflows: bool = _f(False, "record-and-replay: learn workflows (calls with typed placeholders) from each generation's successes and the demonstrations, and run a stored workflow that passes every check instead of the model (docs/loop.md#record-and-replay)")
    retrieve: list[str] = _f(["episodes"], "levels of experience retrieved into the context, filled in this order: episodes (successful episodes as turns), insights (lessons, e.g. reflections on failures), workflows (call sequences with typed placeholders); context_examples of each")
    context_chars: int = _f(0, "character budget of everything retrieved into a prompt (episodes, insights, workflows); an item that does not fit is left out and counted; 0 = no bound", min=0, max=1_000_000)
    reflect: bool = _f(False, "after acting, the model writes a one-line lesson on each failed episode from the checker's feedback, stored as an insight linked to it, and a retry pass measures success on retry with and without it; later generations see the lessons with insights in retrieve")
    reflection_max_tokens: int = _f(48, "token budget of a reflection: generation stops there and a longer lesson is cut to it (counted)", min=4, max=1024)
    vote_groups: int = _f(0, "group self-consistency in the evaluation with context: the retrieved experience split into this many groups, one answer per group, majority vote over the canonical calls; 0 = off", min=0, max=32)
    consolidate: Consolidate = _f("successes", "what each generation's adapter is trained on: successes (replayed ones included) and demonstrations; own (replayed episodes left out); insights (successes with the insights their acting prompt shows; needs insights in retrieve)")
    consolidation_steps: int = _f(0, "optimizer steps of each consolidation, whatever its rows; 0 = the rows and [training] num_train_epochs decide", min=0, max=1_000_000)
    library: str = _f("", "adapter library folder (docs/adapters.md) where each finished generation's adapter is registered as RUN-genN; empty = none; may change on resume")


@dataclass
class LegacyRehearsal:
    """The ``[loop]`` keys that set the rehearsal before ``[loop] recipe`` (their defaults are
    ``self-distill``'s values); :meth:`LoopConfig.from_dict` maps them onto a recipe."""

    rehearsal: str = _f("self", "rehearsal rows: self (the base model's answers, llm/data/selfsynth), a JSONL file of {prompt, response}, or none")
    rehearsal_ratio: float = _f(0.5, "rehearsal share of the rows of every batch (replaybank.mixing quota)", min=0, lt=1)
    kl_weight: float = _f(3.0, "weight of the KL-to-base term on the rehearsal rows' answer tokens; 0 = off (then rehearsal_ce = true); inactive with rehearsal = none", min=0, max=1000)
    rehearsal_ce: bool = _f(False, "true: train the rehearsal rows' answers with cross-entropy as well as the KL term; false = KL only (needs kl_weight > 0); inactive with rehearsal = none")


@dataclass
class LoopConfig:
    """The whole loop config."""

    loop: Loop = field(default_factory=Loop)
    training: Training = field(default_factory=lambda: Training(**LOOP_TRAINING))
    evaluation: SharedEvaluation = field(default_factory=lambda: SharedEvaluation(**LOOP_EVALUATION))
    data: SharedData = field(default_factory=SharedData)
    source: str = "<defaults>"
    recipes: dict[str, Recipe] = field(default_factory=dict)
    """The config's ``[recipes.NAME]`` tables (and the recipe of the old ``[loop]`` keys)."""
    text: str | None = field(default=None, repr=False, compare=False)
    """The TOML file's text, for the line numbers of errors."""

    @property
    def recipe(self) -> Recipe | None:
        """The rehearsal recipe ``[loop] recipe`` names; None for ``none``.

        Example:
            >>> r = LoopConfig().recipe
            >>> r.source, r.ratio, r.kl_to_base, r.rehearsal_ce
            (['self'], 0.5, 3.0, False)
        """
        return resolve(self.loop.recipe, self.recipes, at(self.source, self.text, "loop", "recipe"), "[loop] recipe")

    @classmethod
    def from_toml(cls, path: str | Path) -> LoopConfig:
        """Read and validate a TOML file.

        A file that sets no key (zero bytes, only comments or empty headers) is refused: leave
        the config argument out to run the defaults. A UTF-8 byte-order mark is accepted.

        Raises:
            ConfigError: missing or empty file, TOML syntax error, or an invalid section, key or value.
        """
        p = Path(path)
        data, text = read_toml(p)
        if all(isinstance(v, dict) and not v for v in data.values()):  # far more often a mistake than a choice
            raise ConfigError(
                f"{p}: config file sets no keys (it is empty, or holds only comments or empty [section] headers); "
                f"to run the defaults leave the config argument out, or write them to a file to edit with "
                f"`replaybank loop --print-config > {p.name}`"
            )
        return cls.from_dict(data, source=str(p), text=text)

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "<config>", *, text: str | None = None) -> LoopConfig:
        """Validate ``{section: {key: value}}`` (sections ``loop``, ``training``, ``evaluation``,
        ``data``, ``recipes``; the keys of :data:`MOVED` also under ``loop``).

        ``text`` is the TOML file's text when there is one: errors about the recipe then name the
        line.

        Raises:
            ConfigError: unknown section or key, wrong type or range, inconsistent values, an
                unknown recipe, a recipe the loop cannot run, ``[loop] recipe`` together with
                the old rehearsal keys, or a key written both under ``[loop]`` and its section.
        """
        data = dict(data)
        refuse_arms_tables(data, source, text)
        declared = parse_recipes(data.pop("recipes", {}), source, text)
        sections = {"loop": Loop, "training": Training, **{name: klass for name, (klass, _) in SHARED.items()}}
        for name, values in data.items():
            if name not in sections:
                raise ConfigError(f"{at(source, text, name)}: unknown section [{name}]{did_you_mean(name, [*sections, 'recipes'])}")
            if not isinstance(values, dict):
                raise ConfigError(f"{at(source, text, name)}: [{name}] must be a table, got {shown(values)}")
        raw = dict(data.get("loop", {}))
        known = [f.name for f in fields(Loop)] + list(LEGACY_KEYS) + list(MOVED)
        for key in raw:
            if key not in known:
                raise ConfigError(f"{at(source, text, 'loop', key)}: unknown key [loop] {key}{did_you_mean(key, known)}")
        legacy = {key: raw.pop(key) for key in LEGACY_KEYS if key in raw}
        shared = {name: _shared_values(source, text, name, data.get(name, {}), raw) for name in SHARED}
        loop, _ = read_section(source, "loop", Loop, raw, text=text)
        training, _ = read_section(source, "training", Training, data.get("training", {}), LOOP_TRAINING, text=text)
        evaluation, _ = read_section(source, "evaluation", SharedEvaluation, shared["evaluation"], LOOP_EVALUATION, text=text)
        data_section, _ = read_section(source, "data", SharedData, shared["data"], text=text)
        if legacy:
            if "recipe" in raw:
                old = next(iter(legacy))
                line = key_line(text, "loop", old) if text else None
                raise ConfigError(
                    f"{at(source, text, 'loop', 'recipe')}: [loop] recipe = {raw['recipe']!r} and [loop] {old}"
                    + (f" (line {line})" if line else "") + f" both set the rehearsal; [loop] {', '.join(legacy)} "
                    "are the old spelling of a recipe: keep recipe (with a [recipes.NAME] table for other values) "
                    "and drop them"
                )
            name, spec = _from_legacy(read_section(source, "loop", LegacyRehearsal, legacy, text=text)[0], source, text)
            if spec is not None and name == LEGACY_NAME:
                if name in declared:
                    raise ConfigError(f"{at(source, text, table_name('recipes', name))}: [recipes.{name}] is the name of the recipe "
                                      f"the old [loop] rehearsal keys give; rename the table or drop those keys")
                declared[name] = spec
            loop = dataclasses.replace(loop, recipe=name)
        cfg = cls(loop=loop, training=training, evaluation=evaluation, data=data_section, source=source,
                  recipes=declared, text=text)
        cfg.cross_check()
        return cfg

    def cross_check(self) -> None:
        lp = self.loop
        bad = [lv for lv in lp.levels if lv not in (1, 2, 3, 4)]
        if not lp.levels or bad:
            raise ConfigError(f"{at(self.source, self.text, 'loop', 'levels')}: [loop] levels = {shown(lp.levels)}: expected some of 1, 2, 3, 4")
        if lp.private_fields and not lp.demos_file:
            raise ConfigError(f"{at(self.source, self.text, 'loop', 'private_fields')}: [loop] private_fields = "
                              f"{shown(lp.private_fields)} names fields of the demonstrations of [loop] demos_file, which is not set")
        names = [name for name in lp.private_fields if not FIELD_NAME.fullmatch(name)]
        if names:
            raise ConfigError(f"{at(self.source, self.text, 'loop', 'private_fields')}: [loop] private_fields: {names[0]!r} is "
                              "not a field name (lower-case letters, digits and _, starting with a letter)")
        unknown = [lv for lv in lp.retrieve if lv not in RETRIEVE_LEVELS]
        if not lp.retrieve or unknown or len(set(lp.retrieve)) != len(lp.retrieve):
            raise ConfigError(f"{at(self.source, self.text, 'loop', 'retrieve')}: [loop] retrieve = {shown(lp.retrieve)}: "
                              f"expected some of {', '.join(RETRIEVE_LEVELS)}, each at most once")
        if lp.consolidate == "insights" and "insights" not in lp.retrieve:
            raise ConfigError(f"{at(self.source, self.text, 'loop', 'consolidate')}: [loop] consolidate = 'insights' puts "
                              f"the insights an acting prompt shows into the rows, but [loop] retrieve = {shown(lp.retrieve)} "
                              "shows none; add insights to retrieve (and reflect = true to write them), or choose successes or own")
        if lp.vote_groups == 1:
            raise ConfigError(f"{at(self.source, self.text, 'loop', 'vote_groups')}: [loop] vote_groups = 1 votes on one "
                              "answer (the evaluation with context again); set 0 (off) or 2 or more")
        spec = self.recipe  # an unknown name fails here
        if spec is not None and spec.fresh_adapter:
            raise ConfigError(f"{at(self.source, self.text, table_name('recipes', lp.recipe), 'fresh_adapter')}: [loop] recipe = "
                              f"{lp.recipe!r} sets fresh_adapter = true, an arm of `replaybank run`; the loop consolidates into one adapter")
        if lp.consolidation_steps and spec is not None and spec.controller != "none":
            raise ConfigError(f"{at(self.source, self.text, 'loop', 'consolidation_steps')}: [loop] consolidation_steps = "
                              f"{lp.consolidation_steps} with [loop] recipe = {lp.recipe!r}, whose controller = "
                              f"{spec.controller!r} spaces its evaluation points over the epochs' steps; set "
                              "consolidation_steps = 0 or a recipe without a controller")
        if spec is not None and spec.peer != "none":
            raise ConfigError(f"{at(self.source, self.text, table_name('recipes', lp.recipe), 'peer')}: [loop] recipe = "
                              f"{lp.recipe!r} sets peer = {spec.peer!r}, a peer method of `replaybank run`; the loop trains plain LoRA")
        for key, value, off in (("sampling", spec.sampling if spec else "uniform", "uniform"), ("project", spec.project if spec else "none", "none")):
            if value != off:
                raise ConfigError(f"{at(self.source, self.text, table_name('recipes', lp.recipe), key)}: [loop] recipe = "
                                  f"{lp.recipe!r} sets {key} = {value!r}, an option of `replaybank run`; the loop does not run it")
        if spec is None or not spec.source:
            return
        if len(spec.source) > 1 or not (spec.source[0] == "self" or is_file_source(spec.source[0])):
            table = table_name("recipes", lp.recipe)
            where = at(self.source, self.text, table, "source") if lp.recipe in self.recipes else at(self.source, self.text, "loop", "recipe")
            raise ConfigError(
                f"{where}: [loop] recipe = {lp.recipe!r} rehearses with source = {spec.source}; the loop rehearses with "
                "one source: self (the base model's own answers) or a .jsonl file of {prompt, response} rows"
            )

    def with_(self, **loop: Any) -> LoopConfig:
        """A copy with some ``[loop]`` keys replaced (the CLI's flags; the keys of :data:`MOVED`
        go to their section); values are re-validated."""
        data = self.to_dict()
        for key, value in loop.items():
            data[MOVED.get(key, "loop")][key] = value
        return LoopConfig.from_dict(data, source=self.source, text=self.text)

    @staticmethod
    def before_keys_existed() -> dict[str, Any]:
        """The config a run written before a key existed ran with, per key, in the form
        :meth:`comparable` gives: the defaults, except :data:`RAN_BEFORE_THE_KEY`."""
        data = LoopConfig.comparable(LoopConfig().to_dict())
        for key, value in RAN_BEFORE_THE_KEY.items():
            data[MOVED.get(key, "loop" if key in data["loop"] else "recipe")][key] = value
        return data

    @staticmethod
    def comparable(data: dict[str, Any]) -> dict[str, Any]:
        """A saved config (:meth:`to_dict`, or a run's from before ``[loop] recipe``) as resuming
        compares it: the rehearsal recipe's values as a section ``recipe``, whatever its name (or
        ``{"source": []}`` without rehearsal), the keys of :data:`MOVED` in their sections
        wherever the run wrote them; keys an old run did not have are left out, so
        :func:`replaybank.llm.loop.state.check_same_config` holds them to :meth:`before_keys_existed`.

        Example:
            >>> old = {"loop": {"seed": 0, "rehearsal": "self", "rehearsal_ratio": 0.5, "kl_weight": 3.0}}
            >>> LoopConfig.comparable(old)["recipe"]
            {'source': ['self'], 'ratio': 0.5, 'kl_to_base': 3.0}
            >>> LoopConfig.comparable(LoopConfig().to_dict())["recipe"]["rehearsal_ce"]
            False
        """
        out = {name: dict(values) for name, values in data.items() if name != "recipes"}
        lp = out.setdefault("loop", {})
        for key, section in MOVED.items():
            if key in lp:
                out.setdefault(section, {})[key] = lp.pop(key)
        legacy = {key: lp.pop(key) for key in LEGACY_KEYS if key in lp}
        name = lp.pop("recipe", None)
        recipe: dict[str, Any]
        if name is None:  # written before [loop] recipe existed
            source = legacy.get("rehearsal", "self")
            renamed = {"rehearsal_ratio": "ratio", "kl_weight": "kl_to_base", "rehearsal_ce": "rehearsal_ce"}
            recipe = {"source": [source], **{new: legacy[old] for old, new in renamed.items() if old in legacy}}
            if source == NONE:
                recipe = {"source": []}
        elif name == NONE:
            recipe = {"source": []}
        else:
            declared = data.get("recipes", {})
            recipe = dict(declared[name]) if name in declared else recipe_dict(BUILTIN_RECIPES[name])
        out["recipe"] = recipe if recipe.get("source") else {"source": []}
        return out

    @staticmethod
    def recipe_values(data: dict[str, Any]) -> dict[str, Any] | None:
        """Every value of the recipe a saved config ran with (old runs: :meth:`before_keys_existed`
        for keys they lacked), or None without rehearsal."""
        recipe = LoopConfig.comparable(data)["recipe"]
        return {**LoopConfig.before_keys_existed()["recipe"], **recipe} if recipe["source"] else None

    def to_dict(self) -> dict[str, Any]:
        """``{section: {key: value}}`` for every key; ``recipes`` holds the config's tables and the
        recipe ``[loop] recipe`` names, with its values (so a saved config says what it ran)."""
        recipes = {name: recipe_dict(spec) for name, spec in self.recipes.items()}
        spec = self.recipe
        if spec is not None:
            recipes[self.loop.recipe] = recipe_dict(spec)
        return {"loop": dataclasses.asdict(self.loop), "recipes": recipes, "training": dataclasses.asdict(self.training),
                "evaluation": dataclasses.asdict(self.evaluation), "data": dataclasses.asdict(self.data)}

    def saved_dict(self) -> dict[str, Any]:
        """The config as a run's ``state.json`` records it: :meth:`to_dict` without the keys of
        :data:`WRITTEN_WHEN_SET` that are at their default.

        Example:
            >>> "consolidate" in LoopConfig().saved_dict()["loop"]
            False
            >>> LoopConfig.from_dict({"loop": {"consolidation_steps": 12}}).saved_dict()["loop"]["consolidation_steps"]
            12
        """
        data = self.to_dict()
        defaults = Loop()
        for key in WRITTEN_WHEN_SET:
            if data["loop"][key] == getattr(defaults, key):
                del data["loop"][key]
        return data

    def to_toml(self) -> str:
        """The effective config as TOML, each key with its help as a comment."""
        lines = [f"# effective loop config (from {self.source})"]
        data = self.to_dict()
        tables: list[tuple[str, Any, dict[str, Any]]] = [("loop", Loop, data["loop"])]
        tables += [(f"recipes.{json.dumps(name)}", Recipe, values) for name, values in data["recipes"].items()]
        tables += [("training", Training, data["training"]), ("data", SharedData, data["data"]),
                   ("evaluation", SharedEvaluation, data["evaluation"])]
        for name, klass, values in tables:
            lines.append(f"\n[{name}]")
            for f in fields(klass):
                if f.name not in values:  # a recipe's controller keys, without a controller
                    continue
                value = values[f.name]
                text = json.dumps(value) if isinstance(value, list) else toml_value(value)
                lines.append(f"{f.name} = {text}  # {f.metadata['help']}")
        return "\n".join(lines) + "\n"


def _from_legacy(old: LegacyRehearsal, source: str, text: str | None) -> tuple[str, Recipe | None]:
    """The recipe the old ``[loop]`` rehearsal keys set: its name (a built-in's when the values are
    one's, :data:`LEGACY_NAME` otherwise, ``none`` without rehearsal) and the recipe.

    Raises:
        ConfigError: the old keys' own checks, naming the old keys.
    """
    where = at(source, text, "loop", "rehearsal")
    if old.rehearsal not in ("self", NONE) and not is_file_source(old.rehearsal):
        raise ConfigError(f"{where}: [loop] rehearsal = {old.rehearsal!r}: expected self, none or a .jsonl file of {{prompt, response}} rows")
    if old.rehearsal == NONE:
        return NONE, None
    if old.rehearsal_ratio == 0:
        raise ConfigError(f"{at(source, text, 'loop', 'rehearsal_ratio')}: [loop] rehearsal_ratio = 0 with rehearsal = {old.rehearsal!r}; set rehearsal = \"none\" instead")
    if not old.rehearsal_ce and old.kl_weight == 0:
        raise ConfigError(
            f"{at(source, text, 'loop', 'kl_weight')}: [loop] rehearsal_ce = false (the default) trains the rehearsal rows through the KL term "
            "only, and kl_weight = 0 turns that term off (the rows would train nothing); to train them with "
            "cross-entropy alone set rehearsal_ce = true as well, or set a kl_weight above 0"
        )
    spec = Recipe(source=[old.rehearsal], ratio=old.rehearsal_ratio, kl_to_base=old.kl_weight, rehearsal_ce=old.rehearsal_ce)
    name = next((n for n, r in BUILTIN_RECIPES.items() if r == spec and n != "rehearsal"), LEGACY_NAME)
    return name, spec


def _shared_values(source: str, text: str | None, name: str, values: Any, loop: dict[str, Any]) -> dict[str, Any]:
    """The values of shared section ``[name]``: its own table and the keys of :data:`MOVED` that
    ``loop`` (the ``[loop]`` table, popped from it here) still writes for it.

    Raises:
        ConfigError: ``[name]`` sets a key of the main job's section that the
            loop does not read; a key is written both there and under ``[loop]``; a moved key's
            value is wrong (named ``[loop] KEY``, where it is written).
    """
    klass, of_run = SHARED[name]
    reads = [f.name for f in fields(klass)]
    for key in values:
        if key not in reads and key in {f.name for f in fields(of_run)}:
            raise ConfigError(
                f"{at(source, text, name, key)}: [{name}] {key} is a key of `replaybank run`; the loop's [{name}] "
                f"reads {', '.join(reads)}"
            )
    moved = {key: loop.pop(key) for key in [k for k in loop if MOVED.get(k) == name]}
    both = sorted(set(moved) & set(values))
    if both:
        line = key_line(text, "loop", both[0]) if text else None
        raise ConfigError(
            f"{at(source, text, name, both[0])}: [{name}] {both[0]} and [loop] {both[0]}"
            + (f" (line {line})" if line else "") + f" are one key; [loop] {both[0]} is its old spelling: keep [{name}]"
        )
    read_section(source, "loop", klass, moved, text=text)  # checked where it is written: [loop] KEY
    return {**values, **moved}
