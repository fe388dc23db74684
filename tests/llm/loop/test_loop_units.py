"""The loop's pieces: where generation stops, lineage selection (window / all / best on the
validation split), the held-out split, config and state validation, batched stopping = one by one."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from replaybank.episodic import Task
from replaybank.episodic.env import QxEnvironment
from replaybank.llm.config import ConfigError
from replaybank.llm.config.loop import LoopConfig
from replaybank.llm.loop.act import call_end
from replaybank.llm.loop.lineage import lineage_for, split_heldout
from replaybank.llm.loop.state import (
    LoopState,
    StateError,
    check_same_config,
    check_same_run,
    new_state,
    read_state,
    write_state,
)


@pytest.mark.parametrize(
    ("text", "max_calls", "expected"),
    [
        ("<<qx a.b; k=v>>", 1, 15),
        ("<<qx a.b; k=v>> end; end; end;", 1, 15),          # the loop the base model falls into is cut
        ("<<qx a.b; k=v>> end;", 2, 15),                    # text after a call that opens no other call
        ("<<qx a.b; k=v>>", 2, None),                       # a second call may follow
        ("<<qx a.b; k=v>> <", 2, None),
        ("<<qx a.b; k=v>> <<qx c.d", 2, None),
        ("<<qx a.b; k=v>> <<qx c.d; x=1>>", 2, 31),
        ("<<qx a.b; k=v> still open", 1, None),
        ("Sure, here it is", 1, None),
    ],
)
def test_call_end(text, max_calls, expected):
    assert call_end(text, max_calls) == expected


def test_window_and_all_lineages():
    assert [lineage_for(g, 3, "window") for g in (1, 2, 3, 4, 5)] == [[1], [1, 2], [1, 2, 3], [2, 3, 4], [3, 4, 5]]
    assert lineage_for(4, 3, "all") == [1, 2, 3, 4]
    assert lineage_for(4, 1, "window") == [4]


def test_best_ranks_earlier_generations_by_the_validation_score_of_the_model_that_acted():
    # validation[j]: the model that acted in generation j + 1 (index 0 = the base model)
    validation = [0.0, 0.8, 0.1, 0.9, 0.2]
    assert lineage_for(5, 3, "best", validation) == [2, 4, 5]
    assert lineage_for(5, 2, "best", validation) == [4, 5]
    # later scores (of models that did not act yet) are never read
    assert lineage_for(3, 3, "best", validation[:2]) == lineage_for(3, 3, "best", validation) == [1, 2, 3]
    # ties go to the more recent generation
    assert lineage_for(4, 2, "best", [0.5, 0.5, 0.5]) == [3, 4]
    with pytest.raises(ValueError, match="needs a validation score for each of the 3 earlier"):
        lineage_for(4, 3, "best", [0.1])
    with pytest.raises(ValueError, match="start at 1"):
        lineage_for(0, 3, "window")


def test_validation_and_evaluation_tasks_are_disjoint_held_out_tasks():
    env = QxEnvironment(levels=(1, 2))
    heldout = env.tasks(40 + 24, split="heldout", seed=3)
    evaluation, validation = split_heldout(heldout, 40)
    train_ids = {t.id for t in env.tasks(200, split="train", seed=3)}
    assert len(evaluation) == 40 and len(validation) == 24
    assert not {t.id for t in evaluation} & {t.id for t in validation}
    assert not ({t.id for t in heldout} & train_ids)
    with pytest.raises(ValueError, match="overlap"):
        split_heldout([Task("a", "x"), Task("a", "x")], 1)


def test_config_errors_name_the_key_and_value():
    with pytest.raises(ConfigError, match=r"\[loop\] lineage = 'newest': expected one of 'window', 'all', 'best'"):
        LoopConfig.from_dict({"loop": {"lineage": "newest"}})
    with pytest.raises(ConfigError, match=r"\[loop\] demos = 40: expected a value in \[0, 16\]"):
        LoopConfig.from_dict({"loop": {"demos": 40}})
    with pytest.raises(ConfigError, match=r"levels = \[5\]"):
        LoopConfig.from_dict({"loop": {"levels": [5]}})
    with pytest.raises(ConfigError, match=r"unknown section \[trainig\]; did you mean 'training'"):
        LoopConfig.from_dict({"trainig": {}})
    with pytest.raises(ConfigError, match="rehearsal = 'corpus'"):
        LoopConfig.from_dict({"loop": {"rehearsal": "corpus"}})
    cfg = LoopConfig.from_dict({"training": {"learning_rate": 5e-4}})
    assert cfg.training.learning_rate == 5e-4 and cfg.training.lora_rank == 8  # loop defaults kept
    # the effective config written as TOML reads back as the same config, every key
    assert LoopConfig.from_dict(cfg.to_dict()).to_dict() == cfg.to_dict()


def test_printed_config_reads_back_as_the_same_config(tmp_path):
    cfg = LoopConfig.from_dict({"loop": {"generations": 3, "levels": [1, 3], "system_prompt": 'say "hi"\n'},
                                "training": {"learning_rate": 5e-4, "lora_target_modules": ["q_proj"]}})
    path = tmp_path / "loop.toml"
    path.write_text(cfg.to_toml(), encoding="utf-8")
    assert LoopConfig.from_toml(path).to_dict() == cfg.to_dict()
    assert LoopConfig.from_toml(path).to_dict() != LoopConfig().to_dict()  # the changes survived


def test_state_round_trip_and_refusals(tmp_path):
    cfg = LoopConfig().to_dict()
    write_state(tmp_path, new_state(cfg))
    state = read_state(tmp_path)
    assert state is not None and state.finished == 0 and state == new_state(cfg)
    check_same_config(tmp_path, state, LoopConfig().with_(generations=9).to_dict())  # more generations: fine
    # a run that finished 3 generations resumes with 3 or more, and is refused with fewer
    three = dataclasses.replace(state, finished=3)
    check_same_config(tmp_path, three, LoopConfig().with_(generations=3).to_dict())
    check_same_run(tmp_path, three, LoopConfig().with_(generations=4))
    with pytest.raises(StateError, match=r"finished 3 generations, but \[loop\] generations = 2; set generations "
                                         r"to at least 3 to resume it"):
        check_same_run(tmp_path, three, LoopConfig().with_(generations=2))
    with pytest.raises(StateError, match=r"\[loop\] seed = 0, not 1"):
        check_same_config(tmp_path, state, LoopConfig().with_(seed=1).to_dict())
    # A run written before a key existed resumes when the key is at the value it ran with then, else is refused.
    before = LoopConfig.before_keys_existed()
    older = dataclasses.replace(state, config={**state.config, "data": {k: v for k, v in cfg["data"].items() if k != "self_open_rows"}})
    check_same_config(tmp_path, older, LoopConfig().with_(self_open_rows=False).to_dict(), before)
    with pytest.raises(StateError, match=r"written before \[data\] self_open_rows existed \(it ran as self_open_rows = False\), not True"):
        check_same_config(tmp_path, older, LoopConfig().to_dict(), before)
    # a run saved before [loop] recipe holds the old rehearsal keys; it resumes under the recipe they
    # give (the default self-distill has the same values), and another recipe is refused
    # (and, as then, the keys of [evaluation] and [data] under [loop])
    loop = {k: v for k, v in {**cfg["loop"], **cfg["evaluation"], **cfg["data"]}.items() if k != "recipe"}
    old_loop = {**loop, "rehearsal": "self", "rehearsal_ratio": 0.5, "kl_weight": 3.0, "rehearsal_ce": False}
    old = dataclasses.replace(state, config={"loop": old_loop, "training": cfg["training"]})
    check_same_run(tmp_path, old, LoopConfig())
    with pytest.raises(StateError, match=r"\[recipe\] kl_to_base = 3.0, not 1.0"):
        check_same_run(tmp_path, old, LoopConfig.from_dict({"loop": {"kl_weight": 1.0}}))
    with pytest.raises(StateError, match=r"holds a loop run with \[recipe\] kl_to_base = 3.0, not None"):  # no rehearsal
        check_same_run(tmp_path, old, LoopConfig().with_(recipe="none"))
    # a run from before rehearsal_ce trained the rehearsal rows with cross-entropy, whatever the default is now
    assert before["recipe"]["rehearsal_ce"] is True
    older = dataclasses.replace(old, config={**old.config, "loop": {k: v for k, v in old_loop.items() if k != "rehearsal_ce"}})
    check_same_run(tmp_path, older, LoopConfig.from_dict({"loop": {"rehearsal_ce": True}}))
    with pytest.raises(StateError, match=r"written before \[recipe\] rehearsal_ce existed \(it ran as rehearsal_ce = True\), not False"):
        check_same_run(tmp_path, older, LoopConfig())
    (tmp_path / "state.json").write_text(json.dumps({"schema": 7}))
    with pytest.raises(StateError, match="schema 7"):
        read_state(tmp_path)
    (tmp_path / "state.json").write_text("{not json")
    with pytest.raises(StateError, match="not a loop state file"):
        read_state(tmp_path)


@pytest.mark.parametrize("finished", [-1, True])
def test_state_refuses_a_finished_count_that_is_not_a_generation(tmp_path, finished):
    write_state(tmp_path, dataclasses.replace(new_state(LoopConfig().to_dict()), finished=finished))
    with pytest.raises(StateError, match="'finished'"):
        read_state(tmp_path)


def test_load_adapter_refuses_files_linked_from_outside_the_run(tmp_path):
    from replaybank.llm.loop.consolidate import AdapterError, load_adapter

    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "adapter.safetensors").write_bytes(b"x")
    (outside / "adapter.json").write_text("{}")
    run = tmp_path / "run" / "adapters" / "gen1"
    run.mkdir(parents=True)
    for name in ("adapter.safetensors", "adapter.json"):
        (run / name).symlink_to(outside / name)
    with pytest.raises(AdapterError, match="symbolic link"):
        load_adapter(None, run)


def test_batched_stop_rule_matches_one_prompt_at_a_time(small_tok):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from replaybank.llm.eval.decode import generate_detailed

    torch.manual_seed(0)
    config = LlamaConfig(  # a wide init, so each prompt gets its own tokens (the default init repeats one)
        vocab_size=len(small_tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, tie_word_embeddings=True, initializer_range=1.0,
        pad_token_id=small_tok.pad_token_id, eos_token_id=small_tok.eos_token_id,
    )
    model = LlamaForCausalLM(config)
    prompts = [f"Request number {i}: {'add tea ' * (i % 4)}" for i in range(8)]

    def stop(ids: list[int]) -> bool:  # fires on content, at a different step in each row
        return len(ids) >= 2 and ids[-1] % 4 == 0

    batched = generate_detailed(model, small_tok, prompts, max_new_tokens=12, batch_size=8, stop_when=stop)
    single = [generate_detailed(model, small_tok, [p], max_new_tokens=12, batch_size=1, stop_when=stop)[0]
              for p in prompts]
    assert batched == single
    assert len({g.n_tokens for g in batched}) > 2  # the rows stopped at different steps
    assert all(not g.truncated for g in batched if g.n_tokens < 12)  # halted by the rule, not by the budget
    plain = generate_detailed(model, small_tok, prompts, max_new_tokens=12, batch_size=8)
    assert all(p.text.startswith(b.text) or p.n_tokens <= b.n_tokens for p, b in zip(plain, batched, strict=True))


def test_report_pairs_the_rehearsal_arms_per_seed_and_names_the_kl_weight():
    from replaybank.llm.loop.report import LoopRun, group_key, paired_gaps
    from replaybank.llm.loop.results import GenerationRow

    def saved(loop, rows=()):
        return LoopState(config={"loop": loop}, finished=max(len(rows) - 1, 0), generations=tuple(rows))

    def run(seed, rehearsal, retentions, kl=0.0, lineage="window"):
        arm = {"success": 0.0, "credit": 0.0}
        gens = [{"generation": g, "adapter": "base", "no_context": arm, "context": arm, "validation": arm,
                 "suite": {"leakage": None}, "retention": r} for g, r in enumerate(retentions)]
        lp = {"lineage": lineage, "window": 3, "rehearsal": rehearsal, "rehearsal_ratio": 0.5, "seed": seed,
              "kl_weight": kl}
        return LoopRun(f"{rehearsal}-{seed}", Path("."), saved(lp, [GenerationRow.from_json(g) for g in gens]))

    runs = [run(0, "self", [1.0, 0.9, 0.8], kl=1.0), run(1, "self", [1.0, 0.95, 0.9], kl=1.0),
            run(2, "self", [1.0, 0.5, 0.5], kl=1.0),  # seed 2 has no arm without rehearsal: left out
            run(0, "none", [1.0, 0.7, 0.75]), run(1, "none", [1.0, 0.75])]
    gaps = paired_gaps(runs)
    kl1 = "window (K=3), rehearsal self 50% + KL 1"
    assert list(gaps) == [kl1]
    assert gaps[kl1].seeds == [0, 1]
    assert len(gaps[kl1].generations) == 2  # the shortest paired run
    assert gaps[kl1].generations[1] == pytest.approx([0.2, 0.2])
    # a second rehearsal variant of the same lineage gets its own gaps against the same runs
    # without (it used to overwrite the first one's seeds), and another lineage pairs with nothing
    both = runs + [run(0, "self", [1.0, 0.6, 0.9], kl=3.0), run(0, "self", [1.0, 0.9], kl=1.0, lineage="all")]
    gaps2 = paired_gaps(both)
    assert set(gaps2) == {kl1, "window (K=3), rehearsal self 50% + KL 3"}
    assert gaps2[kl1] == gaps[kl1]
    assert gaps2["window (K=3), rehearsal self 50% + KL 3"].generations[1] == pytest.approx([-0.1])
    assert group_key(runs[0].state) == "window (K=3), rehearsal self 50% + KL 1"
    first = runs[0].state.config["loop"]
    assert isinstance(first, dict)
    kl_only = saved({**first, "kl_weight": 3.0, "rehearsal_ce": False})
    assert group_key(kl_only) == "window (K=3), rehearsal self 50% + KL 3 (no cross-entropy on it)"
    assert group_key(runs[3].state) == "window (K=3), no rehearsal"
    # runs that differ in the experience keys are different arms, not seeds of one
    levels = saved({**first, "replay_workflows": True, "reflect": True, "retrieve": ["episodes", "workflows"]})
    assert group_key(levels) == (group_key(runs[0].state)
                                 + ", replay workflows, reflect, retrieve episodes+workflows")
    assert paired_gaps(runs[:3]) == {}


def test_the_defaults_are_the_config_the_published_tables_measured():
    # The README's and docs/loop.md's loop tables (benchmarks/results/loop.md) were measured with
    # `replaybank loop` and no config; benchmarks/results/loop_config.toml is that config, as
    # `replaybank loop --print-config` printed it. A changed default makes those tables describe
    # something else: re-measure them (and rewrite this file) in the same change.
    from pathlib import Path

    measured = Path(__file__).resolve().parents[3] / "benchmarks" / "results" / "loop_config.toml"
    assert LoopConfig().to_dict() == LoopConfig.from_toml(measured).to_dict()
