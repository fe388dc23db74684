"""The loop's report: per-generation tables, seeds aggregated, lineage modes side by side, plots.

:func:`collect` reads the ``state.json`` of every run folder under an output folder;
:func:`aggregate` groups runs by (lineage, rehearsal) and gives each generation's figures per
seed; :func:`write_report` writes ``report.md``, ``metrics.json`` (a :class:`.summary.LoopMetrics`)
and ``loop.png``.

Example:
    >>> row = GenerationRow.from_json({"generation": 0, "adapter": "base", "no_context": {"success": 0.25, "credit": 0.5},
    ...     "context": {"success": 0.5, "credit": 0.75}, "validation": {"success": 0.0, "credit": 0.0},
    ...     "suite": {"leakage": None}, "retention": 0.95})
    >>> metrics_of(row)
    {'exact': 0.25, 'credit': 0.5, 'exact_ctx': 0.5, 'credit_ctx': 0.75, 'retention': 0.95}
    >>> mean_std([0.25, 0.75])
    '0.50 ± 0.35'
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from replaybank.llm.config.loop import Loop, LoopConfig
from replaybank.llm.config.names import UnsafePathError, refuse_links, write_inside
from replaybank.llm.loop.act import Score
from replaybank.llm.loop.results import Acted, GenerationRow
from replaybank.llm.loop.state import LoopState, read_state
from replaybank.llm.loop.summary import (
    METRICS,
    GenerationFigures,
    LoopArm,
    LoopMetrics,
    Metric,
    RetentionGap,
)
from replaybank.llm.records import ABSENT

REPORT_FILES = ("report.md", "metrics.json", "loop.png")
LABELS = {
    "exact": "held-out exact, no context", "credit": "held-out credit, no context",
    "exact_ctx": "held-out exact, with context", "credit_ctx": "held-out credit, with context",
    "retention": "suite retention vs base",
}


@dataclass(frozen=True)
class LoopRun:
    """One run folder of a grid: its name, folder and checked state."""

    name: str
    folder: Path
    state: LoopState

    @property
    def rows(self) -> tuple[GenerationRow, ...]:
        """The run's finished generations, 0 first."""
        return self.state.generations


def metrics_of(row: GenerationRow) -> dict[str, float | None]:
    """The scalars of one generation's row that the report aggregates."""
    m = row.evaluation
    return {
        "exact": m.no_context.success, "credit": m.no_context.credit,
        "exact_ctx": m.context.success, "credit_ctx": m.context.credit,
        "retention": m.retention,
    }


def mean_std(values: Sequence[float | None], digits: int = 2) -> str:
    """``mean ± std`` (sample std, ddof=1; just the value for one seed; None values left out)."""
    vals = [v for v in values if v is not None]
    if not vals:
        return "-"
    if len(vals) == 1:
        return f"{vals[0]:.{digits}f}"
    return f"{np.mean(vals):.{digits}f} ± {np.std(vals, ddof=1):.{digits}f}"


def collect(out: Path) -> list[LoopRun]:
    """Every run under ``out`` (folders holding ``state.json``), sorted by name."""
    runs = []
    for folder in sorted(p.parent for p in out.glob("*/state.json")):
        if folder.is_symlink():  # a run folder is the grid's own, never one elsewhere
            raise UnsafePathError(f"{folder}: is a symbolic link; a grid folder holds its own runs (remove the link)")
        state = read_state(folder)
        if state is not None:
            runs.append(LoopRun(folder.name, folder, state))
    return runs


def group_key(state: LoopState) -> str:
    """The run's lineage and rehearsal recipe in words: runs with the same key are seeds of one arm.

    The recipe is read by its values (:meth:`LoopConfig.recipe_values`: the same for a run saved
    before ``[loop] recipe`` existed and for one that names it).
    """
    lp = state.loop_config.loop
    r = LoopConfig.recipe_values(dict(state.config))
    reh = "no rehearsal" if r is None else f"rehearsal {', '.join(r['source'])} {r['ratio']:.0%}"
    if r is not None and r["mix_by"] != "rows":
        reh += f" of {r['mix_by']}"
    if r is not None and r["kl_to_base"] > 0:
        reh += f" + KL {r['kl_to_base']:g}"
        if not r["rehearsal_ce"]:  # a run from before the key trained with cross-entropy
            reh += " (no cross-entropy on it)"
    return f"{lp.lineage} (K={lp.window}), {reh}" + _experience_words(lp)


