"""The built-in datasets behind the continual-learning streams, loaded offline as numpy arrays.

* :func:`load_digits_arrays`: ``sklearn.datasets.load_digits`` (1,797 8x8 images).
* :func:`load_mnist1d_arrays`: MNIST-1D generated procedurally (Greydanus 2020); its download
  helper is never called.
"""

from __future__ import annotations

import functools
import random

import numpy as np
from numpy.typing import NDArray

__all__ = ["ArraySplit", "load_digits_arrays", "load_mnist1d_arrays", "stratified_split"]

FloatArray = NDArray[np.float32]
IntArray = NDArray[np.int64]

ArraySplit = tuple[FloatArray, IntArray, FloatArray, IntArray]


def stratified_split(
    x: FloatArray, y: IntArray, test_fraction: float, rng: np.random.Generator
) -> ArraySplit:
    """Split ``(x, y)`` so each class keeps ``test_fraction`` of its rows (rounded) for test.

    Returns:
        ``(x_train, y_train, x_test, y_test)``.
    """
    test_idx = []
    for c in np.unique(y):
        idx = rng.permutation(np.flatnonzero(y == c))
        test_idx.append(idx[: round(len(idx) * test_fraction)])
    test = np.zeros(len(y), dtype=bool)
    test[np.concatenate(test_idx)] = True
    return x[~test], y[~test], x[test], y[test]


def load_digits_arrays(*, seed: int = 0, test_fraction: float = 0.2) -> ArraySplit:
    """sklearn's 8x8 digits, standardised to zero mean and unit variance overall, split by class.

    The split is stratified and drawn from ``numpy.random.default_rng(seed)``.

    Returns:
        ``(x_train, y_train, x_test, y_test)`` with 64 float32 features.
    """
    from sklearn.datasets import load_digits

    data = load_digits()
    x = data.data.astype(np.float32)
    # One global scale (not per pixel): keeps always-blank border pixels at a constant and puts
    # the inputs on the same scale as the N(0, 1) noise that pseudo-rehearsal draws.
    x = (x - x.mean()) / x.std()
    return stratified_split(
        x, data.target.astype(np.int64), test_fraction, np.random.default_rng(seed)
    )


def load_mnist1d_arrays(*, seed: int = 42, num_samples: int = 5000) -> ArraySplit:
    """MNIST-1D generated offline with the ``mnist1d`` package's own generator.

    ``mnist1d.data.make_dataset`` seeds and draws from the global ``random``/``numpy.random``
    state; that state is saved and restored around the call so nothing outside changes. The
    download helper is never called. With the defaults (``seed=42``, 5,000 samples) this is the
    canonical MNIST-1D: 4,000 training and 1,000 test rows of 40 features.

    Returns:
        ``(x_train, y_train, x_test, y_test)``.

    Raises:
        ImportError: the ``mnist1d`` package is not installed.
    """
    return tuple(a.copy() for a in _mnist1d_cached(seed, num_samples))  # type: ignore[return-value]


@functools.lru_cache(maxsize=4)
def _mnist1d_cached(seed: int, num_samples: int) -> ArraySplit:
    # Generation takes about 2 s; runs over several seeds and strategies reuse it.
    from mnist1d.data import get_dataset_args, make_dataset

    args = get_dataset_args()
    args.seed = seed
    args.num_samples = num_samples
    np_state, py_state = np.random.get_state(), random.getstate()
    try:
        data = make_dataset(args)
    finally:
        np.random.set_state(np_state)
        random.setstate(py_state)
    return (
        data["x"].astype(np.float32),
        data["y"].astype(np.int64),
        data["x_test"].astype(np.float32),
        data["y_test"].astype(np.int64),
    )
