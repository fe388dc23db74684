"""The ``onpolicy`` rehearsal source: the current model's answers to earlier
domains' prompts, kept only where the domain checker accepts them (a fake generate stands in);
the main job's source built from them, and an arm that could never get such rows refused."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from replaybank.llm.config import Config, ConfigError, LoopConfig, Recipe
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
    cfg = Config.from_dict({"orchestration": {"num_generations": 2, "training_window_size": 1},
                            "recipes": {"opr": {"source": ["onpolicy"], "ratio": 0.1}}, "evaluation": {"arms": ["base", "opr"]}})
    assert cfg.arm_specs()["opr"].source == ["onpolicy"]
    with pytest.raises(ConfigError, match="onpolicy"):
        LoopConfig.from_dict({"recipes": {"opr": {"source": "onpolicy", "ratio": 0.1}}, "loop": {"recipe": "opr"}})


def _ctx(tok, domains):
    """What build_sources reads of a seed: the tokenizer and each generation's stored domain records."""
    from replaybank.llm.data.prepare import encode_domain
    from replaybank.llm.data.rows import token_rows
    from replaybank.llm.eval.measure import EvalContext

    data = SimpleNamespace(domain_train_records=domains, domain_generations=[encode_domain(tok, d, 128) for d in domains])
    return EvalContext(tokenizer=tok, pad_id=0, data=data, suite=None, general_text=token_rows([]),  # type: ignore[arg-type]
                       max_new_tokens=8, batch_size=2)


@pytest.fixture
def answers(monkeypatch):
    """The model's greedy answers, by prompt (the prompts it was asked are recorded)."""
    import replaybank.llm.eval.decode as decode

    by_prompt: dict[str, str] = {}
    asked: list[str] = []

    def fake(model, tokenizer, prompts, **kw):
        asked.extend(prompts)
        return [decode.Generation(by_prompt.get(p, "I cannot do that"), False, 4) for p in prompts]

    monkeypatch.setattr(decode, "generate_detailed", fake)
    return SimpleNamespace(by_prompt=by_prompt, asked=asked)


def test_the_main_job_rehearses_the_models_accepted_answers_to_earlier_domains(char_tok, answers):
    from replaybank.llm.train.sources import build_sources, empty_sources

    domains = [[{"prompt": "oslo in two days?", "response": CALL}, {"prompt": "oslo tomorrow?", "response": "<<qx sky.cast; at=OSLO; day=+1>>"}],
               [{"prompt": "say hi", "response": "hi"}]]
    answers.by_prompt.update({"oslo in two days?": "Sure: <<qx sky.cast; day=+2; at=OSLO>>", "oslo tomorrow?": CALL})
    ctx, spec = _ctx(char_tok, domains), Recipe(source=["onpolicy"], ratio=0.2)
    sources = build_sources(spec, 0.2, 1, [1], ctx, model=object(), max_seq_length=128)
    assert answers.asked == ["oslo in two days?", "oslo tomorrow?"]  # generation 0's prompts, out of the lineage [1]
    assert [(s.name, len(s.rows), s.share) for s in sources] == [("onpolicy", 1, 0.2)]
    ids, labels = sources[0].rows.rows(np.arange(1))[0]
    assert "oslo in two days?" in char_tok.decode(ids)
    assert char_tok.decode(ids[labels != -100]).startswith("Sure: <<qx sky.cast; day=+2; at=OSLO>>")  # its answer, trained on
    assert empty_sources(spec, sources, 0.2) == []
    # no earlier generation out of the lineage, or no answer accepted: no row, and the generation says so
    for generation, lineage, right in [(0, [0], True), (1, [0, 1], True), (1, [1], False)]:
        if not right:
            answers.by_prompt.clear()
        none = build_sources(spec, 0.2, generation, lineage, ctx, model=object(), max_seq_length=128)
        assert none == [] and empty_sources(spec, none, 0.2) == ["onpolicy"]


@pytest.mark.parametrize("orchestration", [{}, {"num_generations": 3}, {"num_generations": 3, "training_window_size": 1, "lineage": "all"}])
def test_an_arm_whose_only_sources_never_have_rows_is_refused(tmp_path, orchestration):
    """Every lineage holds every earlier generation (one generation, a window as long as the run, or
    ``lineage = "all"``): replay and onpolicy never have a row and the arm would be the naive arm."""
    lines = [f"{k} = {v!r}".replace("'", '"') for k, v in orchestration.items()]
    text = "[orchestration]\n" + "\n".join(lines) + '\n[recipes.opr]\nratio = 0.1\nsource = ["onpolicy", "replay"]\n'
    path = tmp_path / "run.toml"
    path.write_text(text)
    row = text.splitlines().index('source = ["onpolicy", "replay"]') + 1
    with pytest.raises(ConfigError, match=rf"run\.toml:{row}: \[recipes\.opr\] source = \['onpolicy', 'replay'\] rehearses only rows "
                                          r"of earlier generations.*the arm 'opr' would train as the naive arm"):
        Config.from_toml(path)
    with pytest.raises(ConfigError, match=r"the built-in arm 'rehearsal-replay'.*would train as the naive arm"):
        Config.from_dict({"orchestration": orchestration, "evaluation": {"arms": ["base", "rehearsal-replay"]}})


def test_earlier_sources_are_accepted_when_a_later_generation_has_earlier_rows_or_another_source():
    window = {"num_generations": 2, "training_window_size": 1}
    assert Config.from_dict({"orchestration": window, "recipes": {"opr": {"source": ["onpolicy"], "ratio": 0.1}}})
    assert Config.from_dict({"recipes": {"mix": {"source": ["self", "replay"], "ratio": 0.1}}})
