"""End to end on a tiny random Llama: self / KL / replay / token-mixed arms over two domains and two
seeds, the output folder protected without --force, and self-synthesis that yields nothing."""

from __future__ import annotations

import json

import pytest

from replaybank.errors import ReplayBankError
from replaybank.llm.config import Config


def _cfg(model_dir, **evaluation):
    return Config.from_dict({
        "orchestration": {"num_generations": 2, "training_window_size": 1},
        "training": {"base_model": str(model_dir), "batch_size": 5, "learning_rate": 5e-3, "lora_rank": 2,
                     "rehearsal_rows_per_epoch": 10, "mixing_ratio": 0.2, "num_threads": 1},
        "data": {"domain_train_rows": 10, "domain_eval_rows": 3, "general_eval_rows": 3, "self_rows": 6,
                 "domain_train": ["builtin:toolapi", "builtin:agenda"], "domain_eval": ["builtin:toolapi", "builtin:agenda"]},
        "evaluation": {"eval_points": 1, "suite_per_family": 2, "max_new_tokens": 4, "probe_pairs": 1, **evaluation},
        "recipes": {"mixed": {"source": ["self", "replay"], "ratio": 0.3, "mix_by": "tokens", "kl_to_base": 0.5}},
        "output": {"save_adapters": False},
    })


@pytest.fixture(autouse=True)
def _own_cache(isolated_cache):
    """Suite answers and self rows of the tiny model go to a per-test cache, never the user's."""


@pytest.fixture
def fake_self_answers(monkeypatch):
    """The tiny random model writes no usable answer; the base model's 'own answers' are faked here."""
    import replaybank.llm.data.selfsynth as selfsynth
    from replaybank.llm.eval.decode import Generation

    def fake(model, tokenizer, prompts, **kw):
        return [Generation(f"Here is a short answer number {k} about it.", False, 12) for k, _ in enumerate(prompts)]

    monkeypatch.setattr(selfsynth, "generate_detailed", fake)


def test_self_kl_replay_arms_over_two_domains_and_two_seeds(tiny_model_dir, tmp_path, fake_self_answers):
    from replaybank.llm.recipes.rehearsal import run_experiment

    out = tmp_path / "run"
    cfg = _cfg(tiny_model_dir, arms=["base", "naive", "rehearsal-corpus", "rehearsal-self-kl", "mixed"], probe_sources=True)
    metrics = run_experiment(cfg, out, log=lambda m: None, max_steps=2, seeds=2)
    saved = json.loads((out / "metrics.json").read_text())
    assert saved["seeds"] == [0, 1] and (out / "seeds" / "seed1.json").is_file() and (out / "behaviour.png").is_file()
    arms = saved["arms"]
    assert set(arms) == {"base", "naive", "rehearsal-corpus", "rehearsal-self-kl", "mixed"}  # each arm once, by its name
    for name in ("base", "naive", "rehearsal-corpus", "rehearsal-self-kl"):
        assert {"general_loss", "domain_loss", "probe_score"} <= set(arms[name])
    naive = arms["naive"]["summary"]["leakage"]
    assert naive["n"] == 2 and naive["std"] is not None and naive["mean"] == pytest.approx(sum(naive["values"]) / 2)
    # the KL arm logs its KL term on steps that hold rehearsal rows; the others never do
    kl_steps = [s["kl"] for g in arms["rehearsal-self-kl"]["generations"] for s in g["train"]["steps"] if s["rehearsal_rows"]]
    assert kl_steps and all(k is not None and k >= 0 for k in kl_steps)
    assert all(s["kl"] is None for g in arms["naive"]["generations"] for s in g["train"]["steps"])
    # replay exists only from the second domain on; its rows are the first domain's
    gens = arms["mixed"]["generations"]
    assert set(gens[0]["sources"]) == {"self"} and set(gens[1]["sources"]) == {"self", "replay"}
    assert gens[0]["empty_sources"] == ["replay"] and "empty_sources" not in gens[1]  # recorded where a source had no row
    assert gens[1]["sources"]["replay"]["rows"] == 10
    assert set(arms["mixed"]["loss_share"]["label_tokens"]) == {"domain", "self", "replay"}
    assert arms["rehearsal-corpus"]["loss_share"]["rows"]["corpus"] > 0
    # 2 x 2 accuracy matrix per arm and seed; backward transfer from replaybank.metrics
    assert all(len(r) == 2 for r in arms["mixed"]["matrix"]["R_mean"])
    assert "backward_transfer" in arms["mixed"]["summary"]
    assert [c["source"] for c in saved["probe"]["comparison"]] == ["corpus", "self"]
    assert saved["targets"]["arms"].keys() == {"rehearsal-corpus", "rehearsal-self-kl", "mixed"}
    report = (out / "report.md").read_text()
    assert "| rehearsal-self-kl |" in report and "±" in report and "accuracy matrix" in report
    assert metrics.wall_seconds > 0 and metrics.arms["naive"].summary["leakage"].to_json() == naive


