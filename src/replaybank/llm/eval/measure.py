"""Measuring one model state: losses, the general-capability suite, generated domain accuracy.

Every measurement of an arm goes through :func:`measure_losses` (cheap, teacher-forced; also used
at the evaluation points during training), :func:`domain_row` (a row of the accuracy matrix:
generated exact match on every domain's held-out requests) and :func:`measure_behaviour` (the
suite and the probe, after the last generation). :func:`flatten` turns one arm's nested result into
the flat scalars that seeds are aggregated over.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from replaybank.llm.data.prepare import Prepared
from replaybank.llm.data.rows import TokenRows
from replaybank.llm.eval.generate import Precision
from replaybank.llm.eval.losses import mean_loss
from replaybank.llm.eval.probe import probe_score
from replaybank.llm.eval.suite import AGREEMENT_FAMILY, FAMILIES
from replaybank.metrics import average_accuracy, backward_transfer, forgetting


@dataclass
class EvalContext:
    """What every measurement of a seed needs: tokenizer, data, suite, general text, settings."""

    tokenizer: Any
    pad_id: int
    data: Prepared
    suite: Any
    general_text: TokenRows
    max_new_tokens: int
    batch_size: int
    self_rows: TokenRows | None = None
    """Self-synthesized rehearsal rows of this seed (None when no arm uses them)."""
    self_records: list[dict[str, Any]] | None = None
    """The same rows as ``{prompt, response, open}`` (the ``selfgen`` source answers their prompts)."""
    baseline: list[dict[str, Any]] | None = None
    """The base model's domain accuracy row (forward-transfer baseline of the matrix)."""
    precision: Precision = "fp32"
    """Evaluation arithmetic (``[evaluation] generation_precision``): generated answers and
    teacher-forced losses."""


def measure_losses(model: Any, ctx: EvalContext) -> dict[str, float]:
    """Teacher-forced losses (nats per labelled token).

    Returns:
        ``general_loss`` (held-out general text from a source other than the rehearsal pool),
        ``docs_loss`` (held-out documents of the rehearsal corpus, wrapped like rehearsal rows),
        ``domain_loss`` (mean over the distinct domains' held-out rows) and ``domain_losses``
        (one per generation).
    """
    per_gen: list[float] = []
    seen: dict[int, float] = {}
    for rows in ctx.data.domain_evals:
        if id(rows) not in seen:
            seen[id(rows)] = mean_loss(model, rows, ctx.pad_id, precision=ctx.precision)
        per_gen.append(seen[id(rows)])
    return {
        "general_loss": mean_loss(model, ctx.general_text, ctx.pad_id, precision=ctx.precision),
        "docs_loss": mean_loss(model, ctx.data.general_eval, ctx.pad_id, precision=ctx.precision),
        "domain_loss": float(np.mean(list(seen.values()))),
        "domain_losses": per_gen,  # type: ignore[dict-item]
    }


def domain_row(model: Any, ctx: EvalContext, desc: str) -> list[dict[str, Any]]:
    """Generated accuracy on every generation's held-out domain requests (one matrix row)."""
    from replaybank.llm.eval.domain import generated_accuracy

    out: list[dict[str, Any]] = []
    cache: dict[int, dict[str, Any]] = {}
    for g, records in enumerate(ctx.data.domain_eval_records):
        if id(records) not in cache:
            res = generated_accuracy(
                model, ctx.tokenizer, records, max_new_tokens=ctx.max_new_tokens,
                batch_size=ctx.batch_size, desc=f"{desc}: domain {g}", precision=ctx.precision,
            )
            cache[id(records)] = {k: res.get(k) for k in ("exact_match", "call_score", "n", "truncated", "items")}
        out.append(cache[id(records)])
    return out


def measure_behaviour(model: Any, ctx: EvalContext, desc: str) -> dict[str, Any]:
    """The suite (generated answers) and the teacher-forced probe."""
    from replaybank.llm.eval.suite import evaluate_suite

    suite = evaluate_suite(model, ctx.tokenizer, ctx.suite, batch_size=ctx.batch_size, desc=f"{desc}: suite",
                           precision=ctx.precision)
    probe = probe_score(model, ctx.tokenizer, ctx.data.probe, ctx.pad_id)
    return {"suite": suite, "probe_score": probe["exact_match"], "probe_logprob": probe["answer_logprob"]}


