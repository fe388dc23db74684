from __future__ import annotations

import numpy as np
import pytest
import torch

from replaybank import ReplayBuffer
from replaybank.admission import GroupBalanced, Reservoir
from replaybank.cl.config import STRATEGY_NAMES, protocol_config
from replaybank.cl.runner import evaluate, minibatches, run
from replaybank.cl.strategies import STRATEGIES, PseudoRehearsal, make_strategy
from replaybank.cl.streams import make_stream, split_stream
from replaybank.errors import ReplayBankError

CONFIG = protocol_config("online", batch_size=4, replay_batch_size=4, buffer_size=8, lr=0.1)


def test_registry_matches_names() -> None:
    assert tuple(STRATEGIES) == STRATEGY_NAMES


@pytest.mark.parametrize("name", STRATEGY_NAMES)
def test_every_strategy_runs_on_a_tiny_stream(name: str, tiny_stream) -> None:  # type: ignore[no-untyped-def]
    result = run(tiny_stream, name, CONFIG, seed=0)
    assert result.accuracy.shape == (2, 2)
    assert np.all((result.accuracy >= 0) & (result.accuracy <= 1))
    assert result.baseline.shape == (2,)
    # every strategy learns the first task of well-separated blobs
    assert result.accuracy[0, 0] > 0.5


@pytest.mark.parametrize("name", STRATEGY_NAMES)
def test_same_seed_same_numbers(name: str, tiny_stream) -> None:  # type: ignore[no-untyped-def]
    a = run(tiny_stream, name, CONFIG, seed=3)
    b = run(tiny_stream, name, CONFIG, seed=3)
    np.testing.assert_array_equal(a.accuracy, b.accuracy)
    np.testing.assert_array_equal(a.baseline, b.baseline)


def test_runs_do_not_touch_global_torch_rng(tiny_stream) -> None:  # type: ignore[no-untyped-def]
    torch.manual_seed(123)
    before = torch.get_rng_state().clone()
    run(tiny_stream, "generative", CONFIG, seed=0)
    run(tiny_stream, "er", CONFIG, seed=0)
    assert torch.equal(torch.get_rng_state(), before)


def test_different_seeds_differ(tiny_stream) -> None:  # type: ignore[no-untyped-def]
    a = make_strategy("naive", tiny_stream, CONFIG, torch.Generator().manual_seed(0), np.random.default_rng(0))
    b = make_strategy("naive", tiny_stream, CONFIG, torch.Generator().manual_seed(1), np.random.default_rng(0))
    assert not torch.equal(next(a.model.parameters()), next(b.model.parameters()))


@pytest.mark.parametrize(
    ("name", "admission"),
    [("er", Reservoir), ("er-balanced", GroupBalanced), ("derpp", Reservoir), ("agem", Reservoir)],
)
def test_replay_strategies_use_the_core_buffer(name: str, admission: type, tiny_stream) -> None:  # type: ignore[no-untyped-def]
    s = make_strategy(name, tiny_stream, CONFIG, torch.Generator().manual_seed(0), np.random.default_rng(0))
    buffer = s.buffer  # type: ignore[attr-defined]
    assert isinstance(buffer, ReplayBuffer)
    assert isinstance(buffer.admission, admission)
    assert buffer.capacity == CONFIG.buffer_size
    x, y = s.begin_task(tiny_stream.tasks[0], ())
    for _ in range(5):
        s.observe(x[:4], y[:4])
    assert len(buffer) == CONFIG.buffer_size


def test_derpp_stores_logits(tiny_stream) -> None:  # type: ignore[no-untyped-def]
    s = make_strategy("derpp", tiny_stream, CONFIG, torch.Generator().manual_seed(0), np.random.default_rng(0))
    x, y = s.begin_task(tiny_stream.tasks[0], ())
    s.observe(x[:4], y[:4])
    logits = s.buffer.sample(2).data["logits"]  # type: ignore[attr-defined]
    assert logits.shape == (2, tiny_stream.n_classes)


