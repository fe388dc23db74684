"""The main job (``replaybank run``): every arm over every seed, measured where it matters, reported.

Read top to bottom; each step names the component that does the work.

1. :func:`run_experiment` sets up: validates the output folder (:mod:`..report.folder`), picks
   threads and device (:mod:`..runtime`), loads the base model (:mod:`..model`) and the suite;
2. per seed (``training.seed + k``; :func:`run_seed`, in worker processes with ``jobs``):
   a. samples the general-capability suite and gets the base model's answers (cached;
      :mod:`..eval.suite`);
   b. prepares the corpus pool, held-out sets, domain data and probe (:mod:`..data.prepare`) and
      checks that no training text contains a suite prompt;
   c. synthesizes the ``self`` rehearsal rows when an arm uses them (:mod:`..data.selfsynth`);
   d. measures ``base`` (:mod:`..eval.measure`); on the first seed, probes gradient interference
      per rehearsal source (:mod:`..eval.interference`);
   e. trains and measures every other arm (:func:`train_arm`; side by side in one-thread worker
      processes with ``[evaluation] arm_processes``, :func:`train_arms_apart`): per generation the lineage
      (:mod:`..train.lineage`), the rehearsal sources (:mod:`..train.sources`), the LoRA loop
      (:mod:`..train`), one row of the accuracy matrix; after the last, the suite; with
      ``[evaluation] choose = "floor"``, the operating point chosen on the validation data and
      applied (:mod:`..eval.operating`);
3. aggregates the arms over seeds (:mod:`..report.seeds`), checks the targets, and writes
   ``metrics.json``, ``report.md``, ``behaviour.png`` and ``losses.png`` (:mod:`..report.metrics`).

Everything is written into ``OUT.partial/`` and renamed to ``OUT`` at the very end, so an
interrupted run never leaves an output folder that looks complete; a rerun with the same config
resumes the arms' checkpoints and finished seeds from ``OUT.partial/``. An existing ``OUT`` (or
leftovers of a run with another config) is only replaced with ``force``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from replaybank.llm.adapters.routed_arm import ROUTED_ARM, measure_routed
from replaybank.llm.config import ArmPlan, Config
from replaybank.llm.config.names import safe_folder
from replaybank.llm.config.parse import with_seed
from replaybank.llm.config.recipe import recipe_dict
from replaybank.llm.data.prepare import check_overlaps, prepare
from replaybank.llm.data.rows import TokenRows
from replaybank.llm.data.selfsynth import encode_records, synthesize_records
from replaybank.llm.eval.interference import InterferenceReport, probe_sources
from replaybank.llm.eval.losses import mean_loss
from replaybank.llm.eval.measure import (
    EvalContext,
    domain_row,
    final_domain,
    flatten,
    loss_shares,
    matrix_metrics,
    measure_base,
    measure_behaviour,
    measure_point,
)
from replaybank.llm.eval.operating import at_operating_point, validation_set
from replaybank.llm.eval.suite import (
    Suite,
    general_text_rows,
    load_suite,
    prepare_suite,
    sample_suite,
)
from replaybank.llm.records import JsonObject
from replaybank.llm.report.folder import (
    OutputError,
    check_out_dir,
    finish,
    partial_dir,
    read_result,
    write_result,
)
from replaybank.llm.report.metrics import build_metrics, write_outputs
from replaybank.llm.report.seeds import aggregate
from replaybank.llm.results import (
    ArmResult,
    ArmTraining,
    CurvePoint,
    DomainCell,
    DomainScore,
    Generation,
    MixtureEntry,
    RunResult,
    SeedManifest,
    SeedResult,
    SourceUse,
    SuiteScore,
    TrainLogRecord,
    TrainTotal,
)
from replaybank.llm.runtime import environment, loadavg, pick_device, pick_threads, use_device
from replaybank.llm.train import KLSpec, train_lora
from replaybank.llm.train.adapter import adapter_state, fresh_adapter, restore_adapter
from replaybank.llm.train.lineage import select_lineage
from replaybank.llm.train.peers import PeerHooks, peer_calibration, peer_training
from replaybank.llm.train.peft_files import write_adapter_folder
from replaybank.llm.train.snapshots import Snapshots
from replaybank.llm.train.sources import (
    arm_steering,
    build_sources,
    concat_rows,
    empty_sources,
    refresh_cost,
    rehearsal_alone,
    rows_per_epoch,
    sampled_rows,
)
from replaybank.llm.train.trl_peer import SDFT_ARM, train_sdft
from replaybank.storage import available_memory

__all__ = ["OutputError", "SeedSetup", "arm_processes", "run_experiment", "run_seed", "seed_setup", "train_arm", "train_arms_apart"]

Log = Callable[[str], None]


def run_experiment(
    cfg: Config, out: Path | None = None, log: Log = print, max_steps: int | None = None,
    *, seeds: int | None = None, force: bool = False, jobs: int = 1,
) -> RunResult:
    """Run every configured arm over every seed and write the report; returns what ``metrics.json`` holds.

    Args:
        cfg: a validated config.
        out: output folder (default ``cfg.output.out_dir``).
        log: where progress lines go.
        max_steps: optional cap on optimizer steps per arm and generation (smoke tests).
        seeds: number of seeds (default ``[evaluation] seeds``); seed ``k`` is ``training.seed + k``.
        force: replace an earlier run's output folder (and discard leftovers of another config).
        jobs: run seeds in this many worker processes (each loads the model; one torch thread each).

    Raises:
        ConfigError, CorpusError, ModelError, SuiteError, OutputError: bad input, before any
            training starts. ReplayBankError: self-synthesis that yields no usable row.
    """
    import torch

    wall0 = time.perf_counter()
    load_start = loadavg()
    if load_start is not None and load_start > (os.cpu_count() or 1):
        log(f"note: load average {load_start} on {os.cpu_count()} CPUs; other processes will slow this run")
    out = Path(out if out is not None else cfg.output.out_dir)
    check_out_dir(out, force)
    n_seeds = seeds if seeds is not None else cfg.evaluation.seeds
    if n_seeds < 1:
        raise OutputError(f"--seeds {n_seeds}: need at least one seed")
    t = cfg.training
    items = load_suite(cfg.data.suite)  # bad suite files fail before the model loads
    threads = pick_threads(t.num_threads)
    torch.set_num_threads(threads.threads)
    log(f"torch threads: {threads.threads} ({threads.reason})")
    device = pick_device(t.device, where=f"{cfg.source}: [training] device")  # before the model loads
    use_device(device)
    timings: dict[str, float] = {}

    t0 = time.perf_counter()
    base_model, tokenizer = _load(cfg, device, log)
    timings["model_load"] = time.perf_counter() - t0

    general_text = general_text_rows(tokenizer, t.max_seq_length)
    partial = partial_dir(out, cfg.to_dict(), n_seeds, force)

    n_jobs = min(max(1, jobs), n_seeds)
    n_arms = sum(arm != "base" for arm in cfg.evaluation.arms)
    processes, why = arm_processes(cfg.evaluation.arm_processes, threads.threads, device, base_model, n_arms)
    if n_jobs > 1:
        results = _parallel_seeds(cfg, n_seeds, n_jobs, partial, log, max_steps)
    else:
        log(f"arm processes: {processes} ({why})")
        results = [
            run_seed(cfg, k, base_model, tokenizer, items, general_text, partial=partial, log=log, max_steps=max_steps,
                     arm_processes=processes)
            for k in range(n_seeds)
        ]
    timings.update({key: v for res in results for key, v in res.timings.items()})

    agg = aggregate([{a: flatten(r) for a, r in res.arms.items()} for res in results])
    metrics = replace(  # the run's environment, timings and wall time: build_metrics leaves them to the caller
        build_metrics(cfg, results, agg),
        environment={**environment(device), "loadavg_1min_start": load_start, "loadavg_1min_end": loadavg(),
                     "thread_choice": threads.to_dict(),
                     "arm_processes": {"processes": processes if n_jobs == 1 else 1, "reason": why}},
        timings={key: round(v, 2) for key, v in timings.items()},
        seeds=[t.seed + k for k in range(n_seeds)],
        wall_seconds=round(time.perf_counter() - wall0, 2),
    )
    write_outputs(partial, metrics)  # metrics.json last: its presence marks a complete run
    finish(partial, out)  # checkpoints dropped, OUT.partial renamed to OUT
    log(f"wrote {out / 'report.md'}, {out / 'metrics.json'} and plots in {metrics.wall_seconds:.1f} s")
    return metrics


@dataclass
class SeedSetup:
    """What every arm of one seed shares, built the same way by the run and by an arm's worker process."""

    seed: int
    label: str
    cfg: Config
    """The config with ``training.seed`` set to this seed."""
    plans: dict[str, ArmPlan]
    """Every trained arm of the config, in its order."""
    ctx: EvalContext
    share: float
    how: str
    self_manifest: JsonObject | None
    suite: Suite


