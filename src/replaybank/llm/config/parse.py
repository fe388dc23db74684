"""The experiment config: reading a TOML file and validating it, with "did you mean".

Every key lives in one section; the ``[orchestration]`` and ``[training]`` keys of the
rehearsal-corpus method (docs/llm.md) are accepted as written. The sections, their keys, defaults, help and ranges are the schema in
:mod:`replaybank.llm.config.schema` (re-exported here); this module checks values against it,
checks keys against each other, and writes the effective config back as TOML.

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

import copy
import dataclasses
import json
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from replaybank.llm.config.choose import check_choose_keys
from replaybank.llm.config.floor import check_gate_keys
from replaybank.llm.config.recipe import (
    BUILTIN_RECIPES,
    EARLIER_SOURCES,
    JOB_ARMS,
    TAKES_TRAINING_SHARE,
    ArmPlan,
    Recipe,
    builtin,
    is_file_source,
    parse_recipes,
    recipe_dict,
    refuse_arms_tables,
)
from replaybank.llm.config.schema import (
    ARM_SOURCES,
    BUILTIN_TOOLAPI,
    CHOOSE_KEYS,
    SECTIONS,
    Data,
    Evaluation,
    Orchestration,
    Output,
    Training,
)
from replaybank.llm.config.values import (
    ConfigError,
    at,
    did_you_mean,
    read_section,
    read_toml,
    shown,
    table_name,
    toml_value,
)

__all__ = ["Config", "ConfigError", "with_seed"]


@dataclass
class Config:
    """The whole experiment config; see :data:`SECTIONS` for the keys."""

    orchestration: Orchestration = field(default_factory=Orchestration)
    training: Training = field(default_factory=Training)
    data: Data = field(default_factory=Data)
    evaluation: Evaluation = field(default_factory=Evaluation)
    output: Output = field(default_factory=Output)
    recipes: dict[str, Recipe] = field(default_factory=dict)
    """The config's own ``[recipes.NAME]`` tables."""
    source: str = "<defaults>"
    explicit: frozenset[str] = frozenset()
    text: str | None = field(default=None, repr=False, compare=False)
    """The TOML file's text, for the line numbers of errors found after parsing."""

    @classmethod
    def from_toml(cls, path: str | Path) -> Config:
        """Read and validate a TOML file.

        A file that sets no key at all (zero bytes, only comments or empty ``[section]`` headers)
        is refused: leave the config argument out to run with the defaults.

        Raises:
            ConfigError: missing or empty file, TOML syntax error (a UTF-8 byte-order mark is
                accepted), or any invalid key or value.
        """
        p = Path(path)
        data, text = read_toml(p)
        cfg = cls.from_dict(data, source=str(p), text=text)
        if not cfg.explicit and not cfg.recipes:  # a zero-byte or comments-only file is far more often a mistake than a choice
            raise ConfigError(_empty_file_message(p))
        return cfg

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "<config>", *, text: str | None = None) -> Config:
        """Validate a nested dict ``{section: {key: value}}``.

        ``text`` is the TOML file's text when there is one: errors in recipe tables then name the
        line (``run.toml:7: [recipes.x] ratio = 1.0: ...``).

        Raises:
            ConfigError: an unknown section or key (with a "did you mean"), a wrong type or range,
                an ``[arms.NAME]`` table (recipes are ``[recipes.NAME]``).
        """
        sections: dict[str, Any] = {}
        explicit: set[str] = set()
        data = dict(data)
        refuse_arms_tables(data, source, text)
        declared = parse_recipes(data.pop("recipes", {}), source, text)
        for name, values in data.items():
            if name not in SECTIONS:
                raise ConfigError(f"{at(source, text, name)}: unknown section [{name}]{did_you_mean(name, SECTIONS)}")
            if not isinstance(values, dict):
                raise ConfigError(f"{at(source, text, name)}: [{name}] must be a table, got {shown(values)}")
        for name, klass in SECTIONS.items():
            sections[name], keys = read_section(source, name, klass, data.get(name, {}), text=text)
            explicit.update(f"{name}.{key}" for key in keys)
        if declared and "evaluation.arms" not in explicit:
            sections["evaluation"].arms = sections["evaluation"].arms + [a for a in declared if a not in sections["evaluation"].arms]
        cfg = cls(**sections, recipes=declared, source=source, explicit=frozenset(explicit), text=text)
        cfg.cross_check()
        cfg.check_arms()
        ev = cfg.evaluation
        check_gate_keys(ev.retention_floor, ev.gate_arm, ev.arms, source, text)
        check_choose_keys(ev.choose, ev.scales, ev.scale_profiles, cfg.data.validation_suite, cfg.explicit, source, text)
        peers = [a for a in ev.arms if a != "base" and cfg.arm_plan(a).recipe.peer != "none"] if ev.choose == "floor" else []
        if peers:
            raise ConfigError(f"{at(source, text, 'evaluation', 'choose')}: [evaluation] choose = \"floor\" scales LoRA "
                              f"adapters, but {peers[0]!r} is a peer method's adapter; drop it from [evaluation] arms or choose = \"last\"")
        if ev.choose == "floor" and ev.checkpoints and "peer-sdft" in ev.arms:
            raise ConfigError(f"{at(source, text, 'evaluation', 'checkpoints')}: [evaluation] checkpoints = {ev.checkpoints} keeps "
                              "adapter states during replaybank's own LoRA training, but 'peer-sdft' trains through TRL; "
                              "drop it from [evaluation] arms or set checkpoints = 0")
        return cfg

    def cross_check(self) -> None:
        where = self.source
        if not self.evaluation.arms:
            raise ConfigError(f"{at(where, self.text, 'evaluation', 'arms')}: [evaluation] arms is empty; expected one or more of base, naive, rehearsal")
        specs = self.arm_specs()
        for arm in self.evaluation.arms:
            if arm not in specs and arm != "base":
                raise ConfigError(
                    f"{at(where, self.text, 'evaluation', 'arms')}: [evaluation] arms contains {arm!r}; expected base, "
                    f"a built-in recipe or a [recipes.NAME] table{did_you_mean(arm, ['base', *specs])}"
                )
            files = [s for s in specs[arm].source if is_file_source(s)] if arm in specs else []
            if files:
                table = table_name("recipes", arm)
                raise ConfigError(
                    f"{at(where, self.text, table, 'source')}: [{table}] source contains {files[0]!r}: the main job "
                    f"rehearses with {', '.join(ARM_SOURCES)}; a .jsonl file of prompt/response rows is a source of the loop"
                )
        if len(set(self.evaluation.arms)) != len(self.evaluation.arms):
            raise ConfigError(f"{at(where, self.text, 'evaluation', 'arms')}: [evaluation] arms = {self.evaluation.arms!r} lists an arm twice; list each once")
        t = self.training
        if t.rehearsal_prompt_chars >= t.rehearsal_max_chars:
            raise ConfigError(
                f"{at(where, self.text, 'training', 'rehearsal_prompt_chars')}: [training] rehearsal_prompt_chars = {t.rehearsal_prompt_chars} is not below "
                f"[training] rehearsal_max_chars = {t.rehearsal_max_chars}: the prompt would show the whole "
                "passage and the completion only repeat it; expected rehearsal_prompt_chars < rehearsal_max_chars"
            )
        plans = [self.arm_plan(a) for a in self.evaluation.arms if a in specs]
        zero = next((p for p in plans if p.recipe.source and p.share == 0 and p.rows_per_epoch is None), None)
        if zero is not None:
            shared = zero.from_training
            knob = "[training] mixing_ratio = 0" if shared else f"[{table_name('recipes', zero.name)}] ratio = 0"
            line = at(where, self.text, "training", "mixing_ratio") if shared else at(where, self.text, table_name("recipes", zero.name), "ratio")
            raise ConfigError(
                f"{line}: {knob} makes the rehearsal arm {zero.name!r} the naive arm again; "
                f"expected a share > 0, or drop {zero.name!r} from [evaluation] arms"
            )
        self._check_earlier_rows(plans)
        if not self.training.lora_target_modules:
            raise ConfigError(f"{at(where, self.text, 'training', 'lora_target_modules')}: [training] lora_target_modules is empty; name at least one module")
        if not self.data.domain_train:
            raise ConfigError(f"{at(where, self.text, 'data', 'domain_train')}: [data] domain_train is empty; give one file or folder per generation")
        n_gen, n_files = self.orchestration.num_generations, len(self.data.domain_train)
        if n_files not in (1, n_gen) or (n_files == 1 and n_gen > 1 and self.data.domain_train[0] != BUILTIN_TOOLAPI):
            raise ConfigError(
                f"{at(where, self.text, 'data', 'domain_train')}: [data] domain_train has {n_files} entries but [orchestration] "
                f"num_generations = {n_gen}; give one file or folder per generation"
            )

    def _check_earlier_rows(self, plans: list[ArmPlan]) -> None:
        """Refuse an arm that rehearses only rows of earlier generations out of the lineage
        (``replay``, ``onpolicy``) when every generation's lineage holds all earlier ones: no
        generation would have a rehearsal row, and the arm would train as the naive arm."""
        o = self.orchestration
        if o.lineage != "all" and o.training_window_size < o.num_generations:
            return
        plan = next((p for p in plans if p.recipe.source and all(s in EARLIER_SOURCES for s in p.recipe.source)), None)
        if plan is None:
            return
        if plan.name in self.recipes:
            table = table_name("recipes", plan.name)
            line, what = at(self.source, self.text, table, "source"), f"[{table}] source = {plan.recipe.source!r}"
        else:
            line, what = at(self.source, self.text, "evaluation", "arms"), f"the built-in arm {plan.name!r} (source = {plan.recipe.source!r})"
        raise ConfigError(
            f"{line}: {what} rehearses only rows of earlier generations out of the lineage, but every generation's "
            f"lineage holds all earlier ones ([orchestration] num_generations = {o.num_generations}, "
            f"training_window_size = {o.training_window_size}, lineage = {o.lineage!r}): the arm {plan.name!r} would train "
            "as the naive arm; add a source (corpus or self), or set training_window_size below num_generations"
        )

    def check_arms(self) -> None:
        where = self.source
        if len(set(self.evaluation.arms)) != len(self.evaluation.arms):
            raise ConfigError(f"{at(where, self.text, 'evaluation', 'arms')}: [evaluation] arms lists an arm twice: {self.evaluation.arms}")
        if self.data.domain_eval and len(self.data.domain_eval) not in (1, self.orchestration.num_generations):
            raise ConfigError(
                f"{at(where, self.text, 'data', 'domain_eval')}: [data] domain_eval has {len(self.data.domain_eval)} entries but [orchestration] "
                f"num_generations = {self.orchestration.num_generations}; give one for all or one per generation"
            )
        if not self.data.domain_eval:
            raise ConfigError(f"{at(where, self.text, 'data', 'domain_eval')}: [data] domain_eval is empty; give one file (or builtin) for all generations")

    def arm_specs(self) -> dict[str, Recipe]:
        """Every arm this config can run by name: the built-in recipes, then its ``[recipes.NAME]``
        tables.

        The arms of :data:`.recipe.JOB_ARMS` (``peer-sdft``, ``routed``) have no rehearsal rows.
        Built-in rehearsal recipes of :data:`.recipe.TAKES_TRAINING_SHARE` take ``[training]
        mixing_ratio`` and ``mix_by`` (the rehearsal-corpus method's share); ``self-distill`` keeps
        its own (half
        of the rows). ``rehearsal`` is the historical name of ``rehearsal-corpus``. A table with a
        built-in name replaces it.

        Example:
            >>> specs = Config().arm_specs()
            >>> specs["rehearsal-self"].source, specs["rehearsal-self"].ratio, specs["naive"].source
            (['self'], 0.1, [])
            >>> specs["self-distill"].ratio, specs["self-distill"].rehearsal_ce
            (0.5, False)
        """
        t = self.training
        specs = {}
        for name in BUILTIN_RECIPES:
            spec = builtin(name)
            if name in TAKES_TRAINING_SHARE:
                spec.ratio, spec.mix_by = (t.mixing_ratio if spec.source else 0.0), t.mix_by
            specs[name] = spec
        specs.update({name: Recipe(source=[], ratio=0.0) for name in JOB_ARMS})
        return {**specs, **self.recipes}

    def arm_plan(self, name: str) -> ArmPlan:
        """How arm ``name`` rehearses: its recipe and its share, decided here once.

        A built-in recipe of :data:`.recipe.TAKES_TRAINING_SHARE` (not replaced by a table) takes
        the job's share, ``[training] mixing_ratio``; when the config sets
        ``rehearsal_rows_per_epoch`` but not ``mixing_ratio`` (the rehearsal-corpus
        method's form, docs/llm.md) that share is
        instead ``rows / (rows + domain rows per epoch)`` for each generation's lineage
        (:meth:`.recipe.ArmPlan.share_for`), so every generation draws that many rehearsal rows
        per virtual epoch, whatever the lineage's size. A recipe with ``domain = false`` (``control``)
        has the share 1: its rehearsal rows alone. Every other arm keeps its recipe's ``ratio``.

        Example:
            >>> cfg = Config.from_dict({"training": {"rehearsal_rows_per_epoch": 500}})
            >>> plan = cfg.arm_plan("rehearsal-corpus")
            >>> [round(plan.share_for(n), 4) for n in (1500, 4500)], plan.from_training
            ([0.25, 0.1], True)
            >>> cfg.arm_plan("self-distill").share_for(1500), cfg.arm_plan("naive").share
            (0.5, 0.0)

        Raises:
            KeyError: ``name`` is no arm of :meth:`arm_specs`.
        """
        spec = self.arm_specs()[name]
        if not spec.domain:  # the control arm: every row of every batch is rehearsal
            return ArmPlan(name, spec, 1.0)
        if name not in TAKES_TRAINING_SHARE or name in self.recipes or not spec.source:
            return ArmPlan(name, spec, spec.ratio)
        return ArmPlan(name, spec, spec.ratio, self._rows_per_epoch(), from_training=True)

    def training_share(self, domain_rows: int) -> tuple[float, str]:
        """The job's share (``[training]``, what the built-in rehearsal arms take) for a generation
        of ``domain_rows`` domain rows per epoch, and how it was decided (for ``metrics.json``).

        Example:
            >>> Config.from_dict({"training": {"rehearsal_rows_per_epoch": 500}}).training_share(4500)
            (0.1, 'converted from rehearsal_rows_per_epoch=500 over 4500 domain rows per epoch')
        """
        rows = self._rows_per_epoch()
        if rows is None:
            return self.training.mixing_ratio, "mixing_ratio"
        return rows / (rows + domain_rows), f"converted from rehearsal_rows_per_epoch={rows} over {domain_rows} domain rows per epoch"

    def _rows_per_epoch(self) -> int | None:
        """``[training] rehearsal_rows_per_epoch`` when the job's share is converted from it (it is
        set and ``mixing_ratio`` is not), else None."""
        if "training.rehearsal_rows_per_epoch" in self.explicit and "training.mixing_ratio" not in self.explicit:
            return self.training.rehearsal_rows_per_epoch
        return None

    def to_dict(self) -> dict[str, Any]:
        """``{section: {key: value}}`` for every key, defaults included (the operating-point keys,
        :data:`.schema.CHOOSE_KEYS`, only with ``choose = "floor"``); declared recipe tables too
        (as ``recipes``)."""
        out = {name: dataclasses.asdict(getattr(self, name)) for name in SECTIONS}
        if self.evaluation.choose == "last":  # the adapter as trained: the choosing keys are left out
            for key in CHOOSE_KEYS:
                del out["evaluation"][key]
        if self.recipes:
            out["recipes"] = {name: recipe_dict(spec) for name, spec in self.recipes.items()}
        return out

    def to_toml(self, with_help: bool = True) -> str:
        """The effective config as TOML, each key with its help as a comment."""
        lines = [f"# effective config (from {self.source})"]
        for name, klass in SECTIONS.items():
            lines.append(f"\n[{name}]")
            section = getattr(self, name)
            for f in fields(klass):
                if name == "evaluation" and f.name in CHOOSE_KEYS and self.evaluation.choose == "last":
                    continue  # as to_dict: the adapter as trained reads no scale
                value = toml_value(getattr(section, f.name))
                comment = f"  # {f.metadata['help']}" if with_help else ""
                lines.append(f"{f.name} = {value}{comment}")
        for name, spec in self.recipes.items():
            lines.append(f"\n[recipes.{json.dumps(name)}]")
            written = recipe_dict(spec)
            for f in fields(Recipe):
                comment = f"  # {f.metadata['help']}" if with_help else ""
                if f.name in written:
                    lines.append(f"{f.name} = {toml_value(written[f.name])}{comment}")
        return "\n".join(lines) + "\n"


def _empty_file_message(path: Path) -> str:
    return (
        f"{path}: config file sets no keys (it is empty, or holds only comments or empty [section] "
        "headers); to run with the defaults leave the config argument out, or write them to a file "
        f"to edit with `replaybank config > {path.name}`"
    )


def with_seed(cfg: Config, seed: int) -> Config:
    """A copy of ``cfg`` with ``[training] seed = seed`` (explicit keys kept)."""
    out = copy.deepcopy(cfg)
    out.training = dataclasses.replace(cfg.training, seed=seed)
    return out
