from __future__ import annotations

import doctest

import numpy as np
import pytest

from replaybank import metrics
from replaybank.metrics import (
    average_accuracy,
    backward_transfer,
    forgetting,
    forgetting_per_task,
    forward_transfer,
    learning_accuracy,
)

# A 3-task matrix worked out by hand below. Task 0 recovers after task 1 then drops; task 1 is
# learned, then partly forgotten.
R3 = np.array(
    [
        [0.80, 0.10, 0.20],
        [0.50, 0.90, 0.30],
        [0.70, 0.60, 0.95],
    ]
)


def test_average_accuracy_is_mean_of_last_row() -> None:
    assert average_accuracy(R3) == pytest.approx((0.70 + 0.60 + 0.95) / 3)


def test_backward_transfer_by_hand() -> None:
    # (0.70 - 0.80) and (0.60 - 0.90) -> mean -0.2
    assert backward_transfer(R3) == pytest.approx(-0.2)


def test_forward_transfer_by_hand() -> None:
    b = [0.1, 0.05, 0.1]
    # (R[0,1] - b1) = 0.05, (R[1,2] - b2) = 0.2 -> 0.125
    assert forward_transfer(R3, b) == pytest.approx(0.125)


def test_forgetting_is_best_earlier_minus_final() -> None:
    # task 0: max(0.8, 0.5) - 0.7 = 0.1 ; task 1: max(0.1, 0.9) - 0.6 = 0.3
    np.testing.assert_allclose(forgetting_per_task(R3), [0.1, 0.3])
    assert forgetting(R3) == pytest.approx(0.2)


def test_forgetting_differs_from_first_minus_last_when_peak_is_later() -> None:
    # Task 0 peaks after task 1 (0.9), not right after learning (0.6).
    R = np.array([[0.6, 0.0, 0.0], [0.9, 0.8, 0.0], [0.7, 0.8, 0.9]])
    first_minus_last = R[0, 0] - R[2, 0]
    assert first_minus_last == pytest.approx(-0.1)
    assert forgetting_per_task(R)[0] == pytest.approx(0.2)


def test_learning_accuracy_is_mean_diagonal() -> None:
    assert learning_accuracy(R3) == pytest.approx((0.80 + 0.90 + 0.95) / 3)


def test_perfect_memory_has_zero_forgetting_and_bwt() -> None:
    R = np.tril(np.ones((4, 4)))
    assert forgetting(R) == 0.0
    assert backward_transfer(R) == 0.0
    assert average_accuracy(R) == 1.0


def test_naive_class_incremental_pattern() -> None:
    # Only the most recent task is right: the textbook catastrophic-forgetting matrix.
    R = np.eye(5)
    assert average_accuracy(R) == pytest.approx(0.2)
    assert forgetting(R) == pytest.approx(1.0)
    assert backward_transfer(R) == pytest.approx(-1.0)
    assert learning_accuracy(R) == pytest.approx(1.0)


@pytest.mark.parametrize(
    "bad",
    [np.zeros((2, 3)), np.zeros(3), np.zeros((0, 0)), np.array([[1.0, np.nan], [0.5, 0.5]])],
)
def test_bad_matrices_raise(bad: np.ndarray) -> None:
    with pytest.raises(ValueError):
        average_accuracy(bad)


@pytest.mark.parametrize("fn", [backward_transfer, forgetting, forgetting_per_task])
def test_single_task_raises_for_transfer_metrics(fn) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match="at least 2"):
        fn(np.array([[0.9]]))


def test_forward_transfer_baseline_shape_checked() -> None:
    with pytest.raises(ValueError, match="baseline"):
        forward_transfer(R3, [0.1, 0.1])


def test_docstring_examples_hold() -> None:
    result = doctest.testmod(metrics)
    assert result.attempted >= 6
    assert result.failed == 0


def test_forgetting_is_negative_when_final_accuracy_beats_every_earlier_row() -> None:
    # Task 0 is learned to 0.5 and ends at 0.9 (later training helped it): forgetting -0.4, as
    # defined (best earlier minus final), not clipped at 0; BWT agrees in sign.
    R = [[0.5, 0.0], [0.9, 0.8]]
    np.testing.assert_allclose(forgetting_per_task(R), [-0.4])
    assert forgetting(R) == pytest.approx(-0.4)
    assert backward_transfer(R) == pytest.approx(0.4)
