"""On-policy self-distillation (the ``selfgen`` source, :mod:`replaybank.llm.train.selfgen`): its rows are
the current adapter's own greedy answers, rewritten every ``refresh_every`` steps inside the LoRA loop,
learnt through the KL term on their answer tokens; a resumed run equals an uninterrupted one; the
``self-distill-onpolicy`` recipe runs in the main job and records what generating costs (tiny random Llama)."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest

from replaybank.errors import ReplayBankError
from replaybank.llm.config import Config, ConfigError
from replaybank.llm.config.recipe import builtin, recipe_dict

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

PROMPTS = ["Name a colour.", "Write a haiku about rain.", "What is 3 + 4?", "Give me a tip for sleeping well.",
           "Describe a cat in one sentence.", "List two fruits."]
TOKENS = 6  # answer budget: the tiny model's answers run to it (open rows)


@pytest.fixture(autouse=True)
def _own_cache(isolated_cache):
    """Nothing of the tiny model goes to the user's cache."""


@pytest.fixture(scope="module")
def setup(tiny_model_dir, tmp_path_factory):
    return _setup(tiny_model_dir, tmp_path_factory)


@pytest.fixture(scope="module")
def setup_full_vocab(full_vocab_model_dir, tmp_path_factory):
    """``_setup`` on SmolLM2's full vocabulary: after two steps at this learning rate the 2k-token
    tiny model answers every prompt with whitespace, so its refreshed rows hold no answer token."""
    return _setup(full_vocab_model_dir, tmp_path_factory)


def _setup(tiny_model_dir, tmp_path_factory):
    from replaybank.llm.data.prepare import prepare
    from replaybank.llm.model import load_model

    cfg = Config.from_dict({
        "training": {"base_model": str(tiny_model_dir), "batch_size": 4, "learning_rate": 3e-2, "lora_rank": 2,
                     "num_threads": 1, "save_every": 2, "num_train_epochs": 1},
        "data": {"domain_train_rows": 24, "domain_eval_rows": 2, "general_eval_rows": 2},
        "output": {"out_dir": str(tmp_path_factory.mktemp("unused"))},
    })
    base, tok = load_model(cfg.training.base_model, "cpu")
    return cfg, base, tok, prepare(cfg, tok)


def _greedy(model, tok, prompts=PROMPTS):
    from replaybank.llm.eval.decode import generate_detailed

    return [(g.text, g.truncated) for g in generate_detailed(model, tok, prompts, max_new_tokens=TOKENS, batch_size=4)]


def _selfgen(tok, every, cls=None):
    from replaybank.llm.train.selfgen import SelfGenRows

    records = [(p, "Sure.", False) for p in PROMPTS]  # where the rows start: replaced before the first step
    return (cls or SelfGenRows)(tok, records, every=every, max_new_tokens=TOKENS, batch_size=4, max_seq_length=64)


def _run(setup, every=3, ckpt=None, max_steps=None, cls=None):
    from replaybank.llm.train import KLSpec, Source, add_lora, train_lora

    cfg, base, tok, data = setup
    model = add_lora(copy.deepcopy(base), cfg.training)
    own = _selfgen(tok, every, cls)
    log = train_lora(model, tok.pad_token_id, data.domain_generations[0], cfg.training, checkpoint_dir=ckpt,
                     max_steps=max_steps, sources=[Source("selfgen", own.rows, 0.5, refresh=own)],
                     kl=KLSpec(3.0, rehearsal_ce=False))
    return log, own, model


def test_rows_are_the_current_adapters_answers_and_change_after_a_refresh(setup):
    from replaybank.llm.train.selfgen import SelfGenRows

    tok = setup[2]

    class Watched(SelfGenRows):
        """Records, at every refresh, its answers and a separate generation from the model at that step."""

        seen: dict[int, tuple[list, list]] = {}

        def refresh(self, model, step):
            counts = super().refresh(model, step)
            Watched.seen[step] = (list(self.answers), _greedy(model, tok))
            return counts

    log, own, model = _run(setup, every=2, max_steps=4, cls=Watched)
    assert [r["step"] for r in log.refreshes] == [0, 2, 4]  # before the first step, then every 2
    for step, (answers, generated) in Watched.seen.items():
        assert answers == generated, step  # the rows are the model's own greedy answers at that step
    assert own.answers == _greedy(model, tok)  # the last refresh: the model as it ended
    assert Watched.seen[0][0] == _greedy(setup[1], tok)  # before step 1 the adapter is the base model (B = 0)
    assert Watched.seen[4][0] != Watched.seen[0][0]  # training moved the adapter, and its rows followed
    assert sum(r["changed"] for r in log.refreshes[1:]) > 0
    # the rows drawn are the refreshed ones: each step's selfgen rows are encodings of the answers in force
    assert all(s["source_rows"]["selfgen"] == 2 for s in log.steps)
    for r in log.refreshes:
        assert r["rows"] == len(PROMPTS) and r["seconds"] > 0 and r["train_seconds"] >= 0
    assert log.refreshes[0]["train_seconds"] == 0.0 and log.refreshes[1]["train_seconds"] > 0


