"""Mixer(carry_credit=True): the quota credit carries from epoch to epoch, so the
long-run share is the shares; its state resumes exactly and is checked like the rest."""

from __future__ import annotations

import numpy as np
import pytest

from replaybank.errors import InvalidStateError
from replaybank.mixing import Mixer


def make(carry: bool = True) -> Mixer:
    return Mixer([64, 5], [0.9, 0.1], 8, seed=0, drop_last=True, carry_credit=carry)


def run(m: Mixer, epochs: int) -> list[np.ndarray]:
    out = []
    for e in range(epochs):
        out += [b.source for b in m.epoch(e)]
    return out


def test_carried_credit_gives_the_share_and_restarted_credit_does_not() -> None:
    carried, restarted = run(make(True), 20), run(make(False), 20)
    for batches, within in ((carried, 1.0), (restarted, None)):
        rows = sum(len(b) for b in batches)
        reh = sum(int((b == 1).sum()) for b in batches)
        if within is not None:
            assert abs(reh - 0.1 * rows) <= within
        else:
            assert reh / rows == 0.09375  # the figure: 8 short of 128 over 20 epochs
    assert len(carried) == make().batches_in(20) and len(restarted) == make(False).batches_in(20) == 160


def test_state_mid_run_resumes_exactly() -> None:
    full = make()
    want = run(full, 4)
    m = make()
    seen = [b.source for b in m.epoch(0)]
    it = m.epoch(1)
    seen += [next(it).source for _ in range(3)]
    state = m.state_dict()
    assert "epoch_credit" in state and state["epoch"] == 1
    again = make()
    again.load_state_dict(state)
    rest = [b.source for b in again.epoch(1)] + [b.source for e in (2, 3) for b in again.epoch(e)]
    assert [x.tolist() for x in seen + rest] == [x.tolist() for x in want]


def test_bad_and_old_states_are_refused() -> None:
    m = make()
    run(m, 2)  # now at the start of epoch 2
    state = m.state_dict()
    assert state["epoch"] == 2 and state["credit"] == state["epoch_credit"]
    old = {k: v for k, v in state.items() if k != "epoch_credit"}
    with pytest.raises(InvalidStateError, match="restarted the quota credit"):
        make().load_state_dict(old)
    bad = dict(state, epoch_credit=[0.5, 0.4])
    with pytest.raises(InvalidStateError, match="epoch_credit"):
        make().load_state_dict(bad)
    moved = dict(state, epoch_credit=[-0.4, 0.4] if state["epoch_credit"] != [-0.4, 0.4] else [0.2, -0.2])
    with pytest.raises(InvalidStateError, match="altered state"):
        make().load_state_dict(moved)
    with pytest.raises(InvalidStateError, match="unknown key 'epoch_credit'"):
        make(False).load_state_dict(state)
    fresh = make().state_dict()
    fresh.pop("epoch_credit")  # epoch 0 began with no credit in every version: still taken
    make().load_state_dict(fresh)