def test_balanced_buffer_holds_every_class(make_arrays) -> None:  # type: ignore[no-untyped-def]
    stream = split_stream(*make_arrays(n_per_class=40), n_tasks=2)
    result = make_strategy(
        "er-balanced", stream, CONFIG, torch.Generator().manual_seed(0), np.random.default_rng(0)
    )
    for task in stream.tasks:
        x, y = result.begin_task(task, ())
        for i in range(0, len(x), 4):
            result.observe(x[i : i + 4], y[i : i + 4])
    counts = result.buffer.admission.group_counts()  # type: ignore[attr-defined]
    assert sorted(counts) == [0, 1, 2, 3]
    assert max(counts.values()) - min(counts.values()) <= 1


def test_step_targets_pseudo_rehearsal_is_exactly_naive(tiny_stream) -> None:  # type: ignore[no-untyped-def]
    """The reference's per-step targets give a zero KL gradient: SGD reproduces naive exactly."""
    def train(strategy_factory):  # type: ignore[no-untyped-def]
        s = strategy_factory(torch.Generator().manual_seed(0))
        for task in tiny_stream.tasks:
            x, y = s.begin_task(task, ())
            for i in range(0, len(x), 4):
                s.observe(x[i : i + 4], y[i : i + 4])
            s.end_task(task)
        return [p.detach().clone() for p in s.model.parameters()]

    naive = train(lambda g: make_strategy("naive", tiny_stream, CONFIG, g, np.random.default_rng(0)))
    step = train(
        lambda g: PseudoRehearsal(tiny_stream, CONFIG, g, np.random.default_rng(0), targets="step")
    )
    task = train(lambda g: make_strategy("pseudo", tiny_stream, CONFIG, g, np.random.default_rng(0)))
    for a, b in zip(naive, step, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)
    assert any(not torch.allclose(a, b) for a, b in zip(naive, task, strict=True))


def test_joint_last_row_is_trained_on_everything(tiny_stream) -> None:  # type: ignore[no-untyped-def]
    s = make_strategy("joint", tiny_stream, CONFIG, torch.Generator().manual_seed(0), np.random.default_rng(0))
    x, _ = s.begin_task(tiny_stream.tasks[1], tiny_stream.tasks[:1])
    assert len(x) == sum(len(t.y_train) for t in tiny_stream.tasks)


def test_task_incremental_evaluation_masks_other_classes(make_arrays) -> None:  # type: ignore[no-untyped-def]
    class_stream = split_stream(*make_arrays(), n_tasks=2, scenario="class")
    task_stream = split_stream(*make_arrays(), n_tasks=2, scenario="task")
    model = torch.nn.Linear(6, 4)
    with torch.no_grad():  # always predicts class 3
        model.weight.zero_()
        model.bias.copy_(torch.tensor([0.0, 0.1, 0.2, 5.0]))
    np.testing.assert_allclose(evaluate(model, class_stream), [0.0, 0.5])
    # masked to {0, 1}, class 1 wins on task 0: half right
    np.testing.assert_allclose(evaluate(model, task_stream), [0.5, 0.5])


def test_unknown_strategy_lists_valid_names(tiny_stream) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ReplayBankError, match="valid strategies: naive, joint, er"):
        run(tiny_stream, "ewc", CONFIG, seed=0)


def test_er_beats_naive_on_split_digits() -> None:
    """One fixed seed under the DER protocol; the measured gap is ~65 points, the bar is 30."""
    stream = make_stream("split-digits")
    config = protocol_config("der", lr=0.1)
    naive = run(stream, "naive", config, seed=0).accuracy[-1].mean()
    er = run(stream, "er", config, seed=0).accuracy[-1].mean()
    assert er - naive > 0.30


