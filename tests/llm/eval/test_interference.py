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


def test_probe_cli_prints_the_report_as_json_and_it_reads_back(tiny_model_dir, tmp_path, capsys):
    """``replaybank probe --json`` on a tiny random Llama: the printed object is the report's own
    record (the same one metrics.json carries), read back whole by ``InterferenceReport.from_json``."""
    import json

    from replaybank.cli import main
    from replaybank.llm.eval.interference import InterferenceReport

    cfg = tmp_path / "probe.toml"
    cfg.write_text(
        f'[training]\nbase_model = "{tiny_model_dir}"\nbatch_size = 4\nlora_rank = 2\nnum_threads = 1\n'
        "[data]\ndomain_train_rows = 8\ndomain_eval_rows = 2\ngeneral_eval_rows = 2\n"
    )
    assert main(["probe", str(cfg), "--pairs", "2", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    report = InterferenceReport.from_json(printed, "replaybank probe --json")
    assert len(report.pairs) == 2 and report.conflicting_pairs == sum(p.dot < 0 for p in report.pairs)
    assert all(-1.0 <= p.cosine <= 1.0 and p.domain_norm > 0 for p in report.pairs)
    assert report.to_json() == printed
