"""``[evaluation] choose = "floor"`` end to end on a tiny random Llama: the frontier recorded, the
chosen point applied and saved, the report's plot, and a run killed while choosing resumes
without training again."""

from __future__ import annotations

import json

import pytest

from replaybank.llm.config import Config


@pytest.fixture(autouse=True)
def _own_cache(isolated_cache):
    """Suite answers of the tiny model go to a per-test cache, never the user's."""


def _cfg(model_dir, out, **evaluation):
    return Config.from_dict({
        "training": {"base_model": str(model_dir), "batch_size": 5, "learning_rate": 5e-3, "lora_rank": 4,
                     "num_threads": 1},
        "data": {"domain_train_rows": 10, "domain_eval_rows": 4, "general_eval_rows": 4},
        "evaluation": {"eval_points": 1, "arms": ["base", "naive"], "suite_per_family": 1,
                       "max_new_tokens": 4, "probe_sources": False, "choose": "floor", "scales": [0.5, 1.0],
                       "scale_profiles": ["uniform", "depth"], "retention_floor": 0.0, **evaluation},
        "output": {"out_dir": str(out)},
    })


@pytest.fixture(scope="module")
def floor_run(tiny_model_dir, tmp_path_factory):
    """One uninterrupted floor run of ``_cfg`` (2 steps, its own cache), built once: checked by
    ``test_a_floor_run_records_the_frontier_applies_the_choice_and_plots_it``, and the reference a
    run killed while choosing must equal once resumed. Returns ``(config, metrics, out folder)``."""
    from replaybank.llm.recipes.rehearsal import run_experiment

    tmp = tmp_path_factory.mktemp("floor-run")
    out = tmp / "run"
    cfg = _cfg(tiny_model_dir, out)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("REPLAYBANK_CACHE", str(tmp / "cache"))
        metrics = run_experiment(cfg, log=lambda m: None, max_steps=2)
    return cfg, metrics, out


def test_a_floor_run_records_the_frontier_applies_the_choice_and_plots_it(tiny_model_dir, floor_run):
    from replaybank.llm.data.prepare import prepare
    from replaybank.llm.data.validation import validation_requests
    from replaybank.llm.results import RunResult

    cfg, metrics, out = floor_run
    saved = RunResult.from_json(json.loads((out / "metrics.json").read_text()))
    assert saved == metrics
    (fr,) = saved.arms["naive"].frontier
    # uniform 0.5, 1 and depth 0.5-1 (depth 1-1 is uniform 1: measured once)
    assert [(p.profile, p.lo, p.hi) for p in fr.points] == [("uniform", 0.5, 0.5), ("uniform", 1.0, 1.0), ("depth", 0.5, 1.0)]
    assert fr.chosen is not None and fr.floor and set(fr.floor.values()) == {0.0}
    assert fr.keep_skill == 0.5  # the default skill rule, recorded
    best = max(p.domain_exact_match for p in fr.points)
    assert fr.points[fr.chosen].domain_exact_match == best
    assert fr.validation["suite"] == "builtin:validation" and all(i.startswith("val-") for i in fr.validation["ids"])
    assert saved.arms["base"].frontier is None
    manifest = json.loads((out / "adapters" / "naive" / "seed0" / "gen0" / "replaybank.json").read_text())
    if fr.points[fr.chosen].lo != 1.0 or fr.points[fr.chosen].hi != 1.0:
        assert manifest["operating_point"]["lo"] == fr.points[fr.chosen].lo
    assert (out / "frontier.png").is_file()
    report = (out / "report.md").read_text()
    assert "## Operating point" in report and "![frontier](frontier.png)" in report
    assert not (out / "arms").exists()

    data = prepare(cfg, __import__("transformers").AutoTokenizer.from_pretrained(tiny_model_dir))
    (val,), _ = validation_requests(cfg, data)
    test = {r["prompt"] for r in data.domain_eval_records[0]}
    train = {r["prompt"] for r in data.domain_train_records[0]}
    assert len(val) == 4 and not {r["prompt"] for r in val} & (test | train)


