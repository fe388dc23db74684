"""A ``TrainerCallback`` that steers a :func:`replaybank.hf.mix` stream's rehearsal share with a
replay controller (:mod:`replaybank.controllers`, the same objects as ``replaybank run`` and
``replaybank loop``).

After each ``Trainer.evaluate`` it reads the held-out loss of the domain and of the rehearsal
source (``eval_<name>_loss``, from an ``eval_dataset`` dict with those two names), feeds them to
:func:`~replaybank.controllers.summarize` and ``controller.update``, and moves the stream's quota
from the next global batch it draws (:class:`~replaybank.hf.schedule.QuotaSchedule`). The first
evaluation is the baseline every later loss is divided by (``eval_on_start=True`` makes it the
untrained model's). Its state (controller, losses, schedule) is written to every checkpoint
folder as ``replaybank_controller.json`` and read back when ``Trainer`` resumes from one, so a
resumed run draws the batches of an uninterrupted one.

Example (a sketch; ``tests/hf/test_controller_callback.py`` runs it on a tiny Llama):

    cb = ControllerCallback.from_recipe(recipe("rehearsal-self"), seed=0)   # or any controller
    train = mix(domain, general, MixSpec(cb.ratio, batch_size=8, seed=0), steer=cb.schedule)
    trainer = Trainer(..., train_dataset=train, eval_dataset={"domain": d_eval, "rehearsal": g_eval},
                      args=TrainingArguments(..., eval_strategy="steps", eval_steps=50, eval_on_start=True))
    trainer.add_callback(cb)
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
from transformers import TrainerCallback

from replaybank.controllers import Controller, MixLimits, check_params, make_controller, summarize
from replaybank.files import check_path, read_regular, write_regular
from replaybank.hf.plan import MixError
from replaybank.hf.schedule import QuotaSchedule

STATE_FILE = "replaybank_controller.json"
_VERSION = 1


class ControllerCallback(TrainerCallback):
    """Steer a ``mix`` stream's rehearsal share after every evaluation (see the module).

    Args:
        controller: a replay controller over exactly one rehearsal source (``mix`` mixes one).
        domain: the ``eval_dataset`` name of the held-out domain rows.
        rehearsal: the ``eval_dataset`` name of the held-out rehearsal rows.
        k: evaluations the loss trend is fitted over.

    Attributes:
        schedule: pass it to ``mix(..., steer=)``.
        ratio: the starting rehearsal share (the controller's), for ``mix``'s ``ratio``.
        history: raw losses per evaluation, ``[domain, rehearsal]``.
        trajectory: ``[{"step", "shares", "batch"}]``, the mixture after each evaluation and the
            global batch it took effect from.

    Raises:
        MixError: a controller over other than one source, or ``k < 2``.
    """

    def __init__(self, controller: Controller, *, domain: str = "domain", rehearsal: str = "rehearsal", k: int = 3) -> None:
        if getattr(getattr(controller, "limits", None), "n", None) != 1:
            raise MixError("ControllerCallback: the controller must mix exactly one rehearsal source (mix has one); "
                           "build it over MixLimits((name,), ...)")
        if isinstance(k, bool) or not isinstance(k, int) or k < 2:
            raise MixError(f"ControllerCallback(k={k!r}): expected an int >= 2")
        self.controller, self.names, self.k = controller, (domain, rehearsal), k
        self.schedule = QuotaSchedule()
        self.history: list[list[float]] = []
        self.trajectory: list[dict[str, Any]] = []
        self._pending: dict[str, float] = {}
        self.ratio = float(controller.mixture(np.array([True]))[1])

    @classmethod
    def from_recipe(cls, spec: Any, seed: int, **kwargs: Any) -> ControllerCallback:
        """The controller of a recipe (:func:`replaybank.hf.recipe`, a ``[recipes.NAME]`` table):
        the one ``replaybank run`` and ``replaybank loop`` build (one source).

        Raises:
            MixError: a recipe without a controller or with more than one source.
        """
        from replaybank.llm.config.controller import recipe_controller

        if getattr(spec, "controller", "none") == "none" or len(spec.source) != 1:
            raise MixError("ControllerCallback.from_recipe: the recipe needs a controller and exactly one source "
                           f"(got controller = {getattr(spec, 'controller', None)!r}, source = {spec.source})")
        controller = recipe_controller(spec, seed)
        if controller is None:
            raise MixError(f"ControllerCallback.from_recipe: the recipe's controller {spec.controller!r} builds none")
        return cls(controller, **kwargs)

    @classmethod
    def make(cls, name: str, *, seed: int, floor: float = 0.0, max_share: float = 0.5, **params: Any) -> ControllerCallback:
        """A callback around ``make_controller(name, MixLimits(("rehearsal",), floor, max_share), ...)``."""
        limits = MixLimits(("rehearsal",), floor=floor, max_share=max_share)
        params = check_params(name, params)
        return cls(make_controller(name, limits, rng=np.random.default_rng(seed), **params))

    # -- Trainer events ---------------------------------------------------------------------------
    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.global_step > 0:  # resuming: this callback's state of that checkpoint
            folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            path = folder / STATE_FILE
            if path.exists() or path.is_symlink():  # a FIFO or a link is refused by load, not skipped
                self.load(folder)

    def on_evaluate(self, args: Any, state: Any, control: Any, metrics: dict[str, float] | None = None, **kwargs: Any) -> None:
        for key, value in (metrics or {}).items():
            for name in self.names:
                if key == f"eval_{name}_loss":
                    self._pending[name] = float(value)
        if all(n in self._pending for n in self.names):  # both sources of this evaluation are in
            again = bool(self.trajectory) and self.trajectory[-1]["step"] == state.global_step
            if not again:  # eval_on_start repeats the saved step's evaluation on resume: read once
                self.observe(state.global_step, [self._pending[n] for n in self.names])
            self._pending = {}

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        if folder.is_dir():
            write_regular(folder / STATE_FILE, json.dumps(self.state_dict()), error=MixError, follow_links=False,
                          what="controller state file")

    # -- the steering -----------------------------------------------------------------------------
    def observe(self, step: int, losses: list[float]) -> float:
        """One evaluation's held-out losses ``[domain, rehearsal]`` -> the new rehearsal share,
        in effect from the stream's next global batch; returns it."""
        self.history.append([float(x) for x in losses])
        if len(self.history) == 1:  # the baseline: nothing to compare with yet
            mix = self.controller.mixture(np.array([True]))
        else:
            mix = self.controller.update(summarize(self.history, k=self.k), np.array([True]))
        batch = self.schedule.change(float(mix[1]))
        self.trajectory.append({"step": int(step), "batch": batch, "shares": {"domain": float(mix[0]), "rehearsal": float(mix[1])}})
        return float(mix[1])

    def state_dict(self) -> dict[str, Any]:
        """JSON-ready: the controller's state, the losses, the schedule, the trajectory."""
        return {"schema_version": _VERSION, "controller": self.controller.state_dict(), "history": self.history,
                "schedule": self.schedule.state_dict(), "trajectory": self.trajectory}

    def load_state_dict(self, state: Any) -> None:
        """Restore :meth:`state_dict` (checked whole first: ``MixError`` / ``InvalidStateError``
        naming the key, e.g. a controller state of another sequence)."""
        import copy

        if not isinstance(state, dict) or set(state) != {"schema_version", "controller", "history", "schedule", "trajectory"}:
            raise MixError(f"{STATE_FILE}: expected keys controller, history, schedule, trajectory, schema_version")
        if state["schema_version"] != _VERSION:
            raise MixError(f"{STATE_FILE}: schema_version {state['schema_version']!r}, expected {_VERSION}")
        copy.deepcopy(self.controller).load_state_dict(state["controller"])
        history = state["history"]
        if not isinstance(history, list) or not all(
            isinstance(r, list) and len(r) == 2 and all(isinstance(x, (int, float)) and not isinstance(x, bool)
                                                        and math.isfinite(x) and x >= 0 for x in r) for r in history):
            raise MixError(f"{STATE_FILE}: 'history' must be rows of two finite losses >= 0")
        copy.deepcopy(self.schedule).load_state_dict(state["schedule"])
        if not isinstance(state["trajectory"], list):
            raise MixError(f"{STATE_FILE}: 'trajectory' must be a list")
        self.controller.load_state_dict(state["controller"])
        self.schedule.load_state_dict(state["schedule"])
        self.history, self.trajectory = [list(map(float, r)) for r in history], list(state["trajectory"])

    def load(self, folder: str | Path) -> None:
        """Read ``folder/replaybank_controller.json`` (a checkpoint folder written by :meth:`on_save`).

        Raises:
            MixError: the file is missing, not a regular file (a FIFO is refused at once, never
                waited on; a symbolic link is refused, as :meth:`on_save` refuses to write
                through one), not JSON, or not a state of this callback (see :meth:`load_state_dict`).
        """
        path = check_path(folder, error=MixError, what="checkpoint folder") / STATE_FILE
        data = read_regular(path, error=MixError, follow_links=False, what="controller state file")
        try:
            state = json.loads(data.decode("utf-8"))
        except (ValueError, RecursionError) as exc:
            raise MixError(f"{path}: not a readable controller state ({exc})") from None
        self.load_state_dict(state)
