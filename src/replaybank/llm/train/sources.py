"""The rehearsal sources of one generation of an arm, mixed into its domain batches.

An arm (a rehearsal recipe, :class:`replaybank.llm.config.Recipe`) names its sources: ``corpus`` (the rehearsal pool,
sliced per virtual epoch), ``self`` (the base model's own answers, synthesized per seed) and
``replay`` (the stored training rows of earlier generations not in the lineage; absent in the first
generation, where its share goes to the arm's other sources or, alone, leaves the generation naive).
``selfgen`` (the arm's own greedy answers to the self rows' prompts, rewritten every
``refresh_every`` steps by the LoRA loop, :mod:`.selfgen`) joins them.
The arm's share is split evenly over the sources that have rows. The control arm (a recipe with
``domain = false``) trains its sources' rows alone, in place of the domain's (:func:`rehearsal_alone`).
"""

from __future__ import annotations

import warnings
from dataclasses import replace
from typing import Any

import numpy as np

from replaybank.controllers import Controller
from replaybank.llm.config import Recipe, Training
from replaybank.llm.data.rows import TokenRows, token_rows
from replaybank.llm.eval.measure import EvalContext
from replaybank.llm.results import CurvePoint, Losses
from replaybank.llm.train.log import TrainLog
from replaybank.llm.train.lora import Source, epoch_slice
from replaybank.llm.train.selfgen import SelfGenRows
from replaybank.llm.train.steer import Steering


def concat_rows(parts: list[TokenRows]) -> TokenRows:
    """One :class:`TokenRows` holding every row of ``parts`` in order."""
    if len(parts) == 1:
        return parts[0]
    return token_rows([r for p in parts for r in p.rows(np.arange(len(p)))])


def build_sources(
    spec: Recipe, share: float, generation: int, lineage: list[int], ctx: EvalContext, model: Any = None,
    max_seq_length: int = 512, seed: int = 0,
) -> list[Source]:
    """The rehearsal sources of one generation, ``share`` (the arm's, :class:`~replaybank.llm.config.ArmPlan`)
    split evenly over those that have rows.

    ``onpolicy`` asks ``model`` (the arm's, as it is now) the stored prompts of the earlier
    generations out of the lineage and keeps the answers the domain checker accepts
    (:mod:`..data.onpolicy`); none accepted (or no earlier generation) leaves it without rows.
    A recipe with ``sampling = "forgetting"`` draws each source's rows by the forgetting of
    ``model`` (:mod:`.targeted`, seeded by ``seed``).

    ``selfgen`` starts from the self rows (the base model's answers) and is rewritten by the
    model being trained before its first step and every ``spec.refresh_every`` steps after.

    Raises:
        ValueError: when the arm asks for ``self`` or ``selfgen`` rows and none were synthesized.
    """
    available: list[Source] = []  # each with share 0 until the number of sources with rows is known
    for name in spec.source:
        if name == "corpus":
            available.append(Source("corpus", ctx.data.rehearsal_pool, 0.0, sliced=True))
        elif name == "self":
            if ctx.self_rows is None or len(ctx.self_rows) == 0:
                raise ValueError("arm needs self-synthesized rehearsal rows, but none were generated")
            available.append(Source("self", ctx.self_rows, 0.0))
        elif name == "replay":
            earlier = [g for g in range(generation) if g not in lineage]
            if earlier:
                available.append(Source("replay", concat_rows([ctx.data.domain_generations[g] for g in earlier]), 0.0))
        elif name == "selfgen":
            if not ctx.self_records:
                raise ValueError("arm needs selfgen rows (the prompts of the self rows), but no self rows were generated")
            own = _selfgen(spec, ctx, max_seq_length)
            available.append(Source("selfgen", own.rows, 0.0, refresh=own))
        elif name == "onpolicy":
            rows = _onpolicy(model, ctx, [g for g in range(generation) if g not in lineage], max_seq_length)
            if rows is not None:
                available.append(Source("onpolicy", rows, 0.0))
    if not available or share <= 0:
        return []
    sources = [replace(s, share=share / len(available)) for s in available]
    if spec.sampling == "forgetting":
        from replaybank.llm.train.targeted import target_sources

        sources = target_sources(sources, model, ctx.pad_id, refresh_every=spec.refresh_every, cap=spec.priority_cap,
                                 outlier_mads=spec.outlier_mads, candidates=spec.candidates, seed=seed)
    return sources


