"""Measuring one model state: losses, the general-capability suite, generated domain accuracy.

Every measurement of an arm goes through :func:`measure_losses` (cheap, teacher-forced; at the
evaluation points during training :func:`measure_point` adds the KL to the base model on the
domain being trained, :mod:`.drift`), :func:`domain_row` (a row of the accuracy matrix:
generated exact match on every domain's held-out requests) and :func:`measure_behaviour` (the
suite and the probe, after the last generation). :func:`flatten` turns one arm's nested result into
the flat scalars that seeds are aggregated over.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from replaybank.llm.data.prepare import Prepared
from replaybank.llm.data.rows import TokenRows
from replaybank.llm.eval.decode import Precision
from replaybank.llm.eval.losses import mean_loss
from replaybank.llm.eval.skill_probe import probe_score
from replaybank.llm.eval.suite import AGREEMENT_FAMILY, FAMILIES
from replaybank.llm.results import (
    ArmResult,
    DomainCell,
    DomainScore,
    Generation,
    Losses,
    LossShare,
    MatrixResult,
    SuiteScore,
    TrainStep,
)
from replaybank.llm.train.kl import BaseCache
from replaybank.metrics import average_accuracy, backward_transfer, forgetting


@dataclass
class ValidationSet:
    """Where an operating point is chosen (``[evaluation] choose = "floor"``): the validation suite
    with the base model's answers, and validation domain requests per distinct domain
    (:mod:`replaybank.llm.data.validation`), never the test ones."""

    suite: Any
    requests: list[list[dict[str, Any]]]
    manifest: dict[str, Any]


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
    baseline: list[DomainCell] | None = None
    """The base model's domain accuracy row (forward-transfer baseline of the matrix)."""
    precision: Precision = "fp32"
    """Evaluation arithmetic (``[evaluation] generation_precision``): generated answers and
    teacher-forced losses."""
    validation: ValidationSet | None = None
    """The validation data an operating point is chosen on (``choose = "floor"`` only)."""
    base_states: BaseCache = field(default_factory=BaseCache)
    """The base model's hidden states on the held-out domain rows, kept for the early warning's KL
    across the seed's evaluation points and arms (the base never changes within a seed)."""


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


def measure_point(model: Any, ctx: EvalContext, generation: int) -> dict[str, float]:
    """One evaluation point of a trained arm: :func:`measure_losses` and ``domain_kl``, KL(base ||
    adapter) in nats per token on the held-out rows of generation ``generation``'s domain
    (:func:`.drift.domain_kl`; ``model`` is a PEFT model, its adapter disabled for the base)."""
    from replaybank.llm.eval.drift import domain_kl

    kl = domain_kl(model, ctx.data.domain_evals[generation], ctx.pad_id, precision=ctx.precision, base=ctx.base_states)
    return {**measure_losses(model, ctx), "domain_kl": kl}


def domain_row(model: Any, ctx: EvalContext, desc: str) -> list[DomainCell]:
    """Generated accuracy on every generation's held-out domain requests (one matrix row)."""
    from replaybank.llm.eval.domain import generated_accuracy

    out: list[DomainCell] = []
    cache: dict[int, DomainCell] = {}
    for g, records in enumerate(ctx.data.domain_eval_records):
        if id(records) not in cache:
            res = generated_accuracy(
                model, ctx.tokenizer, records, max_new_tokens=ctx.max_new_tokens,
                batch_size=ctx.batch_size, desc=f"{desc}: domain {g}", precision=ctx.precision,
            )
            cache[id(records)] = DomainCell(
                exact_match=res["exact_match"], call_score=res.get("call_score"), n=res["n"],
                truncated=res.get("truncated"), items=res.get("items"),
            )
        out.append(cache[id(records)])
    return out


def measure_behaviour(model: Any, ctx: EvalContext, desc: str) -> tuple[SuiteScore, float, float]:
    """The suite (generated answers) and the teacher-forced probe: ``(suite, probe score, probe log-prob)``."""
    from replaybank.llm.eval.suite import evaluate_suite

    suite = evaluate_suite(model, ctx.tokenizer, ctx.suite, batch_size=ctx.batch_size, desc=f"{desc}: suite",
                           precision=ctx.precision)
    probe = probe_score(model, ctx.tokenizer, ctx.data.probe, ctx.pad_id)
    return SuiteScore.from_json(suite, "evaluate_suite"), probe["exact_match"], probe["answer_logprob"]


def measure_base(model: Any, ctx: EvalContext, label: str) -> ArmResult:
    """The base arm: losses, probe, one accuracy-matrix row; its suite answers are the reference (1.0)."""
    losses = measure_losses(model, ctx)
    probe = probe_score(model, ctx.tokenizer, ctx.data.probe, ctx.pad_id)
    row = domain_row(model, ctx, f"base {label}")
    # The base answers were generated (or read from the cache) once; the base keeps all it has.
    retention = {f: 1.0 if v > 0 else None for f, v in ctx.suite.base["families"].items()}
    return ArmResult(
        losses=Losses.from_json(losses, "measure_losses"),
        probe_score=probe["exact_match"],
        probe_logprob=probe["answer_logprob"],
        suite=SuiteScore.from_json({**ctx.suite.base, "retention": retention}, "the suite's base answers"),
        domain=DomainScore(row[-1].exact_match, row[-1].call_score, row[-1].n),
        matrix_row=row,
        matrix=MatrixResult(R=[[float(c.exact_match) for c in row]]),  # the forward-transfer baseline row
        self_loss=mean_loss(model, ctx.self_rows, ctx.pad_id, precision=ctx.precision) if ctx.self_rows is not None else None,
    )


