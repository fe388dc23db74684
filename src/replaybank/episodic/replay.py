"""Record-and-replay: pick a stored workflow that passes every check for a task, and run it
through the environment, call by call, without the model.

:func:`choose` tries the workflows whose pattern the task text matches (the candidates), those
drawn from the most episodes first, and returns the first that passes every check of
:mod:`.checks`, with the refusals of those tried before it. :func:`run` executes it: call ``i`` is
rendered (a result slot read from the result of an earlier call), validated under the API, and
run by the environment's ``execute``, one call per step, as the agent's turns would be; a call that
cannot be rendered or validated stops the replay with a refusal (``unbound`` or ``bad_type``)
before it runs. The environment's checker then judges the replayed episode like any other.

Example:
    >>> from replaybank.episodic.env import QxEnvironment
    >>> from replaybank.episodic.experience import StoredWorkflow
    >>> from replaybank.episodic.turns import demonstrate
    >>> from replaybank.episodic.workflow import abstract
    >>> env = QxEnvironment()
    >>> old = Task("a", "Add 3 eggs to my shopping list. Then send Anna the total.",
    ...            expected=("<<qx cart.add; sku=eggs; qty=3>>", "<<qx purse.send; to=@anna; cents=96>>"))
    >>> new = Task("b", "Add 2 olive oil to my shopping list. Then send Kemi the total.")
    >>> chosen, refusals = choose([StoredWorkflow(1, abstract(demonstrate(env, old), 1))], new.text)
    >>> for step in run(env, new, chosen.workflow, chosen.binding):
    ...     print(step.output, "->", step.result)
    <<qx cart.add; sku=olive_oil; qty=2>> -> ok cart.add sku=olive_oil qty=2 total=2198
    <<qx purse.send; to=@kemi; cents=2198>> -> ok purse.send to=@kemi cents=2198
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .checks import Api, Refusal, check_workflow
from .episode import Step, Task
from .experience import StoredWorkflow, Workflow
from .qx import SCHEMA, validate
from .turns import ToolEnvironment, run_execute
from .workflow import BindError, Binding, render, skeleton

__all__ = ["Chosen", "choose", "run"]


@dataclass(frozen=True)
class Chosen:
    """A stored workflow that passed every check for a task, and its binding to the task."""

    id: int
    workflow: Workflow
    binding: Binding


def choose(
    workflows: Sequence[StoredWorkflow], text: str, api: Api = SCHEMA
) -> tuple[Chosen | None, list[Refusal]]:
    """The first candidate for a task with ``text`` that passes every check (None if none does),
    and the refusals of the candidates tried before it."""
    candidates = [w for w in workflows if skeleton(w.workflow).fullmatch(text)]
    candidates.sort(key=lambda w: (-len(w.workflow.episodes), w.id))
    refusals: list[Refusal] = []
    for stored in candidates:
        got = check_workflow(stored.workflow, text, api)
        if isinstance(got, Refusal):
            refusals.append(got)
        else:
            return Chosen(stored.id, stored.workflow, got), refusals
    return None, refusals


def run(env: ToolEnvironment, task: Task, wf: Workflow, binding: Binding, api: Api = SCHEMA) -> tuple[Step, ...] | Refusal:
    """The steps of ``wf`` run on ``task`` through ``env`` (see the module doc), or the refusal
    that stopped it before a call ran.

    Raises:
        CheckerError: the environment's ``execute`` raised or returned something invalid.
    """
    steps: list[Step] = []
    results: list[str] = []
    for i in range(len(wf.calls)):
        try:
            call = render(wf, i, binding.values, results)
        except BindError as err:
            return Refusal("bound", "unbound", str(err))
        problems = validate(call, api)
        if problems:
            return Refusal("typed", "bad_type", f"call {i}: {'; '.join(problems)}")
        output = call.canonical()
        ran = run_execute(env, task, output, steps)
        if ran is None:
            return Refusal("typed", "bad_type", f"call {i}: the environment ran no call for {output}")
        steps.append(Step(task.text if i == 0 else results[-1], output, *ran))
        results.append(ran[1])
    return tuple(steps)