def test_earlier_output_is_never_replaced_without_force(tiny_model_dir, tmp_path):
    from replaybank.llm.recipes.rehearsal import OutputError, run_experiment

    out = tmp_path / "run"
    cfg = _cfg(tiny_model_dir, arms=["naive"])
    run_experiment(cfg, out, log=lambda m: None, max_steps=1)
    before = (out / "metrics.json").read_bytes()
    with pytest.raises(OutputError, match=r"holds an earlier run's output; pass --force"):
        run_experiment(cfg, out, log=lambda m: None, max_steps=1)
    assert (out / "metrics.json").read_bytes() == before and not (tmp_path / "run.partial").exists()
    # leftovers of an interrupted run with another config are not discarded either
    partial = tmp_path / "other.partial"
    partial.mkdir()
    (partial / "config.sha256").write_text("another config")
    with pytest.raises(OutputError, match=r"leftovers of an interrupted run with another config.*--force"):
        run_experiment(cfg, tmp_path / "other", log=lambda m: None, max_steps=1)
    assert (partial / "config.sha256").read_text() == "another config"
    # force=True replacing the output: test_cli_seeds_and_force_flags (--force, the same call)


def test_self_synthesis_that_yields_nothing_stops_the_run(tiny_model_dir, tmp_path, monkeypatch):
    import replaybank.llm.data.selfsynth as selfsynth
    from replaybank.llm.eval.decode import Generation
    from replaybank.llm.recipes.rehearsal import run_experiment

    monkeypatch.setattr(selfsynth, "generate_detailed",
                        lambda model, tok, prompts, **kw: [Generation("word " * 40, True, 96) for _ in prompts])
    with pytest.raises(ReplayBankError, match="no usable"):
        run_experiment(_cfg(tiny_model_dir, arms=["naive", "rehearsal-self"]), tmp_path / "o", log=lambda m: None, max_steps=1)
    assert not (tmp_path / "o").exists()


def test_cli_seeds_and_force_flags(tiny_model_dir, tmp_path, capsys):
    from replaybank.llm import cli

    conf = tmp_path / "c.toml"
    conf.write_text(
        f'[training]\nbase_model = "{tiny_model_dir}"\nbatch_size = 5\nnum_threads = 1\n'
        '[data]\ndomain_train_rows = 5\ndomain_eval_rows = 2\ngeneral_eval_rows = 2\n'
        '[evaluation]\narms = ["base", "naive"]\nsuite_per_family = 1\nmax_new_tokens = 3\n[output]\nsave_adapters = false\n'
    )
    out = tmp_path / "o"
    assert cli.main(["run", str(conf), "--out", str(out), "--max-steps", "1", "--seeds", "2"]) == 0
    assert json.loads((out / "metrics.json").read_text())["seeds"] == [0, 1]
    capsys.readouterr()
    assert cli.main(["run", str(conf), "--out", str(out), "--max-steps", "1"]) == 2
    assert "pass --force to replace it" in capsys.readouterr().err
    assert cli.main(["run", str(conf), "--out", str(out), "--max-steps", "1", "--force"]) == 0
    assert json.loads((out / "metrics.json").read_text())["seeds"] == [0]  # the 2-seed output was replaced
    assert cli.main(["run", str(conf), "--out", str(out), "--seeds", "0"]) == 2


def test_seeds_in_worker_processes_match_the_sequential_run(tiny_model_dir, tmp_path):
    from replaybank.llm.recipes.rehearsal import run_experiment

    cfg = _cfg(tiny_model_dir, arms=["base", "naive"], probe_sources=False)
    # one domain and generation: the seeds' figures, not the number of generations, are compared
    data = {**cfg.to_dict()["data"], "domain_train": ["builtin:toolapi"], "domain_eval": ["builtin:toolapi"]}
    cfg = type(cfg).from_dict({**cfg.to_dict(), "orchestration": {"num_generations": 1}, "data": data})
    seq = run_experiment(cfg, tmp_path / "seq", log=lambda m: None, max_steps=1, seeds=2)
    par = run_experiment(cfg, tmp_path / "par", log=lambda m: None, max_steps=1, seeds=2, jobs=2)
    for arm in ("base", "naive"):
        for key in ("general_loss", "domain_loss", "leakage"):
            assert par.arms[arm].summary[key].values == pytest.approx(seq.arms[arm].summary[key].values, rel=1e-5)