def _experience_words(lp: Loop) -> str:
    """The experience and consolidation keys a run set beyond the defaults (runs that differ there
    are different arms).

    Example:
        >>> _experience_words(Loop(replay_workflows=True, reflect=True, retrieve=["episodes", "insights"]))
        ', replay workflows, reflect, retrieve episodes+insights'
        >>> _experience_words(Loop(retrieve=["episodes"]))
        ''
        >>> _experience_words(Loop(replay_workflows=True, consolidate="own", consolidation_steps=12))
        ', replay workflows, consolidate own, 12 steps per consolidation'
    """
    words = ["replay workflows"] if lp.replay_workflows else []
    words += ["reflect"] if lp.reflect else []
    if list(lp.retrieve) != ["episodes"]:
        words.append("retrieve " + "+".join(lp.retrieve))
    if lp.context_chars:
        words.append(f"context {lp.context_chars} chars")
    if lp.vote_groups:
        words.append(f"vote over {lp.vote_groups} groups")
    if lp.consolidate != "successes":
        words.append(f"consolidate {lp.consolidate}")
    if lp.consolidation_steps:
        words.append(f"{lp.consolidation_steps} steps per consolidation")
    return "".join(f", {w}" for w in words)


def paired_gaps(runs: list[LoopRun]) -> dict[str, RetentionGap]:
    """Per rehearsal group (:func:`group_key`) with runs without rehearsal of the same lineage and
    window: ``retention`` with rehearsal minus without, per generation and per seed both have
    (a group with no such seed is left out). Two rehearsal variants
    of one lineage in one folder each get their own gaps against the same runs without.
    """
    with_: dict[str, tuple[tuple[str, int], dict[int, list[float | None]]]] = {}
    without: dict[tuple[str, int], dict[int, list[float | None]]] = {}
    for run in runs:
        lp = run.state.loop_config.loop
        arm: tuple[str, int] = (lp.lineage, lp.window)
        per_gen = [metrics_of(r)["retention"] for r in run.rows]
        if LoopConfig.recipe_values(dict(run.state.config)) is None:
            without.setdefault(arm, {})[lp.seed] = per_gen
        else:
            with_.setdefault(group_key(run.state), (arm, {}))[1][lp.seed] = per_gen
    out: dict[str, RetentionGap] = {}
    for key, (arm, on) in with_.items():
        off = without.get(arm, {})
        seeds = sorted(set(on) & set(off))
        if not seeds:
            continue
        n_gen = min([len(on[s]) for s in seeds] + [len(off[s]) for s in seeds])
        out[key] = RetentionGap(seeds=seeds,
                                generations=[[_diff(on[s][g], off[s][g]) for s in seeds] for g in range(n_gen)])
    return out


