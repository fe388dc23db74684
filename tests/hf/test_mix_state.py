"""A ``mix()`` stream state is checked before datasets resumes from it (bounded)."""

from __future__ import annotations

import copy
import json
import time

import pytest

pytest.importorskip("datasets")

from replaybank.hf import MixError, MixSpec, mix  # noqa: E402
from replaybank.hf.stream_state import MAX_RESUME_EXAMPLES  # noqa: E402


def _stream(epochs=None):
    ds = mix([{"t": i} for i in range(6)], [{"t": -i} for i in range(4)], MixSpec(0.25, batch_size=4, seed=0, world_size=1, epochs=epochs))
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
        (lambda s: s["examples_iterable"].update(previous_state_example_idx=2), "never held that position"),
        (lambda s: _inner(s).update(shard_example_idx=9), "not within one map batch"),
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

    ds = MixedIterableDataset([{"t": i} for i in range(6)], [{"t": -i} for i in range(4)], MixSpec(0.25, batch_size=4, seed=0, world_size=1), rank=0)
    state = ds.state_dict()
    with pytest.raises(MixError, match="consumed=True"):
        ds.load_state_dict({**state, "consumed": True})
    ds.load_state_dict(state)


# -- hypothesis: random edits of a saved stream state -----------------------------------
import os  # noqa: E402

from hypothesis import HealthCheck, event, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from replaybank.errors import ReplayBankError  # noqa: E402

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "40"))
_STREAM: list = []


def _shared_stream():
    if not _STREAM:
        ds = _stream(epochs=2)  # 16 index pairs in all: an accepted state resumes at once
        good = json.loads(json.dumps(ds.state_dict()))
        ds.load_state_dict(copy.deepcopy(good))
        _STREAM.extend([ds, good, [r for _, r in zip(range(3), ds)]])
    return _STREAM


def _paths(d, prefix=()):
    for k, v in d.items():
        yield (*prefix, k)
        if isinstance(v, dict):
            yield from _paths(v, (*prefix, k))


edit_value = st.one_of(st.integers(-3, 20), st.integers(-(2**70), 2**70), st.floats(allow_nan=True),
                       st.sampled_from([None, True, "x"]), st.builds(list), st.builds(dict))


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_random_stream_state_edits_are_refused_whole_or_resume(data):
    ds, good, expected = _shared_stream()
    ds.load_state_dict(copy.deepcopy(good))
    state = copy.deepcopy(good)
    for _ in range(data.draw(st.integers(1, 3))):
        paths = sorted(_paths(state))
        if not paths:
            break
        path = data.draw(st.sampled_from(paths))
        parent = state
        for k in path[:-1]:
            parent = parent[k] if isinstance(parent, dict) else {}
        if not isinstance(parent, dict) or path[-1] not in parent:
            continue
        if data.draw(st.integers(0, 4)) == 0:
            del parent[path[-1]]
        else:
            parent[path[-1]] = data.draw(edit_value)
    start = time.monotonic()
    try:
        ds.load_state_dict(state)
    except ReplayBankError as err:
        event(f"stream state: {type(err).__name__}")
        # datasets' state_dict() reports the last iteration, so compare where the stream resumes
        assert [r for _, r in zip(range(3), ds)] == expected, "a refused state changed the stream"
        return
    finally:
        assert time.monotonic() - start < 2.0
    event("stream state: accepted")
    start = time.monotonic()
    try:
        for _ in zip(range(20), ds):
            pass
    except (ReplayBankError, IndexError, KeyError, TypeError, ValueError) as err:  # noqa: B014
        event(f"resume after accepted state: {type(err).__name__}")
        raise
    assert time.monotonic() - start < 5.0
