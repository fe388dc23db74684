"""mix_by = "tokens": row quotas that hit a target share of labelled tokens (the loss)."""

from __future__ import annotations

import numpy as np
import pytest

from replaybank.mixing import Mixer, batch_quotas, row_shares


def test_rows_mode_is_the_normalised_shares():
    np.testing.assert_allclose(row_shares([9, 1]), [0.9, 0.1])


def test_token_mode_divides_by_tokens_per_row():
    # rehearsal rows carry 4x the labelled tokens of domain rows: 10% of the loss is 1/37 of the rows
    r = row_shares([0.9, 0.1], "tokens", [20.0, 80.0])
    np.testing.assert_allclose(r, [36 / 37, 1 / 37])
    # equal token counts: tokens mode equals rows mode
    np.testing.assert_allclose(row_shares([0.7, 0.3], "tokens", [5.0, 5.0]), [0.7, 0.3])


@pytest.mark.parametrize("tokens", [[20.0, 80.0], [60.0, 15.0], [20.0, 80.0, 40.0]])
def test_quota_schedule_hits_the_token_share(tokens):
    target = [0.9, 0.1] if len(tokens) == 2 else [0.8, 0.1, 0.1]
    quotas = batch_quotas(10, row_shares(target, "tokens", tokens), num_batches=400)
    label_tokens = quotas.sum(axis=0) * np.asarray(tokens)
    share = label_tokens / label_tokens.sum()
    # 4000 rows: the credit keeps each row count within one of its exact share, so the token
    # share is within (one row's tokens / all tokens) of the target
    tol = max(tokens) / label_tokens.sum() + 1e-9
    np.testing.assert_allclose(share, target, atol=tol)


def test_mixer_with_token_shares_on_variable_length_rows():
    rng = np.random.default_rng(0)
    dom_len = rng.integers(10, 31, size=500)  # mean ~20 labelled tokens
    reh_len = rng.integers(60, 101, size=300)  # mean ~80
    shares = row_shares([0.9, 0.1], "tokens", [dom_len.mean(), reh_len.mean()])
    tokens = np.zeros(2)
    for b in Mixer([500, 300], shares, batch_size=10, seed=3).epoch(0):
        tokens += [dom_len[b.rows_of(0)].sum(), reh_len[b.rows_of(1)].sum()]
    # sampled lengths vary: the measured share is within 1.5 points of the 10% target
    assert tokens[1] / tokens.sum() == pytest.approx(0.1, abs=0.015)


def test_bad_token_input():
    with pytest.raises(ValueError, match="needs tokens_per_row"):
        row_shares([0.9, 0.1], "tokens")
    with pytest.raises(ValueError, match="> 0 for every source"):
        row_shares([0.9, 0.1], "tokens", [10.0, 0.0])
    with pytest.raises(ValueError, match="2 entries for 3 sources"):
        row_shares([0.8, 0.1, 0.1], "tokens", [1.0, 2.0])
    with pytest.raises(ValueError, match="mix_by must be"):
        row_shares([1.0], "bytes")  # type: ignore[arg-type]
    # a source with share 0 may have no tokens
    np.testing.assert_allclose(row_shares([1.0, 0.0], "tokens", [10.0, 0.0]), [1.0, 0.0])
