"""Continual-learning metrics over an accuracy matrix, pure numpy.

Every function takes ``R``, a square ``T x T`` array where ``R[i, j]`` is the accuracy on the test
set of task ``j`` after training through task ``i`` (rows: time, columns: tasks). Accuracies may be
fractions or percentages; the functions do not rescale them. Rows before a task is trained are part
of the matrix (in class-incremental streams they are usually 0).

Sources:

* Lopez-Paz & Ranzato (2017), "Gradient Episodic Memory for Continual Learning", section 4:
  ACC, BWT, FWT.
* Chaudhry, Dokania, Ajanthan & Torr (2018), "Riemannian Walk for Incremental Learning", section 4:
  forgetting as the best earlier accuracy minus the final one.
* Riemer et al. (2019), "Learning to Learn without Forgetting by Maximizing Transfer and Minimizing
  Interference", section 5: learning accuracy.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from replaybank.errors import ReplayBankError

__all__ = [
    "average_accuracy",
    "backward_transfer",
    "forgetting",
    "forgetting_per_task",
    "forward_transfer",
    "learning_accuracy",
]


def _matrix(R: ArrayLike, *, min_tasks: int = 1, name: str = "R") -> NDArray[np.float64]:
    m = np.asarray(R, dtype=np.float64)
    if m.ndim != 2 or m.shape[0] != m.shape[1]:
        raise ReplayBankError(f"{name} must be a square T x T accuracy matrix, got shape {m.shape}")
    if m.shape[0] < min_tasks:
        raise ReplayBankError(
            f"{name} has {m.shape[0]} task(s); this metric needs at least {min_tasks}"
        )
    if not np.all(np.isfinite(m)):
        raise ReplayBankError(f"{name} contains NaN or infinite entries")
    return m


# Results are rounded to 12 decimals so that float noise (0.7000000000000001) does not reach
# reports; 1e-12 is far below the resolution of any test-set accuracy.
_DECIMALS = 12


def average_accuracy(R: ArrayLike) -> float:
    """Mean final accuracy over all tasks (ACC, Lopez-Paz & Ranzato 2017).

    ``ACC = 1/T * sum_j R[T-1, j]``.

    Args:
        R: ``T x T`` accuracy matrix, ``T >= 1``.

    Returns:
        The mean of the last row.

    Raises:
        ReplayBankError (a ValueError): ``R`` is not square, is empty, or holds NaN/inf.

    Example:
        >>> average_accuracy([[0.9, 0.0], [0.6, 0.8]])
        0.7
    """
    m = _matrix(R)
    return round(float(m[-1].mean()), _DECIMALS)


def backward_transfer(R: ArrayLike) -> float:
    """Influence of later training on earlier tasks (BWT, Lopez-Paz & Ranzato 2017).

    ``BWT = 1/(T-1) * sum_{j < T-1} (R[T-1, j] - R[j, j])``. Negative values mean forgetting.
    Per task, ``R[j, j] - R[T-1, j]`` is what Avalanche calls forgetting (first minus last).

    Args:
        R: ``T x T`` accuracy matrix, ``T >= 2``.

    Returns:
        The mean change from just-learned to final accuracy over the first ``T - 1`` tasks.

    Raises:
        ReplayBankError (a ValueError): ``R`` is not square, has fewer than 2 tasks, or holds NaN/inf.

    Example:
        >>> backward_transfer([[0.9, 0.0], [0.6, 0.8]])
        -0.3
    """
    m = _matrix(R, min_tasks=2)
    t = m.shape[0]
    diffs = m[-1, : t - 1] - np.diag(m)[: t - 1]
    return round(float(diffs.mean()), _DECIMALS)


def forward_transfer(R: ArrayLike, baseline: ArrayLike) -> float:
    """Zero-shot accuracy on a task before training on it, over a baseline (FWT, Lopez-Paz & Ranzato 2017).

    ``FWT = 1/(T-1) * sum_{j >= 1} (R[j-1, j] - b[j])`` where ``b[j]`` is the accuracy on task ``j``
    of the model at random initialisation. In class-incremental streams the unseen classes are
    never predicted, so FWT there is ``-mean(b[1:])`` and says little.

    Args:
        R: ``T x T`` accuracy matrix, ``T >= 2``.
        baseline: length-``T`` accuracies of the randomly initialised model, one per task.

    Returns:
        The mean gain over the baseline on the last ``T - 1`` tasks.

    Raises:
        ReplayBankError (a ValueError): shapes disagree, fewer than 2 tasks, or NaN/inf entries.

    Example:
        >>> forward_transfer([[0.9, 0.3, 0.2], [0.7, 0.8, 0.4], [0.6, 0.7, 0.9]], [0.1, 0.1, 0.2])
        0.2
    """
    m = _matrix(R, min_tasks=2)
    b = np.asarray(baseline, dtype=np.float64)
    t = m.shape[0]
    if b.shape != (t,):
        raise ReplayBankError(f"baseline must have shape ({t},) to match R, got {b.shape}")
    if not np.all(np.isfinite(b)):
        raise ReplayBankError("baseline contains NaN or infinite entries")
    gains = np.array([m[j - 1, j] - b[j] for j in range(1, t)])
    return round(float(gains.mean()), _DECIMALS)


def forgetting_per_task(R: ArrayLike) -> NDArray[np.float64]:
    """Per-task forgetting: best earlier accuracy minus final accuracy (Chaudhry et al. 2018).

    ``f_j = max_{l < T-1} R[l, j] - R[T-1, j]`` for ``j < T - 1``; the last task has no entry.
    As in the paper, the max runs over every earlier row, including rows from before task ``j``
    was trained. Avalanche's forgetting is first minus last, ``R[j, j] - R[T-1, j]``: the two agree
    when accuracy on ``j`` peaks right after learning it, and differ when later training first
    raises it (ours then reports the drop from that peak) or in online streams, where Avalanche has
    no clean "first" value (Avalanche issue #1343). Both can be negative: ``f_j < 0`` when the
    final accuracy on ``j`` is above every earlier row's (the task got easier or was relearned,
    e.g. the rows of a joint baseline, which are separate models trained on more data).

    Args:
        R: ``T x T`` accuracy matrix, ``T >= 2``.

    Returns:
        Array of length ``T - 1``.

    Raises:
        ReplayBankError (a ValueError): ``R`` is not square, has fewer than 2 tasks, or holds NaN/inf.

    Example:
        >>> forgetting_per_task([[0.9, 0.0, 0.0], [0.5, 0.8, 0.0], [0.6, 0.4, 0.9]]).tolist()
        [0.3, 0.4]
    """
    m = _matrix(R, min_tasks=2)
    t = m.shape[0]
    best_earlier = m[: t - 1, : t - 1].max(axis=0)
    return np.round(best_earlier - m[-1, : t - 1], _DECIMALS)


def forgetting(R: ArrayLike) -> float:
    """Mean forgetting over the first ``T - 1`` tasks (Chaudhry et al. 2018).

    The mean of :func:`forgetting_per_task`; see there for the formula and how it differs from
    Avalanche's first-minus-last.

    Args:
        R: ``T x T`` accuracy matrix, ``T >= 2``.

    Returns:
        Mean forgetting; negative when final accuracies exceed the earlier best.

    Raises:
        ReplayBankError (a ValueError): ``R`` is not square, has fewer than 2 tasks, or holds NaN/inf.

    Example:
        >>> forgetting([[0.9, 0.0, 0.0], [0.5, 0.8, 0.0], [0.6, 0.4, 0.9]])
        0.35
    """
    return round(float(forgetting_per_task(R).mean()), _DECIMALS)


def learning_accuracy(R: ArrayLike) -> float:
    """Mean accuracy on each task right after training on it (LA, Riemer et al. 2019).

    ``LA = 1/T * sum_j R[j, j]``: how well the learner acquires new tasks, regardless of what it
    later forgets (low LA with low forgetting means an intransigent learner, Chaudhry et al. 2018).

    Args:
        R: ``T x T`` accuracy matrix, ``T >= 1``.

    Returns:
        The mean of the diagonal.

    Raises:
        ReplayBankError (a ValueError): ``R`` is not square, is empty, or holds NaN/inf.

    Example:
        >>> learning_accuracy([[0.9, 0.0], [0.6, 0.8]])
        0.85
    """
    m = _matrix(R)
    return round(float(np.diag(m).mean()), _DECIMALS)
