"""A ``TrainerCallback`` that measures general-capability retention while a Trainer fine-tunes.

Every ``every`` optimizer steps it runs an evaluator on the model being trained (adapter on, eval
mode, no gradient), logs the numbers through the trainer's own ``log`` (so ``state.log_history``,
the console and every ``report_to`` logger get them, under ``prefix``), and, when the watched
number falls below ``threshold``, warns (:class:`RetentionWarning`) or stops training.

The evaluator is either the user's own (any ``model -> {name: number}`` callable) or the main
job's general-capability suite (:meth:`RetentionCallback.from_suite`:
:mod:`replaybank.llm.eval.suite`, greedy answers scored against the base model's, the retention of
each family being its score over the base model's).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal

from transformers import TrainerCallback

from replaybank.hf.plan import MixError

Evaluator = Callable[[Any], "Mapping[str, Any] | float"]


class RetentionWarning(UserWarning):
    """Retention fell below the callback's threshold."""


def suite_retention(result: Mapping[str, Any]) -> dict[str, float]:
    """Flat numbers from :func:`replaybank.llm.eval.suite.evaluate_suite`'s result.

    ``retention`` is the mean of the checker-scored families' retentions (families whose base
    score is 0 are left out, and so is ``open``, agreement with the base model's wording, which
    is still logged on its own, unless the suite has nothing else); ``retention/<family>`` and ``score/<family>`` per family, and
    ``leakage``.

    Example:
        >>> suite_retention({"families": {"code": 0.5, "arithmetic": 1.0},
        ...                  "retention": {"code": 0.5, "arithmetic": 1.0}, "leakage": 0.0})
        {'retention': 0.75, 'retention/code': 0.5, 'retention/arithmetic': 1.0, 'score/code': 0.5, 'score/arithmetic': 1.0, 'leakage': 0.0}
    """
    from replaybank.llm.eval.measure import suite_retention as mean_retention

    ret = {f: v for f, v in result.get("retention", {}).items() if v is not None}
    out: dict[str, float] = {}
    mean = mean_retention(ret)
    if mean is not None:
        out["retention"] = mean
    out.update({f"retention/{f}": float(v) for f, v in ret.items()})
    out.update({f"score/{f}": float(v) for f, v in result.get("families", {}).items()})
    if "leakage" in result:
        out["leakage"] = float(result["leakage"])
    return out


