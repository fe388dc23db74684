"""Run strategies over a stream and collect accuracy matrices.

One run = one strategy, one seed: train task by task in the order the strategy protocol fixes
(``begin_task -> observe per minibatch -> end_task``), evaluate on every task's test set after each
task, and return the ``T x T`` accuracy matrix plus the random-initialisation accuracies that
forward transfer needs.

Seeds: ``numpy.random.SeedSequence(seed)`` spawns independent streams for the model and torch
noise, the minibatch order, and the buffer, so two strategies run with the same seed start from
the same initial weights and see the same first-epoch order of each task.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from replaybank.cl.config import TrainConfig, check_strategies
from replaybank.cl.strategies import Strategy, make_strategy
from replaybank.cl.streams import Stream
from replaybank.errors import ReplayBankError

__all__ = ["RunResult", "evaluate", "minibatches", "run", "run_many"]


@dataclass(frozen=True)
class RunResult:
    strategy: str
    seed: int
    accuracy: np.ndarray  # R[i, j]: accuracy on task j after training through task i
    baseline: np.ndarray  # accuracy of the untrained model on each task
    seconds: float


@torch.no_grad()
def evaluate(model: torch.nn.Module, stream: Stream) -> np.ndarray:
    """Test accuracy on every task of ``stream``; task-incremental streams mask to the task's classes."""
    model.eval()
    accuracies = []
    for task in stream.tasks:
        logits = model(torch.from_numpy(task.x_test))
        if stream.scenario == "task":
            mask = torch.full((stream.n_classes,), float("-inf"))
            mask[list(task.classes)] = 0.0
            logits = logits + mask
        predictions = logits.argmax(dim=1).numpy()
        accuracies.append(float((predictions == task.y_test).mean()))
    return np.array(accuracies)


def minibatches(order: torch.Tensor, batch_size: int) -> tuple[torch.Tensor, ...]:
    """Cut ``order`` into ``len(order) // batch_size`` minibatches of exactly ``batch_size``.

    The ``len(order) % batch_size`` examples left after the last full batch are skipped in this
    pass, as ``DataLoader(drop_last=True)`` does; the runner reshuffles every epoch, so other
    examples come last next time. A step on a last batch of one or two examples, with the plain
    SGD of the harness, can undo a task just before it is evaluated (split-digits, joint, one
    epoch: 93% -> 13% after a final one-example batch), and a batch of another size would break
    the protocol's fixed batch. An order shorter than one batch is one batch of all of it.

    Example:
        >>> [len(b) for b in minibatches(torch.arange(23), 10)], [len(b) for b in minibatches(torch.arange(7), 10)]
        ([10, 10], [7])
    """
    if batch_size < 1:
        raise ReplayBankError(f"batch_size must be >= 1, got {batch_size}")
    n = len(order)
    if n < batch_size:
        return (order,) if n else ()
    return order[: n - n % batch_size].split(batch_size)


def check_batch_fits(stream: Stream, config: TrainConfig, option: str = "batch_size") -> None:
    """Refuse a ``batch_size`` larger than the training rows of the stream's smallest task: such a
    task would be learnt in one short batch, not batches of the size asked for.

    Raises:
        ReplayBankError (a ValueError): naming ``option``, both sizes and the task.
    """
    if not stream.tasks:
        return
    small = min(stream.tasks, key=lambda t: len(t.y_train))
    if config.batch_size > len(small.y_train):
        raise ReplayBankError(
            f"{option} {config.batch_size} is larger than task {small.index} of stream {stream.name!r}, "
            f"which has {len(small.y_train)} training rows; give a batch size of at most {len(small.y_train)}"
        )


def _seeds(seed: int) -> tuple[torch.Generator, torch.Generator, np.random.Generator]:
    model_seq, order_seq, buffer_seq = np.random.SeedSequence(seed).spawn(3)
    model_gen = torch.Generator().manual_seed(int(model_seq.generate_state(1, np.uint64)[0] >> 1))
    order_gen = torch.Generator().manual_seed(int(order_seq.generate_state(1, np.uint64)[0] >> 1))
    return model_gen, order_gen, np.random.default_rng(buffer_seq)


def run(stream: Stream, strategy: str, config: TrainConfig, seed: int) -> RunResult:
    """Train ``strategy`` through ``stream`` under ``config``; deterministic given ``seed``.

    Raises:
        ReplayBankError (a ValueError): unknown strategy name (lists the valid ones).
    """
    check_strategies([strategy])
    start = time.perf_counter()
    model_gen, order_gen, rng = _seeds(seed)
    learner: Strategy = make_strategy(strategy, stream, config, model_gen, rng)
    baseline = evaluate(learner.model, stream)
    n = len(stream)
    accuracy = np.zeros((n, n))
    for task in stream.tasks:
        x, y = learner.begin_task(task, stream.tasks[: task.index])
        for _ in range(config.epochs):
            order = torch.randperm(len(x), generator=order_gen)
            for batch in minibatches(order, config.batch_size):
                learner.observe(x[batch], y[batch])
        learner.end_task(task)
        accuracy[task.index] = evaluate(learner.model, stream)
    return RunResult(strategy, seed, accuracy, baseline, time.perf_counter() - start)


def run_many(
    stream: Stream,
    strategies: Sequence[str],
    config: TrainConfig,
    seeds: Sequence[int],
    *,
    log: bool = False,
) -> dict[str, list[RunResult]]:
    """Every strategy under every seed; returns ``{strategy: [RunResult per seed]}``."""
    check_strategies(list(strategies))
    check_batch_fits(stream, config)
    results: dict[str, list[RunResult]] = {}
    for name in strategies:
        for seed in seeds:
            result = run(stream, name, config, seed)
            results.setdefault(name, []).append(result)
            if log:
                print(
                    f"{stream.name} {name:<12} seed {seed}: final accuracy "
                    f"{result.accuracy[-1].mean():.3f} ({result.seconds:.1f}s)",
                    flush=True,
                )
    return results
