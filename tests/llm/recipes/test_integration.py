"""End to end on a tiny randomly initialised Llama (seconds): the run, resume, bad input."""

from __future__ import annotations

import json

import numpy as np
import pytest

from replaybank.llm.config import Config
from replaybank.llm.data.corpus import CorpusError
from replaybank.llm.model import ModelError


@pytest.fixture(autouse=True)
def _own_cache(isolated_cache):
    """Suite answers of the tiny model go to a per-test cache, never the user's."""


def _cfg(model_dir, out, **training):
    return Config.from_dict({
        "training": {"base_model": str(model_dir), "batch_size": 5, "learning_rate": 5e-3, "lora_rank": 4,
                     "rehearsal_rows_per_epoch": 20, "mixing_ratio": 0.1, "num_threads": 1, **training},
        "data": {"domain_train_rows": 20, "domain_eval_rows": 5, "general_eval_rows": 4},
        "evaluation": {"eval_points": 2, "arms": ["base", "naive", "rehearsal"], "suite_per_family": 2,
                       "max_new_tokens": 6, "probe_pairs": 1},
        "output": {"out_dir": str(out)},
    })


@pytest.fixture(scope="module")
def uninterrupted(tiny_model_dir, tmp_path_factory):
    """One uninterrupted run of ``_cfg`` (its own cache), built once: its report is checked by
    ``test_tiny_run_writes_complete_report``, and it is the reference a resumed run must equal."""
    from replaybank.llm.recipes.rehearsal import run_experiment

    tmp = tmp_path_factory.mktemp("uninterrupted")
    out = tmp / "run"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("REPLAYBANK_CACHE", str(tmp / "cache"))
        metrics = run_experiment(_cfg(model_dir=tiny_model_dir, out=out), log=lambda m: None)
    return metrics, out


def test_tiny_run_writes_complete_report(uninterrupted):
    metrics, out = uninterrupted
    assert sorted(p.name for p in out.iterdir()) == ["adapters", "behaviour.png", "losses.png", "metrics.json", "report.md", "seeds"]
    assert not out.with_name("run.partial").exists()
    saved = json.loads((out / "metrics.json").read_text())
    assert saved["arms"].keys() == {"base", "naive", "rehearsal"}
    for arm in saved["arms"].values():
        for key in ("general_loss", "domain_loss", "probe_score"):
            assert isinstance(arm[key], float) and np.isfinite(arm[key])
    assert saved["wall_seconds"] == metrics.wall_seconds > 0
    assert saved == json.loads(json.dumps(metrics.to_json()))  # the file is the returned record
    reh = saved["arms"]["rehearsal"]["generations"][0]["train"]["steps"]
    # 20 domain rows at 90% of batches of 5: quotas alternate 4/5 domain rows; 10% => 0 or 1 rehearsal row
    assert {s["rehearsal_rows"] for s in reh} <= {0, 1}
    assert saved["mixing"]["share"] == 0.1
    # The quota carries its fractional credit from batch to batch: the running count of rehearsal
    # rows is never a full row away from 10% of the rows drawn so far (a floor per batch would give 0).
    rows = np.cumsum([s["rows"] for s in reh])
    drawn = np.cumsum([s["rehearsal_rows"] for s in reh])
    assert drawn[-1] > 0 and np.all(np.abs(drawn - 0.1 * rows) < 1), list(zip(rows, drawn))
    assert saved["mixing"]["measured_row_share"] == pytest.approx(drawn[-1] / rows[-1], abs=1e-12)
    naive = saved["arms"]["naive"]["generations"][0]["train"]["steps"]
    assert all(s["rehearsal_rows"] == 0 for s in naive)
    assert len(saved["arms"]["naive"]["curve"]) == 2
    adapter = out / "adapters" / "rehearsal" / "seed0" / "gen0"
    assert (adapter / "adapter_config.json").is_file()
    assert json.loads((adapter / "replaybank.json").read_text())["config"]["training"]["lora_rank"] == 4
    report = (out / "report.md").read_text()
    assert "| naive |" in report
    assert saved["environment"]["thread_choice"]["reason"] == "num_threads = 1 in the config"
    assert "1 torch thread(s): num_threads = 1 in the config)" in report
    # per family: retention with its interval and the flips, from the per-item outcomes; the gate
    assert saved["schema_version"] == 4
    base_fams = saved["arms"]["base"]["families"]
    for fam, entry in saved["arms"]["naive"]["families"].items():
        assert entry["n_items"] == base_fams[fam]["n_items"] >= 1
        if entry["retention"] is not None:
            assert entry["retention"]["low"] <= entry["retention"]["mean"] <= entry["retention"]["high"]
            assert entry["retention"]["mean"] == pytest.approx(saved["arms"]["naive"][f"retention_{fam}"], abs=1e-4)
        lost = [i for i in saved["arms"]["naive"]["flips"][0]["lost"] if i["family"] == fam]
        assert len(lost) == entry["lost"] and all(i["prompt"] and "base_answer" in i for i in lost)
    assert saved["gate"]["chosen_arm"] == "rehearsal" and set(saved["gate"]["arms"]) == {"naive", "rehearsal"}
    assert "## Retention gate" in report and "## Items lost and gained" in report


