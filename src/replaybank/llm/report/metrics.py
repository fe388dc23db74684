"""Assembling and writing the run's results: ``metrics.json``, ``report.md``, two plots.

:func:`effect` is the pure summary of three arms, base, naive and the corpus rehearsal arm (rise
of the held-out general loss, its ratio between arms, the domain-loss gap); :func:`build_metrics` assembles every arm over
seeds (means, spreads, measured loss shares, the accuracy matrix, the probe side by side with the
measured forgetting, the targets, the early warning: KL to the base against retention, :mod:`..eval.drift`); :mod:`replaybank.llm.report.markdown` only formats what it is given.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from replaybank.llm.config.floor import resolve_floors
from replaybank.llm.config.names import refuse_links
from replaybank.llm.eval.drift import early_warning
from replaybank.llm.eval.interference import InterferenceReport
from replaybank.llm.report.families import family_summary, interval_method
from replaybank.llm.report.gate import evaluate_gate
from replaybank.llm.report.markdown import write_report
from replaybank.llm.report.plots import (
    BEHAVIOUR_PLOT,
    FRONTIER_PLOT,
    MIXTURE_PLOT,
    PLOT_NAME,
    plot_behaviour,
    plot_frontier,
    plot_losses,
    plot_mixture,
)
from replaybank.llm.report.seeds import FAMILIES, Aggregate
from replaybank.llm.results import (
    SCHEMA_VERSION,
    ArmMatrix,
    ArmResult,
    ArmSummary,
    Effect,
    Frontier,
    Gate,
    LossShare,
    Mixing,
    MixingMeasured,
    ProbeComparison,
    ProbeSection,
    RiseRatio,
    RunResult,
    SeedManifest,
    SeedResult,
    Targets,
    TrainStep,
)

METRICS_SCHEMA_VERSION = SCHEMA_VERSION
SOURCE_LOSS = {"corpus": "docs_loss", "self": "self_loss"}


def effect(general_loss: Mapping[str, float], domain_loss: Mapping[str, float]) -> Effect:
    """Compare three arms on their mean losses against three criteria: naive raises the general loss,
    rehearsal keeps that rise to at most a third, and costs at most 5% of domain loss.

    Args:
        general_loss, domain_loss: the means of ``base``, ``naive`` and ``rehearsal`` (the corpus
            rehearsal arm); a missing arm leaves its comparisons out.


    Returns:
        ``naive_general_rise`` and ``rehearsal_general_rise`` (loss minus base), ``rise_ratio``
        (rehearsal rise / naive rise; ``None`` when naive did not rise), ``domain_loss_ratio``
        (rehearsal / naive domain loss) and the ``criteria`` met.

    Example:
        >>> e = effect({"base": 2.0, "naive": 2.6, "rehearsal": 2.1}, {"base": 5.0, "naive": 0.20, "rehearsal": 0.205})
        >>> round(e.ratio.rise_ratio, 3), e.criteria["rise_at_most_a_third"]
        (0.167, True)
    """
    base, naive, reh = (general_loss.get(a) for a in ("base", "naive", "rehearsal"))
    naive_rise = naive - base if base is not None and naive is not None else None
    reh_rise = reh - base if base is not None and reh is not None else None
    ratio = None
    if naive_rise is not None and reh_rise is not None:
        ratio = RiseRatio(reh_rise / naive_rise if naive_rise > 0 else None)
    dom_naive, dom_reh = domain_loss.get("naive"), domain_loss.get("rehearsal")
    domain_ratio = dom_reh / dom_naive if dom_naive is not None and dom_reh is not None else None
    criteria = {}
    if naive_rise is not None:
        # "Measurably": more than 2% of the base loss, far above the run-to-run noise we saw.
        criteria["naive_raises_general"] = naive_rise > 0.02 * base  # type: ignore[operator]
    if ratio is not None and ratio.rise_ratio is not None:
        criteria["rise_at_most_a_third"] = ratio.rise_ratio <= 1 / 3
    if domain_ratio is not None:
        # Rehearsal must not cost domain skill: at most 5% above naive's loss (lower is fine).
        criteria["domain_loss_at_most_5pct_above_naive"] = domain_ratio <= 1.05
    return Effect(criteria=criteria, naive_general_rise=naive_rise, rehearsal_general_rise=reh_rise, ratio=ratio,
                  domain_loss_ratio=domain_ratio)


def build_metrics(cfg: Any, seeds: Sequence[SeedResult], agg: Aggregate) -> RunResult:
    """What ``metrics.json`` holds (:class:`~replaybank.llm.results.RunResult`) from every seed's
    results and their aggregate; the run's environment, timings and wall time are the caller's."""
    from replaybank.llm.report.seeds import check_targets

    specs = cfg.arm_specs()
    per_seed = [seed.arms for seed in seeds]
    manifests = [seed.manifest for seed in seeds]
    first = per_seed[0]
    per_family = family_summary(per_seed, [m.seed for m in manifests])
    arms: dict[str, ArmSummary] = {}
    for name in first:
        training = [seed[name].training for seed in per_seed]
        fams = per_family.get(name)
        matrix = ArmMatrix(
            R_mean=np.mean([seed[name].matrix.R for seed in per_seed], axis=0).round(4).tolist(),
            per_seed=[seed[name].matrix for seed in per_seed],
        )
        entry = ArmSummary(summary=agg[name], matrix=matrix,
                           families=fams.families if fams else None, flips=fams.flips if fams else None)
        t0 = training[0]
        if name != "base" and t0 is not None:
            trained = [t for t in training if t is not None]
            steered = bool(t0.mixture)  # a replay controller's mixture after every evaluation
            entry = ArmSummary(
                summary=entry.summary, matrix=entry.matrix, families=entry.families, flips=entry.flips,
                spec=specs[name],
                share=float(np.mean([t.share for t in trained])),
                loss_share=_mean_shares([t.loss_share for t in trained]),
                curve=t0.curve, generations=t0.generations, train_total=t0.train_total,
                controller=t0.controller if steered else None,
                mixture=t0.mixture if steered else None,
                mixture_per_seed=[t.mixture for t in trained] if steered else None,
                frontier=_frontiers([seed[name] for seed in per_seed]),
            )
        arms[name] = entry
    # an arm of one fresh adapter per skill carries nothing over, a peer method without sources rehearses
    # nothing, and the control arm learns no domain: none is a rehearsal arm
    rehearsal_arms = [a for a in first if a not in ("base", "naive") and not (
        a in specs and (specs[a].fresh_adapter or (specs[a].peer != "none" and not specs[a].source) or not specs[a].domain))]
    corpus_arm = next((a for a in ("rehearsal-corpus", "rehearsal") if a in first), None)
    targets = check_targets(agg, rehearsal_arms)
    reh = next((a for a in ("rehearsal", "rehearsal-corpus") if a in arms), "")  # the corpus rehearsal arm
    three = {role: arms[arm] for role, arm in {"base": "base", "naive": "naive", "rehearsal": reh}.items() if arm in arms}
    return RunResult(
        arms=arms,
        effect=effect(_means(three, "general_loss"), _means(three, "domain_loss")),
        targets=targets,
        gate=_gate(cfg, {a: f.families for a, f in per_family.items()}, targets),
        intervals=interval_method(),
        probe=ProbeSection(fresh_lora=seeds[0].probes, comparison=probe_vs_forgetting(seeds[0].probes, agg, specs)),
        mixing=_compat_mixing(first.get(corpus_arm) if corpus_arm else None, manifests[0], cfg),
        data=manifests[0].data,
        data_per_seed=manifests,
        suite=[seed.suite for seed in seeds],
        config=cfg.to_dict(),
        config_source=cfg.source,
        early_warning=early_warning(per_seed, [m.seed for m in manifests]),
    )


def _frontiers(results: Sequence[ArmResult]) -> list[Frontier] | None:
    """Each seed's frontier of an arm that chose its operating point (None for one that did not)."""
    found = [r.frontier for r in results if r.frontier is not None]
    return found or None


