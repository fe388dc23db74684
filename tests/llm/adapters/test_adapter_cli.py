"""``replaybank adapters add | list | show | remove | merge | route`` end to end, on
adapters of the tiny random Llama written as the loop writes them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from replaybank.cli import main

torch = pytest.importorskip("torch")
peft = pytest.importorskip("peft")


def _loop_folder(model_dir: Path, where: Path, seed: int) -> Path:
    """A PEFT folder with the loop's replaybank.json (base model fingerprint included)."""
    from transformers import LlamaForCausalLM

    from replaybank.llm.eval.decode import model_fingerprint
    from replaybank.llm.train.peft_files import write_adapter_folder

    base = LlamaForCausalLM.from_pretrained(model_dir)
    torch.manual_seed(seed)
    model = peft.get_peft_model(base, peft.LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"],
                                                      init_lora_weights=False, task_type="CAUSAL_LM"))
    where.mkdir(parents=True)
    write_adapter_folder(model, where, {"generation": 1, "base_model": {"fingerprint": model_fingerprint(model),
                                                                        "name": str(model_dir)}})
    return where


def test_the_adapters_command_end_to_end(tiny_model_dir, tmp_path, capsys):
    lib = tmp_path / "lib"
    cart = _loop_folder(tiny_model_dir, tmp_path / "run" / "gen1", seed=1)
    weather = _loop_folder(tiny_model_dir, tmp_path / "run" / "gen2", seed=2)
    (tmp_path / "cart.txt").write_text("Add 3 eggs to my cart.\nPut rice in the shopping cart.\n")
    (tmp_path / "weather.txt").write_text("What is the forecast for Oslo tomorrow?\n")
    (tmp_path / "figures.json").write_text(json.dumps({"retention": 0.8}))
    assert main(["adapters", "add", str(lib), "cart", "--from", str(cart), "--skill", "shopping",
                 "--examples", str(tmp_path / "cart.txt")]) == 0
    # the gate: figures measured elsewhere, below the floor: refused (exit 2), then forced
    args = ["adapters", "add", str(lib), "weather", "--from", str(weather), "--skill", "weather",
            "--examples", str(tmp_path / "weather.txt"), "--figures", str(tmp_path / "figures.json"), "--floor", "0.9"]
    assert main(args) == 2
    assert "adapter 'weather', field 'figures.retention': retention 80.0% is below the floor 90.0%" in capsys.readouterr().err
    assert main([*args, "--force"]) == 0
    assert "FORCED below the floor" in capsys.readouterr().out
    assert main(["adapters", "list", str(lib), "--json"]) == 0
    index = json.loads(capsys.readouterr().out)
    assert sorted(index) == ["cart", "weather"] and index["weather"]["retention"] == 0.8
    assert main(["adapters", "show", str(lib), "cart", "--verify"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["skill"] == "shopping" and shown["source"] == str(cart) and shown["examples"][0] == "Add 3 eggs to my cart."
    assert main(["adapters", "route", str(lib), "Add milk to my cart", "Forecast for Oslo?", "Write a poem", "--json"]) == 0
    routes = json.loads(capsys.readouterr().out)
    assert [r["adapter"] for r in routes] == ["cart", "weather", None]
    (tmp_path / "general.txt").write_text("Write a poem about the sea.\nWhat is 2 + 2?\nName three rivers.\n")
    assert main(["adapters", "route", str(lib), "Add milk to my cart", "Write a short poem about rain", "--json",
                 "--background", str(tmp_path / "general.txt"), "--calibrate"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("calibrated: top-k ")
    assert [r["adapter"] for r in json.loads(out[out.index("["):])] == ["cart", None]
    assert main(["adapters", "route", str(lib), "hello", "--calibrate"]) == 2
    assert "field 'background': --calibrate needs --background" in capsys.readouterr().err
    assert main(["adapters", "merge", str(lib), "both", "--adapters", "cart,weather", "--type", "cat",
                 "--weights", "1,1", "--base", str(tiny_model_dir)]) == 0
    assert "registered both" in capsys.readouterr().out
    merged = peft.PeftModel.from_pretrained(__import__("transformers").LlamaForCausalLM.from_pretrained(tiny_model_dir),
                                            lib / "both")
    assert merged.peft_config["default"].r == 4
    assert main(["adapters", "merge", str(lib), "bad", "--adapters", "cart,both", "--type", "linear",
                 "--base", str(tiny_model_dir)]) == 2
    assert "adapter 'cart, both', field 'r': combination type 'linear' needs adapters of one rank" in capsys.readouterr().err
    assert main(["adapters", "remove", str(lib), "cart"]) == 0
    assert main(["adapters", "show", str(lib), "cart"]) == 2
    assert "adapter 'cart', field 'name': " in capsys.readouterr().err


def test_route_on_an_empty_library_is_a_clear_error(tmp_path, capsys):
    assert main(["adapters", "add", str(tmp_path / "lib"), "x", "--from", str(tmp_path / "nowhere"), "--skill", "s"]) == 2
    assert "field 'folder'" in capsys.readouterr().err
    assert main(["adapters", "route", str(tmp_path / "lib"), "hello"]) == 2
    err = capsys.readouterr().err
    assert "field 'adapters': " in err and "the library holds no adapter to route to" in err


def test_adapters_aggregate_merges_the_learners_of_a_skill(tiny_model_dir, tmp_path, capsys):
    lib = tmp_path / "lib"
    for seed in (1, 2):
        folder = _loop_folder(tiny_model_dir, tmp_path / f"seed{seed}" / "gen0", seed=seed)
        (tmp_path / f"ex{seed}.txt").write_text(f"Add {seed} eggs to my cart.\nPut rice in the shopping cart.\n")
        assert main(["adapters", "add", str(lib), f"cart-s{seed}", "--from", str(folder), "--skill", "shopping",
                     "--examples", str(tmp_path / f"ex{seed}.txt")]) == 0
    capsys.readouterr()
    assert main(["adapters", "aggregate", str(lib), "shopping", "--into", "cart", "--base", str(tiny_model_dir),
                 "--type", "cat"]) == 0
    assert "registered cart (" in capsys.readouterr().out
    assert main(["adapters", "show", str(lib), "cart", "--verify"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["skill"] == "shopping" and shown["parents"] == ["cart-s1", "cart-s2"]
    assert shown["merge"]["weights"] == [0.5, 0.5] and shown["merge"]["combination_type"] == "cat"
    assert shown["examples"] == ["Add 1 eggs to my cart.", "Put rice in the shopping cart.", "Add 2 eggs to my cart."]
    assert main(["adapters", "aggregate", str(lib), "weather", "--into", "w", "--base", str(tiny_model_dir)]) == 2
    assert "field 'skill': " in capsys.readouterr().err
    assert main(["adapters", "aggregate", str(lib), "shopping", "--into", "t", "--base", str(tiny_model_dir),
                 "--type", "ties"]) == 2
    assert "field 'density': combination type 'ties' needs density" in capsys.readouterr().err
