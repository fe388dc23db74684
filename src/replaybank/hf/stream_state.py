"""The state check of :func:`replaybank.hf.mix` streams: what a resumed state may say.

``mix`` returns a :class:`MixStream`, a ``datasets.IterableDataset`` whose ``load_state_dict``
checks the whole state before datasets sees it. datasets resumes by regenerating every index pair
up to the saved count (about 55,000 a second on a 2-core machine), so a tampered count like
``shard_example_idx = 10**9`` would run for hours; the count is bounded by the stream's length
(``epochs`` set) or by :data:`MAX_RESUME_EXAMPLES` (an endless stream). Imports ``datasets``, so
only :func:`~replaybank.hf.mix` imports this module, when called.
"""

from __future__ import annotations

from typing import Any

import datasets

from replaybank.hf.plan import MixError

#: the most index pairs the state of an endless ``mix`` stream may count (about 20 s of
#: regeneration at the rate above); a longer run resumes with ``MixedIterableDataset`` or
#: ``MixedBatchSampler`` (their state restores the position at once) or ``Trainer``'s skip
MAX_RESUME_EXAMPLES = 2**20
_MAX_DEPTH = 8


class MixStream(datasets.IterableDataset):
    """A ``mix`` stream: a ``datasets.IterableDataset`` whose state is checked on load."""

    _replaybank_template: dict[str, Any]
    _replaybank_limit: int
    _replaybank_batch: int
    _replaybank_mix: dict[str, int]

    def adopt(self, limit: int, batch: int, mix: dict[str, int]) -> None:
        """Take this stream's checks: its fresh state as the template, the count limit, the rows
        per map call, and what ``check_trainer`` compares with the trainer's batch size."""
        self._replaybank_template = self.state_dict()
        self._replaybank_limit = int(limit)
        self._replaybank_batch = int(batch)
        self._replaybank_mix = mix

    def load_state_dict(self, state_dict: dict) -> None:
        """datasets' ``load_state_dict``, after :func:`check_stream_state` passed (all or nothing).

        Raises:
            MixError: naming the entry that is missing, unknown, of the wrong type or out of range.
        """
        check_stream_state(state_dict, self._replaybank_template, self._replaybank_limit)
        check_positions(state_dict, self._replaybank_batch)
        super().load_state_dict(state_dict)


def as_mix_stream(
    ds: datasets.IterableDataset, limit: int, batch: int, mix: dict[str, int]
) -> MixStream:
    """``ds`` (a fresh stream whose map reads ``batch`` rows per call) as a :class:`MixStream`
    that refuses counts above ``limit`` and tells ``check_trainer`` its batch layout ``mix``."""
    ds.__class__ = MixStream
    stream: MixStream = ds  # type: ignore[assignment]
    stream.adopt(limit, batch, mix)
    return stream


def check_stream_state(state: Any, template: Any, limit: int, where: str = "mix stream state") -> None:
    """``state`` must have the shape of ``template`` (a fresh stream's state): the same keys and
    iterable types at every level, integers in ``[0, limit]``; a ``None`` entry of the template
    (no previous state yet) may be ``None`` or shaped like its sibling ``examples_iterable``."""
    _check(state, template, limit, where, 0)


def _check(state: Any, template: Any, limit: int, where: str, depth: int) -> None:
    if depth > _MAX_DEPTH:
        raise MixError(f"{where}: nested deeper than a mix stream's state")
    if isinstance(template, dict):
        if not isinstance(state, dict):
            raise MixError(f"{where}: expected a mapping, got {type(state).__name__}")
        if set(state) != set(template):
            raise MixError(f"{where}: keys {sorted(map(str, state))}, expected {sorted(template)}")
        for key, sub in template.items():
            value = state[key]
            if sub is None and value is not None:  # the previous state, unset in a fresh stream
                sub = template.get("examples_iterable")
            _check(value, sub, limit, f"{where}[{key!r}]", depth + 1)
    elif template is None:
        if state is not None:
            raise MixError(f"{where}: expected null, got {state!r}")
    elif isinstance(template, bool) or not isinstance(template, int):
        if type(state) is not type(template) or state != template:
            raise MixError(f"{where}: {state!r}, expected {template!r}")
    elif type(state) is not int or not 0 <= state <= limit:
        raise MixError(
            f"{where}: {state!r} is not an integer in [0, {limit}] (the examples this stream can "
            "have yielded; resuming regenerates every one of them)"
        )


def check_positions(state: dict[str, Any], batch: int, where: str = "mix stream state") -> None:
    """The counts of the batched map stage must agree with each other (where the state has them):
    the map's last batch started at its previous state's position, and the index stream is at most
    one map batch past it. Another state would resume at a position this stream never held."""
    mapped = state.get("examples_iterable")
    if not isinstance(mapped, dict) or "previous_state_example_idx" not in mapped:
        return
    inner, previous = mapped.get("examples_iterable"), mapped.get("previous_state")
    start = mapped["previous_state_example_idx"]
    expected = previous.get("shard_example_idx", 0) if isinstance(previous, dict) else 0
    if start != expected:
        raise MixError(
            f"{where}: previous_state_example_idx={start} but the previous state is at {expected}; "
            "this stream never held that position (altered state)"
        )
    since = mapped.get("num_examples_since_previous_state", 0)
    if isinstance(since, int) and since > batch:
        raise MixError(f"{where}: num_examples_since_previous_state={since} is more than one map batch ({batch})")
    same_shard = isinstance(inner, dict) and isinstance(previous, dict) and inner.get("shard_idx") == previous.get(
        "shard_idx"
    )
    if same_shard and isinstance(inner, dict) and not 0 <= inner.get("shard_example_idx", 0) - start <= batch:
        raise MixError(
            f"{where}: the index stream is at {inner.get('shard_example_idx')}, not within one map batch "
            f"({batch}) after the map's previous state ({start}) (altered state)"
        )