def seed_setup(
    cfg: Config, k: int, base_model: Any, tokenizer: Any, items: list[Any], general_text: TokenRows, *,
    log: Log, timings: dict[str, float],
) -> SeedSetup:
    """Seed ``training.seed + k``'s suite sample (the base model's answers), data, self rows and, with
    ``choose = "floor"``, validation data; each phase's seconds into ``timings``."""
    from replaybank.llm.model import cache_dir

    t, ev = cfg.training, cfg.evaluation
    seed = t.seed + k
    label = f"seed{seed}"
    plans = {arm: cfg.arm_plan(arm) for arm in ev.arms if arm != "base"}  # every trained arm
    scfg = with_seed(cfg, seed)
    t0 = time.perf_counter()
    suite = prepare_suite(
        base_model, tokenizer, sample_suite(items, ev.suite_per_family, seed), cache_dir=cache_dir() / "suite",
        batch_size=ev.generation_batch_size, desc=f"suite {label}: base answers", precision=ev.generation_precision,
    )
    log(f"suite {label}: {len(suite.items)} items kept of {len(items)} ({suite.base['n']}); "
        f"base leakage {suite.base['leakage']:.3f}")
    timings[f"suite_{label}"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    data = prepare(scfg, tokenizer)
    share, how = scfg.training_share(len(data.domain_generations[0]))
    check_overlaps(items, data, sampled_rows(len(data.rehearsal_pool), scfg.training))  # drops pool rows
    if data.manifest["rehearsal_pool"]["dropped"]:
        log(f"{label}: rehearsal rows dropped so far: {data.manifest['rehearsal_pool']['dropped']}")
    uses_self = any(s in plan.recipe.source for plan in plans.values() for s in ("self", "selfgen"))  # selfgen: its prompts
    self_records, self_manifest = synthesize_records(base_model, tokenizer, scfg, items, log) if uses_self else (None, None)
    self_rows = encode_records(tokenizer, self_records, t.max_seq_length) if self_records is not None else None
    timings[f"data_{label}"] = time.perf_counter() - t0
    log(
        f"{label}: {len(data.rehearsal_pool)} corpus passages, {len(self_rows) if self_rows else 0} self rows, "
        f"domain train {data.manifest['domain_train_rows']}, eval {[len(r) for r in data.domain_eval_records]}; "
        f"corpus share {share:.4f} ({how})"
    )
    ctx = EvalContext(tokenizer, int(tokenizer.pad_token_id), data, suite, general_text, ev.max_new_tokens,
                      ev.generation_batch_size, self_rows, self_records=self_records, precision=ev.generation_precision)
    if ev.choose == "floor" and plans:  # where each trained arm's operating point is chosen
        t0 = time.perf_counter()
        ctx.validation = validation_set(base_model, ctx, scfg, seed, label)
        timings[f"validation_{label}"] = time.perf_counter() - t0
    return SeedSetup(seed, label, scfg, plans, ctx, share, how, self_manifest, suite)


def run_seed(
    cfg: Config, k: int, base_model: Any, tokenizer: Any, items: list[Any], general_text: TokenRows, *,
    partial: Path, log: Log, max_steps: int | None, arm_processes: int = 1,
) -> SeedResult:
    """Seed ``training.seed + k``: suite sample, data, self rows, base, (probe), every trained arm.

    With ``arm_processes`` > 1 the trained arms run side by side in that many worker processes
    (:func:`train_arms_apart`, one torch thread each) and are read back here. A seed already
    finished in ``partial`` (``seeds/seed<N>.json`` of an interrupted run with the same config) is
    read back instead of rerun.
    """
    label = f"seed{cfg.training.seed + k}"
    earlier = read_result(partial, f"seeds/{label}", SeedResult)
    if earlier is not None:
        log(f"{label}: finished in an earlier, interrupted run; read back from {partial / 'seeds' / label}.json")
        return earlier
    timings: dict[str, float] = {}
    setup = seed_setup(cfg, k, base_model, tokenizer, items, general_text, log=log, timings=timings)
    ctx, scfg = setup.ctx, setup.cfg
    t0 = time.perf_counter()
    arms: dict[str, ArmResult] = {"base": measure_base(base_model, ctx, label)}
    ctx.baseline = arms["base"].matrix_row
    timings[f"base_{label}"] = time.perf_counter() - t0
    probes: dict[str, InterferenceReport] = {}
    if k == 0 and cfg.evaluation.probe_sources and setup.plans:
        t0 = time.perf_counter()
        probes = _probe_sources(base_model, ctx, scfg, log)
        timings["probe"] = time.perf_counter() - t0
    todo = [arm for arm in setup.plans if read_result(partial, f"arms/{label}-{arm}", ArmResult) is None]
    if arm_processes > 1 and len(todo) > 1:
        timings.update(train_arms_apart(cfg, k, [setup.plans[a] for a in todo], ctx.baseline, partial=partial,
                                        processes=arm_processes, log=log, max_steps=max_steps))
    for arm, plan in setup.plans.items():
        t0 = time.perf_counter()
        finished = read_result(partial, f"arms/{label}-{arm}", ArmResult)  # trained by a worker, or an interrupted run
        if finished is not None:
            log(f"{arm} {label}: " + ("trained in a worker process; read back" if f"{arm}_{label}" in timings
                                      else "finished in an earlier, interrupted run; read back"))
            arms[arm] = finished
        else:
            arms[arm] = train_arm(plan, base_model, ctx, scfg, partial=partial, log=log, max_steps=max_steps,
                                  seed_label=label)
            write_result(partial, f"arms/{label}-{arm}", arms[arm])
        timings.setdefault(f"{arm}_{label}", time.perf_counter() - t0)
        log(f"{arm} {label}: " + ", ".join(f"{key} {v:.3f}" for key, v in flatten(arms[arm]).items()))
    result = SeedResult(
        arms=arms,
        manifest=SeedManifest(seed=setup.seed, share=setup.share, how=setup.how, data=ctx.data.manifest,
                              self=setup.self_manifest),
        suite={"seed": setup.seed, **setup.suite.manifest, "ids": [i.id for i in setup.suite.items],
               "dropped_ids": setup.suite.dropped},
        probes=probes,
        timings=timings,
    )
    write_result(partial, f"seeds/{label}", result)
    return result


def train_arm(
    plan: ArmPlan, base_model: Any, ctx: EvalContext, cfg: Config, *,
    partial: Path, log: Log, max_steps: int | None, seed_label: str,
) -> ArmResult:
    """Train the arm of ``plan`` through every generation; return its measurements (see module docstring).

    The arm's adapter is put on ``base_model`` itself (:func:`..train.adapter.fresh_adapter`, no
    copy of the base) and taken off again when the arm is done. A recipe with ``fresh_adapter``
    starts every generation from that fresh adapter and trains it on the generation's domain alone.
    ``peer-sdft`` trains through TRL's SDFTTrainer (:mod:`..train.trl_peer`); ``routed`` trains as
    ``naive`` and is measured behind the adapter library's router (:mod:`..adapters.routed_arm`),
    its adapter's own suite and domain figures kept under ``unrouted``.
    """
    peer = plan.recipe.peer  # a peer method in place of plain LoRA (train/peers.py); "none" for every rehearsal arm
    cfg = replace(cfg, training=peer_training(peer, cfg.training))
    prompts = peer_calibration(peer, ctx.tokenizer, cfg.data.self_prompts, seed=cfg.training.seed, exclude=[i.prompt for i in ctx.suite.items])
    ev = cfg.evaluation
    snapshots = Snapshots(ev.checkpoints) if ev.choose == "floor" and ev.checkpoints else None  # frontier points
    with fresh_adapter(base_model, cfg.training, peer, prompts) as model:
        def train() -> ArmResult:
            return _train_arm(plan, model, ctx, cfg, partial=partial, log=log, max_steps=max_steps, seed_label=seed_label,
                              snapshots=snapshots)

        result = train() if ev.choose == "last" else at_operating_point(  # scaled on validation data
            model, ctx, cfg, train, partial=partial, arm=plan.name, seed_label=seed_label, log=log, snapshots=snapshots)
        if plan.name == ROUTED_ARM:  # served behind the adapter library's router, the base model as fallback
            kept = safe_folder(partial, "adapters", plan.name, seed_label, "library") if cfg.output.save_adapters else None
            routed = measure_routed(model, ctx, cfg.evaluation, kept)
            return replace(
                result, suite=SuiteScore.from_json(routed["suite"], "the routed suite"),
                domain=DomainScore.from_json(routed["domain"], "the routed domain score"),
                unrouted={"suite": result.suite.to_json(), "domain": result.domain.to_json()},
                routing=routed["routing"], router=routed["router"], accuracy=routed["accuracy"],
            )
        return result


def _train_arm(
    plan: ArmPlan, model: Any, ctx: EvalContext, cfg: Config, *,
    partial: Path, log: Log, max_steps: int | None, seed_label: str, snapshots: Snapshots | None = None,
) -> ArmResult:
    """Train the arm through every generation and measure it; ``snapshots`` (when given) keeps the
    adapter's states during the last generation's training (``[evaluation] checkpoints``)."""
    orch = cfg.orchestration
    name, spec = plan.name, plan.recipe
    share = plan.share_for(len(ctx.data.domain_generations[0]))  # the arm's share, as its first generation trains
    kl = KLSpec.from_recipe(spec)
    generations: list[Generation] = []
    scores: list[float] = []
    curve: list[CurvePoint] = []
    matrix_rows: list[list[DomainCell]] = []
    mixture: list[MixtureEntry] = []
    offset, tag = 0, f"{name} {seed_label}"
    total_tokens, total_seconds = 0, 0.0  # over the generations, as their training logs round them
    controller = plan.controller(cfg.training.seed)  # one per arm, over all its generations
    initial = adapter_state(model) if spec.fresh_adapter else None  # one adapter per skill, each from this init
    hooks = PeerHooks.of(spec.peer, model)
    for g in range(orch.num_generations):
        lineage = [g] if initial is not None else select_lineage(g, orch.training_window_size, orch.lineage, scores)
        if initial is not None:
            restore_adapter(model, initial)
        domain = concat_rows([ctx.data.domain_generations[i] for i in lineage])
        share_g = plan.share_for(len(domain))  # converted from rehearsal_rows_per_epoch: follows the lineage's size
        sources = build_sources(spec, share_g, g, lineage, ctx, model=model, max_seq_length=cfg.training.max_seq_length,
                                seed=cfg.training.seed + g)
        empty = empty_sources(spec, sources, share_g)
        if empty:  # recorded in the generation's results: without rows the arm trains this generation as naive would
            log(f"{tag} gen {g}: rehearsal source(s) {empty} gave no rows"
                + ("; the generation trains without rehearsal" if not sources else ""))
        trained, epoch_source = sources, "domain"
        if not spec.domain:  # the control arm: as many of its rehearsal rows in place of the domain's, no domain row
            domain, epoch_source = rehearsal_alone(sources, len(domain), seed=cfg.training.seed + g)
            trained = []

        def on_eval(step: int, _offset: int = offset, _g: int = g) -> dict[str, float]:
            result = measure_point(model, ctx, _g)  # the losses and KL(base || adapter) on this domain's held-out rows
            curve.append(CurvePoint.from_json({"step": _offset + step, "generation": _g, **result}, "the curve"))
            log(f"{tag} gen {_g} step {step}: general {result['general_loss']:.4f}, domain {result['domain_loss']:.4f}, "
                f"KL(base||adapter) on domain {result['domain_kl']:.4f}")
            return {k: v for k, v in result.items() if k != "domain_losses"}

        steer = arm_steering(controller, spec, sources, model, ctx, curve, offset, g, lineage)
        if name == SDFT_ARM:  # TRL's SDFTTrainer in place of the LoRA loop, same rows and budget
            train_log = train_sdft(model, ctx.tokenizer, [r for i in lineage for r in ctx.data.domain_train_records[i]],
                                   cfg.training, out_dir=partial / f"{name}-{seed_label}-gen{g}", on_eval=on_eval,
                                   max_completion_length=ctx.max_new_tokens, eval_points=cfg.evaluation.eval_points,
                                   max_steps=max_steps, desc=f"{tag} gen {g}")
        else:
            train_log = train_lora(
                model, ctx.pad_id, domain, cfg.training,
                checkpoint_dir=partial / f"{name}-{seed_label}-gen{g}", on_eval=on_eval,
                eval_points=cfg.evaluation.eval_points, desc=f"{tag} gen {g}", max_steps=max_steps,
                sources=trained, mix_by=spec.mix_by, kl=kl, steer=steer, project=spec.project, epoch_source=epoch_source,
                on_step=snapshots.on_step(model) if snapshots is not None and g == orch.num_generations - 1 else None,
            )
        if not train_log.evals or train_log.evals[-1]["step"] != len(train_log.steps):
            train_log.evals.append(dict(on_eval(len(train_log.steps)), step=len(train_log.steps)))
        elif not curve or curve[-1].generation != g:  # resumed from a checkpoint at its last step
            on_eval(len(train_log.steps))
        if hooks.after_training(model, log):  # a peer's post-processing: its last point measured again, as scored
            curve.pop()
            on_eval(len(train_log.steps))
        final = curve[-1].losses
        offset += len(train_log.steps)
        total_tokens += train_log.tokens
        total_seconds += round(train_log.seconds, 3)
        matrix_rows.append(domain_row(model, ctx, f"{tag} gen {g}"))
        scores.append(-float(final.domain_losses[g]))
        mixture += [MixtureEntry.from_json({**e, "step": offset - len(train_log.steps) + e["step"], "generation": g}, "the mixture")
                    for e in (steer.trajectory if steer else [])]
        generations.append(Generation(
            generation=g, lineage=lineage, domain_rows=len(domain),
            rehearsal_share=share_g if sources else 0.0,
            sources={s.name: SourceUse(rows=len(s.rows), share=s.share, rows_per_epoch=rows_per_epoch(train_log.steps, s.name))
                     for s in sources},
            train=TrainLogRecord.from_json(train_log.to_dict(), f"{tag} gen {g}: the training log"), general_loss=final.general_loss, domain_loss=final.domain_loss,
            domain_accuracy=[DomainScore(c.exact_match, c.call_score, c.n) for c in matrix_rows[-1]],
            empty_sources=empty or None,
        ))
        if cfg.output.save_adapters:  # a checked folder inside OUT.partial; the same PEFT folder the loop writes
            write_adapter_folder(model, safe_folder(partial, "adapters", name, seed_label, f"gen{g}"), {
                "arm": name, "spec": recipe_dict(spec), "rehearsal_share": share, "lineage": lineage,
                "config": cfg.to_dict(), "data": ctx.data.manifest}, converted=hooks.saved(model))
        projected = train_log.projected_share()  # None unless the recipe projects (A-GEM) and steps had rehearsal rows
        log(f"{tag} gen {g}: {len(train_log.steps)} steps, {train_log.tokens} tokens in {train_log.seconds:.1f} s, "
            f"rehearsal share {generations[-1].rehearsal_share:.4f}; "
            + (f"A-GEM projected {projected:.1%} of steps; " if projected is not None else "") +
            f"domain exact match {[round(c.exact_match, 3) for c in matrix_rows[-1]]}")
        if train_log.refreshes:
            log(f"{tag} gen {g}: {refresh_cost(train_log)}")
    suite, probe_score, probe_logprob = measure_behaviour(model, ctx, tag)
    self_loss = mean_loss(model, ctx.self_rows, ctx.pad_id, precision=ctx.precision) if ctx.self_rows is not None else None
    return ArmResult(
        losses=curve[-1].losses,
        probe_score=probe_score, probe_logprob=probe_logprob, suite=suite, self_loss=self_loss,
        domain=final_domain(matrix_rows[-1]),
        matrix=matrix_metrics(matrix_rows, ctx.baseline),
        training=ArmTraining(
            share=share,
            loss_share=loss_shares(generations),
            controller=spec.controller, mixture=mixture,  # the mixture after every evaluation (a controller's)
            curve=curve,
            generations=generations,
            train_total=TrainTotal(tokens=total_tokens, seconds=round(total_seconds, 2),
                                   tokens_per_second=round(total_tokens / total_seconds, 1) if total_seconds else None),
        ),
    )


def _probe_sources(base_model: Any, ctx: EvalContext, cfg: Config, log: Log) -> dict[str, InterferenceReport]:
    """Gradient interference of the domain against each rehearsal source, on a fresh LoRA."""
    sources = {"corpus": ctx.data.rehearsal_pool}
    if ctx.self_rows is not None:
        sources["self"] = ctx.self_rows
    with fresh_adapter(base_model, cfg.training) as model:  # no copy of the base model
        reports = probe_sources(
            model, ctx.pad_id, ctx.data.domain_generations[0], sources,
            pairs=cfg.evaluation.probe_pairs, batch_size=cfg.training.batch_size, seed=cfg.training.seed,
            precision=cfg.training.precision,
        )
    for name, rep in reports.items():
        log(f"probe {name}: {rep.measured()}")
    return reports


def _parallel_seeds(cfg: Config, n_seeds: int, jobs: int, partial: Path, log: Log, max_steps: int | None) -> list[SeedResult]:
    """Seeds in ``jobs`` spawned workers (each loads the model, one torch thread, ends with this process)."""
    from replaybank.workers import worker_pool

    log(f"running {n_seeds} seeds in {jobs} processes")
    with worker_pool(jobs) as pool:
        futures = [pool.submit(_seed_worker, cfg, k, partial, max_steps) for k in range(n_seeds)]
        return [f.result() for f in futures]


def _seed_worker(cfg: Config, k: int, partial: Path, max_steps: int | None) -> SeedResult:
    import sys

    def log(message: str) -> None:
        print(f"[seed {cfg.training.seed + k}] {message}", file=sys.stderr, flush=True)

    model, tokenizer = _worker_model(cfg, k, log)
    items = load_suite(cfg.data.suite)
    general_text = general_text_rows(tokenizer, cfg.training.max_seq_length)
    return run_seed(cfg, k, model, tokenizer, items, general_text, partial=partial, log=log, max_steps=max_steps)


def arm_processes(setting: int, threads: int, device: Any, model: Any, n_arms: int) -> tuple[int, str]:
    """How many worker processes train a seed's arms side by side, and why (the run's log line).

    ``setting`` is ``[evaluation] arm_processes``; 0 (auto) gives one process per thread the run
    chose, on a CPU, when there are two arms or more and a copy of the model per process fits in
    half the memory available now. On a CPU, two one-thread processes do more work than one
    process with two threads (two small matrix products at once instead of one split in two), and
    each arm trained on one thread gives the same figures whatever the load when it ran.
    """
    if setting >= 1:
        return setting, f"arm_processes = {setting} in the config"
    if n_arms < 2 or threads < 2 or getattr(device, "type", str(device)) != "cpu":
        return 1, "auto: one process (" + ("fewer than two trained arms" if n_arms < 2 else
                                           "one thread chosen" if threads < 2 else "not on a CPU") + ")"
    need = sum(p.numel() * p.element_size() for p in model.parameters()) * threads
    free = available_memory()
    if free is not None and need > free / 2:
        return 1, f"auto: one process ({threads} copies of the model, {need / 2**30:.1f} GiB, exceed half the free {free / 2**30:.1f} GiB)"
    return threads, f"auto: {threads} processes of one thread, one per thread chosen"


def train_arms_apart(
    cfg: Config, k: int, plans: list[ArmPlan], baseline: list[DomainCell] | None, *,
    partial: Path, processes: int, log: Log, max_steps: int | None,
) -> dict[str, float]:
    """Train ``plans`` of seed ``training.seed + k`` in ``processes`` spawned workers, one torch
    thread each; each writes its ``arms/seed<N>-<arm>.json`` for :func:`run_seed` to read back.

    Each worker loads the model and builds the seed's setup again (:func:`seed_setup`: the suite
    answers and self rows come from the caches the run filled); the base model's accuracy row
    (``baseline``) is passed in. The arms start in order of their expected cost, the costliest
    first, so the last to finish is not a long one started late.

    Returns:
        Each arm's seconds in its worker (``<arm>_seed<N>``).
    """
    from replaybank.workers import worker_pool

    order = sorted(plans, key=_expected_cost, reverse=True)
    log(f"seed{cfg.training.seed + k}: training {', '.join(p.name for p in order)} in {processes} processes of one thread")
    with worker_pool(min(processes, len(order))) as pool:
        futures = {p.name: pool.submit(_arm_worker, cfg, k, p.name, baseline, partial, max_steps) for p in order}
        return {f"{name}_seed{cfg.training.seed + k}": f.result() for name, f in futures.items()}


def _expected_cost(plan: ArmPlan) -> float:
    # Rough: rehearsal rows add steps (rows mixing keeps the domain's rows per epoch), the KL term a
    # base projection, generated sources their generation. Orders the arms only.
    r = plan.recipe
    cost = 1.0 / (1.0 - min(plan.share, 0.9)) if r.mix_by == "rows" else 1.0
    cost *= 1.3 if r.kl_to_base > 0 else 1.0
    return cost * (1.6 if "selfgen" in r.source else 1.0)


def _arm_worker(cfg: Config, k: int, arm: str, baseline: list[DomainCell] | None, partial: Path,
                max_steps: int | None) -> float:
    import sys

    t0 = time.perf_counter()

    def log(message: str) -> None:
        print(f"[{arm}] {message}", file=sys.stderr, flush=True)

    model, tokenizer = _worker_model(cfg, k, log)
    items = load_suite(cfg.data.suite)
    general_text = general_text_rows(tokenizer, cfg.training.max_seq_length)
    setup = seed_setup(cfg, k, model, tokenizer, items, general_text, log=log, timings={})
    setup.ctx.baseline = baseline
    result = train_arm(setup.plans[arm], model, setup.ctx, setup.cfg, partial=partial, log=log, max_steps=max_steps,
                       seed_label=setup.label)
    write_result(partial, f"arms/{setup.label}-{arm}", result)
    return time.perf_counter() - t0


def _worker_model(cfg: Config, k: int, log: Log) -> tuple[Any, Any]:
    """The base model in a worker process: one torch thread, worker ``k``'s device."""
    import torch

    torch.set_num_threads(1)
    device = pick_device(cfg.training.device, worker=k, where=f"{cfg.source}: [training] device")
    use_device(device)  # worker k on GPU k mod n_gpus: its CUDA RNG and new tensors live there
    log(f"device {device}")
    return _load(cfg, device, log)


def _load(cfg: Config, device: Any, log: Log) -> tuple[Any, Any]:
    """The base model and tokenizer, its target modules checked, checkpointing on when configured."""
    from replaybank.llm.model import check_target_modules, enable_gradient_checkpointing, load_model

    t = cfg.training
    model, tokenizer = load_model(t.base_model, device, log)
    check_target_modules(model, list(t.lora_target_modules))
    if t.gradient_checkpointing:
        enable_gradient_checkpointing(model, f"{cfg.source}: [training] gradient_checkpointing")
    return model, tokenizer