@pytest.mark.parametrize(("n", "batch_size"), [(1151, 10), (800, 10), (23, 10), (10, 10), (65, 32), (288, 10)])
def test_minibatches_are_exactly_batch_size_and_drop_the_remainder(n: int, batch_size: int) -> None:
    order = torch.randperm(n, generator=torch.Generator().manual_seed(0))
    batches = minibatches(order, batch_size)
    assert [len(b) for b in batches] == [batch_size] * (n // batch_size)
    kept = torch.cat(batches)
    assert torch.equal(kept, order[: n - n % batch_size])  # in order, each once; the last n % b skipped
    assert len(torch.unique(kept)) == len(kept)


def test_minibatches_of_an_order_shorter_than_a_batch() -> None:
    assert [b.tolist() for b in minibatches(torch.arange(7), 10)] == [list(range(7))]
    assert minibatches(torch.arange(0), 10) == ()
    with pytest.raises(ReplayBankError, match="batch_size must be >= 1"):
        minibatches(torch.arange(5), 0)


def _training_forward_sizes(name: str, stream, config):  # type: ignore[no-untyped-def]
    """Run ``name`` and record, per observe() call, the row counts of each training forward pass."""
    steps: list[list[int]] = []
    original = STRATEGIES[name]

    class Spy(original):  # type: ignore[misc, valid-type]
        def observe(self, x: torch.Tensor, y: torch.Tensor) -> float:
            sizes: list[int] = []
            hook = self.model.register_forward_pre_hook(lambda _m, args: sizes.append(len(args[0])))
            try:
                return super().observe(x, y)
            finally:
                hook.remove()
                steps.append(sizes)

    STRATEGIES[name] = Spy
    try:
        run(stream, name, config, seed=0)
    finally:
        STRATEGIES[name] = original
    return steps


def test_runner_steps_on_exactly_batch_size_rows(tiny_stream) -> None:  # type: ignore[no-untyped-def]
    """Tasks here hold 24 rows; batch 5 -> 4 batches of exactly 5, the remaining 4 rows skipped."""
    config = protocol_config("online", batch_size=5, buffer_size=8)
    steps = _training_forward_sizes("naive", tiny_stream, config)
    assert steps == [[5]] * sum(len(t.y_train) // 5 for t in tiny_stream.tasks)


@pytest.mark.parametrize("name", ["er", "er-rr", "er-balanced"])
def test_er_adds_exactly_the_replay_batch(name: str, tiny_stream) -> None:  # type: ignore[no-untyped-def]
    config = protocol_config("online", batch_size=4, replay_batch_size=3, buffer_size=8)
    steps = _training_forward_sizes(name, tiny_stream, config)
    assert steps[0] == [4]  # the buffer is empty before the first step
    assert steps[1:] == [[4 + 3]] * (len(steps) - 1)


def test_der_protocol_is_batch_10_plus_replay_10() -> None:
    stream = make_stream("split-digits", n_tasks=2)
    for name in ("er", "er-rr"):
        steps = _training_forward_sizes(name, stream, protocol_config("der", buffer_size=50))
        assert steps[0] == [10] and set(map(tuple, steps[1:])) == {(20,)}, name
    derpp = _training_forward_sizes("derpp", stream, protocol_config("der", buffer_size=50))
    assert set(map(tuple, derpp[1:])) == {(10, 10, 10)}  # stream batch, logits draw, labels draw


def test_er_with_replacement_fills_the_replay_batch_from_a_small_buffer(tiny_stream) -> None:  # type: ignore[no-untyped-def]
    """A replay batch larger than what is stored: ER draws it with repeats, ER-RR replays all it holds."""
    config = protocol_config("online", batch_size=2, replay_batch_size=5, buffer_size=8)
    er = _training_forward_sizes("er", tiny_stream, config)
    rr = _training_forward_sizes("er-rr", tiny_stream, config)
    assert er[1:3] == [[2 + 5], [2 + 5]]
    assert rr[1:3] == [[2 + 2], [2 + 4]] and rr[3] == [2 + 5]


def test_er_rr_replays_every_stored_item_once_before_repeating(tiny_stream) -> None:  # type: ignore[no-untyped-def]
    from replaybank.samplers import Reshuffled, Uniform

    config = protocol_config("online", batch_size=4, replay_batch_size=4, buffer_size=8)
    gen, rng = torch.Generator().manual_seed(0), np.random.default_rng(0)
    rr = make_strategy("er-rr", tiny_stream, config, gen, rng)
    er = make_strategy("er", tiny_stream, config, torch.Generator().manual_seed(0), np.random.default_rng(0))
    assert isinstance(rr.buffer.sampler, Reshuffled) and isinstance(er.buffer.sampler, Uniform)  # type: ignore[attr-defined]
    x, y = torch.from_numpy(tiny_stream.tasks[0].x_train[:8]), torch.from_numpy(tiny_stream.tasks[0].y_train[:8])
    rr.buffer.extend({"x": x.numpy(), "y": y.numpy(), "row": np.arange(8)})  # type: ignore[attr-defined]
    drawn = np.concatenate([rr.replay("row")[0].numpy() for _ in range(2)])  # type: ignore[attr-defined, index]
    assert sorted(drawn.tolist()) == list(range(8))
