"""Assembling and writing the run's results: ``metrics.json``, ``report.md``, two plots.

:func:`effect` is the pure summary of three arms, base, naive and the corpus rehearsal arm (rise
of the held-out general loss, its ratio between arms, the domain-loss gap); :func:`build_metrics` assembles every arm over
seeds (means, spreads, measured loss shares, the accuracy matrix, the probe side by side with the
measured forgetting, the targets); :mod:`replaybank.llm.report.markdown` only formats what it is given.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from replaybank.llm.config.floor import resolve_floors
from replaybank.llm.config.names import refuse_links
from replaybank.llm.config.recipe import recipe_dict
from replaybank.llm.report.families import family_summary, interval_method
from replaybank.llm.report.gate import evaluate_gate
from replaybank.llm.report.markdown import write_report
from replaybank.llm.report.plots import (
    BEHAVIOUR_PLOT,
    MIXTURE_PLOT,
    PLOT_NAME,
    plot_behaviour,
    plot_losses,
    plot_mixture,
)

METRICS_SCHEMA_VERSION = 3
SOURCE_LOSS = {"corpus": "docs_loss", "self": "self_loss"}


def effect(arms: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Compare the arms against three criteria: naive raises the general loss, rehearsal keeps that
    rise to at most a third, and costs at most 5% of domain loss.

    Args:
        arms: ``base``, ``naive`` and ``rehearsal`` (the corpus rehearsal arm), each with its
            ``general_loss`` and ``domain_loss``; a missing arm leaves its comparisons out.

    Returns:
        ``naive_general_rise`` and ``rehearsal_general_rise`` (loss minus base), ``rise_ratio``
        (rehearsal rise / naive rise; ``None`` when naive did not rise), ``domain_loss_ratio``
        (rehearsal / naive domain loss) and a ``criteria`` dict of booleans.

    Example:
        >>> e = effect({"base": {"general_loss": 2.0, "domain_loss": 5.0},
        ...             "naive": {"general_loss": 2.6, "domain_loss": 0.20},
        ...             "rehearsal": {"general_loss": 2.1, "domain_loss": 0.205}})
        >>> round(e["rise_ratio"], 3), e["criteria"]["rise_at_most_a_third"]
        (0.167, True)
    """
    out: dict[str, Any] = {}
    base = arms.get("base")
    naive = arms.get("naive")
    reh = arms.get("rehearsal")
    if base and naive:
        out["naive_general_rise"] = naive["general_loss"] - base["general_loss"]
    if base and reh:
        out["rehearsal_general_rise"] = reh["general_loss"] - base["general_loss"]
    if "naive_general_rise" in out and "rehearsal_general_rise" in out:
        rise = out["naive_general_rise"]
        out["rise_ratio"] = out["rehearsal_general_rise"] / rise if rise > 0 else None
    if naive and reh:
        out["domain_loss_ratio"] = reh["domain_loss"] / naive["domain_loss"]
    criteria = {}
    if "naive_general_rise" in out:
        # "Measurably": more than 2% of the base loss, far above the run-to-run noise we saw.
        criteria["naive_raises_general"] = out["naive_general_rise"] > 0.02 * base["general_loss"]  # type: ignore[index]
    if out.get("rise_ratio") is not None:
        criteria["rise_at_most_a_third"] = out["rise_ratio"] <= 1 / 3
    if "domain_loss_ratio" in out:
        # Rehearsal must not cost domain skill: at most 5% above naive's loss (lower is fine).
        criteria["domain_loss_at_most_5pct_above_naive"] = out["domain_loss_ratio"] <= 1.05
    out["criteria"] = criteria
    return out


