"""Every LLM command on the device it is given: ``cuda:N`` checked before the model loads, one GPU
per ``--jobs`` worker, the loop and ``rl grpo`` on their device, the KV-cache keyword of either
transformers API. No GPU is needed: ``torch.cuda`` is faked where a GPU would be."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from replaybank.llm.config import Config, ConfigError  # noqa: E402
from replaybank.llm.runtime import pick_device  # noqa: E402


class _Loaded(Exception):
    """Raised by a fake load_model: the model would have loaded here."""


def _gpus(monkeypatch: Any, n: int) -> list[int]:
    current: list[int] = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: n > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: n)
    monkeypatch.setattr(torch.cuda, "set_device", lambda i: current.append(int(i)))
    return current


def test_device_spellings_are_checked_when_the_config_is_read(tmp_path: Path) -> None:
    for good in ("auto", "cpu", "cuda", "cuda:0", "cuda:12"):
        assert Config.from_dict({"training": {"device": good}}).training.device == good
    path = tmp_path / "run.toml"
    for bad in ("gpu", "cuda:", "cuda:-1", "cuda:01", "cuda:x", "CPU"):
        path.write_text(f'[training]\ndevice = "{bad}"\n')
        with pytest.raises(ConfigError, match=r"run\.toml:2: \[training\] device = .*expected auto, cpu, cuda or cuda:N"):
            Config.from_toml(path)


def test_pick_device_against_the_machine(monkeypatch: Any) -> None:
    _gpus(monkeypatch, 0)
    assert pick_device("auto") == "cpu" and pick_device("cpu", worker=5) == "cpu"
    with pytest.raises(ConfigError, match=r"x\.toml: \[training\] device = 'cuda' but no CUDA device"):
        pick_device("cuda", where="x.toml: [training] device")
    _gpus(monkeypatch, 1)
    assert pick_device("auto") == "cuda" and pick_device("cuda:0") == "cuda:0"
    assert pick_device("cuda", worker=3) == "cuda"  # one GPU: every worker shares it
    with pytest.raises(ConfigError, match=r"device = 'cuda:3' but this machine has 1 CUDA device \(cuda:0\)"):
        pick_device("cuda:3")
    _gpus(monkeypatch, 4)
    assert [pick_device("cuda", worker=k) for k in range(6)] == ["cuda:0", "cuda:1", "cuda:2", "cuda:3", "cuda:0", "cuda:1"]
    assert [pick_device("auto", worker=k) for k in range(2)] == ["cuda:0", "cuda:1"]
    assert pick_device("cuda:2", worker=1) == "cuda:2"  # explicit: every worker on GPU 2
    with pytest.raises(ConfigError, match=r"4 CUDA devices \(cuda:0 \.\. cuda:3\)"):
        pick_device("cuda:4")


def test_run_with_a_missing_gpu_fails_before_the_model_loads(tmp_path: Path, monkeypatch: Any) -> None:
    from replaybank.llm import model as model_mod
    from replaybank.llm.recipes.rehearsal import run_experiment

    _gpus(monkeypatch, 1)

    def load(*a: Any, **k: Any) -> Any:
        raise _Loaded

    monkeypatch.setattr(model_mod, "load_model", load)
    path = tmp_path / "big.toml"
    path.write_text('[training]\ndevice = "cuda:3"\n')
    with pytest.raises(ConfigError, match=r"big\.toml: \[training\] device = 'cuda:3' but this machine has 1 CUDA device"):
        run_experiment(Config.from_toml(path), tmp_path / "out", log=lambda _: None)


def test_seed_workers_get_one_gpu_each(tmp_path: Path, monkeypatch: Any) -> None:
    from replaybank.llm import model as model_mod
    from replaybank.llm.recipes import rehearsal

    current = _gpus(monkeypatch, 2)
    seen: list[str] = []

    def load(name: str, device: str = "cpu", log: Any = None) -> Any:
        seen.append(device)
        raise _Loaded

    monkeypatch.setattr(model_mod, "load_model", load)
    cfg = Config.from_dict({"training": {"device": "cuda"}})
    for k in range(3):
        with pytest.raises(_Loaded):
            rehearsal._seed_worker(cfg, k, tmp_path, None)
    assert seen == ["cuda:0", "cuda:1", "cuda:0"] and current == [0, 1, 0]


def test_loop_loads_the_model_on_the_configured_device(tmp_path: Path, monkeypatch: Any) -> None:
    from replaybank.llm import model as model_mod
    from replaybank.llm.config.loop import LoopConfig
    from replaybank.llm.recipes.loop import run_loop

    seen: list[str] = []

    def load(name: str, device: str = "cpu", log: Any = None) -> Any:
        seen.append(device)
        raise _Loaded

    monkeypatch.setattr(model_mod, "load_model", load)
    current = _gpus(monkeypatch, 2)
    with pytest.raises(_Loaded):
        run_loop(LoopConfig.from_dict({"training": {"device": "cuda:1"}}), tmp_path / "a", log=lambda _: None)
    with pytest.raises(_Loaded):
        run_loop(LoopConfig.from_dict({"training": {"device": "cuda"}}), tmp_path / "b", log=lambda _: None, worker=3)
    assert seen == ["cuda:1", "cuda:1"] and current == [1, 1]
    _gpus(monkeypatch, 0)
    with pytest.raises(ConfigError, match=r"\[training\] device = 'cuda' but no CUDA device"):
        run_loop(LoopConfig.from_dict({"training": {"device": "cuda"}}), tmp_path / "c", log=lambda _: None)
    assert seen == ["cuda:1", "cuda:1"]  # refused before the model loads


def test_grpo_sampling_generator_lives_on_the_model_device(monkeypatch: Any) -> None:
    from replaybank.rl import sampling

    made: list[Any] = []

    class _Gen:
        def __init__(self, device: Any = "cpu") -> None:
            made.append(device)

        def manual_seed(self, seed: int) -> _Gen:
            return self

    model = SimpleNamespace(parameters=lambda: iter([SimpleNamespace(device=torch.device("cuda", 1))]))
    monkeypatch.setattr(torch, "Generator", _Gen)
    sampling.generator_for(model, 3)
    assert made == [torch.device("cuda", 1)]


class _OldApi(torch.nn.Module):
    """A causal LM with the transformers-4 forward: ``past_key_values`` in, ``past_key_values`` out."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(1))
        self.seen: list[Any] = []

    def forward(self, input_ids: Any, attention_mask: Any = None, position_ids: Any = None, past_key_values: Any = None,
                use_cache: bool = True, logits_to_keep: int = 0) -> Any:
        self.seen.append(past_key_values)
        logits = torch.zeros(input_ids.shape[0], 1, 8)
        logits[:, :, 5 if len(self.seen) < 3 else 7] = 1.0  # two tokens, then the stop token 7
        return SimpleNamespace(logits=logits, past_key_values=("kv", len(self.seen)))


