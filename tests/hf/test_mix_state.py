"""Issue 29: a ``mix()`` stream state is checked before datasets resumes from it (bounded)."""

from __future__ import annotations

import copy
import json
import time

import pytest

pytest.importorskip("datasets")

from replaybank.hf import MixError, mix  # noqa: E402
from replaybank.hf.stream_state import MAX_RESUME_EXAMPLES  # noqa: E402


def _stream(epochs=None):
    ds = mix([{"t": i} for i in range(6)], [{"t": -i} for i in range(4)], 0.25, batch_size=4, seed=0,
             world_size=1, epochs=epochs)
    it = iter(ds)
    for _ in range(5):
        next(it)
    return ds


def _inner(state):
    return state["examples_iterable"]["examples_iterable"]


@pytest.mark.parametrize(
    ("change", "match"),
    [
        (lambda s: _inner(s).update(shard_example_idx=10**9), "shard_example_idx.*not an integer in"),
        (lambda s: _inner(s).update(shard_example_idx=-1), "shard_example_idx"),
        (lambda s: _inner(s).update(shard_example_idx=2.5), "shard_example_idx"),
        (lambda s: _inner(s).update(type="ArrowExamplesIterable"), "type"),
        (lambda s: _inner(s).pop("shard_idx"), "keys"),
        (lambda s: s["examples_iterable"].update(previous_state=[1]), "previous_state"),
        (lambda s: s.update(epoch="0"), "epoch"),
    ],
)
def test_a_bad_stream_state_is_refused_at_once(change, match):
    ds = _stream()
    good = ds.state_dict()
    bad = copy.deepcopy(good)
    change(bad)
    start = time.monotonic()
    with pytest.raises(MixError, match=match):
        ds.load_state_dict(bad)
    assert time.monotonic() - start < 1.0
    assert ds.state_dict() == good
    ds.load_state_dict(json.loads(json.dumps(good)))  # the good one still loads and resumes
    assert next(iter(ds)) is not None


def test_the_bound_is_the_stream_length_when_epochs_are_set():
    ds = _stream(epochs=1)
    state = ds.state_dict()
    _inner(state)["shard_example_idx"] = 9  # one epoch of this stream is 8 index pairs
    with pytest.raises(MixError, match=r"in \[0, 8\]"):
        ds.load_state_dict(state)
    assert MAX_RESUME_EXAMPLES == 2**20


def test_the_torch_dataset_refuses_a_bool_for_consumed():
    pytest.importorskip("torch")
    from replaybank.hf.torch import MixedIterableDataset

    ds = MixedIterableDataset([{"t": i} for i in range(6)], [{"t": -i} for i in range(4)], 0.25, batch_size=4,
                              seed=0, world_size=1, rank=0)
    state = ds.state_dict()
    with pytest.raises(MixError, match="consumed=True"):
        ds.load_state_dict({**state, "consumed": True})
    ds.load_state_dict(state)