def test_generations_window(tiny_model_dir, tmp_path):
    from replaybank.llm.recipes.rehearsal import run_experiment

    cfg = Config.from_dict({
        "orchestration": {"num_generations": 3, "training_window_size": 2},
        "training": {"base_model": str(tiny_model_dir), "batch_size": 5, "lora_rank": 2, "num_threads": 1},
        "data": {"domain_train_rows": 10, "domain_eval_rows": 3, "general_eval_rows": 3},
        "evaluation": {"arms": ["naive"], "eval_points": 1, "suite_per_family": 1, "max_new_tokens": 4},
        "output": {"save_adapters": False},
    })
    metrics = run_experiment(cfg, tmp_path / "gens", log=lambda m: None)
    naive = metrics.arms["naive"]
    gens = naive.generations or []
    assert [g.lineage for g in gens] == [[0], [0, 1], [1, 2]]
    assert [g.domain_rows for g in gens] == [10, 20, 20]
    # one accuracy-matrix row per generation, one column per generation's held-out domain set
    assert len(naive.matrix.R_mean) == 3


def test_resume_sees_same_data_order(tiny_model_dir, tmp_path):
    import copy

    from replaybank.llm.data.prepare import prepare
    from replaybank.llm.model import load_model
    from replaybank.llm.train import Source, add_lora, train_lora

    cfg = _cfg(tiny_model_dir, tmp_path, save_every=2, gradient_accumulation_steps=2, num_train_epochs=2)
    base, tok = load_model(cfg.training.base_model, "cpu")
    data = prepare(cfg, tok)
    dom, pool = data.domain_generations[0], data.rehearsal_pool

    def fresh():
        return add_lora(copy.deepcopy(base), cfg.training)

    corpus = [Source("corpus", pool, 0.1, sliced=True)]
    full = train_lora(fresh(), tok.pad_token_id, dom, cfg.training, sources=corpus)
    ckpt = tmp_path / "ckpt"
    part = train_lora(fresh(), tok.pad_token_id, dom, cfg.training, checkpoint_dir=ckpt, max_steps=4, sources=corpus)
    assert len(part.steps) == 4 and (ckpt / "checkpoint.pt").is_file()
    resumed = train_lora(fresh(), tok.pad_token_id, dom, cfg.training, checkpoint_dir=ckpt, sources=corpus)
    assert resumed.resumed_from_step == 4
    assert [s["batch"] for s in resumed.steps] == [s["batch"] for s in full.steps]
    assert [s["epoch"] for s in full.steps].count(1) > 0  # crossed into the second epoch
    np.testing.assert_allclose([s["loss"] for s in resumed.steps], [s["loss"] for s in full.steps], rtol=1e-4)


def test_bad_target_module_lists_the_real_ones(tiny_model_dir, tmp_path):
    from replaybank.llm.recipes.rehearsal import run_experiment

    cfg = _cfg(tiny_model_dir, tmp_path / "o", lora_target_modules=["q_proj", "c_attn"])
    with pytest.raises(ModelError, match=r"c_attn not found in the model; its linear modules are: .*down_proj.*q_proj"):
        run_experiment(cfg, log=lambda m: None)
    assert not (tmp_path / "o").exists()