def test_the_kl_term_runs_on_the_answer_tokens_of_the_refreshed_rows(setup_full_vocab):
    setup = setup_full_vocab
    from replaybank.llm.eval.losses import collate
    from replaybank.llm.train.kl import BaseCache, KLSpec, kl_to_base
    from replaybank.llm.train.step import REHEARSAL, train_step

    cfg, base, tok, data = setup
    _, own, model = _run(setup, every=2, max_steps=2)  # an adapter that differs from the base, its rows refreshed
    rows = own.rows.rows(np.arange(len(own.rows)))
    answers = sum(int((lab[1:] != -100).sum()) for _, lab in rows)
    assert answers > 0
    # by hand: KL(base || adapted) at every answer token (the labelled positions) of the rows, averaged
    ids, att, labels = collate(rows, tok.pad_token_id)
    mask = labels[:, 1:] != -100
    with torch.no_grad():
        adapted = model(input_ids=ids, attention_mask=att).logits[:, :-1][mask]
        with model.disable_adapter():
            reference = model(input_ids=ids, attention_mask=att).logits[:, :-1][mask]
    want = float(kl_to_base(adapted, reference)) / answers
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.SGD(params, lr=0.0)  # measure only
    stats, _ = train_step(model, opt, params, [(REHEARSAL, rows)], ["domain", "selfgen"], tok.pad_token_id,
                          torch.device("cpu"), KLSpec(3.0, rehearsal_ce=False), 0.0, BaseCache())
    assert stats["label_tokens"]["selfgen"] == answers
    assert stats["kl"] == pytest.approx(want, rel=1e-3, abs=1e-6) and want > 0


def test_base_cache_forgets_replaced_rows():
    from replaybank.llm.train.kl import BaseCache, _rehearsal_key

    old = [(np.array([1, 2, 3]), np.array([-100, 2, 3])), (np.array([1, 4]), np.array([-100, 4]))]
    cache = BaseCache()
    for ids, labels in old:
        cache._hidden[_rehearsal_key(ids, labels)] = torch.zeros(1)
    assert cache.forget(old, keep=old[1:]) == 1 and len(cache) == 1  # the unchanged row keeps its base pass


def test_resume_equals_uninterrupted(setup, tmp_path):
    full, full_own, _ = _run(setup)
    ckpt = tmp_path / "ckpt"
    part, _, _ = _run(setup, ckpt=ckpt, max_steps=5)  # checkpoints at 2 and 4 (rows of the refresh at 3), stops at 5
    assert len(part.steps) == 5
    resumed, own, _ = _run(setup, ckpt=ckpt)
    assert resumed.resumed_from_step == 4
    assert [s["batch"] for s in resumed.steps] == [s["batch"] for s in full.steps]
    np.testing.assert_allclose([s["loss"] for s in resumed.steps], [s["loss"] for s in full.steps], rtol=1e-4)
    kl = [[np.nan if s["kl"] is None else s["kl"] for s in log.steps] for log in (resumed, full)]  # None: no answer token
    np.testing.assert_allclose(kl[0], kl[1], rtol=1e-3, atol=1e-6)
    assert not np.isnan(kl[1]).all()

    def plain(log):
        return [{k: v for k, v in r.items() if k not in ("seconds", "train_seconds")} for r in log.refreshes]

    assert plain(resumed) == plain(full) and [r["step"] for r in full.refreshes] == [0, 3, 6, 9]  # of 12 steps
    assert own.answers == full_own.answers


def test_checkpoint_of_another_recipe_or_prompts_is_refused(setup, tmp_path):
    from replaybank.llm.train import Source, add_lora, train_lora
    from replaybank.llm.train.selfgen import SelfGenRows

    cfg, base, tok, data = setup
    ckpt = tmp_path / "ckpt"
    _run(setup, ckpt=ckpt, max_steps=2)
    plain = [Source("self", _selfgen(tok, 3).rows, 0.5)]
    with pytest.raises(ReplayBankError, match=r"checkpoint holds rewritten rows of \['selfgen'\], but this run rewrites none"):
        train_lora(add_lora(copy.deepcopy(base), cfg.training), tok.pad_token_id, data.domain_generations[0],
                   cfg.training, checkpoint_dir=ckpt, sources=plain)
    other = SelfGenRows(tok, [(p + "!", "Sure.", False) for p in PROMPTS], every=3, max_new_tokens=TOKENS)
    with pytest.raises(ReplayBankError, match=r"checkpoint field 'refreshed.selfgen'.*other prompts"):
        train_lora(add_lora(copy.deepcopy(base), cfg.training), tok.pad_token_id, data.domain_generations[0],
                   cfg.training, checkpoint_dir=ckpt, sources=[Source("selfgen", other.rows, 0.5, refresh=other)])


