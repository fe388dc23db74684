"""Formatting a finished run as ``report.md``.

Only formats what :func:`replaybank.llm.report.metrics.build_metrics` assembled; computes nothing new.
"""

from __future__ import annotations

import os
from pathlib import Path

from replaybank.llm.report.plots import BEHAVIOUR_PLOT, FRONTIER_PLOT, PLOT_NAME, arm_names
from replaybank.llm.report.sections import flips_section, frontier_section, gate_section
from replaybank.llm.results import (
    ArmSummary,
    GateArm,
    Interval,
    IntervalMethod,
    JsonObject,
    RunResult,
    Stat,
)


def fmt(entry: Stat | None, digits: int = 3, pct: bool = False) -> str:
    """``mean +- std`` of an aggregate entry (``n/a`` when missing; no spread for one seed).

    Example:
        >>> fmt(Stat(0.5, 0.1, 2, []), pct=True), fmt(Stat(2.0, None, 1, [])), fmt(None)
        ('50.0 ± 10.0', '2.000', 'n/a')
    """
    if entry is None:
        return "n/a"
    scale = 100.0 if pct else 1.0
    d = 1 if pct else digits
    text = f"{entry.mean * scale:.{d}f}"
    if entry.std is not None:
        text += f" ± {entry.std * scale:.{d}f}"
    return text


def _thread_reason(env: JsonObject) -> str:
    """``: <why>`` for the thread count (empty for a run recorded before the reason was)."""
    choice = env.get("thread_choice")
    text = f": {choice['reason']}" if isinstance(choice, dict) else ""
    apart = env.get("arm_processes")
    if isinstance(apart, dict) and apart.get("processes", 1) > 1:
        text += f"; the trained arms in {apart['processes']} processes of one thread ({apart['reason']})"
    return text