def test_arms_in_worker_processes_match_the_sequential_run(tiny_model_dir, tmp_path):
    """``arm_processes = 2``: the trained arms of each seed run side by side in two one-thread
    workers and the figures are those of the one-process run, arm for arm."""
    from replaybank.llm.recipes.rehearsal import run_experiment

    raw = _cfg(tiny_model_dir, arms=["base", "naive", "rehearsal-corpus"], probe_sources=False).to_dict()
    raw["orchestration"] = {"num_generations": 1}
    raw["data"] = {**raw["data"], "domain_train": ["builtin:toolapi"], "domain_eval": ["builtin:toolapi"]}
    seq = run_experiment(Config.from_dict(raw), tmp_path / "seq", log=lambda m: None, max_steps=2, seeds=1)
    logs: list[str] = []
    raw["evaluation"] = {**raw["evaluation"], "arm_processes": 2}
    par = run_experiment(Config.from_dict(raw), tmp_path / "par", log=logs.append, max_steps=2, seeds=1)
    assert "arm processes: 2 (arm_processes = 2 in the config)" in logs
    assert par.environment["arm_processes"] == {"processes": 2, "reason": "arm_processes = 2 in the config"}
    assert "the trained arms in 2 processes of one thread" in (tmp_path / "par" / "report.md").read_text()
    assert sum("trained in a worker process; read back" in line for line in logs) == 2
    for arm in ("naive", "rehearsal-corpus"):
        assert par.arms[arm].summary == seq.arms[arm].summary
    assert par.timings["rehearsal-corpus_seed0"] > 0 and par.timings["naive_seed0"] > 0  # the workers' own seconds


def test_auto_arm_processes_take_one_per_thread_on_a_cpu_when_the_copies_fit(monkeypatch):
    import torch

    from replaybank.llm.recipes import rehearsal

    model = torch.nn.Linear(1024, 1024)  # 4 MiB of parameters
    cpu = torch.device("cpu")
    monkeypatch.setattr(rehearsal, "available_memory", lambda: 2**30)
    assert rehearsal.arm_processes(0, 2, cpu, model, 3)[0] == 2
    assert rehearsal.arm_processes(0, 1, cpu, model, 3) == (1, "auto: one process (one thread chosen)")
    assert rehearsal.arm_processes(0, 2, cpu, model, 1)[0] == 1  # one trained arm: nothing to run beside it
    assert rehearsal.arm_processes(0, 2, torch.device("cuda"), model, 3) == (1, "auto: one process (not on a CPU)")
    monkeypatch.setattr(rehearsal, "available_memory", lambda: 12 * 2**20)  # 2 copies = 8 MiB > half of 12 MiB
    assert "exceed half the free" in rehearsal.arm_processes(0, 2, cpu, model, 3)[1]
    assert rehearsal.arm_processes(3, 1, cpu, model, 3) == (3, "arm_processes = 3 in the config")


def test_control_arm_learns_its_rehearsal_rows_alone_and_is_no_domain_target(tiny_model_dir, tmp_path, fake_self_answers):
    from replaybank.llm.recipes.rehearsal import run_experiment

    out = tmp_path / "run"
    cfg = _cfg(tiny_model_dir, arms=["base", "naive", "rehearsal-self", "control"])
    logs: list[str] = []
    cfg = type(cfg).from_dict({**cfg.to_dict(), "orchestration": {"num_generations": 1},
                               "data": {**cfg.to_dict()["data"], "domain_train": ["builtin:toolapi"],
                                        "domain_eval": ["builtin:toolapi"]}})
    run_experiment(cfg, out, log=logs.append, max_steps=2, seeds=1)
    saved = json.loads((out / "metrics.json").read_text())
    arms = saved["arms"]
    control, naive = arms["control"], arms["naive"]
    # every row it trained on is a self row (the base model's own answers); none is a domain row
    assert control["loss_share"]["rows"] == {"self": 1.0} and control["share"] == 1.0
    steps = [s for g in control["generations"] for s in g["train"]["steps"]]
    assert steps and all(set(s["source_rows"]) == {"self"} for s in steps)
    assert len(steps) == len([s for g in naive["generations"] for s in g["train"]["steps"]])  # same steps as naive
    assert control["spec"]["domain"] is False and "domain" not in naive["spec"]
    # measured and reported beside the others, but no rehearsal arm: no domain target, no probe comparison arm
    assert any(k.startswith("retention_") for k in control["summary"])
    assert "control" not in saved["targets"]["arms"] and "rehearsal-self" in saved["targets"]["arms"]
    assert all(c.get("rehearsal_arm") != "control" for c in saved["probe"]["comparison"])
    # the early warning: KL to the base on domain rows at every evaluation point, in the curve and the log
    assert all(p["domain_kl"] >= 0 for a in ("naive", "control") for p in arms[a]["curve"])
    assert any("KL(base||adapter) on domain" in line for line in logs)
    assert not any("needed" in line for line in logs if line.startswith("probe "))  # measured figures, no verdict
    warning = saved["early_warning"]
    assert warning["n"] == 3 and {p["arm"] for p in warning["points"]} == {"naive", "rehearsal-self", "control"}
    report = (out / "report.md").read_text()
    assert "| control |" in report and "## Early warning" in report and "n = 3" in report