def _diff(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


def aggregate(runs: list[LoopRun]) -> dict[str, LoopArm]:
    """Per group (:func:`group_key`), its runs as seeds: each generation's figures per seed, over
    the generations every run of the group finished."""
    groups: dict[str, list[LoopRun]] = {}
    for run in runs:
        groups.setdefault(group_key(run.state), []).append(run)
    out: dict[str, LoopArm] = {}
    for key, members in groups.items():
        n_gen = min(len(r.rows) for r in members)
        out[key] = LoopArm(seeds=[r.state.loop_config.loop.seed for r in members], runs=[r.name for r in members],
                           generations=[GenerationFigures.over(g, [r.rows[g] for r in members]) for g in range(n_gen)],
                           seconds=[_seconds(r) for r in members])
    return out


def _seconds(run: LoopRun) -> float:
    # the last session's whole wall time when the run was not resumed, else the generations' sum
    seconds = run.state.seconds_this_session
    if seconds is not None and not any(r.act is not None and r.act.resumed for r in run.rows):
        return float(seconds)
    return round(sum(r.seconds or 0.0 for r in run.rows), 1)


def write_report(out: Path) -> Path:
    """Write ``report.md``, ``metrics.json`` and ``loop.png`` for the runs under ``out``.

    Each file is written inside ``out`` only (:func:`write_inside`): a link, FIFO or folder at any
    of the three names is refused before the first is written.

    Raises:
        UnsafePathError: a link (or anything but a regular file) at one of the names, or a run
            folder under ``out`` that is a link.
        StateError: a run's ``state.json`` fails its checks.
    """
    refuse_links(out, *REPORT_FILES)
    runs = collect(out)
    agg = aggregate(runs)
    lines = ["# Consolidation loop", "",
             "Held-out tasks are answered greedily **without** replayed context (the agent's system prompt and the "
             "request only: is the skill in the weights?) and **with** up to `context_examples` successes retrieved "
             "from the store by BM25. "
             "*exact* = share of tasks answered with exactly the expected calls; *credit* = mean argument-level "
             "credit (the checker's reward). Retention = mean over suite families of the family score over the base "
             "model's. Generation 0 is the base model. Values are mean ± std over seeds.", ""]
    for key, group in agg.items():
        lines += [f"## {key}", "", f"seeds {group.seeds}; wall seconds per run (setup, generation 0 and every "
                  f"generation) {group.seconds}", "",
                  "| gen | " + " | ".join(LABELS[m] for m in METRICS) + " |", "|---" * (len(METRICS) + 1) + "|"]
        gens = group.generations
        for gen in gens:
            lines.append(f"| {gen.generation} | " + " | ".join(mean_std(gen.of(m)) for m in METRICS) + " |")
        if len(gens) > 5:
            shown = ", ".join(f"{a:.0%} -> {b:.0%}" + (f" ({b / a:.2f}x)" if a else "")
                              for a, b in zip(gens[1].exact, gens[5].exact, strict=True))
            lines += ["", f"held-out exact without context, generation 1 -> 5, per seed: {shown}"]
        lines.append("")
    gaps = paired_gaps(runs)
    for key, gap in gaps.items():
        lines += [f"## Retention with rehearsal minus without ({key}, paired per seed)", "",
                  f"seeds {gap.seeds}; points of retention (percent of base), mean ± std over seeds, then per seed", "",
                  "| gen | gap | per seed |", "|---|---|---|"]
        for g, vals in enumerate(gap.generations):
            shown = ", ".join("-" if v is None else f"{100 * v:+.0f}" for v in vals)
            lines.append(f"| {g} | {mean_std([100 * v for v in vals if v is not None], 0)} | {shown} |")
        lines.append("")
    lines += ["## Runs", ""]
    for run in runs:
        lines += [f"### {run.name}", "", *_run_table(run.rows), "", *_level_table(run.rows), *_calls_table(run.rows),
                  *_experience_table(run.rows), "```", _store_text(run.folder), "```", ""]
    metrics = json.dumps(LoopMetrics(arms=agg, paired_retention_gap=gaps).to_json(), indent=1)
    png = _plot(agg) if agg else None
    report = write_inside(out, "report.md", ("\n".join(lines) + "\n").encode("utf-8"))
    write_inside(out, "metrics.json", metrics.encode("utf-8"))
    if png is not None:
        write_inside(out, "loop.png", png)
    return report


def _run_table(rows: Sequence[GenerationRow]) -> list[str]:
    head = ("| gen | lineage | acted exact | train rows | steps | exact | credit | exact ctx | credit ctx | "
            "validation credit | retention | leakage | s |")
    lines = [head, "|---" * 13 + "|"]
    for r in rows:
        m, e = metrics_of(r), r.evaluation
        acted = _acted(r)
        lines.append(
            f"| {r.generation} | {_or_dash(r.lineage)} | {_pct(None if acted is None else acted.success)} | "
            f"{_or_dash(r.train_rows)} | {_or_dash(None if r.train is None else r.train.get('steps', '-'))} | "
            f"{_pct(m['exact'])} | {m['credit']:.2f} | {_pct(m['exact_ctx'])} | "
            f"{m['credit_ctx']:.2f} | {e.validation.credit:.2f} | {_pct(m['retention'])} | "
            f"{_pct(e.suite.leakage)} | {_or_dash(r.seconds)} |"
        )
    return lines


def _acted(row: GenerationRow) -> Score | None:
    """The acting arm's score (None for generation 0; a resumed generation's counts from the store)."""
    if row.act is None:
        return None
    if isinstance(row.act, Acted):
        return row.act.score
    return Score(success=row.act.success, credit=row.act.credit, n=row.act.n)


def _or_dash(v: object) -> str:
    return "-" if v is None else str(v)


def _level_table(rows: Sequence[GenerationRow]) -> list[str]:
    """Held-out exact (credit) per ladder level, without and with context; nothing for one level.

    Example:
        >>> row = GenerationRow.from_json({"generation": 0, "adapter": "base", "no_context": {"success": 0.25,
        ...     "credit": 0.6, "levels": {"1": {"success": 0.5, "credit": 0.75}, "4": {"success": 0.0, "credit": 0.5}}},
        ...     "context": {"success": 0.0, "credit": 0.0, "levels": {}}, "validation": {"success": 0.0, "credit": 0.0},
        ...     "suite": {"leakage": None}, "retention": None})
        >>> print("\\n".join(_level_table([row])))
        Held-out exact (credit) per ladder level, without and with replayed context:
        <BLANKLINE>
        | gen | level 1 | level 4 | level 1 ctx | level 4 ctx |
        |---|---|---|---|---|
        | 0 | 50% (0.75) | 0% (0.50) | - | - |
        <BLANKLINE>
    """
    levels = sorted({lv for r in rows for lv in r.evaluation.no_context.levels or {}}, key=int)
    if len(levels) < 2:
        return []
    head = "| gen | " + " | ".join([f"level {lv}" for lv in levels] + [f"level {lv} ctx" for lv in levels]) + " |"
    lines = ["Held-out exact (credit) per ladder level, without and with replayed context:", "",
             head, "|---" * (2 * len(levels) + 1) + "|"]
    for r in rows:
        cells = []
        for part in (r.evaluation.no_context, r.evaluation.context):
            got = part.levels or {}
            cells += [f"{_pct(got[lv].success)} ({got[lv].credit:.2f})" if lv in got else "-" for lv in levels]
        lines.append(f"| {r.generation} | " + " | ".join(cells) + " |")
    return lines + [""]


def _calls_table(rows: Sequence[GenerationRow]) -> list[str]:
    """Model calls (generation turns) per solved task, per arm: acting, held-out without and with
    context, and with replayed workflows (runs with ``replay_workflows``: then also how many acted
    tasks were replayed and the refusals by reason). Nothing for a run from before the count.

    Example:
        >>> arm = {"success": 0.5, "credit": 0.5}
        >>> row = GenerationRow.from_json({"generation": 1, "adapter": "0123456789abcdef", "act": {**arm, "n": 3,
        ...     "model_calls_per_solved": 4.0, "replay": {"tasks": 3, "replayed": 1, "replayed_success": 1,
        ...     "no_candidate": 0, "fell_back": 0, "refused": {"unbound": 2}}},
        ...     "no_context": {**arm, "model_calls_per_solved": 2.5}, "context": {**arm, "model_calls_per_solved": None},
        ...     "validation": arm, "suite": {"leakage": None}, "retention": None,
        ...     "replay": {**arm, "model_calls_per_solved": 1.25, "tasks": 3, "replayed": 1, "replayed_success": 1,
        ...     "no_candidate": 0, "fell_back": 0, "refused": {}}})
        >>> print("\\n".join(_calls_table([row])))
        Model calls (generation turns) per solved task:
        <BLANKLINE>
        | gen | acting | no context | context | replay | acted tasks replayed (solved) | refused |
        |---|---|---|---|---|---|---|
        | 1 | 4.00 | 2.50 | - | 1.25 | 1/3 (1) | unbound 2 |
        <BLANKLINE>
    """
    if not any(r.evaluation.no_context.model_calls_per_solved is not ABSENT for r in rows):
        return []
    replay = any(r.evaluation.replay is not None for r in rows)
    head = "| gen | acting | no context | context |" + (" replay | acted tasks replayed (solved) | refused |" if replay else "")
    lines = ["Model calls (generation turns) per solved task:", "", head, "|---" * (head.count("|") - 1) + "|"]
    for r in rows:
        e = r.evaluation
        acted = r.act if isinstance(r.act, Acted) else None
        cells = [_calls(None if acted is None else acted.score), _calls(e.no_context), _calls(e.context)]
        if replay:
            done = None if acted is None else acted.replay
            cells += [_calls(None if e.replay is None else e.replay.score),
                      "-" if done is None else f"{done.replayed}/{done.tasks} ({done.replayed_success})",
                      "-" if done is None else ", ".join(f"{k} {v}" for k, v in done.refused.items() if v) or "0"]
        lines.append(f"| {r.generation} | " + " | ".join(cells) + " |")
    return lines + [""]


def _experience_table(rows: Sequence[GenerationRow]) -> list[str]:
    """Per generation, the retry pass (``[loop] reflect``: failed episodes retried without and with
    their reflection) and the vote (``[loop] vote_groups``: exact with context, one answer against
    the vote, and the model calls each cost); nothing when neither key was on.

    Example:
        >>> arm, base = {"success": 0.4, "credit": 0.5}, {"suite": {"leakage": None}, "retention": None}
        >>> gen0 = GenerationRow.from_json({"generation": 0, "adapter": "base", "no_context": arm, "context": arm,
        ...     "validation": arm, **base})
        >>> row = GenerationRow.from_json({"generation": 1, "adapter": "0123456789abcdef", "act": {**arm, "n": 4,
        ...     "reflection": {"n": 4, "fallback": 1, "cut": 0, "model_calls": 4, "tokens": 40, "retry": {"n": 4,
        ...     "without": {"success": 0.25, "credit": 0.5}, "with_reflection": {"success": 0.5, "credit": 0.7},
        ...     "model_calls": 8}}}, "no_context": arm, "context": arm, "validation": arm, **base,
        ...     "vote": {"success": 0.5, "credit": 0.6, "model_calls": 30, "groups": 3, "tokens": 300, "unanimous": 0.5,
        ...     "context_model_calls": 10}})
        >>> print("\\n".join(_experience_table([gen0, row])))
        Reflection (failed episodes retried without / with their reflection) and group voting:
        <BLANKLINE>
        | gen | reflections (fallback, cut) | retried | retry exact without | with reflection | exact ctx | exact vote | groups | model calls ctx / vote |
        |---|---|---|---|---|---|---|---|---|
        | 1 | 4 (1, 0) | 4 | 25% (0.50) | 50% (0.70) | 40% | 50% | 3 | 10 / 30 |
        <BLANKLINE>
    """
    shown = [r for r in rows if (r.act is not None and r.act.reflection is not None) or r.evaluation.vote is not None]
    if not shown:
        return []
    lines = ["Reflection (failed episodes retried without / with their reflection) and group voting:", "",
             "| gen | reflections (fallback, cut) | retried | retry exact without | with reflection | exact ctx | "
             "exact vote | groups | model calls ctx / vote |", "|---" * 9 + "|"]
    for r in shown:
        refl = None if r.act is None else r.act.reflection
        retry = None if refl is None else refl.retry
        vote = r.evaluation.vote
        cells = [f"{refl.counts.n} ({refl.counts.fallback}, {refl.counts.cut})" if refl else "-",
                 str(retry.n) if retry else "-"]
        rates = (retry.without, retry.with_reflection) if retry else (None, None)
        cells += ["-" if rate is None else f"{_pct(rate.success)} ({rate.credit:.2f})" for rate in rates]
        cells += [_pct(r.evaluation.context.success) if vote else "-", _pct(vote.score.success) if vote else "-",
                  str(vote.groups) if vote else "-",
                  f"{vote.context_model_calls} / {vote.score.model_calls}" if vote else "-"]
        lines.append(f"| {r.generation} | " + " | ".join(cells) + " |")
    return lines + [""]


def _calls(score: Score | None) -> str:
    v = None if score is None else score.calls_per_solved
    return "-" if v is None else f"{v:.2f}"


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.0f}%"


