"""An arm's operating point (``[evaluation] choose = "floor"``): chosen on the validation data, applied, scored on test.

After its last generation a trained arm's adapter is measured at every configured post-hoc scale
and profile (:mod:`replaybank.llm.train.scaling`) on the validation suite (retention per family
against the base model's validation answers) and on validation domain requests
(:mod:`replaybank.llm.data.validation`); those points are the arm's frontier
(:mod:`replaybank.llm.eval.frontier`). :func:`~replaybank.llm.eval.frontier.choose` takes the best
validation domain score whose validation retention keeps ``[evaluation] retention_floor`` and
whose validation domain score keeps ``[evaluation] keep_skill`` of the adapter's as trained (the
uniform scale-1 point, measured even when ``scales`` leaves 1 out while ``keep_skill > 0``); that
scale is baked into the adapter's LoRA weights (the saved adapter is the chosen one), and the arm
is scored as usual on the test suite and test requests. When no point is eligible, the arm runs
as trained and the frontier says why.

With ``[evaluation] checkpoints = N`` the adapter's states at ``N`` evenly spaced steps of the last
generation's training (:mod:`replaybank.llm.train.snapshots`) are points too (``made_by =
"checkpoint"``, their ``step`` recorded), each loaded into the model and measured as the scale
points are (at scale 1); the adapter as trained is put back afterwards. A chosen checkpoint is
loaded, saved as the arm's adapter and scored on the test data as a chosen scale is.

The trained adapter, the kept states and the measurements are staged in ``OUT.partial/arms/``
before choosing, so a run killed while choosing resumes from them without training again
(:func:`at_operating_point`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from replaybank.llm.config import Config
from replaybank.llm.config.floor import resolve_floors
from replaybank.llm.config.names import safe_folder
from replaybank.llm.eval.frontier import choose, min_retention, pareto, spearman
from replaybank.llm.eval.measure import (
    EvalContext,
    ValidationSet,
    domain_row,
    final_domain,
    matrix_metrics,
    measure_behaviour,
    measure_losses,
)
from replaybank.llm.report.folder import read_result, write_result
from replaybank.llm.results import ArmResult, DomainCell, Frontier, FrontierPoint, Losses
from replaybank.llm.train.scaling import Scale, bake, scaled
from replaybank.llm.train.snapshots import Snapshots

__all__ = ["at_operating_point", "measure_point", "validation_set"]

Log = Callable[[str], None]


def validation_set(base_model: Any, ctx: EvalContext, cfg: Config, seed: int, label: str) -> ValidationSet:
    """The seed's validation data: the validation suite (sampled as the test suite is, the base
    model's answers cached) and the validation domain requests.

    Raises:
        SuiteError, SuiteOverlapError: a bad validation suite, or one a domain training prompt repeats.
        CorpusError: no validation requests (:func:`..data.validation.validation_requests`).
    """
    from replaybank.llm.data.validation import validation_requests
    from replaybank.llm.eval.suite import check_no_overlap, load_suite, prepare_suite, sample_suite
    from replaybank.llm.model import cache_dir

    ev = cfg.evaluation
    items = sample_suite(load_suite(cfg.data.validation_suite), ev.suite_per_family, seed)
    for g, recs in enumerate(ctx.data.domain_train_records):
        check_no_overlap(items, [str(r.get("prompt", r.get("text", ""))) for r in recs], f"domain training data of generation {g}")
    suite = prepare_suite(base_model, ctx.tokenizer, items, cache_dir=cache_dir() / "suite", batch_size=ctx.batch_size,
                          desc=f"validation suite {label}: base answers", precision=ctx.precision)
    requests, manifest = validation_requests(cfg, ctx.data)
    return ValidationSet(suite=suite, requests=requests, manifest={
        "suite": cfg.data.validation_suite, "ids": [i.id for i in suite.items], "dropped_ids": suite.dropped, **manifest})


def measure_point(model: Any, ctx: EvalContext, validation: ValidationSet, scale: Scale, desc: str) -> FrontierPoint:
    """``model`` at ``scale`` on the validation suite and requests (the scale undone afterwards)."""
    from replaybank.llm.eval.domain import generated_accuracy
    from replaybank.llm.eval.suite import evaluate_suite

    with scaled(model, scale):
        suite = evaluate_suite(model, ctx.tokenizer, validation.suite, batch_size=ctx.batch_size,
                               desc=f"{desc}: validation suite", precision=ctx.precision)
        exact = [generated_accuracy(model, ctx.tokenizer, recs, max_new_tokens=ctx.max_new_tokens, batch_size=ctx.batch_size,
                                    desc=f"{desc}: validation domain {k}", precision=ctx.precision)["exact_match"]
                 for k, recs in enumerate(validation.requests)]
    retention: dict[str, float | None] = dict(suite["retention"])
    return FrontierPoint(made_by="scale", profile=scale.profile, lo=scale.lo, hi=scale.hi, change=scale.change,
                         domain_exact_match=float(np.mean(exact)), retention=retention,
                         min_retention=min_retention(retention))


def at_operating_point(
    model: Any, ctx: EvalContext, cfg: Config, train: Callable[[], ArmResult], *,
    partial: Path, arm: str, seed_label: str, log: Log, snapshots: Snapshots | None = None,
) -> ArmResult:
    """Train (or read back the staged trained adapter), choose the operating point, apply it, score it.

    Args:
        model: the arm's PEFT model (its adapter is replaced by the staged one on resume).
        ctx: the seed's measurements; ``ctx.validation`` must be set.
        cfg: the run's config (``[evaluation] scales``, ``scale_profiles``, ``retention_floor``, ``keep_skill``).
        train: trains the arm on ``model`` and measures it (the recipe's own function).
        partial: ``OUT.partial``; the trained adapter is staged under ``arms/``.
        arm, seed_label: name the arm and seed (folders, log lines).
        log: progress lines.
        snapshots: the adapter states ``train`` keeps (``[evaluation] checkpoints``), each a point of
            the frontier; staged beside the trained adapter, and read back into it on resume.

    Returns:
        The arm's result at the chosen point, its :class:`~replaybank.llm.results.Frontier` attached.

    Raises:
        AdapterError: a staged adapter or kept state is missing or unreadable.
    """
    from peft import get_peft_model_state_dict, set_peft_model_state_dict

    from replaybank.llm.train.peft_files import (
        MANIFEST,
        WEIGHTS,
        read_json_object,
        read_tensors,
        write_adapter_folder,
    )

    if ctx.validation is None:
        raise ValueError("at_operating_point needs ctx.validation (validation_set)")
    stage = f"arms/{seed_label}-{arm}.trained"
    trained = read_result(partial, stage, ArmResult)
    folder = safe_folder(partial, "arms", f"{seed_label}-{arm}.trained")
    if trained is not None:
        set_peft_model_state_dict(model, read_tensors(folder / WEIGHTS))
        if snapshots is not None:
            record = read_json_object(folder / MANIFEST, "the staged adapter's manifest").get("checkpoints")
            snapshots.read_staged(folder, record, get_peft_model_state_dict(model))
        log(f"{arm} {seed_label}: trained in an earlier, interrupted run; its adapter read back, choosing again")
    else:
        trained = train()
        manifest: dict[str, Any] = {"arm": arm, "stage": "trained, before choosing"}
        if snapshots is not None and snapshots.states:
            snapshots.write(folder)
            manifest["checkpoints"] = snapshots.record()
        write_adapter_folder(model, folder, manifest)
        write_result(partial, stage, trained)  # last: its presence marks the stage complete
    return _choose_and_apply(model, ctx, ctx.validation, cfg, trained, partial=partial, arm=arm, seed_label=seed_label,
                             log=log, snapshots=snapshots)


def _choose_and_apply(
    model: Any, ctx: EvalContext, validation: ValidationSet, cfg: Config, trained: ArmResult, *,
    partial: Path, arm: str, seed_label: str, log: Log, snapshots: Snapshots | None,
) -> ArmResult:
    from peft import get_peft_model_state_dict, set_peft_model_state_dict

    ev, tag = cfg.evaluation, f"{arm} {seed_label}"
    t0 = time.perf_counter()
    scales: list[Scale] = []
    for profile in ev.scale_profiles:
        for s in ev.scales:
            scale = Scale.of(profile, s)  # type: ignore[arg-type]
            if all((scale.lo, scale.hi) != (x.lo, x.hi) for x in scales):  # depth at 1 is uniform 1: measured once
                scales.append(scale)
    if ev.keep_skill > 0 and all((x.lo, x.hi) != (1.0, 1.0) for x in scales):  # the skill rule's reference: as trained
        scales.append(Scale.of("uniform", 1.0))
    points = [measure_point(model, ctx, validation, s, f"{tag} {s.profile} {s.lo:g}-{s.hi:g}") for s in scales]
    states = snapshots.states if snapshots is not None else {}
    last = (snapshots.last if snapshots is not None else None) or max(states, default=0) + 1
    if states:
        as_trained = {k: v.detach().clone() for k, v in get_peft_model_state_dict(model).items()}
        for step in sorted(states):
            set_peft_model_state_dict(model, states[step])
            p = measure_point(model, ctx, validation, Scale.of("uniform", 1.0), f"{tag} checkpoint step {step}")
            points.append(replace(p, made_by="checkpoint", profile="none", change=step / last, step=step))
        set_peft_model_state_dict(model, as_trained)  # the adapter as trained again
    if snapshots is not None and len(states) < ev.checkpoints:  # a training too short for as many
        log(f"{tag}: kept {len(states)} of {ev.checkpoints} checkpoints: its last training had {last} steps")
    families = list(dict.fromkeys(f for p in points for f in p.retention))
    floors = resolve_floors(ev.retention_floor, families)
    choice = choose(points, floors, keep_skill=ev.keep_skill)
    for p in points:
        where = f"checkpoint step {p.step}" if p.made_by == "checkpoint" else f"{p.profile} {p.lo:g}-{p.hi:g}"
        log(f"{tag} operating point {where}: validation domain {p.domain_exact_match:.3f}, "
            f"min retention {p.min_retention if p.min_retention is None else round(p.min_retention, 3)}")
    log(f"{tag}: chose {'none' if choice.index is None else choice.index}: {choice.reason}")
    result = trained
    chosen = None if choice.index is None else points[choice.index]
    if chosen is not None and chosen.made_by == "checkpoint" and chosen.step is not None:  # its state loaded
        set_peft_model_state_dict(model, states[chosen.step])
    elif choice.index is not None and (scales[choice.index].lo, scales[choice.index].hi) != (1.0, 1.0):
        bake(model, scales[choice.index])
    else:
        chosen = None  # the adapter as trained (or none eligible): measured already
    if chosen is not None:
        result = _scored(model, ctx, trained, tag)
        if cfg.output.save_adapters:
            _save_chosen(model, partial, arm, seed_label, len(trained.matrix.R) - 1, chosen)
    frontier = Frontier(
        points=points, pareto=pareto(points), floor=floors, chosen=choice.index, reason=choice.reason,
        tradeoff=spearman([p.domain_exact_match for p in points], [p.min_retention or 0.0 for p in points]),
        trained_exact_match=trained.domain.exact_match, trained_retention=dict(trained.suite.retention),
        validation=validation.manifest, seconds=round(time.perf_counter() - t0, 2), keep_skill=ev.keep_skill,
    )
    return replace(result, frontier=frontier)


def _scored(model: Any, ctx: EvalContext, trained: ArmResult, tag: str) -> ArmResult:
    """The arm measured again at its (baked) operating point on the test data, as the recipe measures it."""
    row = domain_row(model, ctx, f"{tag} chosen")
    earlier = [[DomainCell(x, None, 0, None, None) for x in r] for r in trained.matrix.R[:-1]]
    suite, probe_score, probe_logprob = measure_behaviour(model, ctx, f"{tag} chosen")
    return replace(
        trained, losses=Losses.from_json(measure_losses(model, ctx), "measure_losses"), suite=suite,
        probe_score=probe_score, probe_logprob=probe_logprob, domain=final_domain(row),
        matrix=matrix_metrics([*earlier, row], ctx.baseline),
    )


def _save_chosen(model: Any, partial: Path, arm: str, seed_label: str, g: int, chosen: FrontierPoint) -> None:
    """Write the baked adapter over the last generation's saved one, its manifest naming the point."""
    from replaybank.llm.train.peft_files import MANIFEST, read_json_object, write_adapter_folder

    folder = safe_folder(partial, "adapters", arm, seed_label, f"gen{g}")
    manifest = read_json_object(folder / MANIFEST, "the adapter's manifest") if (folder / MANIFEST).is_file() else {}
    manifest.pop("sha256", None)
    write_adapter_folder(model, folder, {**manifest, "operating_point": chosen.to_json()})