def matrix_metrics(rows: list[list[DomainCell]], baseline: list[DomainCell] | None) -> MatrixResult:
    """Accuracy matrix ``R[i][j]`` (exact match on domain ``j`` after generation ``i``) and its summaries.

    Uses :mod:`replaybank.metrics`; backward transfer and forgetting need at least two generations.

    Example:
        >>> row = lambda *xs: [DomainCell(x, None, 1, 0, None) for x in xs]
        >>> m = matrix_metrics([row(0.8, 0.0), row(0.5, 0.9)], None)
        >>> m.R, round(m.backward_transfer, 3), round(m.average_accuracy, 3)
        ([[0.8, 0.0], [0.5, 0.9]], -0.3, 0.7)
    """
    R = [[float(c.exact_match) for c in r] for r in rows]
    several = len(R) >= 2
    return MatrixResult(
        R=R, average_accuracy=average_accuracy(R),
        backward_transfer=backward_transfer(R) if several else None,
        forgetting=forgetting(R) if several else None,
        baseline=[float(c.exact_match) for c in baseline] if baseline is not None else None,
    )


SUITE_FAMILIES = FAMILIES
"""Every suite family, ``open`` (agreement with the base's wording) included: all are reported."""


def flatten(result: ArmResult) -> dict[str, float]:
    """The flat scalars of one arm in one seed (what the seeds table aggregates).

    Example:
        >>> arm = ArmResult(Losses(2.0, 1.0, 3.0, [3.0]), 0.5, -1.0,
        ...                 SuiteScore({"code": 0.5}, 0.25, {"code": 0.5}, {"code": 2}, []),
        ...                 DomainScore(0.75, None, 4), MatrixResult([[0.75]]))
        >>> flatten(arm)
        {'general_loss': 2.0, 'docs_loss': 1.0, 'domain_loss': 3.0, 'probe_score': 0.5, 'probe_logprob': -1.0, 'leakage': 0.25, 'code': 0.5, 'retention_code': 0.5, 'domain_exact_match': 0.75}
    """
    losses = result.losses
    out: dict[str, float] = {"general_loss": float(losses.general_loss), "docs_loss": float(losses.docs_loss),
                             "domain_loss": float(losses.domain_loss)}
    if result.self_loss is not None:
        out["self_loss"] = float(result.self_loss)
    out["probe_score"] = float(result.probe_score)
    out["probe_logprob"] = float(result.probe_logprob)
    suite = result.suite
    out["leakage"] = float(suite.leakage)
    for fam in SUITE_FAMILIES:
        if fam in suite.families:
            out[fam] = float(suite.families[fam])
        if suite.retention.get(fam) is not None:
            out[f"retention_{fam}"] = float(suite.retention[fam])  # type: ignore[arg-type]
    out["domain_exact_match"] = float(result.domain.exact_match)
    if result.domain.call_score is not None:
        out["domain_call_score"] = float(result.domain.call_score)
    for key, value in (("average_accuracy", result.matrix.average_accuracy),
                       ("backward_transfer", result.matrix.backward_transfer), ("forgetting", result.matrix.forgetting)):
        if value is not None:
            out[key] = float(value)
    return out


def final_domain(row: list[DomainCell]) -> DomainScore:
    """Domain accuracy after the last generation: the mean over the distinct domains of its matrix row."""
    exact = [float(c.exact_match) for c in row]
    calls = [float(c.call_score) for c in row if c.call_score is not None]
    return DomainScore(
        exact_match=float(np.mean(exact)),
        call_score=float(np.mean(calls)) if calls else None,
        n=int(sum(int(c.n) for c in row)),
    )


def loss_shares(generations: list[Generation]) -> LossShare:
    """Measured share of each source in the rows and in the labelled tokens (= the loss), over all steps.

    Example:
        >>> from replaybank.llm.results import TrainLogRecord, TrainStep
        >>> step = TrainStep(1, 0, 2.0, 2.0, 1.5, 10, 1, 120, 30, {"domain": 9, "self": 1}, {"domain": 90, "self": 30}, None)
        >>> log = TrainLogRecord([step], [], 120, 1.0, 120.0, 0)
        >>> loss_shares([Generation(0, [0], 9, 0.1, {}, log, 1.0, 1.0, [])]).to_json()
        {'rows': {'domain': 0.9, 'self': 0.1}, 'label_tokens': {'domain': 0.75, 'self': 0.25}}
    """
    rows: dict[str, int] = {}
    tokens: dict[str, int] = {}
    for gen in generations:
        for s in gen.train.steps:
            for k, v in s.source_rows.items():
                rows[k] = rows.get(k, 0) + int(v)
            for k, v in (s.label_tokens if isinstance(s, TrainStep) else {}).items():
                tokens[k] = tokens.get(k, 0) + int(v)
    n_rows, n_tok = sum(rows.values()), sum(tokens.values())
    return LossShare(
        rows={k: round(v / n_rows, 4) for k, v in rows.items()} if n_rows else {},
        label_tokens={k: round(v / n_tok, 4) for k, v in tokens.items()} if n_tok else {},
    )


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
