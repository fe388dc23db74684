"""``mix``: domain rows and rehearsal rows as one HF ``datasets.IterableDataset`` with exact quotas.

How it is built: a generator yields only ``(source, row index)`` pairs in the order of
:class:`~replaybank.hf.plan.MixPlan`; a batched ``.map`` then reads the rows, one global batch
per call (one Arrow ``take`` per source for a HF dataset). Keeping the generator index-only is
what makes resuming cheap (see :func:`mix`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Literal

import numpy as np

from replaybank.hf.plan import DOMAIN, REHEARSAL, MixPlan, resolve_world
from replaybank.hf.schedule import QuotaSchedule
from replaybank.hf.sources import Source, check_columns, rehearsal_source, tokens_per_row
from replaybank.hf.spec import MixSpec

ROW_COLUMN = "_replaybank_row"


def _index_stream(
    n_domain: int,
    n_rehearsal: int,
    ratio: float,
    batch_size: int,
    seed: int,
    world_size: int,
    rows_per_epoch: int | None,
    epochs: int | None,
    rank: int,
    source_column: str,
    steer: str | None = None,
) -> Iterator[dict[str, int]]:
    # Module-level and fed only scalars: datasets hashes the generator and its kwargs.
    plan = MixPlan(
        n_domain,
        n_rehearsal,
        ratio,
        batch_size=batch_size,
        seed=seed,
        world_size=world_size,
        rows_per_epoch=rows_per_epoch,
        epochs=epochs,
    )
    for batch in QuotaSchedule.find(steer).steer(plan) if steer else plan:
        if rank < 0:
            source, index = batch.source, batch.index
        else:
            source, index = batch.part(rank, batch_size)
        for s, i in zip(source.tolist(), index.tolist(), strict=True):
            yield {source_column: s, ROW_COLUMN: i}


class _Fetch:
    """The batched map that turns ``(source, row index)`` pairs into the sources' rows."""

    def __init__(
        self, domain: Source, rehearsal: Source | None, columns: list[str], source_column: str
    ) -> None:
        self.sources = (domain, rehearsal)
        self.columns = columns
        self.source_column = source_column

    def __call__(self, batch: dict[str, list[Any]]) -> dict[str, list[Any]]:
        source = np.asarray(batch[self.source_column], dtype=np.int64)
        index = np.asarray(batch[ROW_COLUMN], dtype=np.int64)
        out: dict[str, list[Any]] = {c: [None] * source.size for c in self.columns}
        for s in (DOMAIN, REHEARSAL):
            src = self.sources[s]
            where = np.flatnonzero(source == s)
            if where.size == 0 or src is None:
                continue
            got = src.take(index[where], self.columns)
            for c in self.columns:
                col = out[c]
                for p, v in zip(where.tolist(), got[c], strict=True):
                    col[p] = v
        return out


