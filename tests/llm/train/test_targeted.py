"""Forgetting-targeted rehearsal: the outlier guard and the cap on constructed losses (no model),
and on a tiny Llama whose pool holds 10% malformed rows (random tokens)."""

from __future__ import annotations

import numpy as np
import pytest

from replaybank.llm.config import ConfigError
from replaybank.llm.config.recipe import builtin, parse_recipes, recipe_dict
from replaybank.llm.train.targeted import TargetedRows, forgetting_priorities, outlier_bound


def _pool(n: int = 200, malformed: float = 0.1, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Base losses and losses now: normal rows forget a little, malformed ones have huge base losses and rises."""
    rng = np.random.default_rng(seed)
    bad = np.zeros(n, dtype=bool)
    bad[rng.choice(n, size=int(n * malformed), replace=False)] = True
    base = np.where(bad, rng.normal(9.0, 1.0, n), rng.normal(2.0, 0.2, n))
    rise = np.where(bad, rng.normal(3.0, 0.5, n), rng.exponential(0.3, n))
    return base, base + rise, bad


def test_priority_is_the_rise_over_base_clipped_at_the_cap_quantile():
    base = np.array([1.0, 1.0, 1.0, 1.0, 1.0])
    now = np.array([0.5, 1.1, 1.2, 1.3, 5.0])  # rises 0 (a row learnt better counts 0), .1, .2, .3, 4
    np.testing.assert_allclose(forgetting_priorities(now, base, 1.0), [0.0, 0.1, 0.2, 0.3, 4.0])
    np.testing.assert_allclose(forgetting_priorities(now, base, 0.75), [0.0, 0.1, 0.2, 0.3, 0.3])
    with pytest.raises(ValueError, match=r"quantile in \(0, 1\], got 0"):
        forgetting_priorities(now, base, 0.0)


def test_outlier_bound_holds_out_exactly_the_malformed_rows():
    base, _, bad = _pool()
    held = base > outlier_bound(base, 3.5)
    np.testing.assert_array_equal(held, bad)
    assert outlier_bound(np.ones(5), 3.5) == float("inf")  # no spread: nothing is an outlier


def _malformed_share(base, now, bad, *, cap, mads, draws=4000, seed=0):
    t = TargetedRows(len(base), lambda i: now[i], lambda i: base[i], refresh_every=1, cap=cap, outlier_mads=mads, seed=seed)
    return float(bad[t.pick(draws)].mean()), t


def test_guard_keeps_malformed_rows_out_where_plain_priority_favours_them():
    base, now, bad = _pool()
    unguarded, _ = _malformed_share(base, now, bad, cap=1.0, mads=float("inf"))
    guarded, t = _malformed_share(base, now, bad, cap=0.9, mads=3.5)
    # 10% of the rows; plain priority by rise gives them most draws (their rises are ~10x the others')
    assert unguarded > 0.5
    assert guarded == 0.0
    assert set(t.held_out.tolist()) == set(np.flatnonzero(bad).tolist())
    # the guard still targets forgetting: the drawn normal rows have risen more than a uniform draw's
    rises = now - base
    drawn = t.pick(4000)
    assert rises[drawn].mean() > 1.5 * rises[~bad].mean()


def test_refresh_follows_the_losses_every_n_steps():
    base = np.ones(10)
    now = base.copy()
    now[3] += 1.0
    t = TargetedRows(10, lambda i: now[i], lambda i: base[i], refresh_every=5, cap=1.0, seed=1)
    assert (t.pick(200) == 3).mean() > 0.95
    now[3], now[7] = 1.0, 2.0
    assert t.after_step(4) is None  # not a refresh step: the old priorities stand
    assert (t.pick(200) == 3).mean() > 0.95
    seen = t.after_step(5)
    assert seen is not None and seen["kept"] == 10 and seen["held_out"] == 0
    assert (t.pick(200) == 7).mean() > 0.95


def test_recipe_keys_builtin_and_errors_name_the_file_line():
    spec = builtin("rehearsal-targeted")
    assert spec.sampling == "forgetting" and spec.source == ["corpus"] and 0 < spec.priority_cap <= 1
    assert "priority_cap" in recipe_dict(spec) and "sampling" not in recipe_dict(builtin("rehearsal-corpus"))
    text = '[recipes.t]\nsource = "self"\nsampling = "forgetting"\npriority_cap = 1.5\n'
    with pytest.raises(ConfigError, match=r"run.toml:4: .*priority_cap") as err:
        parse_recipes({"t": {"source": "self", "sampling": "forgetting", "priority_cap": 1.5}}, "run.toml", text=text)
    assert "1.5" in str(err.value)
    text = '[recipes.t]\nsource = "self"\nrefresh_every = 5\n'
    with pytest.raises(ConfigError, match=r"run.toml:3: \[recipes.t\] refresh_every = 5 .*set sampling = \"forgetting\""):
        parse_recipes({"t": {"source": "self", "refresh_every": 5}}, "run.toml", text=text)
    with pytest.raises(ConfigError, match="sampling = 'forgetting' needs rehearsal rows"):
        parse_recipes({"t": {"source": [], "sampling": "forgetting"}}, "run.toml")


# --- on a tiny Llama ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def trained_tiny(tiny_model_dir):
    """The tiny Llama taught a few repeated phrases (its "knowledge"), and a pool of those phrases with
    10% rows of random tokens."""
    torch = pytest.importorskip("torch")
    from transformers import AutoModelForCausalLM

    from replaybank.llm.data.rows import token_rows

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    vocab = model.config.vocab_size
    rng = np.random.default_rng(0)
    phrases = [rng.integers(100, 400, size=6) for _ in range(4)]
    normal = [np.tile(phrases[k % 4], 4)[: 20 + k % 5] for k in range(36)]
    malformed = [rng.integers(1000, vocab, size=22) for _ in range(4)]
    ids = normal + malformed
    rows = token_rows([(x.astype(np.int64), x.astype(np.int64)) for x in ids])
    torch.manual_seed(0)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    batch = torch.tensor(np.stack([x[:20] for x in normal]))
    for _ in range(15):
        loss = model(input_ids=batch, labels=batch).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
    bad = np.array([False] * 36 + [True] * 4)
    return model, rows, bad


def test_tiny_llama_pool_guard_holds_out_the_random_token_rows(trained_tiny):
    import copy

    import torch
    from peft import LoraConfig, get_peft_model

    from replaybank.llm.train.targeted import row_losses

    base_model, rows, bad = trained_tiny
    torch.manual_seed(1)
    model = get_peft_model(copy.deepcopy(base_model), LoraConfig(r=4, target_modules=["q_proj", "v_proj", "down_proj"]))
    domain = torch.tensor(np.stack([np.tile(np.arange(500, 505) + 7 * k, 4) for k in range(8)]))
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=3e-2)
    for _ in range(20):  # a new domain: the model forgets its phrases
        model(input_ids=domain, labels=domain).loss.backward()
        opt.step()
        opt.zero_grad()
    idx = np.arange(len(rows))
    base = row_losses(model, rows, idx, pad_id=0, base=True)
    now = row_losses(model, rows, idx, pad_id=0)
    assert base[bad].min() > base[~bad].max()  # the random-token rows are the base model's outliers
    assert (now - base)[~bad].mean() > 0  # the adapter made it forget

    def share(cap: float, mads: float) -> float:
        t = TargetedRows(len(rows), lambda i: row_losses(model, rows, i, 0), lambda i: row_losses(model, rows, i, 0, base=True),
                         refresh_every=1, cap=cap, outlier_mads=mads, seed=0)
        return float(bad[t.pick(2000)].mean())

    guarded = share(0.9, 3.5)
    assert guarded == 0.0
    # on this model the random-token rows stay at about ln(vocabulary) and barely rise (they were never
    # predicted), so rise-based priority alone draws them less than uniform's 10%; by loss it would favour them
    unguarded = share(1.0, float("inf"))
    by_loss = float(np.sum(now[bad]) / np.sum(now))
    print(f"tiny Llama, malformed share of draws: uniform 0.100, by loss {by_loss:.3f}, by rise {unguarded:.3f}, guarded {guarded:.3f}")
    assert unguarded < by_loss