def build_metrics(
    cfg: Any, per_seed: list[dict[str, dict[str, Any]]], agg: dict[str, dict[str, dict[str, Any]]],
    probes: dict[str, Any], manifests: list[dict[str, Any]], suites: list[dict[str, Any]],
) -> dict[str, Any]:
    """The ``metrics.json`` dict (schema in docs/llm.md) from every seed's arms and their aggregate."""
    from replaybank.llm.report.seeds import check_targets

    specs = cfg.arm_specs()
    first = per_seed[0]
    per_family = family_summary(per_seed, [int(m["seed"]) for m in manifests])
    arms: dict[str, Any] = {}
    for name in first:
        summary = agg[name]
        entry: dict[str, Any] = {key: v["mean"] for key, v in summary.items()}
        entry["std"] = {key: v["std"] for key, v in summary.items()}
        entry["summary"] = summary
        if name != "base":
            spec = specs[name]
            entry["spec"] = recipe_dict(spec)
            entry["share"] = float(np.mean([seed[name]["share"] for seed in per_seed]))
            entry["loss_share"] = _mean_shares([seed[name]["loss_share"] for seed in per_seed])
            for key in ("curve", "generations", "train_total"):
                entry[key] = first[name][key]
            if first[name].get("mixture"):  # a replay controller's mixture after every evaluation
                entry["controller"] = first[name]["controller"]
                entry["mixture"] = first[name]["mixture"]
                entry["mixture_per_seed"] = [seed[name].get("mixture", []) for seed in per_seed]
        entry["matrix"] = {
            "R_mean": np.mean([seed[name]["matrix"]["R"] for seed in per_seed], axis=0).round(4).tolist(),
            "per_seed": [seed[name]["matrix"] for seed in per_seed],
        }
        entry.update(per_family.get(name, {}))  # "families" (intervals, flip counts) and "flips" (the items)
        arms[name] = entry
    # an arm of one fresh adapter per skill carries nothing over, and a peer method without sources rehearses
    # nothing: neither is a rehearsal arm
    specs = cfg.arm_specs()
    rehearsal_arms = [a for a in first if a not in ("base", "naive") and not (
        a in specs and (specs[a].fresh_adapter or (specs[a].peer != "none" and not specs[a].source)))]
    corpus_arm = next((a for a in ("rehearsal-corpus", "rehearsal") if a in first), None)
    targets = check_targets(agg, rehearsal_arms)
    reh = next((a for a in ("rehearsal", "rehearsal-corpus") if a in arms), "")  # the corpus rehearsal arm
    compared = {"base": "base", "naive": "naive", "rehearsal": reh}
    return {
        "arms": arms,
        "effect": effect({role: arms[arm] for role, arm in compared.items() if arm in arms}),
        "targets": targets,
        "gate": _gate(cfg, per_family, targets),
        "intervals": interval_method(),
        "probe": {"fresh_lora": probes, "comparison": probe_vs_forgetting(probes, agg, specs)},
        "mixing": _compat_mixing(first.get(corpus_arm) if corpus_arm else None, manifests[0], cfg),
        "data": manifests[0]["data"],
        "data_per_seed": manifests,
        "suite": suites,
        "config": cfg.to_dict(),
        "config_source": cfg.source,
    }


def _gate(cfg: Any, per_family: dict[str, dict[str, Any]], targets: dict[str, Any]) -> dict[str, Any]:
    """The retention gate over the trained arms: ``[evaluation] gate_arm``, else the targets' best arm."""
    families = {arm: v["families"] for arm, v in per_family.items() if arm != "base"}
    present = list(dict.fromkeys(f for fams in per_family.values() for f in fams["families"]))
    floors = resolve_floors(cfg.evaluation.retention_floor, present)
    gate_arm = cfg.evaluation.gate_arm
    chosen, by = (gate_arm, "gate_arm") if gate_arm else (targets.get("best_arm"), "best_arm")
    return evaluate_gate(families, floors, chosen=chosen, chosen_by=by)


def _mean_shares(shares: list[dict[str, dict[str, float]]]) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for kind in ("rows", "label_tokens"):
        keys = sorted({k for s in shares for k in s.get(kind, {})})
        out[kind] = {k: round(float(np.mean([s[kind].get(k, 0.0) for s in shares])), 4) for k in keys}
    return out