class _NewApi(_OldApi):
    def forward(self, input_ids: Any, attention_mask: Any = None, position_ids: Any = None, cache: Any = None,  # type: ignore[override]
                use_cache: bool = True, logits_to_keep: int = 0) -> Any:
        out = super().forward(input_ids, attention_mask, position_ids, cache, use_cache, logits_to_keep)
        return SimpleNamespace(logits=out.logits, cache=out.past_key_values)


@pytest.mark.parametrize("klass", [_OldApi, _NewApi])
def test_decoding_passes_the_kv_cache_under_either_name(klass: type) -> None:
    from replaybank.llm.eval.decode import _decode
    from replaybank.rl.sampling import sample

    model = klass()
    ids, att = torch.ones(2, 3, dtype=torch.long), torch.ones(2, 3, dtype=torch.long)
    assert _decode(model, ids, att, 6, [7], 0, 0.0, None) == [[5, 5, 7], [5, 5, 7]]
    assert model.seen == [None, ("kv", 1), ("kv", 2)]  # each step gets the cache the last one returned
    model = klass()
    out = sample(model, [[1, 2], [3]], max_new_tokens=6, stop_ids=[7], pad_id=0, greedy=True)
    assert [t.tolist() for t in out.tokens] == [[5, 5, 7], [5, 5, 7]] and model.seen[1:] == [("kv", 1), ("kv", 2)]


def test_cache_keyword_of_the_installed_transformers(tiny_model_dir: Path) -> None:
    import inspect

    from transformers import AutoModelForCausalLM

    from replaybank.llm.model import cache_argument

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    expected = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    assert cache_argument(model) == expected