@pytest.mark.parametrize(("text", "match"), [
    ('[recipes.x]\nsource = "selfgen"\nratio = 0.5\nkl_to_base = 1.0\nrehearsal_ce = false\nrefresh_every = 0\n',
     r"c\.toml:6: \[recipes\.x\] refresh_every = 0: expected a value >= 1"),
    ('[recipes.x]\nsource = "selfgen"\nratio = 0.5\nkl_to_base = 1.0\nrehearsal_ce = false\nrefresh_every = 2.5\n',
     r"c\.toml:6: \[recipes\.x\] refresh_every = 2\.5: expected an integer"),
    ('[recipes.x]\nsource = "selfgen"\nratio = 0.5\nkl_to_base = 1.0\nrehearsal_ce = false\nrefresh_every = "often"\n',
     r"c\.toml:6: \[recipes\.x\] refresh_every"),
    ('[recipes.x]\nsource = "self"\nratio = 0.5\nrefresh_every = 5\n',
     r"c\.toml:4: \[recipes\.x\] refresh_every = 5 rewrites selfgen rows, but source = \['self'\] has none"),
    ('[recipes.x]\nsource = "selfgen"\nratio = 0.5\nkl_to_base = 1.0\n',
     r"c\.toml:2: \[recipes\.x\] source contains 'selfgen'.*set rehearsal_ce = false"),
])
def test_refresh_every_and_selfgen_are_checked_with_file_and_line(tmp_path, text, match):
    path = tmp_path / "c.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=match):
        Config.from_toml(path)


def test_the_builtin_recipe_and_the_loop():
    from replaybank.llm.config import LoopConfig

    spec = builtin("self-distill-onpolicy")
    distill = builtin("self-distill")
    assert spec.source == ["selfgen"] and spec.refresh_every == 20
    assert (spec.ratio, spec.kl_to_base, spec.rehearsal_ce) == (distill.ratio, distill.kl_to_base, distill.rehearsal_ce)
    assert recipe_dict(spec)["refresh_every"] == 20 and "refresh_every" not in recipe_dict(distill)  # old folders read the same
    with pytest.raises(ConfigError, match="the loop rehearses with one source"):
        LoopConfig.from_dict({"loop": {"recipe": "self-distill-onpolicy"}})


def test_main_job_runs_the_recipe_and_records_the_generation_cost(tiny_model_dir, tmp_path, monkeypatch):
    import replaybank.llm.data.selfsynth as selfsynth
    from replaybank.llm.eval.decode import Generation
    from replaybank.llm.recipes.rehearsal import run_experiment

    def fake(model, tokenizer, prompts, **kw):  # the base model's answers (the self rows: selfgen's prompts)
        return [Generation(f"A plain answer number {k}.", False, 6) for k, _ in enumerate(prompts)]

    monkeypatch.setattr(selfsynth, "generate_detailed", fake)
    cfg = Config.from_dict({
        "training": {"base_model": str(tiny_model_dir), "batch_size": 4, "learning_rate": 5e-3, "lora_rank": 2, "num_threads": 1},
        "data": {"domain_train_rows": 8, "domain_eval_rows": 2, "general_eval_rows": 2, "self_rows": 4},
        "evaluation": {"arms": ["base", "self-distill-onpolicy"], "suite_per_family": 1, "max_new_tokens": 3,
                       "probe_sources": False},
        "recipes": {"self-distill-onpolicy": {"source": "selfgen", "ratio": 0.5, "kl_to_base": 3.0,
                                              "rehearsal_ce": False, "refresh_every": 2}},
        "output": {"save_adapters": False},
    })
    lines: list[str] = []
    out = tmp_path / "run"
    run_experiment(cfg, out, log=lines.append, max_steps=3)
    arm = json.loads((out / "metrics.json").read_text())["arms"]["self-distill-onpolicy"]
    gen = arm["generations"][0]
    assert gen["sources"]["selfgen"]["rows"] == 4
    steps, refreshes = gen["train"]["steps"], gen["train"]["refreshes"]
    assert all(s["source_rows"] == {"domain": 2, "selfgen": 2} for s in steps)
    # the KL term ran wherever the drawn answers held a token (the random model's can decode to nothing)
    assert all((s["kl"] is not None) == (s["label_tokens"]["selfgen"] > 0) for s in steps)
    assert any(s["kl"] is not None for s in steps)
    assert [r["step"] for r in refreshes] == [0, 2] and all(r["seconds"] > 0 for r in refreshes)
    assert any("selfgen rewritten 2 times" in line and "s generating vs" in line for line in lines)