def mix(
    domain: Any,
    rehearsal: Any,
    spec: MixSpec,
    *,
    rank: int | Literal["auto"] | None = None,
    columns: Sequence[str] | None = None,
    source_column: str = "source",
    steer: QuotaSchedule | None = None,
) -> Any:
    """Domain and rehearsal rows as a ``datasets.IterableDataset`` with an exact quota per batch.

    Every ``batch_size * world_size`` consecutive rows (one global batch: the rows all ranks take
    one step on) hold ``round(ratio * global batch)`` rehearsal rows by replaybank's one mixing
    rule (:func:`replaybank.mixing.next_quota`: largest remainder, fractional credit carried from
    batch to batch and from epoch to epoch, so over any number of batches and epochs the rehearsal
    rows are ``ratio`` of the rows within one row). Each epoch is a fresh seeded permutation of
    the domain rows; rehearsal rows are cycled (``rows_per_epoch=None``: the whole pool, a fresh
    seeded permutation per pass) or drawn from each epoch's seeded slice of ``rows_per_epoch``
    pool rows (the virtual epochs of the rehearsal-corpus method, docs/llm.md; the same slice as
    the main job). Each row carries
    ``source_column``: 0 for domain, 1 for rehearsal (for a loss that weights or regularises
    rehearsal rows). An epoch's last domain rows that cannot fill one more global batch are left
    out of that epoch, so batch boundaries never shift (another permutation next epoch).

    **Ranks.** With ``rank=None`` (the default) the stream holds every rank's rows, global batch
    after global batch, rank-major: rows ``[r*batch_size, (r+1)*batch_size)`` of each global
    batch are rank r's. That is the layout ``Trainer`` / ``accelerate`` expect of an iterable
    dataset: with ``dispatch_batches`` (their default for iterable datasets) rank 0 reads
    ``world_size`` batches and sends rank r the r-th; without it ``IterableDatasetShard`` gives each
    rank the same block. So each rank trains on its part of a global batch that holds the exact
    quota (the rehearsal rows are also spread evenly over the ranks), no row twice, none dropped.
    ``rank=k`` / ``"auto"`` yields only that rank's part (for your own loop; see also
    :mod:`replaybank.hf.torch`). The spec's ``world_size="auto"`` reads torch.distributed when
    initialised, else ``WORLD_SIZE``; under ``accelerate`` with ``split_batches=True`` give the spec
    ``global_batch_size`` (the per-device batch there is the global one).

    **Resuming.** The order is a pure function of the arguments, so:
    ``Trainer`` never calls ``state_dict`` on a train dataset; on ``resume_from_checkpoint`` it
    re-iterates and skips ``global_step * gradient_accumulation_steps`` batches
    (``accelerate.skip_first_batches``), which reproduces the uninterrupted order exactly. The
    stream is endless by default (``epochs=None``) so that, with the ``max_steps`` an iterable
    dataset needs, the whole run is ``Trainer``'s epoch 0 and that skip count is right.
    ``ds.state_dict()`` / ``ds.load_state_dict()`` (datasets' own, also used by torchdata's
    ``StatefulDataLoader``) record how many examples were yielded; resuming regenerates the
    index pairs up to that point, which is cheap: rows are read by the ``.map`` stage, which
    restarts at the batch in progress, so no row of an earlier batch is read again.

    Args:
        domain: the task rows: ``datasets.Dataset`` or a sequence of row dicts. It defines the
            epoch.
        rehearsal: the rehearsal pool (same kinds; ``None`` or empty only with ratio 0).
        spec: the mixing options (:class:`~replaybank.hf.spec.MixSpec`: the share or recipe, the
            batch size, seed, world size, rehearsal slice, epochs), checked when it was built. One
            record, not keywords, so that the torch readers of :mod:`replaybank.hf.torch` given the
            same spec yield the same order.
        rank: ``None`` for every rank's rows (Trainer, accelerate), else one rank's part (an int
            or ``"auto"``).
        columns: data columns to keep (default: all of the domain's); both sources need them.
        source_column: name of the 0/1 source column added to every row.
        steer: a :class:`~replaybank.hf.schedule.QuotaSchedule` that moves the rehearsal share between
            batches (a :class:`replaybank.hf.ControllerCallback`'s ``schedule``); read in this
            process, so it is a live object beside the spec rather than one of its values.

    Returns:
        A ``datasets.IterableDataset`` of dict rows, ``n_shards == 1``.

    Raises:
        MixError: (a ``ValueError``) before any row is read, on a rehearsal source with no rows
            at a ratio above 0, a missing column or one whose type differs between the sources
            (named), a world size (``"auto"`` resolved here) that does not divide
            ``global_batch_size``, a domain source too small for one batch, or a bad rank. With
            ``mix_by="tokens"``: a source with neither ``labels`` nor ``input_ids``. (A bad option
            is refused earlier, by :class:`~replaybank.hf.spec.MixSpec`.)

    Example:
        >>> domain = [{"text": f"task {i}"} for i in range(6)]
        >>> general = [{"text": f"general {i}"} for i in range(4)]
        >>> ds = mix(domain, general, MixSpec(0.25, batch_size=4, seed=0, epochs=1, world_size=1))
        >>> [row["source"] for row in ds]
        [0, 0, 0, 1, 0, 0, 0, 1]
    """
    import datasets

    if rank is None:
        world, the_rank = resolve_world(spec.world_size, 0)[0], -1
    else:
        world, the_rank = resolve_world(spec.world_size, rank)
    dom = Source(domain, "domain")
    reh = rehearsal_source(rehearsal)
    cols = check_columns(dom, reh, columns, source_column)
    ratio, mix_by = spec.share()
    tokens = tokens_per_row(dom, reh, mix_by, ratio)
    # Build the plan once here so that every bad input is reported now, not at the first row.
    plan = spec.plan(len(dom), 0 if reh is None else len(reh), world, tokens)
    per_rank = plan.batch_size
    kwargs = {
        "n_domain": plan.n_domain,
        "n_rehearsal": plan.n_rehearsal,
        "ratio": plan.ratio,
        "batch_size": per_rank,
        "seed": plan.seed,
        "world_size": world,
        "rows_per_epoch": plan.rows_per_epoch,
        "epochs": plan.epochs,
        "rank": the_rank,
        "source_column": source_column,
        "steer": None if steer is None else steer.token,
    }
    index_features = datasets.Features(
        {source_column: datasets.Value("int8"), ROW_COLUMN: datasets.Value("int64")}
    )
    ds = datasets.IterableDataset.from_generator(
        _index_stream, features=index_features, gen_kwargs=kwargs
    )
    features = None
    if dom.is_hf and (reh is None or reh.is_hf):
        features = datasets.Features(
            {**{c: dom.data.features[c] for c in cols}, source_column: datasets.Value("int8")}
        )
    from replaybank.hf.stream_state import MAX_RESUME_EXAMPLES, as_mix_stream

    rows_per_batch = per_rank * (world if the_rank < 0 else 1)
    mapped = ds.map(
        _Fetch(dom, reh, cols, source_column),
        batched=True,
        batch_size=rows_per_batch,
        remove_columns=[ROW_COLUMN],
        features=features,
    )
    limit = MAX_RESUME_EXAMPLES if plan.epochs is None else int(plan.total_batches() or 0) * rows_per_batch
    # the layout replaybank.hf.check_trainer compares with the trainer's batch size (KLToBase.attach)
    mix = {"batch_size": per_rank, "world_size": world, "rank": the_rank}
    return as_mix_stream(mapped, limit, rows_per_batch, mix)
