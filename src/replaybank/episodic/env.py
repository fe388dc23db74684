"""Environments: where tasks come from and who judges the answers.

An environment is a **task source** (``tasks(n, split=..., seed=...)``) plus a **checker**
(``check(task, output) -> Verdict``). Bring your own by writing a class with those two methods
(:class:`Environment` is a ``Protocol``; nothing to inherit):

    >>> class Sums:
    ...     def tasks(self, n, *, split="train", seed=0):
    ...         return [Task(f"sum-{split}-{i}", f"What is {i} + {i}?", "sum", 1, (str(2 * i),))
    ...                 for i in range(n)]
    ...     def check(self, task, output):
    ...         ok = output.strip() == task.expected[0]
    ...         return Verdict(ok, float(ok))
    >>> env = Sums()
    >>> isinstance(env, Environment)
    True
    >>> run_check(env, env.tasks(2)[1], " 2")
    Verdict(success=True, reward=1.0, credit={}, detail='')

An environment that can also run calls (``execute``), so that episodes have several turns, is a
:class:`replaybank.episodic.turns.ToolEnvironment`; :class:`QxChecker` is one.

The embedded default is :class:`QxEnvironment`: the qx tool API of :mod:`replaybank.llm.data.toolapi`
as a ladder of tasks, judged by :func:`replaybank.episodic.qx.score`. Tasks can also be read from a
JSONL file (:class:`JsonlTasks`), one object per line::

    {"id": "t1", "text": "Add 3 eggs to my shopping list.", "family": "cart.add",
     "difficulty": 2, "expected": ["<<qx cart.add; sku=eggs; qty=3>>"], "split": "train"}

Only ``text`` is required (``id`` defaults to a hash of the text, ``split`` to ``train``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

import numpy as np

from replaybank.errors import ReplayBankError
from replaybank.jsonl import iter_jsonl

from .episode import Step, Task, Verdict
from .qx import SCHEMA, execute, make_step, parse_calls, score

Split = Literal["train", "heldout"]
SPLITS: tuple[str, ...] = ("train", "heldout")


class TaskFileError(ReplayBankError):
    """A task file line is not a valid task (the message names file:line)."""


class CheckerError(ReplayBankError):
    """A checker raised, or returned something that is not a valid ``Verdict``."""


@runtime_checkable
class TaskSource(Protocol):
    """Where tasks come from: ``n`` tasks of a split, reproducible from ``seed``."""

    def tasks(self, n: int, *, split: Split = "train", seed: int = 0) -> Sequence[Task]: ...


@runtime_checkable
class Checker(Protocol):
    """Who judges: the verdict on an agent's whole output for a task."""

    def check(self, task: Task, output: str) -> Verdict: ...


@runtime_checkable
class Environment(TaskSource, Checker, Protocol):
    """A task source and a checker in one object."""


def run_check(checker: Checker, task: Task, output: str) -> Verdict:
    """``checker.check(task, output)``, with failures turned into :class:`CheckerError`.

    Raises:
        CheckerError: the checker raised (the message names the task and the original error), or
            returned something other than a ``Verdict`` with a reward in [0, 1].
    """
    try:
        verdict = checker.check(task, output)
    except Exception as err:
        raise CheckerError(
            f"checker {type(checker).__name__} raised on task {task.id!r} ({task.text[:60]!r}): "
            f"{type(err).__name__}: {err}"
        ) from err
    if not isinstance(verdict, Verdict) or not 0.0 <= float(verdict.reward) <= 1.0:
        raise CheckerError(
            f"checker {type(checker).__name__} returned {verdict!r} for task {task.id!r}; "
            "expected a Verdict with reward in [0, 1]"
        )
    return verdict


def task_id(text: str, prefix: str = "t") -> str:
    """A stable id for a request: ``prefix-`` and 12 hex digits of its sha1."""
    return f"{prefix}-{hashlib.sha1(text.encode()).hexdigest()[:12]}"


class QxChecker:
    """Judges qx calls against ``task.expected`` (argument-level credit; see :mod:`.qx`) and runs
    them on the simulated qx runtime (:func:`replaybank.episodic.qx.execute`).

    Example:
        >>> QxChecker().execute(Task("t", "x"), "<<qx cart.add; sku=tea; qty=2>>")
        ('<<qx cart.add; sku=tea; qty=2>>', 'ok cart.add sku=tea qty=2 total=918')
        >>> QxChecker().execute(Task("t", "x"), "<<qx cart.add; sku=tea>>")[1]
        'error: cart.add: missing required argument qty'
    """

    def check(self, task: Task, output: str) -> Verdict:
        return score(task.expected, output)

    def execute(self, task: Task, output: str, steps: Sequence[Step] = ()) -> tuple[str, str] | None:
        """The turn's calls, canonical, and the runtime's answers (the qx runtime keeps no state,
        so ``steps`` is not read)."""
        step = make_step(task.text, output)
        return None if step.call is None or step.result is None else (step.call, step.result)


