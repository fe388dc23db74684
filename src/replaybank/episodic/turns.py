"""Environments that run the agent's calls, so an episode can take several turns.

An environment that can also **run calls** has a third method, ``execute(task, output, steps)``
(:class:`ToolEnvironment`, a ``Protocol``): given one agent turn and the episode's earlier steps, it returns
``(call, result)``, the call as recorded and the text the agent is shown next as a tool turn, or
None when the turn makes no call. The loop then acts turn by turn (:mod:`replaybank.llm.loop.act`):
the agent writes one call, the environment executes it, the result goes back as a ``tool``
message, the agent writes the next call or stops; :func:`turn_budget` bounds the turns. The
checker still judges the whole episode: ``check(task, output)`` gets every turn's output, joined
by newlines. ``execute`` reads any state from ``steps`` (episodes are acted in batches, so one
environment object serves many at once). A stock of apples whose second call needs the first
result:

    >>> from replaybank.episodic import Verdict
    >>> from replaybank.episodic.env import QxEnvironment, run_check
    >>> class Stock:
    ...     def tasks(self, n, *, split="train", seed=0):
    ...         return [Task(f"stock-{split}-{i}", f"Add {i + 2} apples, then as many as you have.",
    ...                      "stock", 2, (f"add {i + 2}", f"add {i + 2}")) for i in range(n)]
    ...     def execute(self, task, output, steps=()):
    ...         words = output.split()
    ...         if words[:1] != ["add"]:
    ...             return None                                  # no call: the episode ends
    ...         if len(words) != 2 or not words[1].isdigit():
    ...             return output, "error: write add <number>"   # refused, not executed
    ...         before = sum(int(s.call.split()[1]) for s in steps if str(s.result).startswith("ok"))
    ...         return f"add {words[1]}", f"ok, you have {before + int(words[1])}"
    ...     def check(self, task, output):
    ...         calls = output.splitlines()
    ...         credit = {str(i): float(calls[i:i + 1] == [e]) for i, e in enumerate(task.expected)}
    ...         return Verdict(calls == list(task.expected), sum(credit.values()) / max(len(credit), 1), credit)
    >>> stock = Stock()
    >>> isinstance(stock, ToolEnvironment), isinstance(QxEnvironment(), ToolEnvironment)
    (True, True)
    >>> task = stock.tasks(1)[0]
    >>> [m["content"] for m in demonstrate(stock, task).messages()]
    ['Add 2 apples, then as many as you have.', 'add 2', 'ok, you have 2', 'add 2']
    >>> run_check(stock, task, "add 2\\nadd 4")
    Verdict(success=False, reward=0.5, credit={'0': 1.0, '1': 0.0}, detail='')

The qx environment (:class:`replaybank.episodic.env.QxEnvironment`) runs calls on the simulated
qx runtime (:func:`replaybank.episodic.qx.execute`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from replaybank.errors import ReplayBankError

from .env import CheckerError, Environment
from .episode import Episode, Step, Task, demonstration

__all__ = ["ToolEnvironment", "demonstrate", "run_execute", "turn_budget"]


@runtime_checkable
class ToolEnvironment(Environment, Protocol):
    """An environment that also runs the agent's calls, so episodes can have several turns."""

    def execute(self, task: Task, output: str, steps: Sequence[Step] = ()) -> tuple[str, str] | None:
        """Run the call(s) of one agent turn: ``(call, result)`` (the call as recorded, the text
        shown to the agent as the next tool turn), or None when ``output`` makes no call. A call
        that must not run (e.g. it fails the tool schema) is not executed; its result says why.
        ``steps`` are the episode's earlier turns (recorded, with their calls and results)."""
        ...


def turn_budget(task: Task, max_turns: int) -> int:
    """How many turns an episode of ``task`` may take: one per expected call (at least one), or
    ``max_turns`` when the task does not say (no ``expected``); never more than ``max_turns``.

    An episode also ends early, at the first turn that makes no call.

    Example:
        >>> t2 = Task("t", "x", expected=("<<qx a.b; k=1>>", "<<qx c.d; k=2>>"))
        >>> turn_budget(t2, 4), turn_budget(t2, 1), turn_budget(Task("u", "y"), 4)
        (2, 1, 4)
    """
    if max_turns < 1:
        raise ReplayBankError(f"max_turns must be at least 1, got {max_turns!r}")
    return min(max_turns, len(task.expected)) if task.expected else max_turns


def run_execute(
    env: ToolEnvironment, task: Task, output: str, steps: Sequence[Step] = ()
) -> tuple[str, str] | None:
    """``env.execute(task, output, steps)``, with failures turned into :class:`CheckerError`.

    Raises:
        CheckerError: ``execute`` raised (the message names the task and the original error) or
            returned something other than None or a ``(call, result)`` pair of strings.
    """
    try:
        got = env.execute(task, output, tuple(steps))
    except Exception as err:
        raise CheckerError(
            f"environment {type(env).__name__}.execute raised on task {task.id!r} ({task.text[:60]!r}): "
            f"{type(err).__name__}: {err}"
        ) from err
    if got is not None and not (
        isinstance(got, tuple) and len(got) == 2 and all(isinstance(x, str) for x in got)
    ):
        raise CheckerError(
            f"environment {type(env).__name__}.execute returned {got!r} for task {task.id!r}; "
            "expected None or a (call, result) pair of strings"
        )
    return got


def demonstrate(env: Environment, task: Task) -> Episode:
    """A demonstration of ``task`` from its expected answers, as a user seeds a store with.

    With an environment that runs calls (:class:`ToolEnvironment`): one turn per expected call,
    each executed, so the next turn is shown its result (a multi-turn demonstration, every step
    with its call and result). Otherwise one answer holding every expected call.

    Example:
        >>> from replaybank.episodic.env import QxEnvironment
        >>> t = QxEnvironment(levels=(4,)).tasks(1, seed=1)[0]
        >>> for m in demonstrate(QxEnvironment(), t).messages():
        ...     print(f"{m['role']:>9}: {m['content']}")
             user: I need 4 paper towels, add them to the list. Then send Goran the total.
        assistant: <<qx cart.add; sku=paper_towels; qty=4>>
             tool: ok cart.add sku=paper_towels qty=4 total=996
        assistant: <<qx purse.send; to=@goran; cents=996>>

    Raises:
        CheckerError: the environment's ``execute`` raised or returned something invalid.
    """
    if not isinstance(env, ToolEnvironment):
        return demonstration(task, [" ".join(task.expected)])
    steps: list[Step] = []
    for i, call in enumerate(task.expected):
        ran = run_execute(env, task, call, steps)
        prompt = task.text if i == 0 else str(steps[-1].result)
        steps.append(Step(prompt, call, *(ran or (None, None))))
    return demonstration(task, list(task.expected), [s.result for s in steps], [s.call for s in steps])