def test_missing_base_model_path(tmp_path):
    from replaybank.llm.model import resolve_base_model

    with pytest.raises(ModelError, match="path does not exist"):
        resolve_base_model(str(tmp_path / "no" / "model"))
    with pytest.raises(ModelError, match=r"missing.gguf: file not found"):
        resolve_base_model(str(tmp_path / "missing.gguf"))
    with pytest.raises(ModelError, match="not in the local Hugging Face cache"):
        resolve_base_model("someone/not-a-cached-model")


def test_bad_domain_data_and_interrupted_run_leaves_nothing_complete(tiny_model_dir, tmp_path):
    from replaybank.llm.recipes.rehearsal import run_experiment

    bad = tmp_path / "dom.jsonl"
    bad.write_text('{"prompt": "a", "response": "b"}\n{"prompt": "a"}\n')
    cfg = Config.from_dict({
        "training": {"base_model": str(tiny_model_dir), "num_threads": 1},
        "data": {"domain_train": [str(bad)], "domain_eval": str(bad)},
        "evaluation": {"arms": ["base", "naive"], "suite_per_family": 1},
    })
    with pytest.raises(CorpusError, match=r"dom.jsonl:2: a domain line needs prompt\+response"):
        run_experiment(cfg, tmp_path / "out", log=lambda m: None)
    assert not (tmp_path / "out").exists()

    def boom(message):
        if message.startswith("naive seed0 gen 0:"):
            raise KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt):
        run_experiment(_cfg(tiny_model_dir, tmp_path / "out2"), log=boom)
    assert not (tmp_path / "out2").exists()
    assert not (tmp_path / "out2.partial" / "metrics.json").exists()


def test_out_dir_that_is_not_a_run_is_refused(tiny_model_dir, tmp_path):
    from replaybank.llm.recipes.rehearsal import OutputError, run_experiment

    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("precious")
    with pytest.raises(OutputError, match="not a replaybank run folder"):
        run_experiment(_cfg(tiny_model_dir, tmp_path / "mine"), log=lambda m: None)
    assert (tmp_path / "mine" / "notes.txt").read_text() == "precious"


def test_probe_on_tiny_model(tiny_model_dir, tmp_path):
    from replaybank.llm.recipes.interference import run_probe

    rep = run_probe(_cfg(tiny_model_dir, tmp_path), pairs=2, log=lambda m: None)
    assert len(rep.pairs) == 2
    assert all(-1 <= p.cosine <= 1 and 0 <= p.alpha <= 1 for p in rep.pairs)


class _Stop(Exception):
    """Stands for a kill: raised from the log once the naive arm of seed 0 has been trained."""


def test_interrupted_run_resumes_from_partial_without_retraining(tiny_model_dir, tmp_path, uninterrupted):
    from replaybank.llm.recipes.rehearsal import run_experiment

    def cfg(out):
        return _cfg(tiny_model_dir, out)

    def stop_after_naive(message: str) -> None:
        if message.startswith("naive seed0:"):
            raise _Stop

    out = tmp_path / "run"
    with pytest.raises(_Stop):
        run_experiment(cfg(out), log=stop_after_naive)
    partial = tmp_path / "run.partial"
    assert not out.exists() and (partial / "arms" / "seed0-naive.json").is_file()
    assert not (partial / "arms" / "seed0-rehearsal.json").exists()  # the kill came before the next arm

    lines: list[str] = []
    resumed = run_experiment(cfg(out), log=lines.append)
    assert out.is_dir() and not partial.exists() and not (out / "arms").exists()
    assert "naive seed0: finished in an earlier, interrupted run; read back" in lines
    assert not [m for m in lines if m.startswith("naive seed0 gen")]  # not trained again
    assert [m for m in lines if m.startswith("rehearsal seed0 gen 0:")]  # the arm the kill cut off

    reference, _ = uninterrupted  # the same config, run without interruption
    for arm in ("base", "naive", "rehearsal"):
        # every scalar the report aggregates (losses, probe, suite retention per family, leakage,
        # domain accuracy) is the uninterrupted run's, bit for bit
        got = {key: s.values for key, s in resumed.arms[arm].summary.items()}
        want = {key: s.values for key, s in reference.arms[arm].summary.items()}
        assert got.keys() == want.keys() and len(got) >= 5, (arm, sorted(got))
        assert got == want, arm
