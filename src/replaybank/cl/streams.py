"""Task streams for continual learning: class-, task- and domain-incremental splits from arrays.

A :class:`Stream` is a tuple of :class:`Task` objects plus the scenario that says how a learner is
evaluated:

* ``"class"``: one output head over all classes; the task identity is unknown at test time.
* ``"task"``: same training, but at test time logits are restricted to the task's own classes
  (the task identity is given), as Mammoth evaluates its task-IL setting.
* ``"domain"``: every task has the same label set (split tasks relabelled to ``0..k-1``, or a
  permuted stream); one head of ``k`` outputs.

Built-in streams (all offline, numpy only):

* ``split-digits``: ``sklearn.datasets.load_digits`` (1,797 8x8 images), 5 tasks of 2 classes.
* ``split-mnist1d``: MNIST-1D generated procedurally (Greydanus 2020), 5 tasks of 2 classes.
* ``permuted-digits`` / ``permuted-mnist1d``: all 10 classes each task, the features of each
  task permuted by a fixed random permutation (the first task unpermuted); domain-incremental.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from replaybank.cl.datasets import (
    ArraySplit,
    load_digits_arrays,
    load_mnist1d_arrays,
    stratified_split,
)
from replaybank.errors import ReplayBankError

__all__ = [
    "SCENARIOS",
    "STREAMS",
    "Scenario",
    "Stream",
    "Task",
    "load_digits_arrays",
    "load_mnist1d_arrays",
    "make_stream",
    "permuted_stream",
    "split_stream",
    "validation_stream",
]

Scenario = Literal["class", "task", "domain"]
SCENARIOS: tuple[Scenario, ...] = ("class", "task", "domain")

FloatArray = NDArray[np.float32]
IntArray = NDArray[np.int64]


@dataclass(frozen=True)
class Task:
    """One experience of a stream.

    Attributes:
        index: position in the stream, from 0.
        x_train, y_train, x_test, y_test: float32 features and int64 labels, as the learner sees
            them (already relabelled for domain-incremental streams).
        classes: the labels this task uses, sorted; at test time a task-incremental learner
            restricts its logits to these.
    """

    index: int
    x_train: FloatArray
    y_train: IntArray
    x_test: FloatArray
    y_test: IntArray
    classes: tuple[int, ...]


@dataclass(frozen=True)
class Stream:
    """An ordered tuple of tasks with the scenario and the output size a learner needs."""

    name: str
    scenario: Scenario
    tasks: tuple[Task, ...]
    n_classes: int
    input_dim: int

    def __len__(self) -> int:
        return len(self.tasks)


def _check_arrays(
    x_train: ArrayLike, y_train: ArrayLike, x_test: ArrayLike, y_test: ArrayLike
) -> ArraySplit:
    xtr = np.asarray(x_train, dtype=np.float32)
    xte = np.asarray(x_test, dtype=np.float32)
    ytr = np.asarray(y_train)
    yte = np.asarray(y_test)
    for name, x, y in (("train", xtr, ytr), ("test", xte, yte)):
        if x.ndim < 2:
            raise ReplayBankError(f"x_{name} must have shape (n, features...), got {x.shape}")
        if y.ndim != 1:
            raise ReplayBankError(f"y_{name} must be 1-D, got shape {y.shape}")
        if len(x) != len(y):
            raise ReplayBankError(
                f"x_{name} and y_{name} have mismatched lengths: {len(x)} rows vs {len(y)} labels"
            )
        if len(y) == 0:
            raise ReplayBankError(f"the {name} split is empty")
        if not np.issubdtype(y.dtype, np.integer):
            raise ReplayBankError(f"y_{name} must hold integer class labels, got dtype {y.dtype}")
        if y.min() < 0:
            raise ReplayBankError(f"y_{name} holds a negative label ({int(y.min())})")
    if xtr.shape[1:] != xte.shape[1:]:
        raise ReplayBankError(
            f"x_train rows have shape {xtr.shape[1:]} but x_test rows {xte.shape[1:]}"
        )
    flat_tr = xtr.reshape(len(xtr), -1)
    flat_te = xte.reshape(len(xte), -1)
    return flat_tr, ytr.astype(np.int64), flat_te, yte.astype(np.int64)


def split_stream(
    x_train: ArrayLike,
    y_train: ArrayLike,
    x_test: ArrayLike,
    y_test: ArrayLike,
    *,
    n_tasks: int,
    classes_per_task: int | None = None,
    scenario: Scenario = "class",
    class_order: Sequence[int] | None = None,
    name: str = "split",
) -> Stream:
    """Split a labelled dataset into tasks of disjoint classes.

    Task ``t`` holds the classes ``class_order[t*k:(t+1)*k]`` with ``k = classes_per_task``.

    Args:
        x_train, y_train, x_test, y_test: features (any trailing shape; flattened) and integer
            labels; lengths must match pairwise.
        n_tasks: number of tasks, ``>= 1``.
        classes_per_task: classes in each task; default ``n_classes // n_tasks``.
        scenario: ``"class"``, ``"task"`` or ``"domain"`` (labels relabelled to ``0..k-1``).
        class_order: the order in which classes are dealt to tasks; default sorted labels.
        name: the stream's name in reports.

    Returns:
        A :class:`Stream`. For ``"class"``/``"task"`` the head has ``max(label) + 1`` outputs.

    Raises:
        ReplayBankError (a ValueError): mismatched lengths, unknown scenario, too few classes for
            ``n_tasks * classes_per_task``, a class order that is not a list of distinct labels
            present in the data, or a task with no test rows.

    Example:
        >>> x = np.arange(12, dtype=np.float32).reshape(6, 2); y = np.array([0, 1, 2, 3, 0, 1])
        >>> s = split_stream(x, y, x, y, n_tasks=2)
        >>> [t.classes for t in s.tasks], s.n_classes, len(s.tasks[1].y_train)
        ([(0, 1), (2, 3)], 4, 2)
    """
    if scenario not in SCENARIOS:
        raise ReplayBankError(f"unknown scenario {scenario!r}; valid: {', '.join(SCENARIOS)}")
    xtr, ytr, xte, yte = _check_arrays(x_train, y_train, x_test, y_test)
    present = np.unique(ytr)
    if n_tasks < 1:
        raise ReplayBankError(f"n_tasks must be >= 1, got {n_tasks}")
    if classes_per_task is None:
        classes_per_task = max(len(present) // n_tasks, 1)
    if classes_per_task < 1:
        raise ReplayBankError(f"classes_per_task must be >= 1, got {classes_per_task}")
    if n_tasks * classes_per_task > len(present):
        raise ReplayBankError(
            f"{n_tasks} tasks of {classes_per_task} class(es) need {n_tasks * classes_per_task} "
            f"classes, but y_train has {len(present)} ({present.tolist()})"
        )
    order = [int(c) for c in present] if class_order is None else [int(c) for c in class_order]
    if len(set(order)) != len(order) or not set(order) <= set(present.tolist()):
        raise ReplayBankError(
            f"class_order must list distinct labels present in y_train {present.tolist()}, got {order}"
        )
    if len(order) < n_tasks * classes_per_task:
        raise ReplayBankError(
            f"class_order lists {len(order)} classes; {n_tasks} tasks of {classes_per_task} need "
            f"{n_tasks * classes_per_task}"
        )
    tasks = []
    for t in range(n_tasks):
        classes = tuple(sorted(order[t * classes_per_task : (t + 1) * classes_per_task]))
        tr = np.isin(ytr, classes)
        te = np.isin(yte, classes)
        if not te.any():
            raise ReplayBankError(
                f"task {t} (classes {list(classes)}) has no rows in the test split"
            )
        y_tr, y_te = ytr[tr], yte[te]
        if scenario == "domain":
            relabel = np.full(int(max(classes)) + 1, -1, dtype=np.int64)
            relabel[list(classes)] = np.arange(len(classes))
            y_tr, y_te = relabel[y_tr], relabel[y_te]
            classes = tuple(range(len(classes)))
        tasks.append(Task(t, xtr[tr], y_tr, xte[te], y_te, classes))
    n_classes = classes_per_task if scenario == "domain" else int(max(order)) + 1
    return Stream(name, scenario, tuple(tasks), n_classes, xtr.shape[1])


def permuted_stream(
    x_train: ArrayLike,
    y_train: ArrayLike,
    x_test: ArrayLike,
    y_test: ArrayLike,
    *,
    n_tasks: int,
    rng: np.random.Generator,
    name: str = "permuted",
) -> Stream:
    """Tasks that share labels and differ by a fixed permutation of the input features.

    Task 0 is the data as given; task ``t >= 1`` permutes the flattened features with a permutation
    drawn from ``rng``. The scenario is ``"domain"``.

    Args:
        x_train, y_train, x_test, y_test: features and integer labels; lengths must match.
        n_tasks: number of tasks, ``>= 1``.
        rng: source of the permutations.
        name: the stream's name in reports.

    Returns:
        A domain-incremental :class:`Stream` with ``max(label) + 1`` outputs.

    Raises:
        ReplayBankError (a ValueError): mismatched lengths or ``n_tasks < 1``.

    Example:
        >>> x = np.arange(6, dtype=np.float32).reshape(2, 3); y = np.array([0, 1])
        >>> s = permuted_stream(x, y, x, y, n_tasks=2, rng=np.random.default_rng(0))
        >>> s.tasks[1].x_train.tolist(), s.scenario
        ([[2.0, 0.0, 1.0], [5.0, 3.0, 4.0]], 'domain')
    """
    if n_tasks < 1:
        raise ReplayBankError(f"n_tasks must be >= 1, got {n_tasks}")
    xtr, ytr, xte, yte = _check_arrays(x_train, y_train, x_test, y_test)
    classes = tuple(int(c) for c in np.unique(ytr))
    tasks = []
    for t in range(n_tasks):
        perm = np.arange(xtr.shape[1]) if t == 0 else rng.permutation(xtr.shape[1])
        tasks.append(Task(t, xtr[:, perm], ytr, xte[:, perm], yte, classes))
    return Stream(name, "domain", tuple(tasks), int(ytr.max()) + 1, xtr.shape[1])


def validation_stream(stream: Stream, *, fraction: float = 0.2, seed: int = 1) -> Stream:
    """The same stream with a validation split carved out of each task's *training* data.

    For tuning (e.g. the learning rate) without looking at the test split: in every task a
    stratified ``fraction`` of each class's training rows (``round(n_class * fraction)``, drawn
    from ``numpy.random.default_rng(seed)``, fresh per task so permuted tasks hold out the same
    rows) becomes that task's evaluation split, and the rest its training split. The test split is
    never read.

    Args:
        stream: any stream.
        fraction: share of each class's training rows held out, in ``(0, 1)``.
        seed: seed of the held-out draw.

    Returns:
        A :class:`Stream` named ``"<name>/validation"``, same scenario, classes and head size,
        whose ``x_test``/``y_test`` are the validation rows.

    Raises:
        ReplayBankError (a ValueError): ``fraction`` outside ``(0, 1)``, or a task whose
            training or validation part would be empty.

    Example:
        >>> x = np.arange(40, dtype=np.float32).reshape(20, 2); y = np.repeat([0, 1, 2, 3], 5)
        >>> v = validation_stream(split_stream(x, y, x[::5], y[::5], n_tasks=2), fraction=0.2)
        >>> [(len(t.y_train), len(t.y_test)) for t in v.tasks], v.name
        ([(8, 2), (8, 2)], 'split/validation')
    """
    if not 0 < fraction < 1:
        raise ReplayBankError(f"validation fraction must be in (0, 1), got {fraction!r}")
    tasks = []
    for task in stream.tasks:
        x_train, y_train, x_val, y_val = stratified_split(
            task.x_train, task.y_train, fraction, np.random.default_rng(seed)
        )
        if len(y_val) == 0 or len(y_train) == 0:
            raise ReplayBankError(
                f"task {task.index} has {len(task.y_train)} training rows; a validation fraction of "
                f"{fraction} leaves {len(y_train)} to train on and {len(y_val)} to validate on"
            )
        tasks.append(Task(task.index, x_train, y_train, x_val, y_val, task.classes))
    return Stream(
        f"{stream.name}/validation",
        stream.scenario,
        tuple(tasks),
        stream.n_classes,
        stream.input_dim,
    )


def _split_builtin(loader: Callable[[], ArraySplit], name: str) -> Callable[..., Stream]:
    def build(*, scenario: Scenario = "class", n_tasks: int = 5, seed: int = 0) -> Stream:
        del seed  # the class order is fixed (0-1, 2-3, ...) so results compare across papers
        return split_stream(*loader(), n_tasks=n_tasks, scenario=scenario, name=name)

    return build


def _permuted_builtin(loader: Callable[[], ArraySplit], name: str) -> Callable[..., Stream]:
    def build(*, scenario: Scenario = "domain", n_tasks: int = 5, seed: int = 0) -> Stream:
        if scenario != "domain":
            raise ReplayBankError(f"{name} is domain-incremental only; got scenario {scenario!r}")
        return permuted_stream(
            *loader(), n_tasks=n_tasks, rng=np.random.default_rng(seed), name=name
        )

    return build


STREAMS: dict[str, Callable[..., Stream]] = {
    "split-digits": _split_builtin(load_digits_arrays, "split-digits"),
    "split-mnist1d": _split_builtin(load_mnist1d_arrays, "split-mnist1d"),
    "permuted-digits": _permuted_builtin(load_digits_arrays, "permuted-digits"),
    "permuted-mnist1d": _permuted_builtin(load_mnist1d_arrays, "permuted-mnist1d"),
}


def make_stream(
    name: str, *, scenario: Scenario | None = None, n_tasks: int = 5, seed: int = 0
) -> Stream:
    """Build a built-in stream by name.

    Args:
        name: one of :data:`STREAMS`.
        scenario: default ``"class"`` for split streams, ``"domain"`` for permuted ones.
        n_tasks: number of tasks (default 5).
        seed: seeds the permutations of permuted streams; split streams use the fixed class
            order 0-1, 2-3, ... and a fixed data split.

    Raises:
        ReplayBankError (a ValueError): unknown name (the message lists the valid ones) or unsupported scenario.

    Example:
        >>> s = make_stream("split-digits")
        >>> len(s), s.scenario, s.tasks[0].classes, s.input_dim
        (5, 'class', (0, 1), 64)
    """
    if name not in STREAMS:
        raise ReplayBankError(
            f"unknown stream {name!r}; valid streams: {', '.join(sorted(STREAMS))}"
        )
    if scenario is not None and scenario not in SCENARIOS:
        raise ReplayBankError(f"unknown scenario {scenario!r}; valid: {', '.join(SCENARIOS)}")
    kwargs: dict[str, object] = {"n_tasks": n_tasks, "seed": seed}
    if scenario is not None:
        kwargs["scenario"] = scenario
    return STREAMS[name](**kwargs)