def probe_vs_forgetting(probes: dict[str, Any], agg: dict[str, dict[str, dict[str, Any]]], specs: dict[str, Any]) -> list[dict[str, Any]]:
    """Per rehearsal source: the probe's prediction next to the forgetting measured on that source's rows.

    The measured forgetting of a source is the rise of the naive arm's loss on that source's rows
    over the base model's (held-out documents for ``corpus``, the self-synthesized rows for
    ``self``), and what the arm rehearsing only that source left of it.

    Example:
        >>> agg = {"base": {"docs_loss": {"mean": 1.7}}, "naive": {"docs_loss": {"mean": 2.9}},
        ...        "rc": {"docs_loss": {"mean": 1.6}}}
        >>> class S: source, kl_to_base = ["corpus"], 0.0
        >>> out = probe_vs_forgetting({"corpus": {"cosine_mean": 0.09, "alpha_suggested": 0.0, "rehearsal_needed": False}},
        ...                           agg, {"rc": S()})
        >>> out[0]["naive_loss_rise"], out[0]["rehearsal_arm"], out[0]["rehearsal_loss_rise"]
        (1.2, 'rc', -0.1)
    """
    out = []
    for source, rep in probes.items():
        key = SOURCE_LOSS.get(source)
        row: dict[str, Any] = {
            "source": source, "cosine_mean": rep["cosine_mean"], "cosine_std": rep.get("cosine_std"),
            "alpha_suggested": rep["alpha_suggested"], "predicts_forgetting": rep["rehearsal_needed"],
            "loss": key,
        }
        base = agg.get("base", {}).get(key or "", {}).get("mean")
        naive = agg.get("naive", {}).get(key or "", {}).get("mean")
        if base is not None and naive is not None:
            row["naive_loss_rise"] = round(naive - base, 4)
        arm = next((a for a, s in specs.items() if a in agg and list(s.source) == [source] and not s.kl_to_base), None)
        if arm is not None and base is not None and key in agg[arm]:
            row["rehearsal_arm"] = arm
            row["rehearsal_loss_rise"] = round(agg[arm][key]["mean"] - base, 4)
        out.append(row)
    return out


def _compat_mixing(arm: dict[str, Any] | None, manifest: dict[str, Any], cfg: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "share": manifest["share"], "how": manifest["how"], "batch_size": cfg.training.batch_size,
        "mix_by": cfg.training.mix_by,
        "semantics": "fixed quota of every micro-batch (largest remainder, credit carried); "
                     "mix_by=tokens converts the target share of labelled tokens into row quotas",
    }
    if arm:
        steps = [s for gen in arm["generations"] for s in gen["train"]["steps"]]
        rows = sum(s["rows"] for s in steps)
        tokens = sum(s["tokens"] for s in steps)
        out["rows_per_batch"] = sorted({s["rehearsal_rows"] for s in steps})
        out["measured_row_share"] = sum(s["rehearsal_rows"] for s in steps) / rows if rows else None
        out["rehearsal_tokens"] = sum(s["rehearsal_tokens"] for s in steps)
        out["measured_token_share"] = out["rehearsal_tokens"] / tokens if tokens else None
        out["measured_label_token_share"] = arm["loss_share"]["label_tokens"]
    return out


def write_outputs(folder: Path, metrics: dict[str, Any]) -> None:
    """``losses.png``, ``behaviour.png``, ``mixture.png`` (arms with a replay controller), ``report.md``,
    then ``metrics.json`` (last).

    Raises:
        UnsafePathError: a link (or anything but a regular file) at one of these names in
            ``folder``: refused before the first is written, never written through.
    """
    refuse_links(folder, PLOT_NAME, BEHAVIOUR_PLOT, MIXTURE_PLOT, "report.md", "metrics.json")
    plot_losses(folder / PLOT_NAME, metrics)
    plot_behaviour(folder / BEHAVIOUR_PLOT, metrics)
    plot_mixture(folder / MIXTURE_PLOT, metrics)
    write_report(folder / "report.md", metrics)
    write_metrics(folder / "metrics.json", metrics)


def write_metrics(path: Path, metrics: dict[str, Any]) -> None:
    """Write ``metrics.json`` (sorted keys, 2-space indent)."""
    path.write_text(json.dumps(metrics, indent=2, sort_keys=True, default=str) + "\n", encoding="utf-8")
