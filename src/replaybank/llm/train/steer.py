"""Steering the LoRA loop's mixture between optimizer steps with a replay controller.

:class:`Steering` is the glue between :mod:`replaybank.controllers` and
:func:`replaybank.llm.train.train_lora`, in one fixed order at every evaluation point:
``measure`` (raw held-out loss of the current domain and of every rehearsal source) ->
:func:`~replaybank.controllers.summarize` (normalised by the first measurement of this training
run, the trend over the last ``k``) -> ``controller.update`` -> :meth:`replaybank.mixing.Mixer.set_shares`
(the target mixture turned into row shares by :func:`replaybank.mixing.row_shares` when it is a
share of the labelled tokens). The first measurement is taken before the first step, so the
statistics are relative to where the current domain began.

Its state (the controller's, the losses measured so far, the mixture trajectory) goes into the
loop's checkpoint, so a resumed run continues with the same mixtures. The controller itself may
outlive one training run (the main job keeps one per arm over its generations); each run gets a
new :class:`Steering` around it. numpy only.

Example:
    >>> import numpy as np
    >>> from replaybank.controllers import MixLimits, make_controller
    >>> from replaybank.mixing import Mixer
    >>> ctl = make_controller("bandit", MixLimits(("corpus",), max_share=0.5), rng=np.random.default_rng(0))
    >>> losses = iter([[2.0, 1.0], [1.5, 1.4]])
    >>> steer = Steering(ctl, ["corpus"], lambda step: next(losses))
    >>> mixer = Mixer([40, 10], steer.row_shares(), batch_size=8, seed=0)
    >>> steer.begin()
    >>> steer.observe(5, mixer).round(3).tolist()
    [0.765, 0.235]
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from replaybank.controllers import Controller, ControllerError, summarize
from replaybank.errors import InvalidStateError
from replaybank.mixing import MixBy, Mixer, row_shares

STEER_SCHEMA_VERSION = 1
_KEYS = ("schema_version", "controller", "trained", "history", "trajectory")

#: raw held-out losses after optimizer step ``step``: the current domain, then every source of the
#: controller's limits in order (NaN for one not measured, e.g. without rows)
Measure = Callable[[int], Sequence[float]]


class Steering:
    """One training run's steering (see the module).

    Args:
        controller: the replay controller (its ``limits.sources`` name every source it mixes).
        trained: the rehearsal sources this run's mixer draws, in mixer order: a subset of the
            controller's sources (those with rows now); the others are masked.
        measure: the held-out losses after a step (see :data:`Measure`).
        k: evaluations the trend is fitted over.
        mix_by: ``rows`` (the mixture is of rows) or ``tokens`` (of labelled tokens).
        per_row: mean labelled tokens per row of the domain and each trained source (``tokens``).

    Raises:
        ControllerError: a trained source the controller does not mix, or one listed twice.
    """

    def __init__(
        self, controller: Controller, trained: Sequence[str], measure: Measure, *, k: int = 3,
        mix_by: MixBy = "rows", per_row: Sequence[float] | None = None,
    ) -> None:
        names = controller.limits.sources
        unknown = [s for s in trained if s not in names]
        if unknown or len(set(trained)) != len(trained):
            raise ControllerError(f"Steering(trained={list(trained)}): expected distinct sources of the controller, {list(names)}")
        self.controller, self.trained, self.measure, self.k = controller, list(trained), measure, k
        self.mix_by, self.per_row = mix_by, None if per_row is None else list(per_row)
        self.available = np.array([s in self.trained for s in names], dtype=bool)
        self._cols = [0] + [1 + names.index(s) for s in self.trained]
        self.history: list[list[float]] = []
        self.trajectory: list[dict[str, Any]] = []

    def attach(self, mix_by: MixBy, per_row: Sequence[float] | None) -> None:
        """What the mixture is a share of (the training loop's ``mix_by``) and, for ``tokens``, the
        mean labelled tokens per row of the domain and each trained source."""
        self.mix_by, self.per_row = mix_by, None if per_row is None else list(per_row)

    # -- the order of calls ----------------------------------------------------------------------
    def target(self) -> np.ndarray:
        """The controller's mixture now, over ``[domain, *trained]`` (of rows or tokens)."""
        return self.controller.mixture(self.available)[self._cols]

    def row_shares(self, target: np.ndarray | None = None) -> np.ndarray:
        """``target`` (default :meth:`target`) as the mixer's row shares."""
        t = self.target() if target is None else target
        if self.mix_by == "rows":
            return t
        return row_shares(t, self.mix_by, self.per_row)

    def begin(self) -> None:
        """Measure before the first step (nothing when resumed: the history is already there)."""
        if not self.history:
            self.history.append(self._measured(0))
            self._record(0, self.target(), None)

    def observe(self, step: int, mixer: Mixer) -> np.ndarray:
        """After optimizer ``step``: measure, summarize, update the controller, steer ``mixer``.

        Returns:
            The new target mixture over ``[domain, *trained]``.
        """
        if not self.history:
            self.begin()
        self.history.append(self._measured(step))
        stats = summarize(self.history, k=self.k)
        mix = self.controller.update(stats, self.available)[self._cols]
        mixer.set_shares(self.row_shares(mix))
        self._record(step, mix, stats)
        return mix

    def _measured(self, step: int) -> list[float]:
        raw = [float(x) for x in self.measure(step)]
        if len(raw) != 1 + len(self.available):
            raise ControllerError(f"Steering.measure({step}) gave {len(raw)} losses; expected 1 + {len(self.available)} "
                                  f"(the current domain, then {list(self.controller.limits.sources)})")
        return [x if self.available[i - 1] or i == 0 else math.nan for i, x in enumerate(raw)]

    def _record(self, step: int, mix: np.ndarray, stats: Any) -> None:
        names = ["domain", *self.trained]
        entry: dict[str, Any] = {"step": int(step), "shares": {n: round(float(v), 6) for n, v in zip(names, mix, strict=True)}}
        if stats is not None:
            entry["loss"] = {n: round(float(stats.loss[c]), 6) for n, c in zip(names, self._cols, strict=True)}
            entry["trend"] = {n: round(float(stats.trend[c]), 6) for n, c in zip(names, self._cols, strict=True)}
        self.trajectory.append(entry)

    # -- state -----------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """JSON-ready: schema version, the controller's state, the sources trained, the losses
        measured (NaN as None), the trajectory."""
        return {
            "schema_version": STEER_SCHEMA_VERSION,
            "controller": self.controller.state_dict(),
            "trained": list(self.trained),
            "history": [[None if math.isnan(x) else x for x in row] for row in self.history],
            "trajectory": copy.deepcopy(self.trajectory),
        }

    def check_state(self, state: Any) -> tuple[list[list[float]], list[dict[str, Any]]]:
        """Check ``state`` whole against this steering (its controller included) and return its
        history and trajectory; nothing is set.

        Raises:
            InvalidStateError: naming the key: another schema version, sources or controller
                (a state of another sequence or configuration), a loss that is negative or not
                a number, a malformed trajectory.
        """
        if not isinstance(state, Mapping):
            raise InvalidStateError(f"steering state: expected a mapping, got {type(state).__name__}")
        keys = sorted(map(str, state))
        if keys != sorted(_KEYS):
            raise InvalidStateError(f"steering state has keys {keys}, expected {sorted(_KEYS)}")
        if state["schema_version"] != STEER_SCHEMA_VERSION:
            raise InvalidStateError(f"steering state has schema_version {state['schema_version']!r}, expected {STEER_SCHEMA_VERSION}")
        if state["trained"] != self.trained:
            raise InvalidStateError(f"steering state['trained'] = {state['trained']!r}, this run trains {self.trained} "
                                    "(a state of another generation or recipe)")
        copy.deepcopy(self.controller).load_state_dict(state["controller"])  # checks it whole, sets nothing here
        width = 1 + len(self.available)
        history = state["history"]
        if not isinstance(history, list) or not all(isinstance(r, list) and len(r) == width for r in history):
            raise InvalidStateError(f"steering state['history']: expected rows of {width} losses")
        rows = []
        for r, row in enumerate(history):
            vals = [math.nan if x is None else x for x in row]
            if any(isinstance(x, bool) or not isinstance(x, (int, float)) or x < 0 or math.isinf(x) for x in vals):
                raise InvalidStateError(f"steering state['history'][{r}] = {row!r}: a loss is a finite number >= 0 or null")
            rows.append([float(x) for x in vals])
        traj = state["trajectory"]
        if not isinstance(traj, list) or not all(isinstance(e, dict) and isinstance(e.get("step"), int) and
                                                 isinstance(e.get("shares"), dict) for e in traj):
            raise InvalidStateError("steering state['trajectory']: expected entries {step, shares, ...}")
        return rows, copy.deepcopy(traj)

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` (checked whole first by :meth:`check_state`)."""
        history, trajectory = self.check_state(state)
        self.controller.load_state_dict(state["controller"])
        self.history, self.trajectory = history, trajectory
