"""The ``onpolicy`` rehearsal source: the current model's answers to earlier
domains' prompts, kept only where the domain checker accepts them (a fake generate stands in)."""

from __future__ import annotations

import pytest

from replaybank.llm.config import Config, ConfigError, LoopConfig
from replaybank.llm.data.onpolicy import domain_accepts, onpolicy_records

CALL = "<<qx sky.cast; at=OSLO; day=+2>>"


def test_only_accepted_answers_become_rows_with_the_models_answer():
    earlier = [
        [{"prompt": "oslo in two days?", "response": CALL}, {"prompt": "oslo tomorrow?", "response": "<<qx sky.cast; at=OSLO; day=+1>>"}],
        [{"prompt": "say hi", "response": "hi"}, {"text": "no prompt: skipped"}],
    ]
    asked: list[list[str]] = []

    def generate(prompts):
        asked.append(list(prompts))
        # right on the first prompt (arguments in another order), wrong day on the second, right on "say hi"
        return ["Sure: <<qx sky.cast; day=+2; at=OSLO>>", CALL] if len(prompts) == 2 else [" hi "]

    rows, info = onpolicy_records(generate, earlier)
    assert asked == [["oslo in two days?", "oslo tomorrow?"], ["say hi"]]
    assert rows == [{"prompt": "oslo in two days?", "response": "Sure: <<qx sky.cast; day=+2; at=OSLO>>"},
                    {"prompt": "say hi", "response": " hi "}]
    assert info == {"asked": [2, 1], "accepted": [1, 1]}


def test_checker_and_bad_generate():
    assert domain_accepts({"response": CALL}, CALL + " and some words after")
    assert not domain_accepts({"response": CALL}, "I cannot do that")
    with pytest.raises(ValueError, match="gave 0 answers to 1 prompts"):
        onpolicy_records(lambda ps: [], [[{"prompt": "p", "response": "r"}]])


def test_onpolicy_is_a_source_of_the_main_job_not_of_the_loop():
    cfg = Config.from_dict({"recipes": {"opr": {"source": ["onpolicy"], "ratio": 0.1}}, "evaluation": {"arms": ["base", "opr"]}})
    assert cfg.arm_specs()["opr"].source == ["onpolicy"]
    with pytest.raises(ConfigError, match="onpolicy"):
        LoopConfig.from_dict({"recipes": {"opr": {"source": "onpolicy", "ratio": 0.1}}, "loop": {"recipe": "opr"}})
