"""Peer methods as arms of the main job (llm/train/peers.py), run through PEFT, on the tiny random Llama.

The config names them and refuses unknown ones and a PEFT without the call a peer needs; each peer
changes what PEFT computes (CorDA's init is not LoRA's, the intruder reduction changes the delta,
OSF trains its own parameters); every peer arm trains two steps inside a tiny run, is scored, and
its saved adapter loads on the untouched base.
"""

from __future__ import annotations

import json

import pytest

from replaybank.llm.config import Config, ConfigError, LoopConfig
from replaybank.llm.config.recipe import builtin, recipe_dict

PEER_ARMS = ["peer-osf", "peer-corda", "peer-intruder", "peer-attn-lowrank"]


def _cfg(tiny_model_dir, arms, **training):
    return Config.from_dict({
        "training": {"base_model": str(tiny_model_dir), "batch_size": 5, "learning_rate": 5e-3, "lora_rank": 2,
                     "num_threads": 1, "lora_dropout": 0.0, **training},
        "data": {"domain_train_rows": 10, "domain_eval_rows": 3, "general_eval_rows": 3},
        "evaluation": {"arms": arms, "eval_points": 1, "suite_per_family": 2, "max_new_tokens": 4, "probe_sources": False},
    })


def test_peer_arms_are_built_in_recipes_without_rehearsal():
    cfg = Config.from_dict({"evaluation": {"arms": ["base", "naive", *PEER_ARMS]}})
    assert [cfg.arm_plan(a).recipe.peer for a in PEER_ARMS] == ["osf", "corda", "intruder", "attn-lowrank"]
    assert all(cfg.arm_plan(a).share == 0 and not cfg.arm_plan(a).recipe.source for a in PEER_ARMS)
    assert recipe_dict(builtin("peer-osf"))["peer"] == "osf" and "peer" not in recipe_dict(builtin("naive"))
    mixed = Config.from_dict({"recipes": {"osf-self": {"source": "self", "ratio": 0.2, "peer": "osf"}}})
    assert Config.from_dict(mixed.to_dict()).arm_specs()["osf-self"].peer == "osf"