def _store_text(folder: Path) -> str:
    from replaybank.episodic import EpisodeStore
    from replaybank.episodic.stats import format_summary, summary

    path = folder / "store.db"
    if not path.is_file():
        return "(no store)"
    with EpisodeStore(path, readonly=True) as store:
        return format_summary(summary(store)).replace(str(path), f"{folder.name}/store.db")


def _plot(agg: dict[str, LoopArm]) -> bytes:
    """``loop.png``'s bytes: four panels, a line per group over generations."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels: tuple[Metric, ...] = ("exact", "credit", "exact_ctx", "retention")
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.6))
    for ax, metric in zip(axes, panels, strict=True):
        for key, group in agg.items():
            xs = [g.generation for g in group.generations]
            vals = [[v for v in g.of(metric) if v is not None] for g in group.generations]
            mean = np.array([np.mean(v) if v else np.nan for v in vals])
            std = np.array([np.std(v, ddof=1) if len(v) > 1 else 0.0 for v in vals])
            ax.plot(xs, mean, marker="o", label=key)
            ax.fill_between(xs, mean - std, mean + std, alpha=0.15)
        ax.set_title(LABELS[metric], fontsize=9)
        ax.set_xlabel("generation")
        ax.grid(alpha=0.3)
    # one legend under the panels (group names are long; inside a panel they hide its curves)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 2), fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.06 * ((len(labels) + 1) // 2), 1, 1))
    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=110)
    plt.close(fig)
    return png.getvalue()
