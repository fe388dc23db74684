"""The gradient-interference maths on constructed gradients."""

from __future__ import annotations

import numpy as np
import pytest

from replaybank.llm.eval.interference import flat_grad, min_alpha, summarise


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
