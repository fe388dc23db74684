"""Three sections of ``report.md``: the retention gate, the operating points chosen, and the items
each arm lost and gained.

Only formats what :func:`replaybank.llm.report.metrics.build_metrics` assembled. In the item
tables prompts and answers are cut to :data:`PROMPT_CHARS` / :data:`ANSWER_CHARS` characters on one
line; ``metrics.json`` (``arms.<arm>.flips``) holds them in full.
"""

from __future__ import annotations

from replaybank.llm.results import RunResult

__all__ = ["ANSWER_CHARS", "PROMPT_CHARS", "cell", "flips_section", "frontier_section", "gate_section"]

PROMPT_CHARS = 60
ANSWER_CHARS = 80


def cell(text: object, limit: int) -> str:
    """``text`` as one Markdown table cell: whitespace collapsed, ``|`` escaped, cut to ``limit``
    characters with an ellipsis.

    Example:
        >>> cell("a |\\n b", 20), cell("x" * 10, 4)
        ('a \\\\| b', 'xxx…')
    """
    flat = " ".join(str(text or "").split())
    if len(flat) > limit:
        flat = flat[: limit - 1].rstrip() + "…"
    return flat.replace("|", "\\|")


def gate_section(metrics: RunResult) -> list[str]:
    """``## Retention gate``: the floor, the rule, each trained arm per family, the verdict."""
    gate = metrics.gate
    if not gate.arms:
        return []
    fams = list(gate.floor)
    lines = ["", "## Retention gate", "",
             f"Floor per family: {', '.join(f'{f} {v:.0%}' for f, v in gate.floor.items())} "
             f"(`[evaluation] retention_floor`). Rule: {gate.rule}.", "",
             "| arm | " + " | ".join(fams) + " | gate |", "|---|" + "---|" * (len(fams) + 1)]
    for arm, row in gate.arms.items():
        cells = []
        for fam in fams:
            r = row.families.get(fam)
            cells.append("n/a" if r is None or r.retention is None else f"{r.status} ({r.retention * 100:.1f}%)")
        lines.append(f"| {arm} | " + " | ".join(cells) + f" | {'pass' if row.passed else 'fail'} |")
    chosen = gate.chosen_arm
    how = "`[evaluation] gate_arm`" if gate.chosen_by == "gate_arm" else "the targets' best rehearsal arm"
    verdict = "no arm to gate" if chosen is None else f"`{chosen}` ({how}): {'passes' if gate.passed else 'fails'}"
    lines += ["", f"Gated arm (`replaybank run --require-floor` exits 3 when it fails): {verdict}."]
    return lines


def frontier_section(metrics: RunResult, plot: str) -> list[str]:
    """``## Operating point``: per arm that chose one (``[evaluation] choose = "floor"``) and seed,
    the points measured on the validation data, the chosen one and why; the plot ``plot``."""
    arms = {a: v.frontier for a, v in metrics.arms.items() if v.frontier}
    if not arms:
        return []
    lines = ["", "## Operating point (chosen on the validation data)", "",
             "Each trained adapter run at post-hoc scales (`[evaluation] scales`, `scale_profiles`) and, with "
             "`[evaluation] checkpoints`, taken at earlier steps of its last training, measured on the "
             "validation suite and validation domain requests; chosen: the best validation domain exact match whose "
             "validation retention keeps `retention_floor` and whose validation domain exact match keeps `keep_skill` of the "
             "adapter's as trained. The arm's figures above are the chosen point's, on the test "
             "data; the gate judges it.", "",
             "| arm | seed | profile | scale (first-last layer) or step | validation domain % | min validation retention % | "
             "chosen |", "|---|---|---|---|---|---|---|"]
    for arm, frontiers in arms.items():
        for k, fr in enumerate(frontiers or []):
            seed = metrics.seeds[k] if k < len(metrics.seeds) else k
            for i, p in enumerate(fr.points):
                ret = "n/a" if p.min_retention is None else f"{p.min_retention * 100:.1f}"
                lines.append(f"| {arm} | {seed} | {p.made_by if p.made_by == 'checkpoint' else p.profile} | {p.label()} | {p.domain_exact_match * 100:.1f} | {ret} | "
                             f"{'**yes**' if i == fr.chosen else ''} |")
    lines.append("")
    for arm, frontiers in arms.items():
        for k, fr in enumerate(frontiers or []):
            seed = metrics.seeds[k] if k < len(metrics.seeds) else k
            trade = "n/a" if fr.tradeoff is None else f"{fr.tradeoff:.2f}"
            lines.append(f"- {arm}, seed {seed}: {fr.reason}; as trained, test domain exact match "
                         f"{fr.trained_exact_match * 100:.1f}%; Spearman (domain, min retention) over the points {trade}")
    lines += ["", f"![frontier]({plot})"]
    return lines


def flips_section(metrics: RunResult) -> list[str]:
    """``## Items lost and gained``: per trained arm, a count table per family, then the items."""
    arms = {name: a for name, a in metrics.arms.items() if a.flips is not None}
    if not arms:
        return []
    lines = ["", "## Items lost and gained", "",
             "Lost: the base model right, the arm wrong; gained: the reverse (same items, same seed). "
             f"Prompts cut to {PROMPT_CHARS} and answers to {ANSWER_CHARS} characters here; in full in "
             "`metrics.json` (`arms.<arm>.flips`)."]
    for name, arm in arms.items():
        fams = arm.families or {}
        lines += ["", f"### {name}", "", "| family | items (all seeds) | lost | gained |", "|---|---|---|---|"]
        lines += [f"| {fam} | {e.n_items} | {e.lost} | {e.gained} |" for fam, e in fams.items()]
        for kind, title in (("lost", "Lost"), ("gained", "Gained")):
            rows = [(seed.seed, item) for seed in arm.flips or [] for item in getattr(seed, kind)]
            if not rows:
                lines += ["", f"{title}: none."]
                continue
            lines += ["", f"{title} ({len(rows)}):", "",
                      "| seed | item | family | prompt | base answer | arm answer |", "|---|---|---|---|---|---|"]
            lines += [
                f"| {seed} | {item['id']} | {item['family']} | {cell(item['prompt'], PROMPT_CHARS)} "
                f"| {cell(item['base_answer'], ANSWER_CHARS)} | {cell(item['arm_answer'], ANSWER_CHARS)} |"
                for seed, item in rows
            ]
    return lines
