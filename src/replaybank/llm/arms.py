"""Training one arm through every generation (domain) and measuring it.

An arm (:class:`replaybank.llm.config.ArmSpec`) names its rehearsal sources, their total share,
what the share is of (rows or labelled tokens) and the optional KL-to-base term. Per generation:

1. the domain rows are the generation's lineage (:func:`replaybank.llm.train.lineage.select_lineage`);
2. the sources are built: ``corpus`` (the rehearsal pool, sliced per virtual epoch), ``self``
   (the base model's own answers, synthesized per seed), ``replay`` (the stored training rows of
   earlier generations not in the lineage; absent in the first generation, where its share goes
   to the arm's other sources or, alone, leaves the generation naive);
3. :func:`replaybank.llm.train.train_lora` trains the adapter, which carries over;
4. one row of the accuracy matrix is measured (generated exact match on every domain).

After the last generation the suite and probe are measured.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from replaybank.llm.config import ArmSpec, Config
from replaybank.llm.data.rows import TokenRows, token_rows
from replaybank.llm.eval.losses import mean_loss
from replaybank.llm.eval.measure import (
    EvalContext,
    domain_row,
    matrix_metrics,
    measure_behaviour,
    measure_losses,
)
from replaybank.llm.train import KLSpec, Source, add_lora, train_lora
from replaybank.llm.train.lineage import select_lineage

Log = Callable[[str], None]


def concat_rows(parts: list[TokenRows]) -> TokenRows:
    """One :class:`TokenRows` holding every row of ``parts`` in order."""
    if len(parts) == 1:
        return parts[0]
    return token_rows([r for p in parts for r in p.rows(np.arange(len(p)))])


def build_sources(spec: ArmSpec, ratio: float, generation: int, lineage: list[int], ctx: EvalContext) -> list[Source]:
    """The rehearsal sources of one generation, the ratio split evenly over those that have rows.

    Raises:
        ValueError: when the arm asks for ``self`` rows and none were synthesized.
    """
    available: list[tuple[str, TokenRows, bool]] = []
    for name in spec.source:
        if name == "corpus":
            available.append(("corpus", ctx.data.rehearsal_pool, True))
        elif name == "self":
            if ctx.self_rows is None or len(ctx.self_rows) == 0:
                raise ValueError("arm needs self-synthesized rehearsal rows, but none were generated")
            available.append(("self", ctx.self_rows, False))
        elif name == "replay":
            earlier = [g for g in range(generation) if g not in lineage]
            if earlier:
                available.append(("replay", concat_rows([ctx.data.domain_generations[g] for g in earlier]), False))
    if not available or ratio <= 0:
        return []
    return [Source(name, rows, ratio / len(available), sliced) for name, rows, sliced in available]


def train_arm(
    name: str, spec: ArmSpec, ratio: float, base_model: Any, ctx: EvalContext, cfg: Config, *,
    partial: Path, log: Log, max_steps: int | None, seed_label: str,
) -> dict[str, Any]:
    """Train arm ``name`` through every generation; return its measurements (see module docstring)."""
    model = add_lora(copy.deepcopy(base_model), cfg.training)
    orch = cfg.orchestration
    kl = KLSpec(spec.kl_to_base, spec.kl_temperature, spec.kl_on, spec.rehearsal_ce) if spec.kl_to_base > 0 else None
    generations: list[dict[str, Any]] = []
    scores: list[float] = []
    curve: list[dict[str, Any]] = []
    matrix_rows: list[list[dict[str, Any]]] = []
    offset = 0
    tag = f"{name} {seed_label}"
    for g in range(orch.num_generations):
        lineage = select_lineage(g, orch.training_window_size, orch.lineage, scores)
        domain = concat_rows([ctx.data.domain_generations[i] for i in lineage])
        sources = build_sources(spec, ratio, g, lineage, ctx)

        def on_eval(step: int, _offset: int = offset, _g: int = g) -> dict[str, float]:
            result = measure_losses(model, ctx)
            curve.append({"step": _offset + step, "generation": _g, **result})
            log(f"{tag} gen {_g} step {step}: general {result['general_loss']:.4f}, domain {result['domain_loss']:.4f}")
            return {k: v for k, v in result.items() if k != "domain_losses"}

        train_log = train_lora(
            model, ctx.pad_id, domain, None, cfg.training, 0.0,
            checkpoint_dir=partial / f"{name}-{seed_label}-gen{g}", on_eval=on_eval,
            eval_points=cfg.evaluation.eval_points, desc=f"{tag} gen {g}", max_steps=max_steps,
            sources=sources, mix_by=spec.mix_by, kl=kl,
        )
        if not train_log.evals or train_log.evals[-1]["step"] != len(train_log.steps):
            train_log.evals.append(dict(on_eval(len(train_log.steps)), step=len(train_log.steps)))
        final = dict(curve[-1])
        offset += len(train_log.steps)
        matrix_rows.append(domain_row(model, ctx, f"{tag} gen {g}"))
        scores.append(-float(final["domain_losses"][g]))
        generations.append({
            "generation": g, "lineage": lineage, "domain_rows": len(domain),
            "sources": {s.name: {"rows": len(s.rows), "share": s.share} for s in sources},
            "train": train_log.to_dict(), "general_loss": final["general_loss"], "domain_loss": final["domain_loss"],
            "domain_accuracy": [{k: c[k] for k in ("exact_match", "call_score", "n")} for c in matrix_rows[-1]],
        })
        if cfg.output.save_adapters:
            _save_adapter(model, partial / "adapters" / name / seed_label / f"gen{g}", cfg, ctx, name, spec, ratio, lineage)
        log(f"{tag} gen {g}: {len(train_log.steps)} steps, {train_log.tokens} tokens in {train_log.seconds:.1f} s; "
            f"domain exact match {[round(c['exact_match'], 3) for c in matrix_rows[-1]]}")
    behaviour = measure_behaviour(model, ctx, tag)
    if ctx.self_rows is not None:
        behaviour["self_loss"] = mean_loss(model, ctx.self_rows, ctx.pad_id)
    last = curve[-1]
    total_tokens = sum(gen["train"]["tokens"] for gen in generations)
    total_seconds = sum(gen["train"]["seconds"] for gen in generations)
    return {
        "general_loss": last["general_loss"],
        "docs_loss": last["docs_loss"],
        "domain_loss": last["domain_loss"],
        "domain_losses": last["domain_losses"],
        **behaviour,
        "domain": final_domain(matrix_rows[-1]),
        "matrix": matrix_metrics(matrix_rows, ctx.baseline),
        "share": ratio,
        "loss_share": loss_shares(generations),
        "curve": curve,
        "generations": generations,
        "train_total": {
            "tokens": total_tokens,
            "seconds": round(total_seconds, 2),
            "tokens_per_second": round(total_tokens / total_seconds, 1) if total_seconds else None,
        },
    }


def final_domain(row: list[dict[str, Any]]) -> dict[str, Any]:
    """Domain accuracy after the last generation: the mean over the distinct domains of its matrix row."""
    exact = [float(c["exact_match"]) for c in row]
    calls = [float(c["call_score"]) for c in row if c.get("call_score") is not None]
    return {
        "exact_match": float(np.mean(exact)),
        "call_score": float(np.mean(calls)) if calls else None,
        "n": int(sum(int(c["n"]) for c in row)),
    }


def loss_shares(generations: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Measured share of each source in the rows and in the labelled tokens (= the loss), over all steps.

    Example:
        >>> steps = [{"source_rows": {"domain": 9, "self": 1}, "label_tokens": {"domain": 90, "self": 30}}]
        >>> loss_shares([{"train": {"steps": steps}}])
        {'rows': {'domain': 0.9, 'self': 0.1}, 'label_tokens': {'domain': 0.75, 'self': 0.25}}
    """
    rows: dict[str, int] = {}
    tokens: dict[str, int] = {}
    for gen in generations:
        for s in gen["train"]["steps"]:
            for k, v in s.get("source_rows", {}).items():
                rows[k] = rows.get(k, 0) + int(v)
            for k, v in s.get("label_tokens", {}).items():
                tokens[k] = tokens.get(k, 0) + int(v)
    n_rows, n_tok = sum(rows.values()), sum(tokens.values())
    return {
        "rows": {k: round(v / n_rows, 4) for k, v in rows.items()} if n_rows else {},
        "label_tokens": {k: round(v / n_tok, 4) for k, v in tokens.items()} if n_tok else {},
    }


def _save_adapter(model: Any, where: Path, cfg: Config, ctx: EvalContext, arm: str, spec: ArmSpec, ratio: float, lineage: list[int]) -> None:
    model.save_pretrained(where)
    (where / "replaybank.json").write_text(
        json.dumps(
            {"arm": arm, "spec": spec.__dict__, "rehearsal_share": ratio, "lineage": lineage,
             "config": cfg.to_dict(), "data": ctx.data.manifest},
            indent=2, sort_keys=True,
        )
    )
