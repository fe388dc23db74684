"""Acting: the current model attempts tasks, with replayed successes in context, and is checked.

Prompts are chat messages: the agent's system prompt (which tools it has, how calls are
written), then, for acting and for the "with context" evaluation, up to ``context_examples``
successful episodes retrieved from the store by **lexical BM25 similarity** over the task text
(:class:`replaybank.episodic.retrieval.Retriever`), then the task. The "without context"
evaluation is the system prompt and the request alone, which is also the form consolidation
trains on (:mod:`.consolidate`). Generation is batched (:func:`replaybank.llm.eval.decode.generate_detailed`) and each row
stops at the end of its last call (:func:`call_end`): at the closing ``>>`` once the call budget
is used, or at the first text after a ``>>`` that does not open another call. So a model that
would go on (``end; end; ...``) is cut where its call ends. Each call is validated against the
tool schema before it counts as executed (:func:`replaybank.episodic.qx.make_step`), and the
environment's checker labels the answer (:func:`replaybank.episodic.env.run_check`).

**Turns.** With an environment that runs calls (:class:`~replaybank.episodic.turns.ToolEnvironment`,
such as the qx environment) an episode is acted turn by turn: each turn generates until the
closing ``>>`` of one call; the environment executes the call (only if it passes the schema
check; a refused call's result says why) and its result is appended to the conversation as a
``tool`` message; the agent then writes the next call, or no call, which ends the episode. An
episode takes at most :func:`~replaybank.episodic.turns.turn_budget` turns: one per expected call,
capped at ``max_turns``. Turns are batched across episodes: turn ``t`` of every episode still
going is one batched generation. A task with one expected call is therefore one turn, generated
exactly as a single answer: same prompt, same stop rule, same sampling seed. The checker judges
the whole episode, every turn's output joined by newlines.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

import numpy as np

from replaybank.episodic import Episode, Step, Task, Verdict
from replaybank.episodic.env import Environment, run_check
from replaybank.episodic.episode import Source
from replaybank.episodic.qx import make_step
from replaybank.episodic.retrieval import Retriever
from replaybank.episodic.turns import ToolEnvironment, run_execute, turn_budget
from replaybank.llm.config.loop import SYSTEM
from replaybank.llm.data.rows import render_chat
from replaybank.llm.records import Absent, Record, absent, omitted

_CLOSED = re.compile(r"<<qx\b.*?>>", re.DOTALL)


@dataclass(frozen=True)
class LevelScore(Record):
    """One ladder level of an arm: exact success rate, mean credit, attempts."""

    success: float
    credit: float
    n: int | None = omitted()


@dataclass(frozen=True)
class Score(Record):
    """What :func:`summarise` measures of a set of attempts (an evaluation arm, or acting).

    The keys a row of ``state.json`` holds for an arm; a run written before ``levels`` and the
    model calls were counted has only ``success``, ``credit`` and ``n``.
    """

    success: float
    """Share of attempts answered with exactly the expected calls."""
    credit: float
    """Mean argument-level credit (the checker's reward)."""
    n: int | None = omitted()
    levels: dict[str, LevelScore] | None = omitted()
    """Per ladder level (the task's difficulty, as a string)."""
    model_calls: int | None = omitted()
    """Generation turns spent over every attempt."""
    model_calls_per_solved: float | None | Absent = absent()
    """``model_calls`` over the attempts solved; None (null) when none is solved."""

    @property
    def calls_per_solved(self) -> float | None:
        """``model_calls_per_solved``, None also for a run from before the count."""
        v = self.model_calls_per_solved
        return None if isinstance(v, Absent) else v


@dataclass(frozen=True)
class ActStats(Record):
    """How a batch of attempts ran (:func:`attempt`)."""

    seconds: float
    tokens: int
    """Generated, stop tokens included."""
    tokens_per_second: float
    truncated: float
    """Share of episodes with a turn that hit the generation budget."""
    turns: float | None = omitted()
    """Mean turns per episode."""


def call_end(text: str, max_calls: int) -> int | None:
    """Where generation should stop: the end of the last complete ``<<qx ...>>`` call, or None.

    None means "go on": no call is complete yet, or the text after the last one is blank or
    the start of another call (``<``, ``<<``, ``<<q``...) and the budget allows one more.

    Example:
        >>> call_end("<<qx cart.add; sku=tea; qty=7>>", max_calls=1)
        31
        >>> call_end("<<qx cart.add; sku=tea; qty=7>> <<q", max_calls=2) is None
        True
        >>> call_end("<<qx cart.add; sku=tea; qty=7>> end; end;", max_calls=2)
        31
        >>> call_end("<<qx cart.add; sku=tea", max_calls=1) is None
        True
    """
    ends = [m.end() for m in _CLOSED.finditer(text)]
    if not ends:
        return None
    if len(ends) >= max_calls:
        return ends[max_calls - 1]
    rest = text[ends[-1]:].lstrip()
    if not rest or "<<qx".startswith(rest[:4]) or rest.startswith("<<qx"):
        return None
    return ends[-1]


@dataclass(frozen=True)
class Attempt:
    """One episode of one task: the prompt messages, the output (every turn's, cut at the call's
    end, joined by newlines), the verdict, generated tokens (all turns), whether a turn hit the
    token budget, the steps (one per turn; empty for an environment that runs no calls), the
    model calls it spent (generation turns: 0 for a replayed workflow) and its source
    (``"replayed"`` for a workflow run without the model, :mod:`.replay`)."""

    task: Task
    messages: list[dict[str, str]]
    replayed: tuple[int, ...]
    output: str
    verdict: Verdict
    n_tokens: int
    truncated: bool
    steps: tuple[Step, ...] = ()
    model_calls: int = 1
    source: Source = "agent"


def turn_seed(seed: int, turn: int) -> int:
    """The sampling seed of turn ``turn`` (0-based): ``seed`` itself for the first turn, so a
    one-turn episode samples exactly as a single answer; a derived seed after that.

    Example:
        >>> turn_seed(12, 0), turn_seed(12, 1) != turn_seed(13, 0)
        (12, True)
    """
    return seed if turn == 0 else int(np.random.SeedSequence([seed, turn]).generate_state(1)[0])


def build_prompts(
    tasks: Sequence[Task], retriever: Retriever | None, k: int, *, system: str = SYSTEM
) -> list[tuple[list[dict[str, str]], tuple[int, ...]]]:
    """Messages and replayed ids per task: ``retriever`` and ``k > 0`` give the context form,
    else the system prompt and the request alone (no system message when ``system`` is empty).

    Example:
        >>> build_prompts([Task("t", "Add tea.")], None, 0, system="Use qx.")[0]
        ([{'role': 'system', 'content': 'Use qx.'}, {'role': 'user', 'content': 'Add tea.'}], ())
    """
    if retriever is None or k <= 0:
        head = [{"role": "system", "content": system}] if system else []
        return [(head + [{"role": "user", "content": t.text}], ()) for t in tasks]
    return [retriever.context(t, k, system=system or None) for t in tasks]


class _Budget(TypedDict):
    max_new_tokens: int
    batch_size: int
    max_calls: int
    max_turns: int


class AttemptOptions(_Budget, total=False):
    """The generation budget of :func:`attempt` a job passes to every pass over its tasks (acting,
    the retry pass, the vote, evaluation), written once: ``attempt(..., **options)``; without
    ``temperature`` the answers are greedy."""

    temperature: float


def attempt(
    model: Any,
    tokenizer: Any,
    env: Environment,
    tasks: Sequence[Task],
    prompts: Sequence[tuple[list[dict[str, str]], tuple[int, ...]]],
    *,
    max_new_tokens: int,
    batch_size: int,
    temperature: float = 0.0,
    seed: int = 0,
    max_calls: int = 1,
    max_turns: int = 4,
    desc: str | None = None,
    generate_fn: Callable[..., Any] | None = None,
) -> tuple[list[Attempt], ActStats]:
    """Act out one episode per (task, prompt) and check it.

    With a :class:`~replaybank.episodic.turns.ToolEnvironment`, episodes are multi-turn (see the
    module doc): one call per turn, at most ``turn_budget(task, max_turns)`` turns, each turn's
    result fed back as a ``tool`` message. With an environment that only checks, each episode is
    one answer holding up to ``max_calls`` calls.

    Args:
        max_new_tokens: the generation budget of each turn.
        seed: sampling seed of the first turn (later turns: :func:`turn_seed`).
        generate_fn: stands in for :func:`~replaybank.llm.eval.decode.generate_detailed`
            (tests script the agent with it).

    Returns:
        ``(attempts, stats)``: :class:`ActStats`.

    Raises:
        CheckerError: the environment's checker or ``execute`` raised or returned something
            invalid (the message names the environment and the task).
    """
    if generate_fn is None:
        from replaybank.llm.eval.decode import generate_detailed
    generate = generate_fn or generate_detailed

    tool_env = env if isinstance(env, ToolEnvironment) else None  # None: one answer per episode
    per_turn = 1 if tool_env is not None else max_calls
    budgets = [turn_budget(t, max_turns) if tool_env is not None else 1 for t in tasks]
    convs = [list(msgs) for msgs, _ in prompts]
    outputs: list[list[str]] = [[] for _ in tasks]
    steps: list[list[Step]] = [[] for _ in tasks]
    tokens = [0] * len(tasks)
    cut_short = [False] * len(tasks)
    active = list(range(len(tasks)))

    def stop(ids: list[int]) -> bool:
        # Only a token that can complete ">>" can end a call: skip decoding otherwise.
        return bool(ids) and call_end(tokenizer.decode(ids, skip_special_tokens=True), per_turn) is not None

    t0 = time.perf_counter()
    turn = 0
    while active:
        texts = [render_chat(tokenizer, convs[i], add_generation_prompt=True) for i in active]
        gens = generate(
            model, tokenizer, texts, max_new_tokens=max_new_tokens, batch_size=batch_size,
            desc=desc if turn == 0 or desc is None else f"{desc} turn {turn + 1}",
            rendered=True, temperature=temperature, seed=turn_seed(seed, turn), stop_when=stop,
        )
        going = []
        for i, gen in zip(active, gens, strict=True):
            cut = call_end(gen.text, per_turn)
            text = gen.text[:cut] if cut is not None else gen.text
            outputs[i].append(text)
            tokens[i] += gen.n_tokens
            cut_short[i] = cut_short[i] or gen.truncated
            if tool_env is None:
                continue
            prompt = tasks[i].text if turn == 0 else convs[i][-1]["content"]
            ran = run_execute(tool_env, tasks[i], text, steps[i])
            steps[i].append(Step(prompt, text, *(ran or (None, None))))
            if ran is not None and turn + 1 < budgets[i]:
                convs[i] += [{"role": "assistant", "content": text}, {"role": "tool", "content": ran[1]}]
                going.append(i)
        active = going
        turn += 1
    seconds = time.perf_counter() - t0
    out: list[Attempt] = []
    for i, (task, (msgs, replayed)) in enumerate(zip(tasks, prompts, strict=True)):
        text = "\n".join(outputs[i])
        out.append(Attempt(task, msgs, replayed, text, run_check(env, task, text), tokens[i], cut_short[i],
                           tuple(steps[i]), model_calls=len(outputs[i])))
    total = sum(tokens)
    stats = ActStats(
        seconds=round(seconds, 3), tokens=total,
        tokens_per_second=round(total / seconds, 1) if seconds > 0 else 0.0,
        truncated=sum(cut_short) / max(len(out), 1),
        turns=sum(len(o) for o in outputs) / max(len(out), 1),
    )
    return out, stats


def to_episode(a: Attempt, *, generation: int, adapter: str, seed: int, started_at: float) -> Episode:
    """An attempt as the store records it (context = every message before the task; the steps of
    a multi-turn episode, else one step made by :func:`replaybank.episodic.qx.make_step`)."""
    return Episode(
        a.task, a.steps or (make_step(a.task.text, a.output),), a.verdict, generation=generation, adapter=adapter,
        seed=seed, context=tuple(a.messages[:-1]), replayed=a.replayed, source=a.source, started_at=started_at,
        finished_at=time.time(),
    )


def summarise(attempts: Sequence[Attempt]) -> Score:
    """Exact success rate, mean argument credit (the reward) and counts, overall and per level;
    the model calls spent (generation turns, all attempts) and the model calls per solved task
    (None when none is solved).

    Example:
        >>> t = Task("t", "x", "cart.add", 1, ("<<qx cart.add; sku=tea; qty=1>>",))
        >>> a = Attempt(t, [], (), "", Verdict(False, 0.5), 3, False, model_calls=2)
        >>> b = Attempt(t, [], (), "", Verdict(True, 1.0), 3, False)
        >>> s = summarise([a, b]); s.success, s.credit, s.n, s.model_calls, s.model_calls_per_solved
        (0.5, 0.75, 2, 3, 3.0)
    """
    n = len(attempts)
    calls = sum(a.model_calls for a in attempts)
    solved = sum(a.verdict.success for a in attempts)
    levels: dict[str, LevelScore] = {}
    for lv in sorted({a.task.difficulty for a in attempts}):
        group = [a for a in attempts if a.task.difficulty == lv]
        levels[str(lv)] = LevelScore(
            success=sum(a.verdict.success for a in group) / len(group),
            credit=sum(a.verdict.reward for a in group) / len(group),
            n=len(group),
        )
    return Score(
        success=sum(a.verdict.success for a in attempts) / n if n else 0.0,
        credit=sum(a.verdict.reward for a in attempts) / n if n else 0.0,
        n=n, levels=levels, model_calls=calls,
        model_calls_per_solved=calls / solved if solved else None,
    )