class RetentionCallback(TrainerCallback):
    """Evaluate retention every ``every`` steps; log it; warn or stop below ``threshold``.

    Args:
        evaluator: ``model -> {name: number}`` (or a single number, logged as ``metric``).
        every: evaluate after every ``every``-th optimizer step (``>= 1``).
        threshold: warn / stop when ``metric`` falls below it; ``None`` never does.
        on_drop: ``"warn"`` (a :class:`RetentionWarning`) or ``"stop"`` (warn and set
            ``control.should_training_stop``).
        metric: the evaluator's number compared with ``threshold``.
        prefix: prepended to every logged name (``"retention/"`` gives ``retention/retention``
            for the suite's mean; pick ``""`` for bare names).
        at_end: also evaluate after the last step when it was not an evaluation step.

    Attributes:
        history: ``[{"step": ..., **numbers}]``, one entry per evaluation.

    Raises:
        MixError: (a ``ValueError``) naming the argument: ``every < 1``, a non-callable evaluator,
            a non-finite threshold, an unknown ``on_drop``; at evaluation time, an evaluator that
            returns something other than numbers, or a result without ``metric`` while a
            threshold is set.

    Add it with :meth:`attach` (``RetentionCallback(...).attach(trainer)``) so the numbers go
    through ``trainer.log``; given in ``Trainer(callbacks=[...])`` instead, it appends them to
    ``state.log_history`` only (a callback is not handed the trainer).
    """

    def __init__(
        self,
        evaluator: Evaluator,
        *,
        every: int,
        threshold: float | None = None,
        on_drop: Literal["warn", "stop"] = "warn",
        metric: str = "retention",
        prefix: str = "retention/",
        at_end: bool = True,
    ) -> None:
        if not callable(evaluator):
            raise MixError(f"evaluator must be a callable model -> {{name: number}}, got {evaluator!r}")
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise MixError(f"every must be an int >= 1 (optimizer steps between evaluations), got {every!r}")
        if threshold is not None and (
            isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not math.isfinite(threshold)
        ):
            raise MixError(f"threshold must be a finite number or None, got {threshold!r}")
        if on_drop not in ("warn", "stop"):
            raise MixError(f'on_drop must be "warn" or "stop", got {on_drop!r}')
        self.evaluator = evaluator
        self.every = every
        self.threshold = None if threshold is None else float(threshold)
        self.on_drop = on_drop
        self.metric = metric
        self.prefix = prefix
        self.at_end = at_end
        self.history: list[dict[str, float]] = []
        self.trainer: Any = None
        self._pending: dict[str, float] | None = None

    @classmethod
    def from_suite(
        cls,
        tokenizer: Any,
        *,
        every: int,
        items: Any = None,
        cache_dir: str | Path = "runs/suite-cache",
        batch_size: int = 16,
        **kwargs: Any,
    ) -> RetentionCallback:
        """The main job's general-capability suite as the evaluator.

        The base model's answers are generated at the first evaluation (adapter disabled; cached
        in ``cache_dir`` by :func:`~replaybank.llm.eval.suite.prepare_suite`); each evaluation
        then scores the trained model's greedy answers against them and logs
        :func:`suite_retention`'s numbers (``metric="retention"`` is the families' mean).

        Args:
            tokenizer: the model's tokenizer (with a chat template, as the suite's prompts are
                rendered as user turns).
            every: evaluate every ``every`` optimizer steps.
            items: suite items (:func:`~replaybank.llm.eval.suite.load_suite`); default: the
                shipped suite.
            cache_dir: folder of the base answers' cache.
            batch_size: generation batch size.
            **kwargs: the other :class:`RetentionCallback` arguments.
        """
        from replaybank.llm.eval.suite import evaluate_suite, load_suite, prepare_suite

        chosen = load_suite() if items is None else list(items)
        prepared: dict[str, Any] = {}

        def evaluate(model: Any) -> dict[str, float]:
            if "suite" not in prepared:
                prepared["suite"] = prepare_suite(
                    model, tokenizer, chosen, cache_dir=Path(cache_dir), batch_size=batch_size, desc=None
                )
            return suite_retention(evaluate_suite(model, tokenizer, prepared["suite"], batch_size=batch_size))

        return cls(evaluate, every=every, **kwargs)

    def attach(self, trainer: Any) -> RetentionCallback:
        """Add this callback to ``trainer`` and log through ``trainer.log``; returns ``self``."""
        self.trainer = trainer
        trainer.add_callback(self)
        return self

    def _numbers(self, got: Any, step: int) -> dict[str, float]:
        if isinstance(got, (int, float)) and not isinstance(got, bool):
            got = {self.metric: got}
        if not isinstance(got, Mapping):
            raise MixError(
                f"the retention evaluator returned {type(got).__name__} at step {step}; return a "
                "number or a mapping of name -> number"
            )
        out = {}
        for k, v in got.items():
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise MixError(
                    f"the retention evaluator's {k!r} is {type(v).__name__} at step {step}; every value must be a number"
                )
            out[str(k)] = float(v)
        if self.threshold is not None and self.metric not in out:
            raise MixError(
                f"the retention evaluator returned {sorted(out)} at step {step}, without "
                f"metric={self.metric!r} that threshold={self.threshold} watches; pass metric=<one of them>"
            )
        return out

    def _evaluate(self, state: Any, control: Any, model: Any) -> dict[str, float]:
        import torch

        was_training = model.training
        model.eval()
        try:
            with torch.no_grad():
                numbers = self._numbers(self.evaluator(model), state.global_step)
        finally:
            model.train(was_training)
        self.history.append({"step": state.global_step, **numbers})
        value = numbers.get(self.metric)
        if self.threshold is not None and value is not None and value < self.threshold:
            stop = self.on_drop == "stop"
            warnings.warn(
                f"RetentionCallback: {self.metric}={value:.4f} at step {state.global_step} is below "
                f"the threshold {self.threshold}" + ("; stopping training" if stop else ""),
                RetentionWarning,
                stacklevel=2,
            )
            if stop:
                control.should_training_stop = True
        return {f"{self.prefix}{k}": v for k, v in numbers.items()}

    def on_step_end(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> Any:
        if model is None or state.global_step % self.every:
            return control
        logs = self._evaluate(state, control, model)
        if self.trainer is None:
            state.log_history.append({**logs, "step": state.global_step})
        else:
            # Logged right after the trainer's own log of this step (forced here), from on_log:
            # calling trainer.log now would clear the step's should_log and lose its loss entry.
            self._pending = logs
            control.should_log = True
        return control

    def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> Any:
        pending, self._pending = self._pending, None
        if pending is not None and self.trainer is not None:
            self.trainer.log(pending)
        return control

    def on_train_end(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> Any:
        done = self.history and self.history[-1]["step"] == state.global_step
        if self.at_end and model is not None and state.global_step > 0 and not done:
            logs = self._evaluate(state, control, model)
            if self.trainer is None:
                state.log_history.append({**logs, "step": state.global_step})
            else:
                self.trainer.log(logs)
        return control