def _means(arms: Mapping[str, ArmSummary], key: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for name, arm in arms.items():
        value = arm.mean(key)
        if value is not None:
            out[name] = value
    return out


def _gate(cfg: Any, per_family: Mapping[str, Mapping[str, Any]], targets: Targets) -> Gate:
    """The retention gate over the trained arms: ``[evaluation] gate_arm``, else the targets' best arm."""
    families = {arm: {f: s.retention for f, s in fams.items()} for arm, fams in per_family.items() if arm != "base"}
    present = list(dict.fromkeys(f for fams in per_family.values() for f in fams))
    floors = resolve_floors(cfg.evaluation.retention_floor, present)
    gate_arm = cfg.evaluation.gate_arm
    chosen, by = (gate_arm, "gate_arm") if gate_arm else (targets.best_arm, "best_arm")
    return evaluate_gate(families, floors, chosen=chosen, chosen_by=by)


def _mean_shares(shares: list[LossShare]) -> LossShare:
    def mean(kind: str) -> dict[str, float]:
        of = [getattr(s, kind) for s in shares]
        keys = sorted({k for s in of for k in s})
        return {k: round(float(np.mean([s.get(k, 0.0) for s in of])), 4) for k in keys}

    return LossShare(rows=mean("rows"), label_tokens=mean("label_tokens"))


def probe_vs_forgetting(probes: Mapping[str, InterferenceReport], agg: Aggregate, specs: Mapping[str, Any]) -> list[ProbeComparison]:
    """Per rehearsal source: the probe's measured gradients next to the forgetting measured in the run.

    The probe gives no verdict (:mod:`..eval.interference`); beside its cosine, mean inner product
    and count of conflicting pairs stand the naive arm's measured forgetting: the rise of its loss
    on that source's rows over the base model's (held-out documents for ``corpus``, the
    self-synthesized rows for ``self``), what the arm rehearsing only that source left of that
    rise, and the naive arm's suite retention (smallest family, mean over the checker-scored ones).

    Example:
        >>> from replaybank.llm.results import Stat
        >>> st = lambda m, r: {"docs_loss": Stat(m, None, 1, [m]), "retention_code": Stat(r, None, 1, [r])}
        >>> agg = {"base": st(1.7, 1.0), "naive": st(2.9, 0.25), "rc": st(1.6, 0.5)}
        >>> class S: source, kl_to_base, domain = ["corpus"], 0.0, True
        >>> from replaybank.llm.eval.interference import InterferenceReport, PairResult
        >>> pair = PairResult(cosine=0.09, dot=0.4, domain_norm=1.0, rehearsal_norm=1.0, alpha=0.0)
        >>> rep = InterferenceReport([pair, pair], cosine_mean=0.09, cosine_std=0.0, alpha_suggested=0.0, alpha_median=0.0,
        ...                           dot_mean=0.4, conflicting_pairs=0)
        >>> out = probe_vs_forgetting({"corpus": rep}, agg, {"rc": S()})
        >>> out[0].naive_loss_rise, out[0].rehearsal_arm, out[0].rehearsal_loss_rise, out[0].naive_retention_min
        (1.2, 'rc', -0.1, 0.25)
    """
    out = []
    naive_kept = [s.mean for f in FAMILIES if (s := agg.get("naive", {}).get(f"retention_{f}")) is not None]
    for source, rep in probes.items():
        key = SOURCE_LOSS.get(source)
        base = agg["base"][key].mean if "base" in agg and key in agg["base"] else None
        naive = agg["naive"][key].mean if "naive" in agg and key in agg["naive"] else None
        arm = next((a for a, s in specs.items()
                    if a in agg and list(s.source) == [source] and not s.kl_to_base and s.domain), None)
        measured = arm is not None and base is not None and key in agg[arm]
        out.append(ProbeComparison(
            source=source, cosine_mean=rep.cosine_mean, cosine_std=rep.cosine_std,
            alpha_suggested=rep.alpha_suggested, loss=key,
            dot_mean=rep.dot_mean, conflicting_pairs=rep.conflicting_pairs, pairs=len(rep.pairs),
            naive_loss_rise=round(naive - base, 4) if base is not None and naive is not None else None,
            rehearsal_arm=arm if measured else None,
            rehearsal_loss_rise=round(agg[arm][key].mean - base, 4) if measured else None,  # type: ignore[index, operator]
            naive_retention_min=round(min(naive_kept), 4) if naive_kept else None,
            naive_retention_mean=round(float(np.mean(naive_kept)), 4) if naive_kept else None,
        ))
    return out


def _compat_mixing(arm: ArmResult | None, manifest: SeedManifest, cfg: Any) -> Mixing:
    measured = None
    if arm and arm.training is not None:
        steps = [s for gen in arm.training.generations for s in gen.train.steps if isinstance(s, TrainStep)]
        rows = sum(s.rows for s in steps)
        tokens = sum(s.tokens for s in steps)
        rehearsal_tokens = sum(s.rehearsal_tokens for s in steps)
        measured = MixingMeasured(
            rows_per_batch=sorted({s.rehearsal_rows for s in steps}),
            measured_row_share=sum(s.rehearsal_rows for s in steps) / rows if rows else None,
            rehearsal_tokens=rehearsal_tokens,
            measured_token_share=rehearsal_tokens / tokens if tokens else None,
            measured_label_token_share=arm.training.loss_share.label_tokens,
        )
    return Mixing(
        share=manifest.share, how=manifest.how, batch_size=cfg.training.batch_size, mix_by=cfg.training.mix_by,
        semantics="fixed quota of every micro-batch (largest remainder, credit carried); "
                  "mix_by=tokens converts the target share of labelled tokens into row quotas",
        measured=measured,
    )


def write_outputs(folder: Path, metrics: RunResult) -> None:
    """``losses.png``, ``behaviour.png``, ``mixture.png`` (arms with a replay controller),
    ``frontier.png`` (arms that chose an operating point), ``report.md``,
    then ``metrics.json`` (last).

    Raises:
        UnsafePathError: a link (or anything but a regular file) at one of these names in
            ``folder``: refused before the first is written, never written through.
    """
    refuse_links(folder, PLOT_NAME, BEHAVIOUR_PLOT, MIXTURE_PLOT, FRONTIER_PLOT, "report.md", "metrics.json")
    plot_losses(folder / PLOT_NAME, metrics)
    plot_behaviour(folder / BEHAVIOUR_PLOT, metrics)
    plot_mixture(folder / MIXTURE_PLOT, metrics)
    plot_frontier(folder / FRONTIER_PLOT, metrics)
    write_report(folder / "report.md", metrics)
    write_metrics(folder / "metrics.json", metrics)


def write_metrics(path: Path, metrics: RunResult) -> None:
    """Write ``metrics.json`` (sorted keys, 2-space indent)."""
    path.write_text(json.dumps(metrics.to_json(), indent=2, sort_keys=True, default=str) + "\n", encoding="utf-8")