def test_an_unreachable_floor_keeps_the_trained_adapter_and_says_why(tiny_model_dir, tmp_path):
    from replaybank.llm.recipes.rehearsal import run_experiment

    metrics = run_experiment(_cfg(tiny_model_dir, tmp_path / "run", retention_floor=1.0, scales=[1.0],
                                  scale_profiles=["uniform"], suite_per_family=2), log=lambda m: None, max_steps=1)
    (fr,) = metrics.arms["naive"].frontier
    if fr.chosen is None:  # a random model keeps some family below 100%
        assert "runs as trained" in fr.reason
        assert metrics.arms["naive"].mean("domain_exact_match") == fr.trained_exact_match


class _Stop(Exception):
    """Stands for a kill while choosing."""


def test_a_run_killed_while_choosing_resumes_without_training_again(tiny_model_dir, tmp_path, floor_run):
    from replaybank.llm.recipes.rehearsal import run_experiment

    def stop_while_choosing(message: str) -> None:
        if "operating point" in message:
            raise _Stop

    out = tmp_path / "run"
    with pytest.raises(_Stop):
        run_experiment(_cfg(tiny_model_dir, out), log=stop_while_choosing, max_steps=2)
    partial = tmp_path / "run.partial"
    assert (partial / "arms" / "seed0-naive.trained.json").is_file()
    assert (partial / "arms" / "seed0-naive.trained" / "adapter_model.safetensors").is_file()
    lines: list[str] = []
    resumed = run_experiment(_cfg(tiny_model_dir, out), log=lines.append, max_steps=2)
    assert "naive seed0: trained in an earlier, interrupted run; its adapter read back, choosing again" in lines
    assert not [m for m in lines if m.startswith("naive seed0 gen")]  # not trained again
    _, reference, _ = floor_run  # the same config, run without interruption
    assert resumed.arms["naive"].frontier[0].points == reference.arms["naive"].frontier[0].points
    got = {k: s.values for k, s in resumed.arms["naive"].summary.items()}
    assert got == {k: s.values for k, s in reference.arms["naive"].summary.items()}



def test_the_choose_table_reports_each_seeds_choice_and_both_test_figures(tmp_path):
    """benchmarks/choose_table.py (the source of the chosen-point tables in docs/llm.md): per seed the
    chosen point and the test figures as trained and at that point, matched by seed number."""
    import subprocess
    import sys
    from pathlib import Path

    def point(profile, lo, em, ret, code=1.0):
        return {"made_by": "scale", "profile": profile, "lo": lo, "hi": 1.0 if profile == "depth" else lo,
                "change": lo, "domain_exact_match": em, "retention": {"arithmetic": ret, "code": code},
                "min_retention": min(ret, code)}

    frontier = [
        {"points": [point("uniform", 1.0, 0.7, 0.6, code=0.85), point("uniform", 0.5, 0.4, 0.95)], "chosen": 1,
         "reason": "best domain exact match keeping the floor", "tradeoff": -1.0, "pareto": [0, 1],
         "trained_exact_match": 0.66, "trained_retention": {"arithmetic": 0.55, "code": 0.9}},
        {"points": [point("uniform", 1.0, 0.6, 0.5), {**point("uniform", 1.0, 0.3, 0.4), "made_by": "checkpoint",
                                                        "profile": "none", "change": 0.5, "step": 3}],
         "chosen": None, "reason": "no point keeps the floor",
         "tradeoff": None, "pareto": [0], "trained_exact_match": 0.61, "trained_retention": {"arithmetic": 0.5, "code": 1.0}},
    ]
    metrics = {"seeds": [7, 8], "arms": {"base": {}, "self-distill": {
        "frontier": frontier,
        "summary": {"domain_exact_match": {"values": [0.42, 0.61]}},
        "families": {"arithmetic": {"per_seed": [{"seed": 8, "retention": 0.5}, {"seed": 7, "retention": 0.93}]},
                     "code": {"per_seed": [{"seed": 7, "retention": 1.0}, {"seed": 8, "retention": 1.0}]}},
    }}}
    src = tmp_path / "metrics.json"
    src.write_text(json.dumps(metrics))
    script = Path(__file__).resolve().parents[3] / "benchmarks" / "choose_table.py"
    got = tmp_path / "table.json"
    proc = subprocess.run([sys.executable, str(script), str(src), "--json", str(got), "--what-if", "arithmetic=0.5",
                           "--what-if", "0.99"], capture_output=True, text=True, check=True)
    arm = json.loads(got.read_text())["arms"]["self-distill"]
    # the chooser's own rule on the same points: arithmetic held to 0.5 and code, left out, to 0.9
    assert [pick["chosen"] for pick in arm["what_if"]["arithmetic=0.5"]] == [1, 0]
    assert [pick["chosen"] for pick in arm["what_if"]["0.99"]] == [None, None]
    first, second = arm["seeds"]
    assert (first["seed"], first["chosen"], second["chosen"]) == (7, 1, None)
    assert first["trained"] == {"domain_exact_match": 0.66, "retention": {"arithmetic": 0.55, "code": 0.9}}
    assert first["at_chosen"] == {"domain_exact_match": 0.42, "retention": {"arithmetic": 0.93, "code": 1.0}}
    assert arm["mean_at_chosen"]["min_retention"] == pytest.approx((0.93 + 0.5) / 2)
    assert arm["mean_trained"]["domain_exact_match"] == pytest.approx((0.66 + 0.61) / 2)
    assert "| 7 | uniform **chosen** | 0.5 / 0.5 | 40 |" in proc.stdout
    assert "| 7 | at chosen | 42 | 93 | 100 |" in proc.stdout
    assert "| 8 | checkpoint | step 3 | 30 |" in proc.stdout

    # the skill rule: seed 7's uniform 0.5 keeps the floor with 40% against 70% as trained
    subprocess.run([sys.executable, str(script), str(src), "--json", str(got), "--what-if", "arithmetic=0.5",
                    "--keep-skill", "0.6"], capture_output=True, text=True, check=True)
    (first, second) = json.loads(got.read_text())["arms"]["self-distill"]["what_if"]["arithmetic=0.5"]
    assert (first["chosen"], second["chosen"]) == (None, 0)
    assert "only by losing the skill (best such: 40% validation domain exact match vs 70% as trained" in first["reason"]
    bad = subprocess.run([sys.executable, str(script), str(src), "--keep-skill", "1.5"], capture_output=True, text=True)
    assert bad.returncode == 2 and "--keep-skill 1.5" in bad.stderr