def empty_sources(spec: Recipe, sources: list[Source], share: float) -> list[str]:
    """The sources ``spec`` names that :func:`build_sources` gave no row (none when the arm's share is 0:
    it asked for no row): a generation whose sources are all here trains as the naive arm would.

    Example:
        >>> src = Source("self", token_rows([(np.array([1, 2]), np.array([-100, 2]))]), 0.1)
        >>> empty_sources(Recipe(source=["self", "onpolicy"]), [src], 0.1)
        ['onpolicy']
    """
    if share <= 0:
        return []
    have = {s.name for s in sources}
    return [name for name in spec.source if name not in have]


def rehearsal_alone(sources: list[Source], rows: int, seed: int) -> tuple[TokenRows, str]:
    """The control arm's training rows: ``rows`` rows (the domain's count, so the arm takes the same
    steps) of its sources alone, split evenly over them (largest share to the first), each source's
    rows in a seeded order, cycled when it has fewer; and the name they train under.

    Raises:
        ValueError: without sources, or ``rows < 1``.

    Example:
        >>> src = Source("self", token_rows([(np.array([1, k]), np.array([-100, k])) for k in range(3)]), 1.0)
        >>> drawn, name = rehearsal_alone([src], 5, seed=0)
        >>> name, len(drawn), sorted(int(ids[1]) for ids, _ in drawn.rows(np.arange(5)))
        ('self', 5, [0, 1, 1, 2, 2])
    """
    if not sources or rows < 1:
        raise ValueError(f"the control arm needs rehearsal sources with rows and rows >= 1 (got {len(sources)} sources, rows = {rows})")
    rng = np.random.default_rng(seed)
    counts = [rows // len(sources) + (i < rows % len(sources)) for i in range(len(sources))]
    picked = []
    for src, n in zip(sources, counts, strict=True):
        order = np.concatenate([rng.permutation(len(src.rows)) for _ in range(-(-n // len(src.rows)))])[:n]
        picked += src.rows.rows(order)
    return token_rows(picked), "+".join(s.name for s in sources)


def _selfgen(spec: Recipe, ctx: EvalContext, max_seq_length: int) -> SelfGenRows:
    from replaybank.llm.data.selfsynth import ANSWER_TOKENS

    records = [(r["prompt"], r["response"], bool(r.get("open"))) for r in ctx.self_records or []]
    return SelfGenRows(ctx.tokenizer, records, every=spec.refresh_every, max_new_tokens=ANSWER_TOKENS,
                       batch_size=ctx.batch_size, max_seq_length=max_seq_length, precision=ctx.precision,
                       exclude=[item.prompt for item in ctx.suite.items])


def refresh_cost(log: TrainLog) -> str:
    """One line on the rows a run rewrote: rewrites, time generating against the run's training
    time (which leaves generation out), per rewrite.

    Example:
        >>> log = TrainLog(steps=[{}] * 4, seconds=8.0, refreshes=[{"source": "selfgen", "step": 0, "seconds": 1.5, "train_seconds": 0.0},
        ...                                           {"source": "selfgen", "step": 2, "seconds": 2.5, "train_seconds": 3.0}])
        >>> refresh_cost(log)
        'selfgen rewritten 2 times: 4.0 s generating vs 8.0 s training (1.00 s of generation per step); per rewrite [1.5, 2.5] s'
    """
    parts = []
    for name in dict.fromkeys(r["source"] for r in log.refreshes):
        mine = [r for r in log.refreshes if r["source"] == name]
        gen = sum(r["seconds"] for r in mine)
        parts.append(f"{name} rewritten {len(mine)} times: {gen:.1f} s generating vs {log.seconds:.1f} s training "
                     f"({gen / max(len(log.steps), 1):.2f} s of generation per step); per rewrite {[r['seconds'] for r in mine]} s")
    return "; ".join(parts)


def _onpolicy(model: Any, ctx: EvalContext, earlier: list[int], max_seq_length: int) -> TokenRows | None:
    from replaybank.llm.data.onpolicy import onpolicy_records
    from replaybank.llm.data.prepare import encode_domain
    from replaybank.llm.eval.decode import generate_detailed

    if not earlier or model is None:
        return None

    def generate(prompts: list[str]) -> list[str]:
        return [g.text for g in generate_detailed(model, ctx.tokenizer, prompts, max_new_tokens=ctx.max_new_tokens,
                                                  batch_size=ctx.batch_size, desc="onpolicy answers", precision=ctx.precision)]

    records, _ = onpolicy_records(generate, [ctx.data.domain_train_records[g] for g in earlier])
    return encode_domain(ctx.tokenizer, records, max_seq_length) if records else None


def held_out_losses(result: Losses, names: list[str], generation: int, lineage: list[int]) -> list[float]:
    """The held-out loss each source guards, from one measurement's losses:
    ``[current domain, *names]`` for a replay controller (NaN where there is none).

    The current domain is generation ``generation``'s held-out rows; ``corpus`` guards the
    rehearsal corpus's held-out documents (``docs_loss``), ``self`` the general text
    (``general_loss``: the base model's own answers stand for its general behaviour), ``replay``
    and ``onpolicy`` the earlier domains out of the lineage (the mean of their held-out losses).

    Example:
        >>> r = Losses(general_loss=3.0, docs_loss=2.0, domain_loss=10 / 3, domain_losses=[1.0, 4.0, 5.0])
        >>> held_out_losses(r, ["corpus", "self", "replay"], 2, [1, 2])
        [5.0, 2.0, 3.0, 1.0]
    """
    per_gen = result.domain_losses
    earlier = [per_gen[i] for i in range(generation) if i not in lineage]
    guards = {"corpus": result.docs_loss, "self": result.general_loss,
              "replay": float(np.mean(earlier)) if earlier else float("nan")}
    guards["onpolicy"] = guards["replay"]
    guards["selfgen"] = guards["self"]  # the adapter's own answers to the same general prompts
    return [float(per_gen[generation]), *(float(guards.get(n, float("nan"))) for n in names)]


def arm_steering(
    controller: Controller | None, spec: Recipe, sources: list[Source], model: Any, ctx: EvalContext,
    curve: list[CurvePoint], offset: int, generation: int, lineage: list[int],
) -> Steering | None:
    """The steering of one generation of an arm by its controller (None without one or without
    sources): it reads the held-out losses of the evaluation just appended to ``curve`` (steps
    counted from ``offset``), and measures them itself before the first step."""
    from replaybank.llm.eval.measure import measure_losses

    if controller is None or not sources:
        return None

    def measure(step: int) -> list[float]:
        last = curve[-1] if curve else None
        if last is None or last.generation != generation or last.step != offset + step:  # step 0: where this generation starts
            return held_out_losses(Losses.from_json(measure_losses(model, ctx), "measure_losses"), spec.source,
                                   generation, lineage)
        return held_out_losses(last.losses, spec.source, generation, lineage)

    return Steering(controller, [s.name for s in sources], measure, k=spec.trend_window)


def rows_per_epoch(steps: list[dict[str, Any]], source: str) -> float:
    """Mean rows of ``source`` drawn per virtual epoch over a training log's steps (0 without steps).

    Example:
        >>> rows_per_epoch([{"epoch": 0, "source_rows": {"corpus": 3}}, {"epoch": 1, "source_rows": {"corpus": 5}}], "corpus")
        4.0
    """
    epochs = {s["epoch"] for s in steps}
    drawn = sum(s["source_rows"].get(source, 0) for s in steps)
    return round(drawn / len(epochs), 2) if epochs else 0.0


def sampled_rows(pool_size: int, training: Training) -> np.ndarray:
    """The corpus rows a seed's LoRA loops draw: every virtual epoch's seeded slice
    (:func:`..train.lora.epoch_slice`), sorted, each once. Every arm and generation of the seed
    draws these same slices, so these are the rows to check before training.

    Example:
        >>> from replaybank.llm.config import Config
        >>> t = Config.from_dict({"training": {"rehearsal_rows_per_epoch": 3, "num_train_epochs": 2}}).training
        >>> sampled_rows(10, t).tolist()
        [3, 4, 5, 6, 7, 9]
    """
    with warnings.catch_warnings():  # a pool smaller than a slice: the LoRA loop warns when it draws
        warnings.simplefilter("ignore")
        slices = [epoch_slice(pool_size, training.rehearsal_rows_per_epoch, training.seed, e) for e in range(training.num_train_epochs)]
    return np.unique(np.concatenate(slices))