def write_report(path: Path, metrics: RunResult) -> None:
    """``report.md``: the arms table with spreads, loss shares, matrix, probe, targets, timings."""
    arms = metrics.arms
    names = arm_names(metrics)
    families = suite_families(metrics)
    seeds = metrics.seeds
    env = metrics.environment
    training = metrics.config["training"]
    lines = [
        "# replaybank run report",
        "",
        f"Base model `{training['base_model']}`, device {env.get('device')}, "  # type: ignore[index]
        f"{len(seeds)} seed(s) {seeds}, wall time {metrics.wall_seconds:.1f} s (1-minute load average "
        f"{env.get('loadavg_1min_start')} at start, {env.get('loadavg_1min_end')} at end, {os.cpu_count()} CPUs, "
        f"{env.get('threads')} torch thread(s){_thread_reason(env)}). Figures: mean ± std over seeds (sample std); retention "
        f"per family: mean over seeds [95% interval] ({_interval_note(metrics.intervals)}).",
        "",
        "| arm | " + " | ".join(f"{fam} retention % [95% CI]" for fam in families)
        + " | tool-call leakage % | domain exact match % | general loss | docs loss | probe | retention gate |",
        "|---|" + "---|" * (len(families) + 6),
    ]
    gate = metrics.gate.arms
    for name in names:
        s = arms[name].summary
        lines.append(
            f"| {name} | " + " | ".join(_retention_cell(arms[name], fam) for fam in families)
            + f" | {fmt(s.get('leakage'), pct=True)} | {fmt(s.get('domain_exact_match'), pct=True)} "
            f"| {fmt(s.get('general_loss'))} | {fmt(s.get('docs_loss'))} | {fmt(s.get('probe_score'))} "
            f"| {_gate_cell(gate.get(name))} |"
        )
    lines += ["", "Family scores of the base model (retention is an arm's score over these; 95% interval; `open` is "
              "agreement with the base model's own wording, not a checker, and has no target):", ""]
    base = arms.get("base")
    lines.append(", ".join(f"{fam} {_score_cell(base, fam)}" for fam in families))
    lines += gate_section(metrics)
    lines += frontier_section(metrics, FRONTIER_PLOT)
    lines += ["", "## Effective share of each source (measured over every step)", "",
              "| arm | target | mix_by | rows | labelled tokens (= loss) | KL to base |", "|---|---|---|---|---|---|"]
    for name in names:
        a = arms[name]
        if name == "base" or a.spec is None or a.loss_share is None:
            continue
        spec = a.spec
        kl = f"{spec.kl_to_base} (T={spec.kl_temperature}, {spec.kl_on})" if spec.kl_to_base else "-"
        lines.append(
            f"| {name} | {a.share:.3f} {'+'.join(spec.source) or '-'} | {spec.mix_by} | "
            f"{_shares(a.loss_share.rows)} | {_shares(a.loss_share.label_tokens)} | {kl} |"
        )
    lines += _per_generation(arms, names)
    matrix_arms = [n for n in names if len(arms[n].matrix.R_mean) > 1]
    if matrix_arms:
        lines += ["", "## Domain sequence: accuracy matrix (generated exact match, mean over seeds)", "",
                  "R[i][j] = accuracy on domain j after training domain i.", ""]
        for name in matrix_arms:
            s = arms[name].summary
            lines.append(f"- {name}: R = {arms[name].matrix.R_mean}, average accuracy "
                         f"{fmt(s.get('average_accuracy'))}, backward transfer {fmt(s.get('backward_transfer'))}, "
                         f"forgetting {fmt(s.get('forgetting'))}")
    comparison = metrics.probe.comparison
    if comparison:
        lines += ["", "## Interference probe (fresh LoRA, first seed) next to measured forgetting", "",
                  "The probe's first-order figures (one step from a fresh adapter) with no verdict: they have not "
                  "predicted forgetting (docs/llm.md). Beside them, what the run measured.", "",
                  "| source | cosine | mean <g_d, g_r> | pairs with <g_d, g_r> < 0 | first-step alpha | loss "
                  "| naive rise | rise with this source | naive retention min / mean % |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for r in comparison:
            kept = ("n/a" if r.naive_retention_min is None or r.naive_retention_mean is None
                    else f"{r.naive_retention_min * 100:.1f} / {r.naive_retention_mean * 100:.1f}")
            lines.append(
                f"| {r.source} | {r.cosine_mean:.4f} ± {r.cosine_std or 0:.4f} "
                f"| {'n/a' if r.dot_mean is None else f'{r.dot_mean:.3g}'} "
                f"| {_or(r.conflicting_pairs, 'n/a')} of {_or(r.pairs, 'n/a')} | {r.alpha_suggested:.3f} "
                f"| {r.loss} | {_or(r.naive_loss_rise, 'n/a')} "
                f"| {_or(r.rehearsal_loss_rise, 'n/a')} ({_or(r.rehearsal_arm, '-')}) | {kept} |"
            )
    lines += _early_warning(metrics)
    targets = metrics.targets
    lines += ["", "## Targets (on the seed means)", ""]
    if targets.naive_loses_behaviour is not None:
        lines.append(f"- naive loses behaviour (leakage >= 50% or conversation retention <= 2/3): "
                     f"{'yes' if targets.naive_loses_behaviour else 'no'}")
    for name, t in targets.arms.items():
        failed = [k for k, v in t.checks.items() if v is False]
        lines.append(f"- {name}: {'all met' if t.met else 'not met: ' + ', '.join(failed)}")
    if targets.best_arm is not None:
        lines.append(f"- best rehearsal arm: {targets.best_arm}")
    lines += flips_section(metrics)
    lines += ["", "## Timings (seconds)", ""]
    lines += [f"- {k}: {v:.1f}" for k, v in metrics.timings.items()]
    lines += ["", f"![behaviour]({BEHAVIOUR_PLOT})", "", f"![losses]({PLOT_NAME})", ""]
    path.write_text("\n".join(lines), encoding="utf-8")


def _early_warning(metrics: RunResult) -> list[str]:
    """The last logged KL(base || adapter) on domain rows against the final retention, and their rank correlation."""
    w = metrics.early_warning
    if w is None or not w.points:
        return []
    rho = (f"Spearman rank correlation of the KL with the minimum retention over families "
           f"{_or(w.spearman_min, 'n/a')}, with the mean retention {_or(w.spearman_mean, 'n/a')} (n = {w.n} "
           "arm-seed pairs; n/a below three pairs or when one side is constant). Negative: more drift, less kept.")
    return ["", "## Early warning: KL(base || adapter) on held-out domain rows vs retention", "",
            "KL in nats per token over the prompt and answer tokens of the trained domain's held-out rows, at the "
            "last evaluation point; retention over the checker-scored families.", "", rho, "",
            "| arm | seed | KL | min retention % | mean retention % |", "|---|---|---|---|---|",
            *(f"| {p.arm} | {p.seed} | {p.kl:.4f} | {p.retention_min * 100:.1f} | {p.retention_mean * 100:.1f} |"
              for p in w.points)]


def _per_generation(arms: dict[str, ArmSummary], names: list[str]) -> list[str]:
    """Rehearsal share and rows drawn per virtual epoch, per arm and generation (first seed)."""
    rows = [
        f"| {name} | {gen.generation} | {gen.domain_rows} | {gen.rehearsal_share:.4f} | "
        + (", ".join(f"{src} {info.rows_per_epoch:g}" for src, info in gen.sources.items()) or "-")
        + " |"
        for name in names if name != "base" for gen in arms[name].generations or []
    ]
    if not rows:
        return []
    return ["", "## Rehearsal per generation (first seed)", "",
            "| arm | generation | domain rows (lineage) | rehearsal share | rehearsal rows per virtual epoch |",
            "|---|---|---|---|---|", *rows]


def suite_families(metrics: RunResult) -> list[str]:
    """The suite families of the run, in suite order (from the arms' ``families``; the three
    historical ones for metrics without them)."""
    found = list(dict.fromkeys(f for a in metrics.arms.values() for f in a.families or {}))
    return found or ["conversation", "arithmetic", "code"]


def _interval_note(iv: IntervalMethod) -> str:
    return f"bootstrap over seeds, then items within each seed, {iv.resamples} resamples"


def _or(value: object, missing: str) -> object:
    return missing if value is None else value


def _retention_cell(arm: ArmSummary, fam: str) -> str:
    entry = (arm.families or {}).get(fam)
    if entry is None:  # metrics without per-item outcomes
        return fmt(arm.summary.get(f"retention_{fam}"), pct=True)
    return _interval(entry.retention)


def _score_cell(arm: ArmSummary | None, fam: str) -> str:
    entry = (arm.families or {}).get(fam) if arm else None
    if entry is None:
        return fmt(arm.summary.get(fam) if arm else None)
    return _interval(entry.score, pct=False)


def _interval(iv: Interval | None, pct: bool = True) -> str:
    """``mean [low, high]`` (percent, one decimal; or three decimals).

    Example:
        >>> _interval(Interval(0.5, 0.25, 0.75)), _interval(None)
        ('50.0 [25.0, 75.0]', 'n/a')
    """
    if iv is None:
        return "n/a"
    if pct:
        return f"{iv.mean * 100:.1f} [{iv.low * 100:.1f}, {iv.high * 100:.1f}]"
    return f"{iv.mean:.3f} [{iv.low:.3f}, {iv.high:.3f}]"


def _gate_cell(row: GateArm | None) -> str:
    if row is None:
        return "-"
    return "pass" if row.passed else "fail: " + ", ".join(row.failed)


def _shares(d: dict[str, float]) -> str:
    return ", ".join(f"{k} {v:.3f}" for k, v in d.items()) or "-"
