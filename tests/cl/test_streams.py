from __future__ import annotations

import numpy as np
import pytest

from replaybank.cl.streams import (
    STREAMS,
    load_mnist1d_arrays,
    make_stream,
    permuted_stream,
    split_stream,
    validation_stream,
)
from replaybank.errors import ReplayBankError


def test_class_incremental_split_has_disjoint_classes(make_arrays) -> None:  # type: ignore[no-untyped-def]
    s = split_stream(*make_arrays(), n_tasks=2)
    assert [t.classes for t in s.tasks] == [(0, 1), (2, 3)]
    assert s.n_classes == 4 and s.scenario == "class"
    for t in s.tasks:
        assert set(np.unique(t.y_train)) == set(t.classes)
        assert set(np.unique(t.y_test)) == set(t.classes)


def test_domain_split_relabels_to_shared_head(make_arrays) -> None:  # type: ignore[no-untyped-def]
    s = split_stream(*make_arrays(), n_tasks=2, scenario="domain")
    assert s.n_classes == 2
    for t in s.tasks:
        assert t.classes == (0, 1)
        assert set(np.unique(t.y_train)) == {0, 1}


def test_class_order_is_respected(make_arrays) -> None:  # type: ignore[no-untyped-def]
    s = split_stream(*make_arrays(), n_tasks=2, class_order=[3, 0, 2, 1])
    assert [t.classes for t in s.tasks] == [(0, 3), (1, 2)]


def test_permuted_stream_is_deterministic_and_permutes(make_arrays) -> None:  # type: ignore[no-untyped-def]
    a = permuted_stream(*make_arrays(), n_tasks=3, rng=np.random.default_rng(5))
    b = permuted_stream(*make_arrays(), n_tasks=3, rng=np.random.default_rng(5))
    np.testing.assert_array_equal(a.tasks[2].x_train, b.tasks[2].x_train)
    np.testing.assert_array_equal(a.tasks[0].x_train, make_arrays()[0])
    assert not np.array_equal(a.tasks[1].x_train, a.tasks[0].x_train)
    np.testing.assert_allclose(np.sort(a.tasks[1].x_train, axis=1), np.sort(a.tasks[0].x_train, axis=1))


def test_builtin_split_digits_shape() -> None:
    s = make_stream("split-digits")
    assert len(s) == 5 and s.input_dim == 64 and s.n_classes == 10
    assert [t.classes for t in s.tasks] == [(0, 1), (2, 3), (4, 5), (6, 7), (8, 9)]
    assert sum(len(t.y_train) + len(t.y_test) for t in s.tasks) == 1797


def test_mnist1d_is_generated_offline_without_touching_global_rng() -> None:
    before = np.random.get_state()[1].copy()
    x, y, xt, yt = load_mnist1d_arrays()
    np.testing.assert_array_equal(np.random.get_state()[1], before)
    assert x.shape == (4000, 40) and xt.shape == (1000, 40)
    assert set(np.unique(y)) == set(range(10))


def test_unknown_stream_lists_valid_names() -> None:
    with pytest.raises(ReplayBankError, match="split-digits") as info:
        make_stream("split-cifar")
    for name in STREAMS:
        assert name in str(info.value)


def test_too_few_classes_for_tasks(make_arrays) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ReplayBankError, match="need 6 classes"):
        split_stream(*make_arrays(), n_tasks=3, classes_per_task=2)
    with pytest.raises(ReplayBankError, match="need 5 classes"):
        split_stream(*make_arrays(), n_tasks=5)


def test_mismatched_lengths(make_arrays) -> None:  # type: ignore[no-untyped-def]
    x, y, xt, yt = make_arrays()
    with pytest.raises(ReplayBankError, match="mismatched lengths"):
        split_stream(x, y[:-1], xt, yt, n_tasks=2)
    with pytest.raises(ReplayBankError, match="mismatched lengths"):
        permuted_stream(x, y, xt[:3], yt, n_tasks=2, rng=np.random.default_rng(0))


