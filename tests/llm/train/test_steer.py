"""A replay controller steering the LoRA loop: the shares move between steps, every
batch keeps the exact quota of the shares in force, and a resumed run equals an uninterrupted one
(tiny random Llama, fake held-out losses that depend only on the step)."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from replaybank.controllers import MixLimits, make_controller
from replaybank.errors import ReplayBankError
from replaybank.llm.config import Config

torch = pytest.importorskip("torch")
pytest.importorskip("peft")


@pytest.fixture(autouse=True)
def _own_cache(isolated_cache):
    """Nothing of the tiny model goes to the user's cache."""


def _fake_losses(step: int) -> list[float]:
    # the domain is learnt, the corpus is forgotten fast, self slowly: a made-up sequence
    return [2.0 / (1 + 0.3 * step), 1.0 + 0.2 * step, 1.0 + 0.02 * step]


@pytest.fixture(scope="module")
def setup(tiny_model_dir, tmp_path_factory):
    from replaybank.llm.data.prepare import prepare
    from replaybank.llm.model import load_model

    cfg = Config.from_dict({
        "training": {"base_model": str(tiny_model_dir), "batch_size": 5, "learning_rate": 5e-3, "lora_rank": 2,
                     "rehearsal_rows_per_epoch": 20, "mixing_ratio": 0.1, "num_threads": 1, "save_every": 2,
                     "num_train_epochs": 1},
        "data": {"domain_train_rows": 40, "domain_eval_rows": 5, "general_eval_rows": 4},
        "output": {"out_dir": str(tmp_path_factory.mktemp("unused"))},
    })
    base, tok = load_model(cfg.training.base_model, "cpu")
    data = prepare(cfg, tok)
    return cfg, base, tok, data


def _run(setup, ckpt=None, max_steps=None, controller=None, sources=("corpus", "self")):
    from replaybank.llm.train import Source, Steering, add_lora, train_lora

    cfg, base, tok, data = setup
    model = add_lora(copy.deepcopy(base), cfg.training)
    pool = data.rehearsal_pool
    srcs = [Source("corpus", pool, 0.1, sliced=True), Source("self", pool, 0.1)][: len(sources)]
    ctl = controller or make_controller("bandit", MixLimits(tuple(sources), floor=0.05, max_share=0.6),
                                        rng=np.random.default_rng(0), lr=3.0)
    steer = Steering(ctl, list(sources), _fake_losses, k=2)
    log = train_lora(model, tok.pad_token_id, data.domain_generations[0], cfg.training, checkpoint_dir=ckpt,
                     eval_points=4, max_steps=max_steps, sources=srcs, steer=steer)
    return log, steer


def test_shares_move_and_every_batch_keeps_its_quota(setup):
    log, steer = _run(setup)
    traj = steer.trajectory
    assert traj[0]["step"] == 0 and traj[-1]["step"] == len(log.steps)
    assert len(traj) >= 4
    corpus = [e["shares"]["corpus"] for e in traj]
    assert corpus[-1] > corpus[0] + 0.1  # the source whose loss rises gains share
    assert all(abs(sum(e["shares"].values()) - 1) < 1e-5 for e in traj)  # rounded to 6 places
    # the rows of each step follow the shares in force when it was drawn (exact quota: floor or ceil)
    bs = setup[0].training.batch_size
    for s in log.steps:
        current = [e for e in traj if e["step"] < s["step"]][-1]["shares"]
        for name in ("corpus", "self"):
            want = current[name] * bs
            assert np.floor(want) - 1e-9 <= s["source_rows"].get(name, 0) <= np.ceil(want) + 1e-9, (s, current)


def test_resume_equals_uninterrupted(setup, tmp_path):
    full, full_steer = _run(setup)
    ckpt = tmp_path / "ckpt"
    part, _ = _run(setup, ckpt=ckpt, max_steps=5)  # stops between checkpoints (every 2 steps) and after a steer
    assert len(part.steps) == 5
    resumed, steer = _run(setup, ckpt=ckpt)
    assert resumed.resumed_from_step == 4
    assert [s["batch"] for s in resumed.steps] == [s["batch"] for s in full.steps]
    assert steer.trajectory == full_steer.trajectory
    assert steer.controller.state_dict() == full_steer.controller.state_dict()
    np.testing.assert_allclose([s["loss"] for s in resumed.steps], [s["loss"] for s in full.steps], rtol=1e-4)


def test_checkpoint_of_another_sequence_is_refused(setup, tmp_path):
    ckpt = tmp_path / "ckpt"
    _run(setup, ckpt=ckpt, max_steps=2)
    other = make_controller("bandit", MixLimits(("corpus", "self"), floor=0.05, max_share=0.5),
                            rng=np.random.default_rng(0), lr=3.0)  # another max_share: another configuration
    with pytest.raises(ReplayBankError, match=r"checkpoint field 'steer'.*max_share"):
        _run(setup, ckpt=ckpt, controller=other)
    from replaybank.llm.train import Source, add_lora, train_lora

    cfg, base, tok, data = setup
    same = [Source("corpus", data.rehearsal_pool, 0.1, sliced=True), Source("self", data.rehearsal_pool, 0.1)]
    with pytest.raises(ReplayBankError, match=r"checkpoint field 'steer': a run steered"):
        train_lora(add_lora(copy.deepcopy(base), cfg.training), tok.pad_token_id, data.domain_generations[0],
                   cfg.training, checkpoint_dir=ckpt, sources=same)


def test_main_job_arm_with_a_controller_records_its_mixture(tiny_model_dir, tmp_path):
    """``replaybank run`` with ``ratio = "auto"``: the arm is steered, metrics.json holds the
    mixture after every evaluation (the first before any step), mixture.png is drawn."""
    import json

    from replaybank.llm.recipes.rehearsal import run_experiment

    out = tmp_path / "run"
    cfg = Config.from_dict({
        "training": {"base_model": str(tiny_model_dir), "batch_size": 5, "learning_rate": 5e-3, "lora_rank": 2,
                     "rehearsal_rows_per_epoch": 20, "num_threads": 1, "num_train_epochs": 1},
        "data": {"domain_train_rows": 20, "domain_eval_rows": 4, "general_eval_rows": 4},
        "evaluation": {"eval_points": 2, "arms": ["base", "auto"], "suite_per_family": 1, "max_new_tokens": 4,
                       "probe_sources": False},
        "recipes": {"auto": {"source": "corpus", "ratio": "auto", "max_share": 0.4, "floor": 0.05}},
        "output": {"out_dir": str(out)},
    })
    run_experiment(cfg, log=lambda m: None, max_steps=4)
    arm = json.loads((out / "metrics.json").read_text())["arms"]["auto"]
    assert arm["controller"] == "bandit" and arm["spec"]["controller"] == "bandit"
    traj = arm["mixture"]
    assert [e["step"] for e in traj][0] == 0 and traj[-1]["step"] == 4 and len(traj) >= 3
    for e in traj:
        assert set(e["shares"]) == {"domain", "corpus"} and abs(sum(e["shares"].values()) - 1) < 1e-5
        assert 0.05 - 1e-6 <= e["shares"]["corpus"] <= 0.4 + 1e-6
    assert "loss" in traj[-1] and traj[-1]["loss"]["domain"] > 0
    assert len(arm["mixture_per_seed"]) == 1
    assert (out / "mixture.png").stat().st_size > 1000
