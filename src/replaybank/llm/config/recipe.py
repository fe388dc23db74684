"""The rehearsal recipe: one definition of how rehearsal rows enter LoRA training, for every job.

A :class:`Recipe` says which rehearsal sources, what share of every batch (of its rows or of its
labelled tokens), whether the rehearsal rows train with cross-entropy, and the KL-to-base term
(weight, temperature, positions). The main job (``replaybank run``: each trained arm is a
recipe), the consolidation loop (``replaybank loop``: ``[loop] recipe``) and :mod:`replaybank.hf`
(``recipe(name)``, ``MixSpec(recipe=)``, ``KLToBase.from_recipe``) read the same type, the same
built-in names (:data:`BUILTIN_RECIPES`) and the same ``[recipes.NAME]`` tables
(:func:`parse_recipes`), so a recipe found in one job can be named in another. The main job
turns each arm's recipe into an :class:`ArmPlan` once, which fixes the arm's share.

Sources: ``corpus`` (the main job's rehearsal corpus), ``self`` (the base model's own answers to
general prompts), ``replay`` (the main job's stored rows of earlier generations), ``onpolicy`` (the
current model's checker-accepted answers to earlier generations' prompts), ``selfgen`` (the
current adapter's own answers to the self rows' general prompts, rewritten every ``refresh_every``
optimizer steps: on-policy self-distillation), or a ``.jsonl``
file of ``{prompt, response}`` rows (the loop). Each job says which it can run.

Example:
    >>> r = builtin("self-distill")
    >>> r.source, r.ratio, r.mix_by, r.kl_to_base, r.rehearsal_ce
    (['self'], 0.5, 'rows', 3.0, False)
    >>> builtin("self-distil")
    Traceback (most recent call last):
    ...
    replaybank.llm.config.ConfigError: unknown recipe 'self-distil'; did you mean 'self-distill'?
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Literal, TypeVar

from replaybank.controllers import Controller
from replaybank.llm.config.controller import auto_ratio, check_controller, recipe_controller
from replaybank.llm.config.names import check_name
from replaybank.llm.config.schema import ARM_SOURCES, ControllerName, KLOn, MixBy, PeerName, _f
from replaybank.llm.config.values import (
    ConfigError,
    at,
    did_you_mean,
    read_section,
    read_toml,
    shown,
    table_name,
)
from replaybank.llm.records import Record, ResultsError

__all__ = [
    "BUILTIN_RECIPES", "CONTROLLER_KEYS", "JOB_ARMS", "NONE", "SELFGEN", "SOURCES", "TAKES_TRAINING_SHARE", "TARGETED_KEYS",
    "ArmPlan", "Project", "Recipe", "Sampling", "builtin", "is_file_source", "load_recipes", "parse_recipes",
    "recipe_dict", "refuse_arms_tables", "resolve",
]  # fmt: skip

SOURCES = ARM_SOURCES  # corpus, self, replay, onpolicy, selfgen
SELFGEN = "selfgen"  # the source whose rows the adapter rewrites while it trains
#: how a source's rows are drawn: in order (each row in turn, or the corpus's seeded slices), or by forgetting
Sampling = Literal["uniform", "forgetting"]
#: what happens to the domain gradient: nothing, or A-GEM's projection against the rehearsal rows' gradient
Project = Literal["none", "agem"]
NONE = "none"  # a recipe name: no rehearsal at all
_R = TypeVar("_R", bound="Recipe")


@dataclass
class Recipe(Record):
    """How rehearsal rows enter training: sources, share, cross-entropy on/off, the KL term.

    It is also the ``spec`` of an arm in ``metrics.json`` (:meth:`to_json`, :meth:`from_json`).
    """

    source: list[str] = _f([], "rehearsal sources: corpus, self, replay, onpolicy, selfgen (the main job), self or a .jsonl file of {prompt, response} (the loop); empty = none (naive)")
    ratio: float = _f(0.1, "total rehearsal share of every batch, split evenly over the sources, in [0, 1)", min=0, lt=1)
    mix_by: MixBy = _f("rows", "rows: share of the rows; tokens: share of the labelled tokens (the loss)")
    kl_to_base: float = _f(0.0, "weight of the KL-to-base term KL(base || adapted) on the rehearsal rows' answer tokens (see kl_on), added to the loss; 0 = off", min=0, max=1000)
    kl_temperature: float = _f(1.0, "temperature of both distributions in the KL term (below 0.01 the term overflows float32)", min=0.01, max=100)
    kl_on: KLOn = _f("rehearsal", "KL positions: rehearsal completions, or also the prompts of domain rows (all)")
    rehearsal_ce: bool = _f(True, "train on the rehearsal completions with cross-entropy as well as the KL term; false = the KL term only (self-distillation; needs kl_to_base > 0)")
    controller: ControllerName = _f("none", "steer the rehearsal share between steps from held-out losses (docs/controllers.md): none (ratio, fixed); fixed (ratio, measured and recorded); bandit (Exp3 on the rise of each source's held-out loss, starting at ratio; ratio = \"auto\" is bandit); proxy (a frozen policy, controller_params.weights)")
    floor: float = _f(0.0, "with a controller: the least share of every batch for each rehearsal source that has rows", min=0, lt=1)
    max_share: float = _f(0.5, "with a controller: the most rehearsal (all sources together) of every batch", min=0, lt=1)
    controller_params: dict[str, Any] = _f({}, "with a controller: its own parameters, e.g. {lr = 1.0, discount = 0.9, explore = 0.1} (bandit), {weights = [7 numbers]} (proxy)")
    trend_window: int = _f(3, "with a controller: evaluations its loss trend is fitted over", min=2, max=1000)
    fresh_adapter: bool = _f(False, "replaybank run: train a fresh adapter on each generation's domain alone (one adapter per skill, adapters/ARM/seedN/genG/), instead of carrying one adapter over; the lineage keys do not apply")
    peer: PeerName = _f("none", "replaybank run: a peer method through PEFT instead of plain LoRA: osf, corda, intruder, attn-lowrank (docs/llm.md, Peer methods)")
    sampling: Sampling = _f("uniform", "replaybank run: how each source's rows are drawn: uniform (in order; the corpus's seeded slices), or forgetting (by the rise of each row's loss over the base model's, docs/llm.md, Forgetting-targeted rehearsal)")
    refresh_every: int = _f(20, "optimizer steps between refreshes of a source's rows: selfgen answers rewritten, or (sampling = forgetting) the rows' losses measured again", min=1, max=1_000_000)
    priority_cap: float = _f(0.9, "with sampling = forgetting: priorities above this quantile of the rows' rises are clipped to it; 1 = no cap", gt=0, max=1)
    outlier_mads: float = _f(3.5, "with sampling = forgetting: rows whose base-model loss is more than this many scaled MADs above the median are never drawn (inf = keep all)", gt=0)
    candidates: int = _f(512, "with sampling = forgetting: the most rows of each source whose losses are measured (a seeded choice)", min=1, max=10_000_000)
    project: Project = _f("none", "replaybank run: none, or agem: project the domain gradient so it does not oppose the rehearsal rows' gradient (docs/llm.md, A-GEM)")
    domain: bool = _f(True, "replaybank run: train on the arm's domain rows; false = on its rehearsal rows alone, as many per epoch as the domain has, plain cross-entropy, no ratio (the control arm: what any LoRA update on those rows costs, the floor under the domain's interference)")

    def to_json(self) -> dict[str, object]:
        """The recipe as a results file writes it (``metrics.json``: ``arms.<arm>.spec``): :func:`recipe_dict`."""
        return recipe_dict(self)

    @classmethod
    def from_json(cls: type[_R], data: object, where: str = "results") -> _R:
        """A recipe :meth:`to_json` wrote, every key checked as a config's ``[recipes.NAME]`` keys are
        (a key it left out takes its default).

        Example:
            >>> r = builtin("self-distill")
            >>> Recipe.from_json(r.to_json()) == r
            True

        Raises:
            ResultsError: ``data`` is not an object, or holds an unknown key or a bad value (``where``
                names it).
        """
        try:
            spec, _ = read_section(where, "recipe", cls, data)
        except ConfigError as exc:
            raise ResultsError(str(exc)) from None
        return spec


@dataclass(frozen=True)
class ArmPlan:
    """How one arm of the main job rehearses, decided once from the config
    (:meth:`replaybank.llm.config.Config.arm_plan`); the job reads the arm's share from here only.

    Attributes:
        name: the arm.
        recipe: its recipe: sources, ``mix_by``, the KL term, the controller, ``fresh_adapter``.
            Its ``ratio`` equals ``share`` (a built-in recipe of :data:`TAKES_TRAINING_SHARE` gets
            ``[training] mixing_ratio`` and ``mix_by``).
        share: the arm's total rehearsal share, split evenly over the sources that have rows: the
            fraction of the rows of every batch (``mix_by = "rows"``), or of the labelled tokens,
            that is of the loss (``mix_by = "tokens"``). 0 for an arm without sources (naive).
            With ``rows_per_epoch`` set, :meth:`share_for` replaces it per generation.
        rows_per_epoch: set when the share is converted from ``[training]
            rehearsal_rows_per_epoch`` (written without ``mixing_ratio``: the rehearsal-corpus method's form):
            every generation then draws that many rehearsal rows per epoch, whatever its size.
        from_training: whether the share is the job's (``[training]``) rather than the recipe's.

    Example:
        >>> plan = ArmPlan("rehearsal-corpus", builtin("rehearsal-corpus"), 0.1, rows_per_epoch=500, from_training=True)
        >>> plan.share_for(1500), plan.share_for(4500)
        (0.25, 0.1)
        >>> ArmPlan("self-distill", builtin("self-distill"), 0.5).share_for(4500)
        0.5
    """

    name: str
    recipe: Recipe
    share: float
    rows_per_epoch: int | None = None
    from_training: bool = False

    def share_for(self, domain_rows: int) -> float:
        """The share of a generation that trains on ``domain_rows`` domain rows per epoch (its lineage)."""
        if self.rows_per_epoch is None:
            return self.share
        return self.rows_per_epoch / (self.rows_per_epoch + domain_rows)

    def controller(self, seed: int) -> Controller | None:
        """A fresh replay controller of the recipe, starting at ``share`` (None without one)."""
        return recipe_controller(self.recipe, seed=seed)


BUILTIN_RECIPES: dict[str, Recipe] = {
    "naive": Recipe(source=[], ratio=0.0),
    "rehearsal-corpus": Recipe(source=["corpus"]),  # the rehearsal-corpus method (docs/llm.md): general corpus, 10% of rows
    "rehearsal": Recipe(source=["corpus"]),  # the old name of rehearsal-corpus
    "rehearsal-self": Recipe(source=["self"]),
    "rehearsal-replay": Recipe(source=["replay"]),
    "rehearsal-self-kl": Recipe(source=["self"], kl_to_base=1.0),
    # the corpus drawn by forgetting (docs/llm.md, Forgetting-targeted rehearsal), outliers held out
    "rehearsal-targeted": Recipe(source=["corpus"], sampling="forgetting"),
    # the base model's own answers as A-GEM's reference memory, and trained on (docs/llm.md, A-GEM)
    "rehearsal-agem": Recipe(source=["self"], project="agem"),
    # the loop's working recipe: half of every batch the base model's own answers, through the KL term only
    "self-distill": Recipe(source=["self"], ratio=0.5, kl_to_base=3.0, rehearsal_ce=False),
    # the same, on-policy: the adapter's own greedy answers to the same prompts, rewritten every 20 steps
    "self-distill-onpolicy": Recipe(source=[SELFGEN], ratio=0.5, kl_to_base=3.0, rehearsal_ce=False, refresh_every=20),
    # peer methods (docs/llm.md, Peer methods): no rehearsal, another way to train the adapter, through PEFT
    "peer-osf": Recipe(source=[], ratio=0.0, peer="osf"),
    "peer-corda": Recipe(source=[], ratio=0.0, peer="corda"),
    "peer-intruder": Recipe(source=[], ratio=0.0, peer="intruder"),
    "peer-attn-lowrank": Recipe(source=[], ratio=0.0, peer="attn-lowrank"),
    # the control arm: the base model's own answers alone, no domain row, same steps and optimizer (docs/llm.md)
    "control": Recipe(source=["self"], ratio=0.0, domain=False),
}
"""The built-in recipes. Every job and :func:`replaybank.hf.recipe` know these names."""

#: Arms of the main job that are no recipe, trained or served another way (docs/llm.md), without rehearsal rows:
#: TRL's SDFTTrainer on the domain rows, and the naive adapter behind the adapter library's router
JOB_ARMS = ("peer-sdft", "routed")

#: Built-in recipes whose share the main job takes from ``[training] mixing_ratio`` and ``mix_by``
#: (the rehearsal-corpus method's share, 10% of rows by default); their ratio above is that default.
TAKES_TRAINING_SHARE = frozenset({
    "rehearsal-corpus", "rehearsal", "rehearsal-self", "rehearsal-replay", "rehearsal-self-kl", "rehearsal-targeted",
    "rehearsal-agem",
})


#: The loop's old ``[loop]`` rehearsal keys and the recipe key each became.
LOOP_SPELLING = {"rehearsal": "source", "rehearsal_ratio": "ratio", "kl_weight": "kl_to_base"}


#: the keys of a replay controller (docs/controllers.md); written only when a recipe has one, so configs and run
#: folders written before them read and resume as they were
CONTROLLER_KEYS = ("controller", "floor", "max_share", "controller_params", "trend_window")
#: the keys of forgetting-targeted sampling; written only when a recipe samples by forgetting
TARGETED_KEYS = ("sampling", "refresh_every", "priority_cap", "outlier_mads", "candidates")
#: sources that draw on earlier generations, which an adapter of one generation's domain alone has not seen
EARLIER_SOURCES = ("replay", "onpolicy")


def recipe_dict(spec: Recipe) -> dict[str, Any]:
    """``spec``'s values as a dict, the controller keys left out when it has none (and
    ``fresh_adapter`` when false, ``peer`` and ``project`` when none, ``domain`` when true, the
    keys of ``sampling = "forgetting"`` when uniform (``refresh_every`` kept with ``selfgen`` rows):
    configs and run folders written before them read back the same).

    Example:
        >>> sorted(recipe_dict(Recipe(source=["self"])))
        ['kl_on', 'kl_temperature', 'kl_to_base', 'mix_by', 'ratio', 'rehearsal_ce', 'source']
    """
    out = asdict(spec)
    if spec.controller == "none":
        for key in CONTROLLER_KEYS:
            out.pop(key)
    if not spec.fresh_adapter:
        out.pop("fresh_adapter")
    if spec.peer == "none":
        out.pop("peer")
    if spec.sampling == "uniform":
        for key in TARGETED_KEYS:
            if key != "refresh_every" or SELFGEN not in spec.source:
                out.pop(key)
    if spec.project == "none":
        out.pop("project")
    if spec.domain:
        out.pop("domain")
    return out


def is_file_source(name: str) -> bool:
    """Whether a source names a JSONL file of ``{prompt, response}`` rows (rather than a kind)."""
    return name.lower().endswith(".jsonl")


def builtin(name: str) -> Recipe:
    """A copy of the built-in recipe ``name``.

    Raises:
        ConfigError: an unknown name, with a "did you mean".
    """
    if name not in BUILTIN_RECIPES:
        raise ConfigError(f"unknown recipe {name!r}{did_you_mean(name, BUILTIN_RECIPES)}")
    spec = BUILTIN_RECIPES[name]
    return replace(spec, source=list(spec.source))


def resolve(name: str, declared: dict[str, Recipe], where: str, key: str) -> Recipe | None:
    """The recipe ``name`` names: a declared ``[recipes.NAME]`` table, else a built-in; None for ``none``.

    Args:
        name: the name as written in the config.
        declared: the config's own tables (they replace built-ins of the same name).
        where: ``file:line`` of the key, for the error.
        key: ``[section] key`` that named it, for the error.

    Raises:
        ConfigError: an unknown name, naming ``where`` and ``key``, with a "did you mean".
    """
    if name == NONE:
        return None
    if name in declared:
        return declared[name]
    if name in BUILTIN_RECIPES:
        return builtin(name)
    known = sorted({*declared, *BUILTIN_RECIPES, NONE})
    raise ConfigError(
        f"{where}: {key} = {name!r} is not a built-in recipe or a [recipes.NAME] table{did_you_mean(name, known)}"
    )


def parse_recipes(raw: Any, source: str, text: str | None = None) -> dict[str, Recipe]:
    """``[recipes.NAME]`` tables -> a :class:`Recipe` per name, every key
    checked by :func:`.values.read_section`, then the keys against each other; errors name
    ``file:line`` when ``text`` (the TOML file's text) is given.

    Example:
        >>> parse_recipes({"mine": {"source": "self", "ratio": 0.3}}, "run.toml")["mine"].source
        ['self']
        >>> text = '[recipes.mine]\\nsource = "self"\\nrehearsal_ce = false\\n'
        >>> parse_recipes({"mine": {"source": "self", "rehearsal_ce": False}}, "run.toml", text=text)
        Traceback (most recent call last):
        ...
        replaybank.llm.config.ConfigError: run.toml:3: [recipes.mine] rehearsal_ce = false trains the rehearsal rows through the KL term only, which needs rehearsal sources and kl_to_base > 0 (got source = ['self'], kl_to_base = 0)

    Raises:
        ConfigError: a table that is not a table, the name ``base`` or ``none``, a name that is not
            a name (:func:`.names.check_name`: it becomes a folder name), an empty table, an
            unknown key, source or value, a share of 0 with sources, a share > 0 with
            ``source = []``, a KL term on rehearsal rows without sources, ``rehearsal_ce = false``
            without the KL term, ``fresh_adapter = true`` with ``replay`` or ``onpolicy`` rows,
            ``selfgen`` rows with cross-entropy, ``refresh_every`` without ``selfgen`` rows.
    """
    section = "recipes"
    if not isinstance(raw, dict):
        raise ConfigError(f"{at(source, text, section)}: [{section}] must hold tables [{section}.NAME], got {shown(raw)}")
    out: dict[str, Recipe] = {}
    for name, values in raw.items():
        table = table_name(section, str(name))
        if name in ("base", NONE):
            what = "the untouched model" if name == "base" else "no rehearsal"
            raise ConfigError(f"{at(source, text, table)}: [{table}] cannot be declared; {name} is {what}")
        try:
            check_name(name, f"[{section}.NAME]")
        except ValueError as exc:
            raise ConfigError(f"{at(source, text, table)}: {exc}; it names the arm's folders") from None
        if not isinstance(values, dict):
            raise ConfigError(f"{at(source, text, table)}: [{table}] must be a table, got {shown(values)}")
        if not values:
            raise ConfigError(
                f"{at(source, text, table)}: [{table}] is empty; give at least its source (corpus, self, replay or a "
                ".jsonl file) and ratio, or name the built-in naive for no rehearsal"
            )
        for key in values:
            if key in LOOP_SPELLING:
                raise ConfigError(f"{at(source, text, table, key)}: unknown key [{table}] {key}; did you mean "
                                  f"{LOOP_SPELLING[key]!r}? ([loop] {key} is its old spelling in the loop)")
        values = auto_ratio(values, at(source, text, table, "ratio"), table)
        spec, keys = read_section(source, table, Recipe, values, text=text)
        if (not spec.source or not spec.domain) and "ratio" not in keys:  # no sources, or no domain rows: no share (0, not the 0.1 default),
            spec = replace(spec, ratio=0.0)  # so the config written back (to_dict, to_toml) reads back
        check_recipe(spec, table, keys, source, text)
        out[name] = spec
    return out


def check_recipe(spec: Recipe, table: str, keys: set[str], source: str, text: str | None = None) -> None:
    """The keys of one recipe against each other (see :func:`parse_recipes`)."""

    def where(*candidates: str) -> str:
        key = next((k for k in candidates if k in keys), candidates[0])
        return at(source, text, table, key)

    for src in spec.source:
        if src not in SOURCES and not is_file_source(src):
            raise ConfigError(
                f"{where('source')}: [{table}] source contains {src!r}; expected some of "
                f"{', '.join(SOURCES)}{did_you_mean(src, SOURCES)} (or a .jsonl file of prompt/response rows)"
            )
    if len(set(spec.source)) != len(spec.source):
        raise ConfigError(f"{where('source')}: [{table}] source lists a source twice: {spec.source}")
    if not spec.domain:
        _check_control(spec, table, where)
        return
    if spec.source and spec.ratio == 0:
        raise ConfigError(f"{where('ratio', 'source')}: [{table}] has sources {spec.source} but ratio = 0; give a ratio in (0, 1)")
    if not spec.source and "ratio" in keys and spec.ratio > 0:
        raise ConfigError(
            f"{where('ratio')}: [{table}] ratio = {spec.ratio:g} with source = []: a share of no rehearsal rows; "
            "give a source, or drop ratio (source = [] is the naive arm)"
        )
    if spec.kl_to_base > 0 and not spec.source and spec.kl_on == "rehearsal":
        raise ConfigError(
            f"{where('kl_to_base')}: [{table}] kl_to_base = {spec.kl_to_base} applies to rehearsal rows, but the arm "
            "has no source; add a source or set kl_on = \"all\""
        )
    if not spec.rehearsal_ce and (spec.kl_to_base == 0 or not spec.source):
        raise ConfigError(
            f"{where('rehearsal_ce')}: [{table}] rehearsal_ce = false trains the rehearsal rows through the KL term only, "
            f"which needs rehearsal sources and kl_to_base > 0 (got source = {spec.source}, kl_to_base = {spec.kl_to_base:g})"
        )
    earlier = [s for s in spec.source if s in EARLIER_SOURCES]
    if spec.fresh_adapter and earlier:
        raise ConfigError(
            f"{where('fresh_adapter')}: [{table}] fresh_adapter = true trains each generation's domain alone, but "
            f"source contains {earlier[0]!r} (rows of earlier generations); drop it, or set fresh_adapter = false"
        )
    check_targeted(spec, table, keys, where)
    if SELFGEN in spec.source and spec.rehearsal_ce:
        raise ConfigError(
            f"{where('rehearsal_ce', 'source')}: [{table}] source contains 'selfgen', the adapter's own answers, which "
            "train through the KL term only (cross-entropy on them would reinforce its own drift); set rehearsal_ce = false "
            "and kl_to_base > 0"
        )
    if "refresh_every" in keys and SELFGEN not in spec.source and spec.sampling == "uniform":
        raise ConfigError(
            f"{where('refresh_every')}: [{table}] refresh_every = {spec.refresh_every} rewrites selfgen rows, but source = "
            f"{spec.source} has none; add \"selfgen\" to source, set sampling = \"forgetting\", or drop refresh_every"
        )
    check_controller(spec, table, keys, source, text)


def check_targeted(spec: Recipe, table: str, keys: set[str], where: Any) -> None:
    """The keys of forgetting-targeted sampling and of A-GEM against the rest of a recipe."""
    if spec.sampling == "uniform":
        stray = [k for k in TARGETED_KEYS[1:] if k in keys and k != "refresh_every"]  # refresh_every: selfgen's too, checked below
        if stray:
            raise ConfigError(f"{where(stray[0])}: [{table}] {stray[0]} applies to sampling = \"forgetting\"; "
                              "set sampling = \"forgetting\" or drop it")
    if spec.sampling == "forgetting" and SELFGEN in spec.source:
        raise ConfigError(f"{where('sampling', 'source')}: [{table}] sampling = \"forgetting\" draws stored rows by their "
                          "loss rise, but selfgen rows are rewritten as the adapter trains; drop one of them")
    for key, value, off in (("sampling", spec.sampling, "uniform"), ("project", spec.project, "none")):
        if value != off and not spec.source:
            raise ConfigError(f"{where(key)}: [{table}] {key} = {value!r} needs rehearsal rows, but source = []")


def _check_control(spec: Recipe, table: str, where: Any) -> None:
    """A recipe with ``domain = false`` (the control arm): its rehearsal rows train alone, plainly."""
    def refuse(key: str, why: str) -> None:
        raise ConfigError(f"{where(key)}: [{table}] domain = false trains on the rehearsal rows alone; {why}")

    if not spec.source:
        refuse("source", "give a source (corpus or self)")
    bad = [s for s in spec.source if s in EARLIER_SOURCES or s == SELFGEN or is_file_source(s)]
    if bad:
        refuse("source", f"source contains {bad[0]!r}, which is domain rows or no source of the main job; use corpus or self")
    if spec.ratio != 0:
        refuse("ratio", f"every row is rehearsal, so ratio = {spec.ratio:g} does not apply; drop it")
    if spec.kl_to_base > 0 or not spec.rehearsal_ce:
        refuse("kl_to_base", "they train with plain cross-entropy; drop kl_to_base and rehearsal_ce")
    if spec.controller != "none" or spec.peer != "none" or spec.fresh_adapter:
        refuse("controller", "no controller, peer method or fresh_adapter applies")


def load_recipes(path: str | Path) -> dict[str, Recipe]:
    """The ``[recipes.NAME]`` tables of a TOML file, checked; other sections are not read (so a
    main-job or loop config can lend its recipes to :mod:`replaybank.hf`).

    Raises:
        ConfigError: a missing or unreadable file, invalid TOML, a bad table (``file:line``), or an
            ``[arms.NAME]`` table (:func:`refuse_arms_tables`).
    """
    p = Path(path)
    data, text = read_toml(p)
    refuse_arms_tables(data, str(p), text)
    return parse_recipes(data.get("recipes", {}), str(p), text)


def refuse_arms_tables(data: dict[str, Any], source: str, text: str | None = None) -> None:
    r"""Refuse ``[arms.NAME]`` tables: a recipe is declared as ``[recipes.NAME]``.

    Example:
        >>> refuse_arms_tables({"arms": {"mine": {"source": "self"}}}, "run.toml", '[arms.mine]\nsource = "self"\n')
        Traceback (most recent call last):
        ...
        replaybank.llm.config.ConfigError: run.toml:1: [arms.mine] is not a section; declare the recipe as [recipes.mine]

    Raises:
        ConfigError: ``data`` has an ``arms`` section, naming the line of its first table.
    """
    raw = data.get("arms")
    if raw is None:
        return
    if isinstance(raw, dict) and raw:
        name = str(next(iter(raw)))
        old, new = table_name("arms", name), table_name("recipes", name)
        raise ConfigError(f"{at(source, text, old)}: [{old}] is not a section; declare the recipe as [{new}]")
    raise ConfigError(f"{at(source, text, 'arms')}: [arms] is not a section; declare recipes as [recipes.NAME] tables")
