"""Copies of a LoRA adapter kept in memory at chosen steps of one training: the checkpoints an arm's
operating point may be chosen from (``[evaluation] checkpoints``, :mod:`replaybank.llm.eval.operating`).

:func:`snapshot_steps` spaces ``n`` steps evenly before the end of a training of ``total`` steps
(the end itself is the adapter as trained, measured anyway). :class:`Snapshots` keeps the adapter's
PEFT tensors (``get_peft_model_state_dict``, the format of ``adapter_model.safetensors``) at those
steps through :func:`replaybank.llm.train.lora.train_lora`'s ``on_step`` hook, and writes and
reads them as safetensors files beside a staged adapter, so a run killed while choosing reads them
back instead of training again. When a training has fewer steps than asked for, it keeps one
state per step before the end (fewer than ``n``, none for a one-step training).

Example:
    >>> snapshot_steps(2, 120), snapshot_steps(3, 10), snapshot_steps(5, 3), snapshot_steps(1, 1)
    ([40, 80], [2, 5, 8], [1, 2], [])
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from replaybank.llm.train.peft_files import AdapterError, check_tensors, read_tensors, write_tensors

__all__ = ["FILE", "Snapshots", "snapshot_steps"]

#: the file name of the state kept at step ``N``: ``FILE.format(step=N)``
FILE = "checkpoint-step{step}.safetensors"


def snapshot_steps(n: int, total: int) -> list[int]:
    """``n`` steps evenly spaced before ``total`` (``round(total * k / (n + 1))``, k = 1..n), in
    order, each once, none at 0 or ``total``: fewer than ``n`` when the training is too short.

    Raises:
        ValueError: ``n`` or ``total`` below 0.
    """
    if n < 0 or total < 0:
        raise ValueError(f"snapshot_steps: n = {n} and total = {total} must be >= 0")
    return sorted({round(total * k / (n + 1)) for k in range(1, n + 1)} - {0, total})


class Snapshots:
    """The adapter states kept at :func:`snapshot_steps` of one training, by step.

    Args:
        n: how many states to keep (``[evaluation] checkpoints``; 0 keeps none).
    """

    def __init__(self, n: int) -> None:
        if n < 0:
            raise ValueError(f"Snapshots: n = {n} must be >= 0")
        self.n = n
        self.states: dict[int, dict[str, Any]] = {}
        """Step -> the adapter's PEFT tensors at that step (on the CPU)."""
        self.last: int | None = None
        """The last step of the training the states were kept from (None before one)."""

    def on_step(self, model: Any) -> Callable[[int, int], None]:
        """The hook :func:`~replaybank.llm.train.lora.train_lora` calls after every optimizer step
        with the step and the last step of the training: keeps a copy of ``model``'s adapter at the
        chosen steps. A new training (step 1) forgets the states of an earlier one."""
        from peft import get_peft_model_state_dict

        due: set[int] = set()

        def keep(step: int, total: int) -> None:
            if step == 1 or total != self.last:  # a new training: its own steps, none of an earlier one's states
                if step == 1:
                    self.states.clear()
                due.clear()
                due.update(snapshot_steps(self.n, total))
            self.last = total
            if step in due:
                self.states[step] = {k: v.detach().clone().cpu() for k, v in get_peft_model_state_dict(model).items()}

        return keep

    def write(self, folder: Path) -> list[Path]:
        """Each state as ``folder/checkpoint-step<N>.safetensors`` (written to a temporary name,
        then renamed); returns the files, in step order.

        Raises:
            UnsafePathError: a link (or FIFO, folder) at a file name written here.
        """
        from replaybank.llm.config.names import refuse_links

        written = []
        for step in sorted(self.states):
            name = FILE.format(step=step)
            refuse_links(folder, name, f"{name}.tmp")
            write_tensors(folder / name, self.states[step])
            written.append(folder / name)
        return written

    def record(self) -> dict[str, Any]:
        """What :meth:`read_staged` needs to find the written states: their steps and the last step."""
        return {"steps": sorted(self.states), "last_step": self.last}

    def read_staged(self, folder: Path, record: object, mine: dict[str, Any]) -> None:
        """Put back the states a staged ``folder`` holds, as :meth:`record` named them (``None``: no
        state was kept), each checked against ``mine`` (the model's adapter tensors: names, shapes,
        finite values), and the last step they were kept from.

        Raises:
            AdapterError: a record that is not the steps (integers from 1 below the last step) and
                the last step, or a state's file missing, unreadable or not the adapter's.
        """
        if record is None:
            self.states, self.last = {}, None
            return
        last = record.get("last_step") if isinstance(record, dict) else None
        steps = record.get("steps") if isinstance(record, dict) else None
        if (not isinstance(last, int) or isinstance(last, bool) or last < 1 or not isinstance(steps, list)
                or not all(isinstance(s, int) and not isinstance(s, bool) and 1 <= s < last for s in steps)):
            raise AdapterError(f"{folder}: the staged checkpoints {record!r:.120} are not steps from 1 below a last step")
        self.read(folder, steps)
        for step, state in self.states.items():
            check_tensors(folder / FILE.format(step=step), state, mine)
        self.last = last

    def read(self, folder: Path, steps: list[int]) -> None:
        """Put the states of ``steps`` back from ``folder`` (as :meth:`write` wrote them), replacing
        any held.

        Raises:
            AdapterError: a state's file missing or not a readable safetensors file.
        """
        self.states = {}
        for step in steps:
            path = folder / FILE.format(step=step)
            if not path.is_file():
                raise AdapterError(f"{path}: the adapter state kept at step {step} is missing")
            self.states[step] = read_tensors(path)
