"""The main job's ``peer-sdft`` (TRL's SDFTTrainer) and ``routed`` (the adapter library's router)
arms: recognised by the config, refused when TRL lacks the trainer, and run in a tiny job."""

from __future__ import annotations

import json
import sys

import pytest

from replaybank.llm.config import Config, ConfigError
from replaybank.llm.train.trl_peer import lora_steps, sdft_rows


def test_the_arms_are_recognised_and_have_no_rehearsal_rows():
    cfg = Config.from_dict({"evaluation": {"arms": ["base", "naive", "peer-sdft", "routed"]}})
    for arm in ("peer-sdft", "routed"):
        plan = cfg.arm_plan(arm)
        assert plan.recipe.source == [] and plan.share == 0.0


def test_sdft_rows_take_the_answer_as_the_demonstration():
    rows = sdft_rows([{"prompt": "p", "response": "r"},
                      {"messages": [{"role": "user", "content": "u"}, {"role": "assistant", "content": "a"}]}])
    assert rows[1] == {"prompt": [{"role": "user", "content": "u"}], "privileged_context": "a"}
    with pytest.raises(ValueError, match="f.jsonl:3: peer-sdft needs request/answer rows"):
        sdft_rows([{"text": "plain", "where": "f.jsonl:3"}])


def test_sdft_takes_the_steps_of_the_lora_loop():
    t = Config.from_dict({"training": {"batch_size": 4, "gradient_accumulation_steps": 2, "num_train_epochs": 3}}).training
    assert lora_steps(10, t) == 6 and lora_steps(10, t, max_steps=2) == 2


def test_a_trl_without_sdft_is_refused_when_the_config_is_checked(tiny_model_dir, monkeypatch):
    from replaybank.llm.config.check import check_sources

    monkeypatch.setitem(sys.modules, "trl.experimental.sdft", None)  # importing it now raises ImportError
    cfg = Config.from_dict({"training": {"base_model": str(tiny_model_dir)},
                            "evaluation": {"arms": ["base", "peer-sdft"]}})
    with pytest.raises(ConfigError, match=r"\[evaluation\] arms contains 'peer-sdft': TRL .* has no SDFTTrainer .*"
                                          r"the arm needs trl >= 1.16"):
        check_sources(cfg)
    check_sources(Config.from_dict({"training": {"base_model": str(tiny_model_dir)},
                                    "evaluation": {"arms": ["base", "routed"]}}))  # routed needs no TRL


def test_a_missing_trl_names_the_extra_that_installs_it(monkeypatch):
    """The main job's bootstrap installs only its own extras: an arm that needs TRL says how to get it."""
    import importlib.metadata

    from replaybank.llm.train import trl_peer

    real = importlib.metadata.version

    def version(name):
        if name == "trl":
            raise importlib.metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(importlib.metadata, "version", version)
    missing = trl_peer.sdft_missing()
    assert missing is not None and missing.startswith("TRL is not installed")
    assert "replaybank[hf]" in missing and "scripts/bootstrap.sh" in missing


def test_peer_sdft_and_routed_train_and_are_scored_in_a_tiny_run(tiny_model_dir, tmp_path, capfd, caplog):
    pytest.importorskip("trl.experimental.sdft", reason="TRL without SDFTTrainer: peer-sdft needs trl >= 1.16")
    from replaybank.llm.eval.measure import flatten
    from replaybank.llm.recipes.rehearsal import run_experiment
    from replaybank.llm.results import ArmResult

    cfg = Config.from_dict({
        "training": {"base_model": str(tiny_model_dir), "batch_size": 4, "learning_rate": 5e-3, "lora_rank": 2,
                     "num_threads": 1},
        "data": {"domain_train_rows": 8, "domain_eval_rows": 3, "general_eval_rows": 3},
        "evaluation": {"arms": ["base", "naive", "peer-sdft", "routed"], "eval_points": 1, "suite_per_family": 1,
                       "max_new_tokens": 4, "probe_sources": False},
        "output": {"save_adapters": True},
    })
    out = tmp_path / "run"
    metrics = run_experiment(cfg, out, log=lambda m: None, max_steps=2, seeds=1).to_json()
    (seed_file,) = (out / "seeds").glob("seed*.json")
    per_seed = json.loads(seed_file.read_text())["arms"]
    err = capfd.readouterr().err
    assert "peer-sdft seed0 gen 0" in err  # the arm's progress bar
    logged = err + "".join(r.getMessage() for r in caplog.records)
    assert "already contains a PEFT adapter" not in logged  # TRL's warning on the teacher this arm chose
    (gen,) = metrics["arms"]["peer-sdft"]["generations"]
    assert [s["step"] for s in gen["train"]["steps"]] == [1, 2]  # the naive arm's budget, capped at 2
    assert all(s["distillation_loss"] is not None for s in gen["train"]["steps"])
    for arm in ("peer-sdft", "routed"):  # scored like every arm
        assert {"domain_exact_match", "leakage", "general_loss"} <= set(flatten(ArmResult.from_json(per_seed[arm], arm)))
        assert {"domain_exact_match", "leakage"} <= set(metrics["arms"][arm]["summary"])
    sdft_weights = _tensors(out / "adapters" / "peer-sdft" / "seed0" / "gen0")
    naive_weights = _tensors(out / "adapters" / "naive" / "seed0" / "gen0")
    assert max(float((sdft_weights[k] - naive_weights[k]).abs().max()) for k in sdft_weights) > 1e-6
    routed = per_seed["routed"]
    assert 0.0 <= routed["routing"]["fallback_general"] <= 1.0 and len(routed["routing"]["to_own"]) == 1
    assert set(routed["unrouted"]) == {"suite", "domain"} and "retention" in routed["suite"]
    assert routed["router"]["threshold"] > 0
    # the arm as measured is kept: its library, whose examples calibrate the same router again
    from replaybank.llm.adapters import AdapterLibrary, Router
    from replaybank.llm.adapters.routed_arm import ENTRY
    from replaybank.llm.data.selfsynth import load_prompt_pool

    library = AdapterLibrary(out / "adapters" / "routed" / "seed0" / "library")
    assert library.names() == [ENTRY]
    again = Router.calibrated({ENTRY: library.manifest(ENTRY).examples}, load_prompt_pool()[0])
    assert (again.top_k, again.threshold) == (routed["router"]["top_k"], routed["router"]["threshold"])
    kept = _tensors(out / "adapters" / "routed" / "seed0" / "gen0")
    assert set(_tensors(library.folder(ENTRY))) == set(kept)


def _tensors(folder):
    from safetensors.torch import load_file

    return load_file(str(folder / "adapter_model.safetensors"))