def _checkpoint_cfg(model_dir, out):
    """``_cfg`` with ``checkpoints = 2`` and uniform scale 1 alone; run over 3 steps its states are
    kept at steps 1 and 2. Six suite items a family and 8 new tokens, so that the tiny model's
    figures tell its checkpoints from its end."""
    return _cfg(model_dir, out, checkpoints=2, scales=[1.0], scale_profiles=["uniform"], suite_per_family=6, max_new_tokens=8)


@pytest.fixture(scope="module")
def checkpoint_run(tiny_model_dir, tmp_path_factory):
    """One uninterrupted run of ``_checkpoint_cfg`` (3 steps, its own cache): checked by
    ``test_checkpoints_are_frontier_points_with_their_steps`` and the reference of the resumed run.
    Returns ``(metrics, out folder)``."""
    from replaybank.llm.recipes.rehearsal import run_experiment

    tmp = tmp_path_factory.mktemp("checkpoint-run")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("REPLAYBANK_CACHE", str(tmp / "cache"))
        metrics = run_experiment(_checkpoint_cfg(tiny_model_dir, tmp / "run"), log=lambda m: None, max_steps=3)
    return metrics, tmp / "run"


def test_checkpoints_are_frontier_points_with_their_steps(checkpoint_run):
    from replaybank.llm.results import RunResult

    metrics, out = checkpoint_run
    raw = json.loads((out / "metrics.json").read_text())
    assert RunResult.from_json(raw) == metrics
    (fr,) = metrics.arms["naive"].frontier
    assert [(p.made_by, p.profile, p.step, p.change) for p in fr.points] == [
        ("scale", "uniform", None, 1.0), ("checkpoint", "none", 1, pytest.approx(1 / 3)),
        ("checkpoint", "none", 2, pytest.approx(2 / 3))]
    trained = fr.points[0]
    for p in fr.points[1:]:  # measured on the state of its step, not on the adapter as trained
        assert (p.domain_exact_match, p.retention) != (trained.domain_exact_match, trained.retention)
    written = raw["arms"]["naive"]["frontier"][0]["points"]
    assert "step" not in written[0] and [w["step"] for w in written[1:]] == [1, 2]
    report = (out / "report.md").read_text()
    assert "| naive | 0 | checkpoint | step 1 |" in report and "| naive | 0 | checkpoint | step 2 |" in report