def measure_base(model: Any, ctx: EvalContext, label: str) -> dict[str, Any]:
    """The base arm: losses, probe, one accuracy-matrix row; its suite answers are the reference (1.0)."""
    losses = measure_losses(model, ctx)
    probe = probe_score(model, ctx.tokenizer, ctx.data.probe, ctx.pad_id)
    row = domain_row(model, ctx, f"base {label}")
    out = {
        **losses,
        "probe_score": probe["exact_match"],
        "probe_logprob": probe["answer_logprob"],
        # The base answers were generated (or read from the cache) once; the base keeps all it has.
        "suite": {**ctx.suite.base, "retention": {f: 1.0 if v > 0 else None for f, v in ctx.suite.base["families"].items()}},
        "domain": {k: row[-1][k] for k in ("exact_match", "call_score", "n")},
        "matrix_row": row,
        "matrix": {"R": [[float(c["exact_match"]) for c in row]]},  # the forward-transfer baseline row
    }
    if ctx.self_rows is not None:
        out["self_loss"] = mean_loss(model, ctx.self_rows, ctx.pad_id, precision=ctx.precision)
    return out


def matrix_metrics(rows: list[list[dict[str, Any]]], baseline: list[dict[str, Any]] | None) -> dict[str, Any]:
    """Accuracy matrix ``R[i][j]`` (exact match on domain ``j`` after generation ``i``) and its summaries.

    Uses :mod:`replaybank.metrics`; backward transfer and forgetting need at least two generations.

    Example:
        >>> row = lambda *xs: [{"exact_match": x} for x in xs]
        >>> m = matrix_metrics([row(0.8, 0.0), row(0.5, 0.9)], None)
        >>> m["R"], round(m["backward_transfer"], 3), round(m["average_accuracy"], 3)
        ([[0.8, 0.0], [0.5, 0.9]], -0.3, 0.7)
    """
    R = [[float(c["exact_match"]) for c in r] for r in rows]
    out: dict[str, Any] = {"R": R, "average_accuracy": average_accuracy(R)}
    if len(R) >= 2:
        out["backward_transfer"] = backward_transfer(R)
        out["forgetting"] = forgetting(R)
    if baseline is not None:
        out["baseline"] = [float(c["exact_match"]) for c in baseline]
    return out


SUITE_FAMILIES = FAMILIES
"""Every suite family, ``open`` (agreement with the base's wording) included: all are reported."""


def flatten(result: dict[str, Any]) -> dict[str, float]:
    """The flat scalars of one arm in one seed (what the seeds table aggregates).

    Example:
        >>> flatten({"general_loss": 2.0, "suite": {"families": {"code": 0.5}, "leakage": 0.25,
        ...          "retention": {"code": 0.5}}, "domain": {"exact_match": 0.75}})
        {'general_loss': 2.0, 'leakage': 0.25, 'code': 0.5, 'retention_code': 0.5, 'domain_exact_match': 0.75}
    """
    out: dict[str, float] = {}
    for key in ("general_loss", "docs_loss", "domain_loss", "self_loss", "probe_score", "probe_logprob"):
        if isinstance(result.get(key), (int, float)):
            out[key] = float(result[key])
    suite = result.get("suite")
    if suite:
        out["leakage"] = float(suite["leakage"])
        for fam in SUITE_FAMILIES:
            if fam in suite["families"]:
                out[fam] = float(suite["families"][fam])
            if suite["retention"].get(fam) is not None:
                out[f"retention_{fam}"] = float(suite["retention"][fam])
    domain = result.get("domain")
    if domain:
        out["domain_exact_match"] = float(domain["exact_match"])
        if domain.get("call_score") is not None:
            out["domain_call_score"] = float(domain["call_score"])
    matrix = result.get("matrix")
    if matrix:
        for key in ("average_accuracy", "backward_transfer", "forgetting"):
            if key in matrix:
                out[key] = float(matrix[key])
    return out


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


def suite_retention(per_family: dict[str, float | None]) -> float | None:
    """Retention over the suite: the mean over the checker-scored families of the family's score
    over the base model's (families the base model scores 0 on, None, are left out, and so is
    ``open``: agreement with the base's wording is reported on its own, not averaged in). A suite
    of ``open`` items only has that family's retention (a user's suite may have no checker).

    Example:
        >>> suite_retention({"conversation": 0.8, "arithmetic": 1.0, "code": None, "open": 0.2})
        0.9
        >>> suite_retention({"open": 0.5})
        0.5
    """
    known = {f: v for f, v in per_family.items() if v is not None}
    kept = [v for f, v in known.items() if f != AGREEMENT_FAMILY] or list(known.values())
    return sum(kept) / len(kept) if kept else None
