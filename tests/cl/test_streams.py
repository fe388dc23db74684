from __future__ import annotations

import numpy as np
import pytest

from replaybank.cl.streams import (
    STREAMS,
    load_mnist1d_arrays,
    make_stream,
    permuted_stream,
    split_stream,
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