@pytest.mark.parametrize("winner", ["checkpoint step 2", "uniform 0.5"])
def test_the_chosen_point_is_loaded_saved_and_scored(tiny_model_dir, tmp_path, monkeypatch, winner):
    """A constructed frontier: the point ``winner`` is given the best validation domain score. A
    checkpoint chosen is the saved adapter to the tensor; a scale chosen after the checkpoints were
    measured is baked into the adapter as trained (the checkpoints' states taken off again)."""
    from dataclasses import replace

    from peft import get_peft_model_state_dict
    from safetensors.torch import load_file

    import replaybank.llm.eval.operating as operating
    from replaybank.llm.recipes.rehearsal import run_experiment

    seen: dict[str, dict] = {}
    real = operating.measure_point

    def measured(model, ctx, validation, scale, desc):
        point = real(model, ctx, validation, scale, desc)
        key = desc.removeprefix("naive seed0 ").replace("-0.5", "").replace("-1", "")
        seen[key] = {k: v.detach().clone() for k, v in get_peft_model_state_dict(model).items()}
        return replace(point, domain_exact_match=1.0) if key == winner else point

    monkeypatch.setattr(operating, "measure_point", measured)
    out = tmp_path / "run"
    cfg = _cfg(tiny_model_dir, out, checkpoints=2, scales=[0.5, 1.0], scale_profiles=["uniform"])
    metrics = run_experiment(cfg, log=lambda m: None, max_steps=3)
    (fr,) = metrics.arms["naive"].frontier
    assert set(seen) == {"uniform 0.5", "uniform 1", "checkpoint step 1", "checkpoint step 2"}
    chosen = fr.points[fr.chosen]
    saved = load_file(str(out / "adapters" / "naive" / "seed0" / "gen0" / "adapter_model.safetensors"))
    manifest = json.loads((out / "adapters" / "naive" / "seed0" / "gen0" / "replaybank.json").read_text())
    assert set(saved) == set(seen["uniform 1"])
    if winner.startswith("checkpoint"):
        assert (chosen.made_by, chosen.step) == ("checkpoint", 2)
        assert manifest["operating_point"]["step"] == 2 and manifest["operating_point"]["made_by"] == "checkpoint"
        assert all(saved[k].equal(v) for k, v in seen["checkpoint step 2"].items())
        assert any(not saved[k].equal(v) for k, v in seen["uniform 1"].items())
    else:
        assert (chosen.made_by, chosen.lo) == ("scale", 0.5) and manifest["operating_point"]["lo"] == 0.5
        for k, v in seen["uniform 1"].items():  # the adapter as trained, its B halved
            assert saved[k].allclose(v * 0.5 if "lora_B" in k else v)


def test_a_run_with_checkpoints_killed_while_choosing_resumes_without_training_again(tiny_model_dir, tmp_path, checkpoint_run):
    from replaybank.llm.recipes.rehearsal import run_experiment

    def stop_while_choosing(message: str) -> None:
        if "operating point" in message:
            raise _Stop

    out = tmp_path / "run"
    with pytest.raises(_Stop):
        run_experiment(_checkpoint_cfg(tiny_model_dir, out), log=stop_while_choosing, max_steps=3)
    staged = tmp_path / "run.partial" / "arms" / "seed0-naive.trained"
    assert sorted(p.name for p in staged.glob("checkpoint-step*")) == ["checkpoint-step1.safetensors",
                                                                         "checkpoint-step2.safetensors"]
    assert json.loads((staged / "replaybank.json").read_text())["checkpoints"] == {"steps": [1, 2], "last_step": 3}
    lines: list[str] = []
    resumed = run_experiment(_checkpoint_cfg(tiny_model_dir, out), log=lines.append, max_steps=3)
    assert "naive seed0: trained in an earlier, interrupted run; its adapter read back, choosing again" in lines
    assert not [m for m in lines if m.startswith("naive seed0 gen")]  # not trained again
    reference, _ = checkpoint_run
    assert resumed.arms["naive"].frontier[0].points == reference.arms["naive"].frontier[0].points
    assert resumed.arms["naive"].frontier[0].chosen == reference.arms["naive"].frontier[0].chosen
    got = {k: s.values for k, s in resumed.arms["naive"].summary.items()}
    assert got == {k: s.values for k, s in reference.arms["naive"].summary.items()}