def test_an_unknown_peer_names_the_key_and_line(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text('[training]\nseed = 0\n\n[evaluation]\narms = ["base", "peer-osff"]\n')
    with pytest.raises(ConfigError, match=r"run.toml:5: \[evaluation\] arms contains 'peer-osff'.*did you mean 'peer-osf'"):
        Config.from_toml(path)
    path.write_text('[recipes.mine]\nsource = []\npeer = "lora-xs"\n')
    with pytest.raises(ConfigError, match=r"run.toml:3: .*peer.*'lora-xs'.*osf"):
        Config.from_toml(path)


def test_the_loop_refuses_a_peer_recipe():
    with pytest.raises(ConfigError, match=r"sets peer = 'osf', a peer method of `replaybank run`"):
        LoopConfig.from_dict({"loop": {"recipe": "mine"}, "recipes": {"mine": {"source": "self", "ratio": 0.5, "peer": "osf"}}})


def test_a_peft_without_the_peer_is_refused_when_the_config_is_checked(monkeypatch, tmp_path):
    import peft

    from replaybank.llm.config.check import check_sources

    path = tmp_path / "run.toml"
    path.write_text(f'[output]\nout_dir = "{tmp_path / "out"}"\n\n[evaluation]\narms = ["base", "naive", "peer-osf"]\n')
    cfg = Config.from_toml(path)
    monkeypatch.delattr(peft, "OSFConfig")
    with pytest.raises(ConfigError, match=r"run.toml:5: arm 'peer-osf' \(peer osf\) needs peft.OSFConfig, added in PEFT 0.18 "
                                          r"\(installed: PEFT [0-9.]+\); upgrade peft"):
        check_sources(cfg)


@pytest.fixture(autouse=True)
def _own_cache(isolated_cache):
    """Suite answers of the tiny model go to a per-test cache, never the user's."""


def _ids(tok):
    import torch

    return torch.tensor([tok("Name three colours of the rainbow.")["input_ids"]])


def test_corda_starts_from_its_own_init_and_loads_on_the_untouched_base(tiny_model_dir, tmp_path):
    import torch
    from peft import PeftModel

    from replaybank.llm.model import load_model, peft_wrapping
    from replaybank.llm.train.adapter import fresh_adapter
    from replaybank.llm.train.peers import PeerHooks, peer_calibration
    from replaybank.llm.train.peft_files import write_adapter_folder

    cfg = _cfg(tiny_model_dir, ["base", "peer-corda"])
    base, tok = load_model(str(tiny_model_dir), "cpu", lambda m: None)
    before = {n: p.detach().clone() for n, p in base.named_parameters()}
    with torch.no_grad():
        reference = base(_ids(tok)).logits
    prompts = peer_calibration("corda", tok, "builtin", seed=0, exclude=["Name three colours of the rainbow."])
    assert 0 < len(prompts) <= 128
    with fresh_adapter(base, cfg.training, "corda", prompts) as model:
        hooks = PeerHooks.of("corda", model)
        b = [p for n, p in model.named_parameters() if "lora_B" in n]
        assert b and all(float(p.detach().abs().max()) > 0 for p in b)  # LoRA's default init has B = 0; CorDA's does not
        with torch.no_grad():
            assert torch.allclose(model(_ids(tok)).logits, reference, atol=1e-4)  # residual + adapter = the base
            for n, p in model.named_parameters():
                if "lora_" in n:
                    p.add_(0.05 * torch.randn_like(p))  # as if trained
            trained = model(_ids(tok)).logits
        assert not torch.allclose(trained, reference, atol=1e-3)
        folder = tmp_path / "corda"
        folder.mkdir()
        write_adapter_folder(model, folder, {"arm": "peer-corda"}, converted=hooks.saved(model))
    assert all(torch.equal(p, before[n]) for n, p in base.named_parameters())  # the residuals are put back
    assert json.loads((folder / "adapter_config.json").read_text())["r"] == 4
    fresh, _ = load_model(str(tiny_model_dir), "cpu", lambda m: None)
    with peft_wrapping():
        loaded = PeftModel.from_pretrained(fresh, str(folder))
    with torch.no_grad():
        assert torch.allclose(loaded(_ids(tok)).logits, trained, atol=1e-4)


def test_the_intruder_reduction_changes_the_delta(tiny_model_dir):
    import torch

    from replaybank.llm.model import load_model
    from replaybank.llm.train.adapter import fresh_adapter
    from replaybank.llm.train.peers import PeerHooks

    cfg = _cfg(tiny_model_dir, ["base", "peer-intruder"])
    base, _ = load_model(str(tiny_model_dir), "cpu", lambda m: None)
    with fresh_adapter(base, cfg.training, "intruder") as model:
        torch.manual_seed(1)
        with torch.no_grad():
            for n, p in model.named_parameters():
                if "lora_B" in n:
                    p.copy_(torch.randn_like(p))  # a delta far from the base's singular directions
        layer = model.base_model.model.model.layers[0].self_attn.q_proj
        delta = layer.get_delta_weight("default").clone()
        lines: list[str] = []
        assert PeerHooks.of("intruder", model).after_training(model, lines.append)
        assert list(model.peft_config) == ["default"] and model.active_adapters == ["default"]
        assert float((layer.get_delta_weight("default") - delta).detach().abs().max()) > 1e-3
        assert all(p.requires_grad for n, p in model.named_parameters() if "lora_" in n)  # trains on next generation
        assert lines and "intruder reduction:" in lines[0]


def test_osf_trains_its_own_parameters_and_unloads(tiny_model_dir):
    import torch

    from replaybank.llm.model import load_model
    from replaybank.llm.train.adapter import fresh_adapter

    cfg = _cfg(tiny_model_dir, ["base", "peer-osf"])
    base, _ = load_model(str(tiny_model_dir), "cpu", lambda m: None)
    before = {n: (p.detach().clone(), p.requires_grad) for n, p in base.named_parameters()}
    with fresh_adapter(base, cfg.training, "osf") as model:
        assert model.peft_type == "OSF"
        trainable = [n for n, p in model.named_parameters() if p.requires_grad]
        assert trainable and all("osf_svd_params" in n for n in trainable)
        with torch.no_grad():
            for p in model.parameters():
                if p.requires_grad:
                    p.add_(0.05 * torch.randn_like(p))
        layer = model.base_model.model.model.layers[0].self_attn.q_proj
        assert float(layer.get_delta_weight("default").detach().abs().max()) > 1e-3  # the low subspace moved the weight
    assert [n for n, _ in base.named_parameters()] == list(before)
    assert all(torch.equal(p, before[n][0]) and p.requires_grad == before[n][1] for n, p in base.named_parameters())


def test_every_peer_arm_trains_is_scored_and_saves_a_loadable_adapter(tiny_model_dir, tmp_path):
    import torch
    from peft import PeftModel

    from replaybank.llm.model import load_model, peft_wrapping
    from replaybank.llm.recipes.rehearsal import run_experiment

    cfg = _cfg(tiny_model_dir, ["base", "naive", *PEER_ARMS])
    out = tmp_path / "run"
    lines: list[str] = []
    metrics = run_experiment(cfg, out, log=lines.append, max_steps=2, seeds=1).to_json()
    for arm in ["naive", *PEER_ARMS]:
        entry = metrics["arms"][arm]
        assert entry["general_loss"] > 0 and "families" in entry and "domain_exact_match" in entry, arm
        assert len(entry["curve"]) == 1, arm  # the intruder arm's last point replaced, not added
    assert any("intruder reduction:" in line for line in lines)
    assert not set(PEER_ARMS) & set(metrics["targets"].get("arms", {}))  # no rehearsal: not a rehearsal arm
    ids = torch.tensor([[1, 2, 3, 4, 5]])
    naive = json.loads((out / "adapters" / "naive" / "seed0" / "gen0" / "adapter_config.json").read_text())
    for arm in PEER_ARMS:
        folder = out / "adapters" / arm / "seed0" / "gen0"
        assert json.loads((folder / "replaybank.json").read_text())["spec"]["peer"] == arm.removeprefix("peer-")
        fresh, _ = load_model(str(tiny_model_dir), "cpu", lambda m: None)
        with torch.no_grad():
            plain = fresh(ids).logits
            with peft_wrapping():
                wrapped = PeftModel.from_pretrained(fresh, str(folder))
            loaded = wrapped(ids).logits
        assert not torch.allclose(plain, loaded, atol=1e-6), arm  # two steps moved it
    lowrank = json.loads((out / "adapters" / "peer-attn-lowrank" / "seed0" / "gen0" / "adapter_config.json").read_text())
    assert lowrank["r"] == 4 and sorted(lowrank["target_modules"]) == ["k_proj", "o_proj", "q_proj", "v_proj"]
    assert naive["r"] == 2 and len(naive["target_modules"]) == 7
    assert json.loads((out / "adapters" / "peer-osf" / "seed0" / "gen0" / "adapter_config.json").read_text())["peft_type"] == "OSF"
