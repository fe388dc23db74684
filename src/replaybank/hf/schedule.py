"""The rehearsal share of a steered :func:`replaybank.hf.mix` stream, batch by batch (numpy only).

A :class:`replaybank.hf.ControllerCallback` appends changes; the stream's index generator applies
them (to the plan's own mixer, :meth:`replaybank.mixing.Mixer.set_shares`: its saved ``ratio``
stays the starting one) before drawing the batch each names.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from replaybank.hf.plan import GlobalBatch, MixError, MixPlan, check_ratio


class QuotaSchedule:
    """The rehearsal share of a steered ``mix`` stream, global batch by global batch.

    A :class:`replaybank.hf.ControllerCallback` appends a change after each evaluation
    (:meth:`change`: from the first global batch the stream has not drawn yet); the stream's index
    generator (``mix(..., steer=schedule)``, same process) applies each change before drawing that
    batch. Because the changes are keyed by batch number, a stream iterated again from the start
    (``Trainer``'s resume skips batches of a fresh iteration) draws exactly the same batches.
    The stream finds its schedule by :attr:`token` (datasets may copy its generator's arguments).

    Example:
        >>> s = QuotaSchedule()
        >>> s.drawn = 3
        >>> s.change(0.25), s.ratio_at(2), s.ratio_at(3), s.state_dict()["changes"]
        (3, None, 0.25, [[3, 0.25]])
    """

    _live: dict[str, QuotaSchedule] = {}

    def __init__(self) -> None:
        import uuid

        self.token = uuid.uuid4().hex
        self.changes: list[tuple[int, float]] = []
        self.drawn = 0  # global batches the stream has drawn (the furthest any iteration got)
        self._live[self.token] = self  # the class's registry, shared by every schedule

    @classmethod
    def find(cls, token: str) -> QuotaSchedule:
        """The schedule ``token`` names in this process.

        Raises:
            MixError: none (a stream iterated in another process: steer with ``dataloader_num_workers=0``).
        """
        if token not in cls._live:
            raise MixError(f"steered mix stream: schedule {token!r} is not in this process; a steered stream is read "
                           "in the trainer's process (dataloader_num_workers=0)")
        return cls._live[token]

    def change(self, ratio: float) -> int:
        """Set ``ratio`` from the first batch not drawn yet; returns that batch's number."""
        r = check_ratio(ratio)
        at = self.drawn
        self.changes = [c for c in self.changes if c[0] < at] + [(at, r)]
        return at

    def steer(self, plan: MixPlan) -> Iterator[GlobalBatch]:
        """``plan``'s global batches, each change applied before the batch it names is drawn.

        Raises:
            InvalidArgumentError: a share above 0 for a plan built with ``ratio=0`` (no rehearsal rows).
        """
        batches = iter(plan)
        k = 0
        while True:
            ratio = self.ratio_at(k)
            if ratio is not None:
                plan.set_shares([1.0 - ratio, ratio])
            batch = next(batches, None)
            if batch is None:
                return
            self.drawn = max(self.drawn, k + 1)
            yield batch
            k += 1

    def ratio_at(self, batch: int) -> float | None:
        """The ratio that takes effect at global batch ``batch`` (None: no change there)."""
        return next((r for b, r in reversed(self.changes) if b == batch), None)

    def state_dict(self) -> dict[str, Any]:
        """``{"changes": [[batch, ratio], ...], "drawn": n}`` (JSON-ready)."""
        return {"changes": [[b, r] for b, r in self.changes], "drawn": self.drawn}

    def load_state_dict(self, state: Any) -> None:
        """Restore :meth:`state_dict` (checked whole first).

        Raises:
            MixError: naming the entry that is not a batch number and a ratio in ``[0, 1)``.
        """
        if not isinstance(state, dict) or set(state) != {"changes", "drawn"}:
            raise MixError(f"quota schedule state: expected keys ['changes', 'drawn'], got {state!r:.200}")
        changes: list[tuple[int, float]] = []
        for k, c in enumerate(state["changes"] if isinstance(state["changes"], list) else [None]):
            ok = isinstance(c, list) and len(c) == 2 and isinstance(c[0], int) and not isinstance(c[0], bool) and c[0] >= 0
            if not ok or (changes and c[0] <= changes[-1][0]):
                raise MixError(f"quota schedule state['changes'][{k}] = {c!r}: expected [batch, ratio], batches increasing")
            changes.append((int(c[0]), check_ratio(c[1])))
        drawn = state["drawn"]
        if isinstance(drawn, bool) or not isinstance(drawn, int) or drawn < 0:
            raise MixError(f"quota schedule state['drawn'] = {drawn!r}: expected a batch count >= 0")
        self.changes, self.drawn = changes, drawn
