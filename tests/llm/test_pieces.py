"""Pure pieces: epoch slices, lineage, the interference maths, the effect summary."""

from __future__ import annotations

import numpy as np
import pytest

from replaybank.llm.data.toolapi import generate_examples
from replaybank.llm.eval.interference import flat_grad, min_alpha, summarise
from replaybank.llm.report.metrics import effect
from replaybank.llm.train import epoch_slice
from replaybank.llm.train.lineage import select_lineage


def test_epoch_slice_seeded_distinct_without_replacement():
    a0 = epoch_slice(100, 30, seed=5, epoch=0)
    assert np.array_equal(a0, epoch_slice(100, 30, seed=5, epoch=0))
    a1 = epoch_slice(100, 30, seed=5, epoch=1)
    assert not np.array_equal(a0, a1)
    assert len(set(a0.tolist())) == 30  # no repeats when the pool is large enough
    # seed + epoch: epoch 1 of seed 5 is epoch 0 of seed 6, as the reference does it
    assert np.array_equal(a1, epoch_slice(100, 30, seed=6, epoch=0))


def test_epoch_slice_small_pool_warns_and_replaces():
    with pytest.warns(UserWarning, match="sampling with replacement"):
        s = epoch_slice(5, 12, seed=0, epoch=0)
    assert s.size == 12 and s.max() < 5
    with pytest.raises(ValueError, match="empty"):
        epoch_slice(0, 3, seed=0, epoch=0)


def test_lineage_policies():
    assert select_lineage(0, 3, "window") == [0]
    assert select_lineage(5, 3, "window") == [3, 4, 5]
    assert select_lineage(2, 1, "window") == [2]
    assert select_lineage(3, 3, "all") == [0, 1, 2, 3]
    assert select_lineage(4, 3, "best", scores=[0.5, 0.1, 0.9, 0.2]) == [0, 2, 4]
    with pytest.raises(ValueError, match="needs a score"):
        select_lineage(2, 3, "best", scores=[1.0])
    with pytest.raises(ValueError, match="unknown lineage"):
        select_lineage(1, 3, "newest")  # type: ignore[arg-type]


def test_min_alpha_known_answers():
    assert min_alpha(-1.0, 1.0) == 0.5
    assert min_alpha(0.0, 1.0) == 0.0
    assert min_alpha(-3.0, 1.0) == pytest.approx(0.75)
    alpha = min_alpha(-3.0, 1.0)
    assert (1 - alpha) * -3.0 + alpha * 1.0 == pytest.approx(0.0)  # exactly on the boundary


def test_interference_on_constructed_gradients():
    """Loss_d = a.w and loss_r = b.w have gradients a and b: the probe must recover them."""
    import torch

    w = torch.nn.Parameter(torch.zeros(3))
    a = torch.tensor([-2.0, 1.0, 0.0])
    b = torch.tensor([1.0, 0.0, 0.0])
    gd = flat_grad(lambda: (a * w).sum(), [w])
    gr = flat_grad(lambda: (b * w).sum(), [w])
    assert np.allclose(gd, a.numpy()) and np.allclose(gr, b.numpy())
    rep = summarise([(gd, gr), (np.array([1.0, 0, 0]), gr)])
    # pair 0: <a,b> = -2, |b|^2 = 1 -> alpha = 2/3; pair 1 agrees -> alpha 0
    assert rep.pairs[0].alpha == pytest.approx(2 / 3)
    assert rep.pairs[0].cosine == pytest.approx(-2 / np.sqrt(5))
    assert rep.pairs[1].alpha == 0.0
    assert rep.alpha_suggested == pytest.approx(2 / 3) and rep.conflicting_pairs == 1
    assert rep.dot_mean == pytest.approx((-2.0 + float(gr[0])) / 2)
    assert "needed" not in rep.summary() and "needed" not in rep.measured()  # measured figures, no verdict
    assert summarise([(gr, gr)]).conflicting_pairs == 0


def test_effect_criteria():
    e = effect({"base": 2.0, "naive": 3.0, "rehearsal": 2.5}, {"base": 5.0, "naive": 0.2, "rehearsal": 0.25})
    assert e.ratio is not None and e.ratio.rise_ratio == pytest.approx(0.5)
    assert e.to_json()["rise_ratio"] == pytest.approx(0.5)
    assert e.criteria == {"naive_raises_general": True, "rise_at_most_a_third": False, "domain_loss_at_most_5pct_above_naive": False}


def test_toolapi_examples_deterministic_and_disjoint():
    a = generate_examples(50, seed=1)
    assert a == generate_examples(50, seed=1)
    held = generate_examples(20, seed=2, exclude={r["prompt"] for r in a})
    assert not {r["prompt"] for r in a} & {r["prompt"] for r in held}
    assert all(r["response"].startswith("<<qx ") and r["response"].endswith(">>") for r in a)


def test_doctests():
    import doctest

    import replaybank.llm.config as config
    import replaybank.llm.data.corpus as corpus
    import replaybank.llm.data.rows as rows
    import replaybank.llm.eval.interference as probe
    import replaybank.llm.recipes.rehearsal as run
    import replaybank.llm.report.metrics as report
    import replaybank.llm.train.kl as train
    import replaybank.llm.train.lineage as generations

    for module in (config, corpus, generations, probe, report, rows, run, train):
        assert doctest.testmod(module).failed == 0, module.__name__