_COPY = {  # level 1: every argument value appears verbatim in the request
    "timer.arm": "Set a timer: dur {dur}, tag {tag}.",
    "sky.cast": "Get the forecast at {at} for day {day}.",
    "purse.send": "Send {cents} cents to {to}.",
    "nudge.set": "Set a reminder {note} for day {day} at {at}.",
    "cart.add": "Add {sku} to the cart, qty {qty}.",
}
LEVELS = {1: "copy: argument values appear verbatim", 2: "convert: units, case and format",
          3: "two calls: two level-2 requests in one",
          4: "chain: the second call needs a value the first call returned"}


class QxEnvironment(QxChecker):
    """The embedded default: qx tool-API requests on a ladder of difficulty.

    Level 1 (copy) states every argument in its final form ("Set a timer: dur 300s, tag tea.");
    level 2 (convert) is the natural request of :mod:`replaybank.llm.data.toolapi` ("Set a timer for
    5 minutes for the tea."); level 3 joins two level-2 requests of different tools and expects
    both calls in order; level 4 chains two calls through a result: a level-2 ``cart.add``
    request, then "send <name> the total", whose ``cents`` is the ``total=`` the runtime returned
    for the first call (:func:`replaybank.episodic.qx.execute`), so it cannot be written before
    that result is seen. Tasks cycle through ``levels``. The split is fixed by a hash of the
    expected call (``heldout_fraction`` of calls are held out), so a held-out task never has an
    answer (or a request) that a train task has, whatever ``n`` and ``seed``.

    Example:
        >>> env = QxEnvironment(levels=(1, 2, 3))
        >>> [(t.difficulty, t.family) for t in env.tasks(3, seed=0)]
        [(1, 'cart.add'), (2, 'sky.cast'), (3, 'timer.arm+nudge.set')]
        >>> t = env.tasks(1, seed=0)[0]
        >>> t.text, t.expected
        ('Add tea to the cart, qty 7.', ('<<qx cart.add; sku=tea; qty=7>>',))
        >>> env.check(t, "<<qx cart.add; sku=tea; qty=7>>").success
        True
    """

    def __init__(self, levels: Sequence[int] = (1, 2, 3), heldout_fraction: float = 0.2) -> None:
        bad = [lv for lv in levels if lv not in LEVELS]
        if not levels or bad:
            raise ReplayBankError(f"levels {list(levels)!r}: each must be one of {sorted(LEVELS)}")
        if not 0.0 < heldout_fraction < 1.0:
            raise ReplayBankError(f"heldout_fraction must be in (0, 1), got {heldout_fraction!r}")
        self.levels = tuple(levels)
        self.heldout_fraction = heldout_fraction

    def _split_of(self, call: str) -> Split:
        h = int(hashlib.sha1(call.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF
        return "heldout" if h < self.heldout_fraction else "train"

    def tasks(self, n: int, *, split: Split = "train", seed: int = 0) -> list[Task]:
        if split not in SPLITS:
            raise ReplayBankError(f"split {split!r} is not one of {SPLITS}")
        from replaybank.llm.data.toolapi import generate_examples

        pool_size = int(3 * n / min(self.heldout_fraction, 1 - self.heldout_fraction)) + 64
        if 4 in self.levels:  # a chain uses two requests, and its payment call must be in the split
            pool_size *= 2
        rows = generate_examples(pool_size, seed=seed)
        pool = [r for r in rows if self._split_of(r["response"]) == split]
        out: list[Task] = []
        seen: set[str] = set()
        i = 0
        while len(out) < n and i < len(pool):
            level = self.levels[len(out) % len(self.levels)]
            if level == 4:  # a cart.add request, paid to someone so that the payment call is in this split
                j = next((j for j in range(i, len(pool)) if _tool(pool[j]) == "cart.add"), None)
                if j is None:
                    break
                names = np.random.default_rng([seed, len(out), j]).permutation(len(_PAYEES))
                task = next((t for t in (_chain(pool[j], _PAYEES[int(m)]) for m in names)
                             if self._split_of(t.expected[1]) == split), None)
                pool.pop(j)
                if task is not None and task.id not in seen:
                    seen.add(task.id)
                    out.append(task)
                continue
            parts = [pool[i]]
            i += 1
            if level == 3:  # the second request: the next one that uses another tool
                j = next((j for j in range(i, len(pool)) if _tool(pool[j]) != _tool(parts[0])), None)
                if j is None:
                    break
                parts.append(pool.pop(j))
            task = _make(level, parts)
            if task.id not in seen:  # two requests with one call give one copy-level task
                seen.add(task.id)
                out.append(task)
        if len(out) < n:
            raise ReplayBankError(f"could not make {n} distinct {split} qx tasks (made {len(out)})")
        return out


def _tool(row: dict[str, str]) -> str:
    return parse_calls(row["response"])[0].tool


def _make(level: int, rows: Sequence[dict[str, str]]) -> Task:
    calls = [parse_calls(r["response"])[0] for r in rows]
    if level == 1:
        text = _COPY[calls[0].tool].format(**calls[0].arg_dict)
    elif level == 2:
        text = rows[0]["prompt"]
    else:
        text = f"{rows[0]['prompt']} Also: {rows[1]['prompt']}"
    family = "+".join(c.tool for c in calls)
    return Task(task_id(text, "qx"), text, family, level, tuple(r["response"] for r in rows))


_PAYEES = ("Anna", "Bilal", "Chen", "Dora", "Emeka", "Farah", "Goran", "Hana", "Ivo", "Jun", "Kemi", "Lars")


def _chain(row: dict[str, str], payee: str) -> Task:
    """Level 4: add items to the cart, then pay ``payee`` the total the runtime returned."""
    cart = parse_calls(row["response"])[0]
    total = execute(cart).rsplit("total=", 1)[1]
    text = f"{row['prompt']} Then send {payee} the total."
    pay = f"<<qx purse.send; to=@{payee.lower()}; cents={total}>>"
    return Task(task_id(text, "qx"), text, "cart.add>purse.send", 4, (row["response"], pay))


class JsonlTasks:
    """Tasks from a JSONL file (format in the module doc); ``tasks`` shuffles a split by ``seed``.

    Raises:
        TaskFileError: a line that is not a JSON object, lacks ``text``, has a field of the wrong
            type, an unknown split, or repeats an id; the message names ``file:line``.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.by_split: dict[str, list[Task]] = {s: [] for s in SPLITS}
        seen: dict[str, int] = {}
        for lineno, obj in iter_jsonl(self.path, error=TaskFileError):
            task, split = _parse_task(obj, f"{self.path}:{lineno}")
            if task.id in seen:
                raise TaskFileError(f"{self.path}:{lineno}: task id {task.id!r} already on line {seen[task.id]}")
            seen[task.id] = lineno
            self.by_split[split].append(task)

    def tasks(self, n: int, *, split: Split = "train", seed: int = 0) -> list[Task]:
        pool = self.by_split.get(split)
        if pool is None:
            raise ReplayBankError(f"split {split!r} is not one of {SPLITS}")
        if n > len(pool):
            raise ReplayBankError(f"{self.path}: asked for {n} {split} tasks, the file has {len(pool)}")
        order = np.random.default_rng(seed).permutation(len(pool))[:n]
        return [pool[int(k)] for k in order]


def _parse_task(obj: dict[str, Any], where: str) -> tuple[Task, str]:
    text = obj.get("text")
    if not isinstance(text, str) or not text.strip():
        raise TaskFileError(f"{where}: 'text' must be a non-empty string, got {text!r}")
    expected = obj.get("expected", [])
    if not isinstance(expected, list) or not all(isinstance(x, str) for x in expected):
        raise TaskFileError(f"{where}: 'expected' must be a list of strings, got {expected!r}")
    difficulty = obj.get("difficulty", 1)
    if not isinstance(difficulty, int) or isinstance(difficulty, bool):
        raise TaskFileError(f"{where}: 'difficulty' must be an integer, got {difficulty!r}")
    split = obj.get("split", "train")
    if split not in SPLITS:
        raise TaskFileError(f"{where}: 'split' must be one of {SPLITS}, got {split!r}")
    for key in ("id", "family"):
        if key in obj and not isinstance(obj[key], str):
            raise TaskFileError(f"{where}: {key!r} must be a string, got {obj[key]!r}")
    tid = obj.get("id") or task_id(text)
    return Task(tid, text, obj.get("family", ""), difficulty, tuple(expected)), split


def write_tasks(path: str | Path, tasks: Sequence[Task], split: Split = "train") -> None:
    """Write tasks as JSONL (appending), in the format :class:`JsonlTasks` reads."""
    with open(path, "a", encoding="utf-8") as f:
        for t in tasks:
            f.write(json.dumps({**t.to_dict(), "split": split}, ensure_ascii=False) + "\n")


def known_tools() -> list[str]:
    """The qx tools the checker knows."""
    return sorted(SCHEMA)
