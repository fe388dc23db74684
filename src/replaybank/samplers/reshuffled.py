"""Random reshuffling: sampling without replacement, each stored item exactly once per epoch."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..checks import check_flag, check_state_keys, state_array, state_number
from ..errors import InvalidStateError
from .base import SamplerBase, View, check_can_sample


class Reshuffled(SamplerBase):
    """Random reshuffling over the buffer's slots (RR-C of Fujita 2025, arXiv 2503.02269).

    An epoch starts by drawing a fresh permutation of the slots occupied at that moment; batches
    are consecutive chunks of it. Semantics when the buffer changes mid-epoch:

    * every item stored when the epoch began and still stored is served exactly once;
    * a slot overwritten mid-epoch serves whatever item it holds when its turn comes (so a new
      item may be served this epoch in place of the one it displaced, and the displaced one is not);
    * slots first filled mid-epoch join at the next epoch; slots evicted mid-epoch are skipped.

    A batch that crosses an epoch boundary takes the rest of the old epoch and the start of the
    next, so an item can appear twice in that one batch; ``batch_size`` may not exceed the number
    of stored items. With ``drop_last=True`` (PyTorch's and TorchRL's name) a batch never crosses
    the boundary: when fewer than ``batch_size`` items are left in the epoch they are dropped and
    the batch comes whole from the next epoch, so no batch ever holds an item twice.

    Args:
        drop_last: drop the short tail of each epoch instead of completing it from the next.

    >>> from replaybank import ReplayBuffer
    >>> buf = ReplayBuffer(6, sampler=Reshuffled(), seed=0)
    >>> _ = buf.extend({"x": np.arange(6)})
    >>> sorted(np.concatenate([buf.sample(3).data["x"], buf.sample(3).data["x"]]).tolist())
    [0, 1, 2, 3, 4, 5]
    """

    can_repeat = False

    def __init__(self, drop_last: bool = False) -> None:
        self.drop_last = check_flag(drop_last, "Reshuffled", "drop_last")
        self.order = np.zeros(0, dtype=np.int64)
        self.position = 0
        self.epoch = 0

    def sample(
        self, batch_size: int, view: View, rng: np.random.Generator
    ) -> tuple[np.ndarray, None]:
        check_can_sample(batch_size, view, False, "Reshuffled(drop_last=True)" if self.drop_last else "Reshuffled")
        parts: list[np.ndarray] = []
        need = batch_size
        while need:
            if self.position >= len(self.order):
                if self.drop_last:  # the old epoch's short tail is dropped, not completed
                    parts, need = [], batch_size
                self.order = rng.permutation(view.table.occupied())
                self.position = 0
                self.epoch += 1
            chunk = self.order[self.position : self.position + need]
            self.position += len(chunk)
            if not view.table.dense:
                chunk = chunk[view.table.ids_of(chunk) >= 0]  # evicted since the epoch began
            parts.append(chunk)
            need -= len(chunk)
        return (parts[0] if len(parts) == 1 else np.concatenate(parts)), None

    def on_clear(self) -> None:
        self.order, self.position = np.zeros(0, dtype=np.int64), 0

    def state_dict(self) -> dict[str, Any]:
        return {"order": self.order, "position": self.position, "epoch": self.epoch}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        who = "Reshuffled"
        check_state_keys(state, who, ("order", "position", "epoch"))
        n = len(np.asarray(state["order"]).reshape(-1))
        order = state_array(state, "order", who, shape=(n,), integer=True, low=0, high=self.capacity - 1)
        position = state_number(state, "position", who, integer=True, low=0, high=n)
        self.epoch = state_number(state, "epoch", who, integer=True, low=0)
        self.order, self.position = order, position

    def check_table(self, table: Any) -> None:
        """The epoch's order may only name slots below ``table.high`` (slots filled when it was
        drawn; ones emptied since are skipped), each once."""
        bad = self.order >= table.high
        if bad.any():
            i = int(np.argmax(bad))
            raise InvalidStateError(
                f"Reshuffled state['order'][{i}] = {int(self.order[i])}: not a slot the table has "
                f"filled (table.high = {table.high})"
            )
        if len(np.unique(self.order)) != len(self.order):
            raise InvalidStateError("Reshuffled state['order']: a slot is listed twice")
