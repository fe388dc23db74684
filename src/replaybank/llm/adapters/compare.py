"""The adapter comparison over a ``replaybank run`` folder: one adapter carried over against one
adapter per skill, merged or routed (docs/adapters.md, "The comparison"), measured per seed and
aggregated over seeds.

The run must have trained an arm with ``fresh_adapter = true`` (one adapter per skill,
``adapters/ARM/seedN/genG/``) beside the carried-over arms, with ``[output] save_adapters = true``.
Everything goes through the library's API: the adapters are registered in a scratch
:class:`~.library.AdapterLibrary` (each skill's training prompts as its routing examples), merged by
:func:`~.merge.merge`, served by :func:`~.route.load_all` + :func:`~.route.routed`, routed by
:class:`~.route.Router`. Domain accuracy is the main job's (:func:`..eval.domain.generated_accuracy`
on the run's own held-out requests: :func:`..data.prepare.prepare` with the config the adapters
recorded, the split checked against their data manifest); general retention is the main job's
suite (:func:`..eval.suite.sample_suite` with the seed, base answers cached, per family and
:func:`..eval.measure.suite_retention`).

Over seeds, pure functions over :func:`measure_seed`'s results (no torch): :func:`flatten` reduces
one seed to scalars per approach, :func:`summarise_seeds` aggregates them with the main job's
:func:`replaybank.llm.report.seeds.aggregate` (mean, sample std with ``ddof = 1``, None for one
seed), :func:`check_targets` checks the targets on the seed means, :func:`best` names the leading
approach and :func:`table` prints the Markdown table.

Example:
    >>> seed = {"skills": ["a", "b"], "approaches": {
    ...     "routed": {"accuracy": [0.5, 0.75], "retention": 1.0, "memory_bytes": 2_000_000},
    ...     "oracle": {"accuracy": [0.5, 0.875], "retention": None, "memory_bytes": 2_000_000}}}
    >>> flat = flatten(seed)["routed"]
    >>> flat["acc_mean"], flat["gap_b"], flat["memory_mb"]
    (0.625, -0.125, 2.0)
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, cast

from replaybank.errors import ReplayBankError

if TYPE_CHECKING:
    from replaybank.llm.adapters.merge import Combination

__all__ = ["GAP_TARGET", "MERGES", "RETENTION_TARGET", "ComparisonError", "RunFolder", "SeedData", "Settings", "best",
           "check_targets", "flatten", "measure_approach", "measure_seed", "prepare_seed", "read_run", "skill_names", "summarise_seeds", "table"]

MERGES = ("linear", "cat", "ties", "dare_ties", "svd")
"""The merge types compared (PEFT's ``add_weighted_adapter`` combination types)."""
GAP_TARGET = -0.05
"""Routed: no skill's accuracy more than 5 points below its own adapter's (the oracle)."""
RETENTION_TARGET = 0.95
"""Routed: general retention at least 95% of the base model's."""


class ComparisonError(ReplayBankError):
    """A run folder the comparison cannot use; the message names the file and what to do."""


@dataclass(frozen=True)
class Settings:
    """What the comparison measures, beyond the run's own settings."""

    merges: tuple[str, ...] = MERGES
    weight: float = 1.0
    """each skill adapter's weight in every merge (equal weights)"""
    density: float = 0.5
    """kept share of the pruning merge types (ties, dare_ties)"""
    threshold: float | None = None
    """the router's confidence below which a request goes to the bare base model (None: the router's
    ``top_k`` and threshold calibrated left-one-out on the skills' training prompts and the background)"""
    background: bool = True
    """give the router the shipped general prompt pool (selfsynth_prompts.txt) as the base model's examples"""
    suite_per_family: int | None = None
    """suite items a family (None: the run's ``[evaluation] suite_per_family``; 0: all)"""
    eval_rows: int | None = None
    """held-out requests a skill (None: all the run held out)"""
    latency_requests: int = 8
    """requests timed one at a time per approach (half skill requests, half suite prompts)"""


@dataclass(frozen=True)
class RunFolder:
    """A finished run: its folder, seeds, the per-skill arm and the carried-over arms compared."""

    root: Path
    seeds: list[int]
    generations: int
    per_skill: str
    carried: list[str]
    base_model: str
    device: str


def read_run(root: Path, per_skill: str | None = None, carried: Sequence[str] | None = None) -> RunFolder:
    """The run in ``root`` (its ``metrics.json``) and the arms to compare.

    ``per_skill`` defaults to the one arm with ``fresh_adapter = true``; ``carried`` to ``naive``
    and the best rehearsal arm: the trained arm with rehearsal sources and the highest final
    accuracy over all skills (``domain_exact_match``, mean over seeds).

    Raises:
        ComparisonError: no finished run, no (or several) per-skill arms, an arm the run did not train.
    """
    from replaybank.llm.config.names import check_name
    from replaybank.llm.config.recipe import BUILTIN_RECIPES
    from replaybank.llm.train.peft_files import read_json_object

    path = Path(root) / "metrics.json"
    if not path.is_file():
        raise ComparisonError(f"{path}: no such file; give the folder of a finished `replaybank run`")
    metrics = read_json_object(path, "the run's metrics.json", error=ComparisonError)
    try:
        config, arms = metrics["config"], metrics["arms"]
        recipes, trained = config.get("recipes", {}), list(config["evaluation"]["arms"])
        seeds, generations = [int(s) for s in metrics["seeds"]], int(config["orchestration"]["num_generations"])
        base_model, device = str(config["training"]["base_model"]), str(config["training"]["device"])
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ComparisonError(f"{path}: not a `replaybank run` metrics file ({exc!r} missing or malformed)") from None
    fresh = [a for a in trained if isinstance(recipes.get(a), dict) and recipes[a].get("fresh_adapter") is True]
    if per_skill is None:
        if len(fresh) != 1:
            raise ComparisonError(f"{path}: the run has {len(fresh)} arms with fresh_adapter = true ({fresh}); "
                                  "train one ([recipes.per-skill] source = [], fresh_adapter = true) or name it")
        per_skill = fresh[0]
    if carried is None:
        def sources(arm: str) -> list[str]:
            declared = recipes.get(arm)
            return list(declared.get("source") or []) if isinstance(declared, dict) else list(
                BUILTIN_RECIPES[arm].source if arm in BUILTIN_RECIPES else [])

        rehearsal = [a for a in trained if a not in ("base", per_skill, *fresh) and sources(a)]
        score = {a: arms.get(a, {}).get("summary", {}).get("domain_exact_match", {}).get("mean", -1.0) for a in rehearsal}
        carried = ["naive", *([max(rehearsal, key=lambda a: score[a])] if rehearsal else [])]
    for arm in [per_skill, *carried]:
        check_name(arm, "an arm")
        if arm not in trained or arm == "base":
            raise ComparisonError(f"{path}: arm {arm!r} was not trained in this run (its arms: {trained})")
    return RunFolder(Path(root), seeds, generations, per_skill, list(carried), base_model, device)


def adapter_folder(run: RunFolder, arm: str, seed: int, generation: int) -> Path:
    """``adapters/ARM/seedN/genG`` of the run, a real folder inside it (no links on the way)."""
    folder = run.root / "adapters" / arm / f"seed{seed}" / f"gen{generation}"
    walk = [folder, *folder.parents][: len(folder.relative_to(run.root).parts)]
    if any(p.is_symlink() for p in walk) or not folder.is_dir():
        raise ComparisonError(f"{folder}: missing or not a folder; the run must save its adapters "
                              "([output] save_adapters = true)")
    return folder


def skill_names(domains: Sequence[str]) -> list[str]:
    """Short distinct names for the generations' domain sources.

    Example:
        >>> skill_names(["builtin:toolapi", "data/agenda.jsonl", "builtin:toolapi"])
        ['toolapi0', 'agenda', 'toolapi2']
    """
    stems = [Path(d.split(":", 1)[-1]).stem for d in domains]
    return [s if stems.count(s) == 1 else f"{s}{g}" for g, s in enumerate(stems)]


Assign = Callable[[str, int | None], Any]
"""``assign(prompt, skill or None) -> Route`` (None: the approach does not serve the request)."""


def _fixed(name: str) -> Any:
    from replaybank.llm.adapters.route import Route

    return Route(adapter=name, confidence=1.0, score=0.0, best=name, confidences={name: 1.0})


def _always(name: str) -> Assign:
    """Every request to adapter ``name``."""
    route = _fixed(name)

    def assign(prompt: str, g: int | None) -> Any:
        return route

    return assign


class SeedData(NamedTuple):
    """A seed's config, data (:class:`~replaybank.llm.data.prepare.Prepared`), domain sources and skill names."""

    cfg: Any
    data: Any
    sources: list[str]
    skills: list[str]


def prepare_seed(run: RunFolder, seed: int, tokenizer: Any) -> SeedData:
    """Seed ``seed``'s data as the run prepared it: :func:`..data.prepare.prepare` with the config in
    the per-skill arm's ``gen0/replaybank.json``, the split checked against its data manifest.

    Raises:
        ComparisonError: the adapter folder is missing, its config is another seed's, or the data
            prepared again differs from the data the run used.
    """
    from replaybank.llm.config import Config
    from replaybank.llm.data.prepare import prepare
    from replaybank.llm.train.peft_files import read_json_object

    path = adapter_folder(run, run.per_skill, seed, 0) / "replaybank.json"
    recorded = read_json_object(path, "the adapter's replaybank.json", error=ComparisonError)
    cfg = Config.from_dict(recorded.get("config", {}), source=str(path))  # the seed's own
    if cfg.training.seed != seed:
        raise ComparisonError(f"{path}: field 'config.training.seed' is {cfg.training.seed}, not {seed}")
    data = prepare(cfg, tokenizer)
    _check_split(data.manifest, recorded.get("data"), path)
    train = cfg.data.domain_train
    sources = [train[g] if len(train) > 1 else train[0] for g in range(run.generations)]
    return SeedData(cfg, data, sources, skill_names(sources))


def _check_split(prepared: dict[str, Any], recorded: Any, where: Path) -> None:
    """The held-out and training rows prepared here are the ones the run used (its data manifest)."""
    for key in ("domain_evals", "domain_train", "domain_train_rows"):
        mine = json.dumps(prepared.get(key), sort_keys=True)
        theirs = json.dumps(recorded.get(key) if isinstance(recorded, dict) else None, sort_keys=True)
        if mine != theirs:
            raise ComparisonError(f"{where}: field 'data.{key}' differs from the data prepared again from its config; "
                                  "the run's data sources changed since (they must be the run's own)")


def measure_seed(
    base_model: Any, tokenizer: Any, run: RunFolder, seed: int, settings: Settings, scratch: Path,
    progress: Callable[[str], None] = lambda _: None,
) -> dict[str, Any]:
    """Every approach on seed ``seed``; see the module docstring.

    Args:
        base_model: the bare base model the run trained on; given back as it was.
        scratch: an empty folder for the scratch library (the merges land there).
        progress: called with an approach's name when it is measured.

    Returns:
        ``{"seed", "skills", "approaches": {name: {"kind", "accuracy" (per skill), "retention",
        "retention_family", "leakage", "memory_bytes", "latency_ms", "ms_per_token", "routing"
        (routed only)}}, "run_matrix": {arm: the run's accuracy matrix}, "library": [names]}``.

    Raises:
        ComparisonError: missing adapters, data that is not the run's. LibraryError: bad adapters.
    """
    from replaybank.llm.adapters.attach import detach
    from replaybank.llm.adapters.library import AdapterLibrary, Registration
    from replaybank.llm.adapters.merge import DENSITY, merge
    from replaybank.llm.adapters.route import Router, load_all
    from replaybank.llm.data.selfsynth import load_prompt_pool
    from replaybank.llm.eval.suite import load_suite, prepare_suite, sample_suite
    from replaybank.llm.model import cache_dir

    G = run.generations
    folders = [adapter_folder(run, run.per_skill, seed, g) for g in range(G)]
    cfg, data, sources, skills = prepare_seed(run, seed, tokenizer)
    ev = cfg.evaluation
    requests = [list(data.domain_eval_records[g][: settings.eval_rows]) for g in range(G)]
    per_family = ev.suite_per_family if settings.suite_per_family is None else settings.suite_per_family
    suite = prepare_suite(base_model, tokenizer, sample_suite(load_suite(cfg.data.suite), per_family, seed),
                          cache_dir=cache_dir() / "suite", batch_size=ev.generation_batch_size, desc=None,
                          precision=ev.generation_precision)

    lib = AdapterLibrary(scratch, create=True)
    names = [f"skill{g}-{skills[g]}" for g in range(G)]
    for g in range(G):
        lib.add(folders[g], Registration(names[g], skill=skills[g], domain=sources[g], examples=[r["prompt"] for r in data.domain_train_records[g] if isinstance(r.get("prompt"), str)]), base_model=base_model)
    for arm in run.carried:
        lib.add(adapter_folder(run, arm, seed, G - 1), Registration(f"carried-{arm}", skill="+".join(skills)), base_model=base_model)
    for kind in settings.merges:
        merge(lib, names, into=f"merge-{kind}", base_model=base_model, weights=[settings.weight] * G,
              combination_type=cast("Combination", kind), density=settings.density if kind in DENSITY else None, seed=seed)
    examples = {n: lib.manifest(n).examples for n in names}
    general = load_prompt_pool()[0] if settings.background else []
    router = (Router.calibrated(examples, general) if settings.threshold is None
              else Router(examples, threshold=settings.threshold, background=general))
    loo_own, loo_base = router.leave_one_out()

    def by_router(prompt: str, g: int | None) -> Any:
        return router.route(prompt)

    def own(prompt: str, g: int | None) -> Any:  # the oracle: a skill's requests to its adapter, nothing else
        return None if g is None else _fixed(names[g])

    plans: dict[str, tuple[str, Assign, list[str]]] = {
        **{arm: ("carried", _always(f"carried-{arm}"), [f"carried-{arm}"]) for arm in run.carried},
        **{f"merge-{k}": ("merge", _always(f"merge-{k}"), [f"merge-{k}"]) for k in settings.merges},
        "routed": ("routed", by_router, names), "oracle": ("oracle", own, names),
    }
    sample = _latency_sample(requests, suite, settings.latency_requests, ev.max_new_tokens)
    approaches: dict[str, dict[str, Any]] = {}
    model = load_all(lib, base_model)  # every entry on the one base model, under its name
    try:
        for name, (kind, assign, held) in plans.items():
            figures = measure_approach(model, tokenizer, kind, assign, requests, suite, ev, names)
            figures.pop("suite")  # per-item answers: the retention figures above summarise them
            approaches[name] = {"kind": kind, **figures,
                                "memory_bytes": sum(_weight_bytes(lib, n) for n in held), "adapters": held,
                                **_latency(model, tokenizer, assign, sample, ev.generation_precision)}
            progress(name)
    finally:
        detach(model, lib.names()[0], wrapped=True)
    arms = (_read_seed(run, seed) or {}).get("arms", {})
    matrices = {a: arms[a].get("matrix") or {} for a in [run.per_skill, *run.carried] if a in arms}
    return {"seed": seed, "skills": skills, "sources": sources, "approaches": approaches, "library": lib.names(),
            "run_matrix": matrices, "run_agreement": _agreement(approaches, matrices, run),
            "router": {"top_k": router.top_k, "threshold": router.threshold, "background_prompts": len(general),
                       "leave_one_out_own": loo_own, "leave_one_out_base": loo_base},
            "settings": {**settings.__dict__, "merges": list(settings.merges), "suite_per_family": per_family,
                         "suite_items": len(suite.items), "eval_rows": [len(r) for r in requests]}}


def _by_route(assign: Assign, prompts: Sequence[str], g: int | None) -> dict[str | None, tuple[Any, list[int]]]:
    """The prompts' indices by where they go (an adapter's name, None for the base), with that route."""
    groups: dict[str | None, tuple[Any, list[int]]] = {}
    for k, p in enumerate(prompts):
        route = assign(p, g)
        if route is not None:
            groups.setdefault(route.adapter, (route, []))[1].append(k)
    return groups


def measure_approach(model: Any, tok: Any, kind: str, assign: Assign,
                     requests: list[list[dict[str, Any]]], suite: Any, ev: Any, names: list[str]) -> dict[str, Any]:
    """Accuracy per skill, routing shares and (unless no request of the suite is served) retention.

    Args:
        model: a PEFT model holding every adapter ``assign`` names (:func:`~.route.routed` switches them).
        assign: where each request goes (:data:`Assign`); ``requests[g]`` are skill ``g``'s held-out
            domain records, ``names[g]`` its own adapter (the routing share ``to_own``).
        suite: the main job's prepared suite; ``ev``: its ``[evaluation]`` section.

    Returns:
        ``{"accuracy" (exact match per skill), "retention", "retention_family", "leakage", "suite"
        (:func:`..eval.suite.summarise` of the routed answers, None when no suite item is served),
        "routing" (kind ``routed`` only)}``.
    """
    from replaybank.llm.adapters.route import routed
    from replaybank.llm.eval.domain import generated_accuracy
    from replaybank.llm.eval.measure import suite_retention
    from replaybank.llm.eval.suite import Suite, evaluate_suite, summarise

    gen = {"batch_size": ev.generation_batch_size, "precision": ev.generation_precision}
    accuracy, to_own, to_base = [], [], []
    for g, records in enumerate(requests):
        groups = _by_route(assign, [r["prompt"] for r in records], g)
        exact = 0.0
        for route, idx in groups.values():
            with routed(model, route) as m:
                res = generated_accuracy(m, tok, [records[k] for k in idx], max_new_tokens=ev.max_new_tokens, **gen)
            exact += res["exact_match"] * len(idx)
        accuracy.append(exact / len(records))
        to_own.append(len(groups.get(names[g], (None, []))[1]) / len(records))
        to_base.append(len(groups.get(None, (None, []))[1]) / len(records))
    out: dict[str, Any] = {"accuracy": accuracy, "retention": None, "retention_family": None, "leakage": None, "suite": None}
    groups = _by_route(assign, [i.prompt for i in suite.items], None)
    general_to_base = None
    if groups:
        outcomes: list[dict[str, Any]] = []
        for route, idx in groups.values():
            part = Suite([suite.items[k] for k in idx], suite.base_answers, suite.base)
            with routed(model, route) as m:
                outcomes += evaluate_suite(m, tok, part, **gen)["items"]
        result = summarise(outcomes, suite.base["families"])
        out.update(retention=suite_retention(result["retention"]), retention_family=result["retention"],
                   leakage=result["leakage"], suite=result)
        general_to_base = len(groups.get(None, (None, []))[1]) / len(suite.items)
    if kind == "routed":
        out["routing"] = {"to_own": to_own, "accuracy": sum(to_own) / len(to_own),
                          "fallback_skill": sum(to_base) / len(to_base),
                          "fallback_general": general_to_base}
    return out


def _latency_sample(requests: list[list[dict[str, Any]]], suite: Any, n: int, budget: int) -> list[tuple[str, int | None, int]]:
    """``n`` requests ``(prompt, skill or None, token budget)``: skill requests round-robin over the
    skills, then suite prompts (their family's budget), the same for every approach."""
    out: list[tuple[str, int | None, int]] = []
    for k in range(max(map(len, requests))):
        out += [(str(recs[k]["prompt"]), g, budget) for g, recs in enumerate(requests) if k < len(recs)]
    return out[: n - n // 2] + [(i.prompt, None, i.budget) for i in suite.items][: n // 2]


def _latency(model: Any, tok: Any, assign: Assign, sample: list[tuple[str, int | None, int]],
             precision: Any) -> dict[str, float | None]:
    """Median wall time per request, one request at a time (routing included), and per generated token."""
    from replaybank.llm.adapters.route import routed
    from replaybank.llm.eval.decode import generate_detailed

    ms, per_token = [], []
    for prompt, g, budget in sample:
        t0 = time.perf_counter()
        route = assign(prompt, g)
        if route is None:  # the oracle serves skill requests only
            continue
        with routed(model, route) as m:
            out = generate_detailed(m, tok, [prompt], max_new_tokens=budget, batch_size=1, desc=None, precision=precision)
        ms.append(1000 * (time.perf_counter() - t0))
        per_token.append(ms[-1] / max(1, out[0].n_tokens))
    return {"latency_ms": statistics.median(ms) if ms else None,
            "ms_per_token": statistics.median(per_token) if per_token else None, "latency_n": len(ms)}


def _weight_bytes(lib: Any, name: str) -> int:
    """Bytes of the adapter's tensors (what serving it holds beside the base model)."""
    from replaybank.llm.train.peft_files import read_tensors

    tensors = read_tensors(lib.folder(name) / lib.manifest(name).weights)
    return int(sum(t.numel() * t.element_size() for t in tensors.values()))


def _agreement(approaches: dict[str, Any], matrices: dict[str, Any], run: RunFolder) -> dict[str, float]:
    """The largest difference between the accuracies measured here and the run's own for the same
    adapters and requests (oracle: the per-skill arm's diagonal; a carried arm: its last row); 0
    when the harness scores what the run scored (all held-out rows, same generation settings)."""
    out: dict[str, float] = {}
    R = matrices.get(run.per_skill, {}).get("R")
    if R:
        out["oracle"] = max(abs(float(approaches["oracle"]["accuracy"][g]) - float(R[g][g])) for g in range(len(R)))
    for arm in run.carried:
        R = matrices.get(arm, {}).get("R")
        if R:
            out[arm] = max(abs(float(a) - float(b)) for a, b in zip(approaches[arm]["accuracy"], R[-1], strict=False))
    return out


def _read_seed(run: RunFolder, seed: int) -> dict[str, Any] | None:
    """The run's own per-seed results (``seeds/seed<N>.json``: the accuracy matrices), if there."""
    from replaybank.llm.train.peft_files import read_json_object

    path = run.root / "seeds" / f"seed{seed}.json"
    return read_json_object(path, "the run's seed results", error=ComparisonError) if path.is_file() else None


def flatten(seed: dict[str, Any]) -> dict[str, dict[str, float]]:
    """``{approach: {scalar: value}}`` of one seed: ``acc_<skill>``, ``acc_mean``, ``gap_<skill>``
    (accuracy minus the oracle's on the same seed), ``retention``, ``retention_<family>``,
    ``leakage``, ``memory_mb``, ``latency_ms``, ``ms_per_token``, the routed approach's
    ``routing_accuracy``, ``fallback_skill``, ``fallback_general``, and for arms of the run their
    ``backward_transfer`` (from the run's accuracy matrix). Missing figures are left out."""
    skills = list(seed["skills"])
    oracle = seed["approaches"].get("oracle", {}).get("accuracy")
    out: dict[str, dict[str, float]] = {}
    for name, a in seed["approaches"].items():
        flat: dict[str, float] = {}
        acc = [float(x) for x in a.get("accuracy") or []]
        for skill, x in zip(skills, acc, strict=False):
            flat[f"acc_{skill}"] = x
        if acc:
            flat["acc_mean"] = sum(acc) / len(acc)
        if oracle and acc and name != "oracle":
            for skill, x, own in zip(skills, acc, oracle, strict=False):
                flat[f"gap_{skill}"] = x - float(own)
        for key in ("retention", "leakage", "latency_ms", "ms_per_token"):
            if a.get(key) is not None:
                flat[key] = float(a[key])
        for fam, value in (a.get("retention_family") or {}).items():
            if value is not None:
                flat[f"retention_{fam}"] = float(value)
        if a.get("memory_bytes") is not None:
            flat["memory_mb"] = float(a["memory_bytes"]) / 1e6
        routing = a.get("routing") or {}
        for key, value in (("routing_accuracy", routing.get("accuracy")), ("fallback_skill", routing.get("fallback_skill")),
                           ("fallback_general", routing.get("fallback_general"))):
            if value is not None:
                flat[key] = float(value)
        matrix = (seed.get("run_matrix") or {}).get(name) or {}
        if matrix.get("backward_transfer") is not None:
            flat["backward_transfer"] = float(matrix["backward_transfer"])
        out[name] = flat
    return out


def summarise_seeds(seeds: Sequence[dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """``{approach: {scalar: {"mean", "std", "n", "values"}}}`` over seeds.

    Raises:
        ValueError: with no seeds.
    """
    from replaybank.llm.report.seeds import aggregate

    return {arm: {key: stat.to_json() for key, stat in scalars.items()}
            for arm, scalars in aggregate([flatten(s) for s in seeds]).items()}


def check_targets(agg: dict[str, dict[str, dict[str, Any]]], skills: Sequence[str]) -> dict[str, Any]:
    """The targets for ``routed`` (:data:`GAP_TARGET`, :data:`RETENTION_TARGET`), on the seed means
    (None when not measured).

    Example:
        >>> agg = {"routed": {"gap_a": {"mean": -0.02}, "gap_b": {"mean": -0.10}, "retention": {"mean": 0.97}}}
        >>> t = check_targets(agg, ["a", "b"])
        >>> t["skills"]["b"], t["retention"]["met"], t["met"]
        ({'gap': -0.1, 'met': False}, True, False)
    """
    routed = agg.get("routed", {})
    per_skill: dict[str, dict[str, Any]] = {}
    for skill in skills:
        gap = routed.get(f"gap_{skill}", {}).get("mean")
        per_skill[skill] = {"gap": gap, "met": None if gap is None else gap >= GAP_TARGET - 1e-12}
    retention = routed.get("retention", {}).get("mean")
    checks = [c["met"] for c in per_skill.values()] + [None if retention is None else retention >= RETENTION_TARGET]
    return {
        "skills": per_skill, "gap_target": GAP_TARGET,
        "retention": {"value": retention, "target": RETENTION_TARGET, "met": checks[-1]},
        "met": None if any(c is None for c in checks) else all(checks),
    }


def best(agg: dict[str, dict[str, dict[str, Any]]]) -> dict[str, Any] | None:
    """The approach (oracle aside) with the highest mean accuracy over the skills, its margin over
    the next and its memory.

    Example:
        >>> best({"a": {"acc_mean": {"mean": 0.6}, "memory_mb": {"mean": 9.0}}, "b": {"acc_mean": {"mean": 0.5}}})
        {'approach': 'a', 'acc_mean': 0.6, 'margin': 0.09999999999999998, 'next': 'b', 'memory_mb': 9.0}
    """
    ranked = sorted(((v["acc_mean"]["mean"], k) for k, v in agg.items() if k != "oracle" and "acc_mean" in v), reverse=True)
    if not ranked:
        return None
    (top, name), rest = ranked[0], ranked[1:]
    return {"approach": name, "acc_mean": top, "margin": top - rest[0][0] if rest else None,
            "next": rest[0][1] if rest else None, "memory_mb": agg[name].get("memory_mb", {}).get("mean")}


def _cell(entry: dict[str, Any] | None, scale: float = 100.0, digits: int = 1) -> str:
    if not entry:
        return "-"
    std = entry.get("std")
    return f"{scale * entry['mean']:.{digits}f}" + (f" ± {scale * std:.{digits}f}" if std is not None else "")


def table(agg: dict[str, dict[str, dict[str, Any]]], skills: Sequence[str]) -> str:
    """The Markdown table: per approach, accuracy per skill and its mean (%), the worst skill's gap
    to its own adapter (points), general retention (%), adapter memory (MB), median latency per
    request (ms), and the routed approach's routing accuracy and fallback rate on general requests (%).

    Example:
        >>> agg = {"routed": {"acc_a": {"mean": 0.5, "std": 0.1}, "retention": {"mean": 0.96, "std": None}}}
        >>> print(table(agg, ["a"]).splitlines()[2])
        | routed | 50.0 ± 10.0 | - | - | 96.0 | - | - | - | - |
    """
    head = ["approach", *(f"{s} acc %" for s in skills), "mean acc %", "worst gap vs own (pts)", "retention %",
            "adapter MB", "latency ms", "routing acc %", "fallback general %"]
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    for name, s in agg.items():
        gaps = [s[f"gap_{k}"] for k in skills if f"gap_{k}" in s]
        worst = min(gaps, key=lambda e: e["mean"]) if gaps else None
        cells = [*(_cell(s.get(f"acc_{k}")) for k in skills), _cell(s.get("acc_mean")), _cell(worst),
                 _cell(s.get("retention")), _cell(s.get("memory_mb"), 1.0), _cell(s.get("latency_ms"), 1.0, 0),
                 _cell(s.get("routing_accuracy")), _cell(s.get("fallback_general"))]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
