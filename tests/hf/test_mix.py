"""replaybank.hf.mix and the torch equivalents: exact quotas, epochs, slices, resume, bad input."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest

datasets = pytest.importorskip("datasets")

from replaybank.errors import ReplayBankError  # noqa: E402
from replaybank.hf import MixError, MixPlan, MixSpec, mix  # noqa: E402
from replaybank.llm.train import epoch_slice  # noqa: E402
from replaybank.mixing import batch_quotas  # noqa: E402


def rows(n: int, base: int = 0) -> list[dict]:
    return [{"x": base + i, "text": f"row {base + i}", "ids": [base + i, 1]} for i in range(n)]


DOM, REH = rows(50), rows(13, base=1000)


def sources(stream) -> list[int]:
    return [r["source"] for r in stream]


@pytest.mark.parametrize(
    "ratio,batch,world",
    [(0.1, 8, 1), (0.33, 8, 1), (0.0, 8, 1), (0.25, 4, 1), (0.1, 4, 2), (0.33, 3, 3), (0.05, 7, 1)],
)
def test_every_batch_holds_the_exact_quota(ratio, batch, world):
    """Rehearsal rows per global batch = the project's rule (batch_quotas) run over the whole
    stream: the credit carries from epoch to epoch."""
    epochs = 3
    ds = mix(DOM, REH, MixSpec(ratio, batch_size=batch, seed=3, epochs=epochs, world_size=world))
    src = np.array(sources(ds))
    g = batch * world
    assert src.size % g == 0
    got = src.reshape(-1, g).sum(axis=1)
    assert len(got) == MixPlan(50, 13, ratio, batch_size=batch, world_size=world, seed=3, epochs=epochs).total_batches()
    want = batch_quotas(g, [1 - ratio, ratio], num_batches=len(got))[:, 1]
    assert (got == want).all()
    exact = g * ratio
    assert got.min() >= np.floor(exact + 1e-9) and got.max() <= np.ceil(exact - 1e-9)
    # the running share never drifts a full row from ratio, over all epochs
    drift = np.abs(np.cumsum(got) - exact * np.arange(1, len(got) + 1))
    assert drift.max() < 1.0 + 1e-9


@pytest.mark.parametrize("n_domain, ratio, batch", [(64, 0.1, 8), (50, 0.1, 4), (37, 0.3, 5)])
def test_the_share_over_many_epochs_is_the_ratio(n_domain, ratio, batch):
    """20 epochs of a 64-row domain at 0.1 (batch 8) gave 9.375% when every epoch
    restarted the credit; carried, the rehearsal rows are ratio x rows within one row."""
    plan = MixPlan(n_domain, 5, ratio, batch_size=batch, seed=0, epochs=20)
    n = reh = 0
    for b in plan:
        n, reh = n + b.source.size, reh + int((b.source == 1).sum())
    assert abs(reh - ratio * n) <= 1, (reh, ratio * n)
    assert n == plan.total_batches() * batch
    if (n_domain, ratio, batch) == (64, 0.1, 8):  # the case, as it was: 8 rows short
        per_epoch = plan.batches_per_epoch()
        restarted = 20 * int(batch_quotas(batch, [0.9, 0.1], num_batches=per_epoch)[:, 1].sum())
        assert (restarted, ratio * 20 * per_epoch * batch) == (120, 128.0)


def test_awkward_ratio_rotates_the_spare_row():
    """0.1 of 8 rows = 0.8: batches get 1 rehearsal row, except one in five gets none.

    Credit (domain, rehearsal) after each batch: (.2,-.2) (.4,-.4) (-.4,.4) (-.2,.2) (0,0), then
    again; 50 domain rows fill 7 batches (7+7+8+7+7+7+7 = 50).
    """
    src = np.array(sources(mix(DOM, REH, MixSpec(0.1, batch_size=8, seed=0, epochs=1, world_size=1))))
    per_batch = src.reshape(-1, 8).sum(axis=1)
    assert per_batch.tolist() == [1, 1, 0, 1, 1, 1, 1]


def test_epochs_are_seeded_permutations_and_drop_only_a_short_tail():
    ds = mix(DOM, REH, MixSpec(0.25, batch_size=4, seed=5, epochs=3, world_size=1))
    out = list(ds)
    per_epoch = MixPlan(50, 13, 0.25, batch_size=4, seed=5).batches_per_epoch() * 4
    epochs = [out[k * per_epoch:(k + 1) * per_epoch] for k in range(3)]
    doms = [[r["x"] for r in e if r["source"] == 0] for e in epochs]
    for d in doms:
        assert len(d) == len(set(d)) and 50 - len(d) < 3  # 3 domain rows per batch
    assert doms[0] != doms[1] != doms[2]
    assert out == list(mix(DOM, REH, MixSpec(0.25, batch_size=4, seed=5, epochs=3, world_size=1)))
    assert out != list(mix(DOM, REH, MixSpec(0.25, batch_size=4, seed=6, epochs=3, world_size=1)))
    # rows_per_epoch=None cycles the pool: every pool row used equally often (within one pass)
    reh = np.bincount([r["x"] - 1000 for r in out if r["source"] == 1], minlength=13)
    assert reh.max() - reh.min() <= 1


def test_per_epoch_rehearsal_slices_are_the_main_jobs_and_differ_by_epoch():
    pool = rows(200, base=1000)
    k = 6
    ds = mix(DOM, pool, MixSpec(0.25, batch_size=4, seed=11, rows_per_epoch=k, epochs=4, world_size=1))
    out = list(ds)
    n = len(out) // 4
    used = [{r["x"] - 1000 for r in out[e * n:(e + 1) * n] if r["source"] == 1} for e in range(4)]
    slices = [set(epoch_slice(200, k, 11, e).tolist()) for e in range(4)]
    for e in range(4):
        assert used[e] == slices[e]  # 12 rehearsal rows per epoch cycle the 6-row slice twice
    assert len({frozenset(s) for s in slices}) == 4
    again = list(mix(DOM, pool, MixSpec(0.25, batch_size=4, seed=11, rows_per_epoch=k, epochs=4, world_size=1)))
    assert again == out
    other = list(mix(DOM, pool, MixSpec(0.25, batch_size=4, seed=12, rows_per_epoch=k, epochs=4, world_size=1)))
    assert other != out


def test_slices_cover_the_pool_uniformly():
    """Over 400 epochs of 10-row slices from a 50-row pool each row is drawn 80 times on average.

    Chi-square over the 50 counts (49 dof) must stay under 85.4, the 0.999 quantile (seed fixed).
    """
    plan = MixPlan(20, 50, 0.5, batch_size=4, seed=0, rows_per_epoch=10, epochs=400)
    counts = np.zeros(50)
    for b in plan:
        if b.step == 0:
            counts[np.unique(epoch_slice(50, 10, 0, b.epoch))] += 1
    assert counts.sum() == 4000
    chi2 = float(((counts - 80.0) ** 2 / 80.0).sum())
    assert chi2 < 85.4, chi2


def test_hf_dataset_and_list_give_the_same_rows():
    spec = MixSpec(0.2, batch_size=5, seed=2, epochs=2, world_size=1)
    from_lists = list(mix(DOM, REH, spec))
    hd = mix(datasets.Dataset.from_list(DOM), datasets.Dataset.from_list(REH), spec)
    assert list(hd) == from_lists
    assert set(hd.features) == {"x", "text", "ids", "source"}
    mixed = mix(datasets.Dataset.from_list(DOM), REH, spec)  # one of each kind
    assert list(mixed) == from_lists


def test_columns_argument_keeps_the_shared_ones():
    reh = [{"x": 1000 + i, "other": i} for i in range(5)]
    ds = mix(DOM, reh, MixSpec(0.2, batch_size=5, seed=0, epochs=1, world_size=1), columns=["x"])
    assert {tuple(sorted(r)) for r in ds} == {("source", "x")}


def test_state_dict_resumes_mid_epoch_and_mid_batch():
    spec = MixSpec(0.3, batch_size=4, seed=9, epochs=3, world_size=1, rows_per_epoch=5)
    full = list(mix(DOM, REH, spec))
    for stop in (1, 7, 29, 55):  # inside a batch, in epoch 0 and in epoch 1
        ds = mix(DOM, REH, spec)
        it = iter(ds)
        head = [next(it) for _ in range(stop)]
        state = json.loads(json.dumps(ds.state_dict()))
        fresh = mix(DOM, REH, spec)
        fresh.load_state_dict(state)
        assert head + list(fresh) == full, stop


def test_endless_stream_and_trainer_style_skip():
    """Trainer resumes by re-iterating and skipping global_step batches: same rows as no stop."""
    torch = pytest.importorskip("torch")
    ds = mix(DOM, REH, MixSpec(0.25, batch_size=4, seed=1, world_size=1))  # epochs=None: endless
    loader = torch.utils.data.DataLoader(ds, batch_size=4)
    it = iter(loader)
    run = [next(it)["x"].tolist() for _ in range(40)]  # 40 batches > 3 epochs of 12
    it = iter(torch.utils.data.DataLoader(ds, batch_size=4))
    for _ in range(17):
        next(it)
    assert [next(it)["x"].tolist() for _ in range(23)] == run[17:]


def test_accelerate_sharding_gives_each_rank_its_part():
    """What Trainer does with an iterable dataset on 2 ranks: each takes its block of 2 batches."""
    pytest.importorskip("torch")
    accelerate_dl = pytest.importorskip("accelerate.data_loader")
    from replaybank.hf.torch import MixedIterableDataset

    spec = MixSpec(0.2, batch_size=3, seed=4, epochs=2, world_size=2)
    stream = mix(DOM, REH, spec)
    for rank in range(2):
        shard = accelerate_dl.IterableDatasetShard(stream, batch_size=3, num_processes=2, process_index=rank)
        mine = list(MixedIterableDataset(DOM, REH, spec, rank=rank))
        assert list(shard) == mine


def test_torch_dataset_and_sampler_resume():
    pytest.importorskip("torch")
    from replaybank.hf.torch import MixedBatchSampler, MixedIterableDataset, TaggedConcat

    spec = MixSpec(0.3, batch_size=3, seed=8, epochs=2, world_size=2)
    full = list(MixedIterableDataset(DOM, REH, spec, rank=1))
    assert full == list(mix(DOM, REH, spec, rank=1))
    ds = MixedIterableDataset(DOM, REH, spec, rank=1)
    it = iter(ds)
    head = [next(it) for _ in range(10)]
    again = MixedIterableDataset(DOM, REH, spec, rank=1)
    again.load_state_dict(json.loads(json.dumps(ds.state_dict())))
    assert head + list(again) == full

    cat = TaggedConcat(DOM, REH)
    sampler = MixedBatchSampler(len(DOM), len(REH), spec, rank=1)
    batches = list(sampler)
    assert len(batches) == len(sampler)
    assert [cat[i] for b in batches for i in b] == full
    s2 = MixedBatchSampler(len(DOM), len(REH), spec, rank=1)
    it2 = iter(s2)
    first = [next(it2) for _ in range(5)]
    s3 = MixedBatchSampler(len(DOM), len(REH), spec, rank=1)
    s3.load_state_dict(json.loads(json.dumps(s2.state_dict())))
    assert first + list(s3) == batches


def test_dataloader_workers(monkeypatch):
    torch = pytest.importorskip("torch")
    from replaybank.hf.torch import MixedBatchSampler, MixedIterableDataset, TaggedConcat

    spec = MixSpec(0.25, batch_size=4, seed=0, epochs=1, world_size=1)
    sampler = MixedBatchSampler(len(DOM), len(REH), spec)
    loader = torch.utils.data.DataLoader(TaggedConcat(DOM, REH), batch_sampler=sampler, num_workers=2,
                                         collate_fn=lambda rows: [r["x"] for r in rows])
    assert [x for b in loader for x in b] == [r["x"] for r in mix(DOM, REH, spec)]
    ds = MixedIterableDataset(DOM, REH, spec)
    # as seen from inside worker 0 of 2 (a real failing worker pool takes seconds to shut down)
    monkeypatch.setattr(torch.utils.data, "get_worker_info", lambda: SimpleNamespace(num_workers=2, id=0))
    with pytest.raises(MixError, match="cannot be split over 2 DataLoader workers"):
        next(iter(ds))


def test_world_and_rank_from_the_environment(monkeypatch):
    pytest.importorskip("torch")
    from replaybank.hf.torch import MixedIterableDataset

    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    ds = MixedIterableDataset(DOM, REH, MixSpec(0.3, batch_size=3, seed=8, epochs=1))
    assert (ds.world_size, ds.rank) == (2, 1)
    assert list(ds) == list(mix(DOM, REH, MixSpec(0.3, batch_size=3, seed=8, epochs=1), rank="auto"))


# -- bad input: every error before a row is read ----------------------------------------------


@pytest.mark.parametrize("ratio", [-0.1, 1.0, 1.5, float("nan"), "0.1", True])
def test_ratio_outside_range(ratio):
    with pytest.raises(MixError, match="ratio"):
        mix(DOM, REH, MixSpec(ratio, batch_size=4, seed=0))


@pytest.mark.parametrize("empty", [[], None, "hf"])
def test_rehearsal_without_rows(empty):
    reh = datasets.Dataset.from_list(REH).select([]) if empty == "hf" else empty
    with pytest.raises(MixError, match="rehearsal source has no rows"):
        mix(DOM, reh, MixSpec(0.1, batch_size=4, seed=0))
    assert len(list(mix(DOM, reh, MixSpec(0.0, batch_size=4, seed=0, epochs=1, world_size=1)))) == 48


def test_missing_column_is_named():
    reh = [{"x": 1, "text": "a"}]
    with pytest.raises(MixError, match="rehearsal source has no column 'ids'"):
        mix(DOM, reh, MixSpec(0.1, batch_size=4, seed=0))
    hreh = datasets.Dataset.from_list(reh)
    with pytest.raises(MixError, match="no column 'ids'"):
        mix(datasets.Dataset.from_list(DOM), hreh, MixSpec(0.1, batch_size=4, seed=0))
    with pytest.raises(MixError, match="domain source has no column 'y'"):
        mix(DOM, REH, MixSpec(0.1, batch_size=4, seed=0), columns=["y"])
    with pytest.raises(MixError, match="source_column='x'"):
        mix(DOM, REH, MixSpec(0.1, batch_size=4, seed=0), source_column="x")


def test_wrong_column_type_is_named():
    bad = [{"x": 1, "text": "a", "ids": "not token ids"}]
    with pytest.raises(MixError, match="column 'ids' is list\\[int\\] in the domain source but string"):
        mix(DOM, bad, MixSpec(0.1, batch_size=4, seed=0))
    hbad = datasets.Dataset.from_list([{"x": 1.5, "text": "a", "ids": [1]}])
    with pytest.raises(MixError, match="column 'x' is int in the domain source but float"):
        mix(datasets.Dataset.from_list(DOM), hbad, MixSpec(0.1, batch_size=4, seed=0))
    with pytest.raises(MixError, match="rows must be mappings"):
        mix([1, 2, 3], REH, MixSpec(0.1, batch_size=1, seed=0))


def test_a_later_row_missing_a_column_is_named_when_read():
    reh = [dict(r) for r in REH]
    del reh[3]["ids"]  # only row 0 is checked up front for a list of dicts
    ds = mix(DOM, reh, MixSpec(0.5, batch_size=4, seed=0, epochs=1, world_size=1))
    with pytest.raises(MixError, match="rehearsal row 3 has no column 'ids'"):
        list(ds)


def test_slice_larger_than_the_pool_warns_and_draws_with_replacement():
    with pytest.warns(UserWarning, match="fewer than rehearsal_rows_per_epoch=20"):
        out = list(mix(DOM, REH, MixSpec(0.25, batch_size=4, seed=0, rows_per_epoch=20, epochs=1, world_size=1)))
    assert {r["x"] for r in out if r["source"] == 1} <= {r["x"] for r in REH}


def test_int32_and_int64_token_ids_mix():
    reh = datasets.Dataset.from_list(REH).cast_column("ids", datasets.List(datasets.Value("int32")))
    dom = datasets.Dataset.from_list(DOM)
    assert dom.features["ids"] != reh.features["ids"]
    out = list(mix(dom, reh, MixSpec(0.2, batch_size=5, seed=0, epochs=1, world_size=1)))
    assert len(out) == 60 and sum(r["source"] for r in out) == 12  # 12 batches of 4 + 1


def test_world_size_must_divide_the_global_batch():
    with pytest.raises(MixError, match="world size 3 does not divide global_batch_size=16"):
        mix(DOM, REH, MixSpec(0.1, global_batch_size=16, world_size=3, seed=0))
    ds = mix(DOM, REH, MixSpec(0.1, global_batch_size=16, world_size=4, seed=0, epochs=1))
    assert len(list(ds)) == 48


@pytest.mark.parametrize("kw", [{"batch_size": 0}, {"batch_size": -2}, {"batch_size": 2.0}, {}, {"batch_size": 2, "global_batch_size": 4}])
def test_bad_batch_size(kw):
    with pytest.raises(MixError, match="batch_size"):
        mix(DOM, REH, MixSpec(0.1, seed=0, **kw))


def test_other_bad_inputs():
    with pytest.raises(MixError, match="rank 2 is outside"):
        mix(DOM, REH, MixSpec(0.1, batch_size=2, seed=0, world_size=2), rank=2)
    with pytest.raises(MixError, match="fewer than the 54 domain rows"):
        mix(DOM, REH, MixSpec(0.1, batch_size=60, seed=0, world_size=1))
    with pytest.raises(MixError, match="streaming"):
        mix(datasets.Dataset.from_list(DOM).to_iterable_dataset(), REH, MixSpec(0.1, batch_size=2, seed=0))
    with pytest.raises(MixError, match="the rehearsal source is a streaming"):
        mix(DOM, datasets.Dataset.from_list(REH).to_iterable_dataset(), MixSpec(0.1, batch_size=2, seed=0))
    if importlib.util.find_spec("torch") is not None:
        from replaybank.hf.torch import MixedIterableDataset

        with pytest.raises(MixError, match="the rehearsal source is a streaming"):
            MixedIterableDataset(DOM, datasets.Dataset.from_list(REH).to_iterable_dataset(), MixSpec(0.1, batch_size=2, seed=0))
    with pytest.raises(MixError, match='mix_by must be "rows" or "tokens"'):
        mix(DOM, REH, MixSpec(0.1, batch_size=2, seed=0, mix_by="bytes"))
    assert issubclass(MixError, ValueError) and issubclass(MixError, ReplayBankError)
    plan = MixPlan(50, 13, 0.1, batch_size=4, seed=0)
    with pytest.raises(MixError, match="batch_size=4, this stream has batch_size=5"):
        MixPlan(50, 13, 0.1, batch_size=5, seed=0).load_state_dict(plan.state_dict())


def test_import_replaybank_hf_stays_numpy_only():
    code = "import sys, replaybank, replaybank.hf; print(sorted({'torch','datasets','transformers'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_trainer_check_doctest():
    import doctest

    import replaybank.hf.trainer_check as module

    assert doctest.testmod(module).failed == 0
