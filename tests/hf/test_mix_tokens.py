"""mix_by="tokens": the rehearsal share of labelled tokens, by the main job's rule.

The quota is the exact largest-remainder row quota of the row share
replaybank.mixing.row_shares gives for the token share; the measured token share is the target
exactly for constant row lengths, and within a stated tolerance for skewed random lengths."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("datasets")

from replaybank.hf import MixError, MixSpec, mix  # noqa: E402
from replaybank.hf.plan import row_ratio  # noqa: E402
from replaybank.mixing import row_shares  # noqa: E402


def _rows(n, prompt, answer, token):
    return [{"input_ids": [token] * (prompt + answer), "labels": [-100] * prompt + [token] * answer}
            for _ in range(n)]  # fmt: skip


def _label_tokens(row):
    return sum(t != -100 for t in row["labels"])


@pytest.mark.parametrize("kind", ["list", "datasets"])
def test_constant_lengths_give_the_exact_token_share_in_every_batch(kind):
    # 5 labelled tokens per domain row, 20 per rehearsal row, half of the tokens rehearsal:
    # row share (0.5/20) / (0.5/5 + 0.5/20) = 0.2, so 1 rehearsal row (20 tokens) and 4 domain rows
    # (20 tokens) in every batch of 5.
    dom, reh = _rows(40, 5, 5, 1), _rows(10, 10, 20, 2)
    if kind == "datasets":
        import datasets

        dom, reh = datasets.Dataset.from_list(dom), datasets.Dataset.from_list(reh)
    ds = mix(dom, reh, MixSpec(0.5, batch_size=5, seed=0, epochs=1, world_size=1, mix_by="tokens"))
    rows = list(ds)
    assert len(rows) == 40 + 10
    for b in range(0, len(rows), 5):
        batch = rows[b : b + 5]
        reh = sum(_label_tokens(r) for r in batch if r["source"] == 1)
        assert reh / sum(_label_tokens(r) for r in batch) == 0.5


def test_row_quota_is_the_main_jobs_rule():
    assert row_ratio(0.1, "tokens", (20.0, 80.0)) == pytest.approx(
        float(row_shares([0.9, 0.1], "tokens", [20.0, 80.0])[1])
    )
    assert row_ratio(0.1, "rows", None) == 0.1
    # 7 labelled tokens per domain row, 21 per rehearsal row, 40% of the labelled tokens from
    # rehearsal: the row share is r = (0.4 / 21) / (0.6 / 7 + 0.4 / 21) = 2/11, 16/11 = 1.45 of
    # every batch of 8 rows, so batches hold 1 or 2 rehearsal rows as the credit carries
    r = 2 / 11
    assert float(row_shares([0.6, 0.4], "tokens", [7.0, 21.0])[1]) == pytest.approx(r)
    dom, reh = _rows(97, 3, 7, 1), _rows(31, 2, 21, 2)
    rows = list(mix(dom, reh, MixSpec(0.4, batch_size=8, seed=3, epochs=2, world_size=1, mix_by="tokens")))
    per_batch = np.array([int(x["source"]) for x in rows]).reshape(-1, 8).sum(axis=1)
    assert len(per_batch) == 28  # 14 full batches per epoch: 97 domain rows at 6.5 a batch
    # the exact largest-remainder quota of r: every batch floor or ceil of 8r, and after k batches
    # the count is within one row of 8rk (credit carried across batches and epochs)
    assert set(per_batch.tolist()) == {1, 2}
    drift = np.cumsum(per_batch) - 8 * r * np.arange(1, len(per_batch) + 1)
    assert np.abs(drift).max() < 1, drift
    tokens = np.array([_label_tokens(x) for x in rows])
    share = tokens[[x["source"] == 1 for x in rows]].sum() / tokens.sum()
    assert abs(share - 0.4) < 0.01  # the drift of under one 21-token row in 2,128 tokens


@pytest.mark.parametrize("ratio", [0.1, 0.3])
def test_skewed_random_lengths_hit_the_token_share(ratio):
    # Rehearsal rows are long and spread (10..90 labelled tokens), domain rows short (2..12).
    rng = np.random.default_rng(0)
    dom = [{"input_ids": [1] * (n + 3), "labels": [-100] * 3 + [1] * n} for n in rng.integers(2, 13, 3000)]
    reh = [{"input_ids": [2] * n, "labels": [2] * n} for n in rng.integers(10, 91, 400)]
    rows = list(mix(dom, reh, MixSpec(ratio, batch_size=16, seed=1, epochs=1, world_size=1, mix_by="tokens")))
    tokens = np.array([_label_tokens(r) for r in rows], dtype=float)
    src = np.array([r["source"] for r in rows])
    share = tokens[src == 1].sum() / tokens.sum()
    # Rehearsal rows are drawn without replacement per pass over a 400-row pool: the measured share
    # differs from the target by the sampling error of the mean length, well under 0.02 here.
    assert abs(share - ratio) < 0.02
    rows_share = (src == 1).mean()
    assert rows_share < ratio / 3  # far fewer rows than by rows: each rehearsal row is ~7x longer


def test_input_ids_length_when_there_are_no_labels():
    dom = [{"input_ids": [1] * 4} for _ in range(30)]
    reh = [{"input_ids": [2] * 12} for _ in range(10)]
    rows = list(mix(dom, reh, MixSpec(0.5, batch_size=4, seed=0, epochs=1, world_size=1, mix_by="tokens")))
    assert [sum(r["source"] for r in rows[b : b + 4]) for b in range(0, len(rows), 4)] == [1] * (len(rows) // 4)


def test_torch_side_follows_the_same_rule():
    torch_mod = pytest.importorskip("replaybank.hf.torch")
    dom, reh = _rows(40, 5, 5, 1), _rows(10, 10, 20, 2)
    ds = torch_mod.MixedIterableDataset(dom, reh, MixSpec(0.5, batch_size=5, seed=0, epochs=1, world_size=1, mix_by="tokens"), rank=0)  # fmt: skip
    assert [r["source"] for r in ds][:10] == [0, 0, 0, 0, 1] * 2
    s = torch_mod.MixedBatchSampler(40, 10, MixSpec(0.5, batch_size=5, seed=0, epochs=1, world_size=1, mix_by="tokens"), rank=0, tokens_per_row=(5.0, 20.0))  # fmt: skip
    assert [sum(i >= 40 for i in b) for b in s] == [1] * 10
    with pytest.raises(MixError, match="needs tokens_per_row"):
        torch_mod.MixedBatchSampler(40, 10, MixSpec(0.5, batch_size=5, seed=0, world_size=1, mix_by="tokens"), rank=0)


def test_bad_input_names_the_column():
    with pytest.raises(MixError, match='the domain source has neither .it has \\[\'text\'\\]'):
        mix([{"text": "a"}] * 8, [{"text": "b"}] * 4, MixSpec(0.1, batch_size=4, seed=0, mix_by="tokens"))
    bad = [{"labels": [1]}, {"labels": 7}, {"labels": [1]}]  # only row 0's types are checked upfront
    with pytest.raises(MixError, match="rehearsal row 1: column 'labels' is int"):
        mix([{"labels": [1, 2]}] * 8, bad, MixSpec(0.1, batch_size=4, seed=0, mix_by="tokens"))
    with pytest.raises(MixError, match="tokens_per_row must be two finite numbers > 0"):
        row_ratio(0.1, "tokens", (5.0, 0.0))
    # ratio 0 needs no token counts at all.
    assert len(list(mix([{"text": "a"}] * 8, None, MixSpec(0.0, batch_size=4, seed=0, epochs=1, world_size=1, mix_by="tokens")))) == 8  # fmt: skip