def test_bad_scenario_and_labels(make_arrays) -> None:  # type: ignore[no-untyped-def]
    x, y, xt, yt = make_arrays()
    with pytest.raises(ReplayBankError, match="scenario"):
        split_stream(x, y, xt, yt, n_tasks=2, scenario="instance")  # type: ignore[arg-type]
    with pytest.raises(ReplayBankError, match="integer"):
        split_stream(x, y.astype(float), xt, yt, n_tasks=2)
    with pytest.raises(ReplayBankError, match="class_order"):
        split_stream(x, y, xt, yt, n_tasks=2, class_order=[0, 0, 1, 2])
    with pytest.raises(ReplayBankError, match="domain-incremental only"):
        make_stream("permuted-digits", scenario="class")


def test_validation_split_comes_from_training_rows_only(make_arrays) -> None:  # type: ignore[no-untyped-def]
    x, y, x_test, y_test = make_arrays(n_per_class=20)
    stream = split_stream(x, y, x_test, y_test, n_tasks=2)
    val = validation_stream(stream, fraction=0.25, seed=1)
    assert val.name == "split/validation" and val.scenario == stream.scenario and val.n_classes == stream.n_classes
    for task, vtask in zip(stream.tasks, val.tasks, strict=True):
        train_rows = {r.tobytes() for r in task.x_train}
        held = [r.tobytes() for r in vtask.x_test]
        kept = [r.tobytes() for r in vtask.x_train]
        assert set(held) <= train_rows and set(kept) <= train_rows  # nothing from the test split
        assert not set(held) & set(kept)  # disjoint
        assert len(held) + len(kept) == len(task.x_train)
        for c in task.classes:  # stratified: round(20 * 0.25) = 5 of each class held out
            assert int((vtask.y_test == c).sum()) == 5
        assert vtask.classes == task.classes


def test_validation_split_is_seeded(make_arrays) -> None:  # type: ignore[no-untyped-def]
    stream = split_stream(*make_arrays(n_per_class=20), n_tasks=2)
    a, b = validation_stream(stream, seed=1), validation_stream(stream, seed=1)
    c = validation_stream(stream, seed=2)
    np.testing.assert_array_equal(a.tasks[0].x_test, b.tasks[0].x_test)
    assert not np.array_equal(a.tasks[0].x_test, c.tasks[0].x_test)


def test_permuted_tasks_hold_out_the_same_rows(make_arrays) -> None:  # type: ignore[no-untyped-def]
    stream = permuted_stream(*make_arrays(n_per_class=20), n_tasks=3, rng=np.random.default_rng(0))
    val = validation_stream(stream)
    first = {r.tobytes() for r in val.tasks[0].x_test}
    unpermuted = {r.tobytes() for r in stream.tasks[0].x_train}
    assert first <= unpermuted
    for t in (1, 2):  # same labels in the same order: the same held-out rows, permuted
        np.testing.assert_array_equal(val.tasks[t].y_test, val.tasks[0].y_test)


@pytest.mark.parametrize("fraction", [0.0, 1.0, -0.1, 1.5])
def test_validation_fraction_must_be_a_proper_share(make_arrays, fraction: float) -> None:  # type: ignore[no-untyped-def]
    stream = split_stream(*make_arrays(), n_tasks=2)
    with pytest.raises(ReplayBankError, match="validation fraction must be in"):
        validation_stream(stream, fraction=fraction)


def test_validation_split_that_leaves_nothing_is_refused(make_arrays) -> None:  # type: ignore[no-untyped-def]
    stream = split_stream(*make_arrays(n_per_class=2), n_tasks=2)  # round(2 * 0.2) = 0 held out
    with pytest.raises(ReplayBankError, match="leaves 4 to train on and 0 to validate on"):
        validation_stream(stream, fraction=0.2)
