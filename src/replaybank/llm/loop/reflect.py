"""Reflection on failure: after a failed attempt the model writes a one-line lesson from the
checker's feedback, kept as an insight (title, description, content) for the next attempt.

The feedback is what the checker and the runtime said, never the expected answer
(:func:`feedback`): the arguments whose credit was 0, the checker's detail (refused calls and
why, missing calls, extra calls) and the ``error: ...`` results of refused calls. The model is
asked for one line (:func:`reflection_prompt`), greedy, at most ``max_tokens`` new tokens, and
stopped at the end of its first line. Its lesson becomes the insight's content
(:func:`to_reflection`):

* an empty answer (or one without a letter) gets a deterministic lesson from the feedback
  (:func:`fallback_lesson`), counted as ``fallback``;
* a lesson longer than ``max_tokens`` tokens (an answer that hit the generation budget, or a
  fallback built from long feedback) is cut to its first ``max_tokens`` tokens, counted as
  ``cut``: a reflection never takes more of the next prompt than its budget;
* the title names the task family and what went wrong (:func:`failure_title`), the description
  is the request and the feedback.

Example:
    >>> from replaybank.episodic import Task, Verdict
    >>> t = Task("t", "Set a timer of 300s tagged tea.", "timer.arm", 1, ("<<qx timer.arm; dur=300s; tag=tea>>",))
    >>> v = Verdict(False, 0.5, {"timer.arm.dur": 1.0, "timer.arm.tag": 0.0})
    >>> feedback(v, ())
    'wrong arguments: timer.arm.tag'
    >>> fallback_lesson(v, ())
    'Next time get timer.arm.tag right: copy each value from the request.'
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from replaybank.episodic import EpisodeStore, Step, StoredEpisode, Task, Verdict
from replaybank.episodic.env import Environment
from replaybank.episodic.experience import Insight, StoredInsight
from replaybank.llm.data.rows import render_chat
from replaybank.llm.loop.act import Attempt, attempt, summarise
from replaybank.llm.loop.context import add_lessons, insight_line
from replaybank.llm.records import Record

Status = Literal["model", "fallback", "cut"]

REFLECT_SYSTEM = (
    "You review a failed attempt at a request for qx tool calls (written <<qx tool.name; key=value; ...>>) "
    "and write one short lesson for the next attempt."
)


@dataclass(frozen=True)
class Reflection:
    """A lesson from one failed attempt, in the form of an insight.

    Args:
        task: the task that failed.
        title: the task family and what went wrong (:func:`failure_title`).
        description: the request and the feedback the lesson answers.
        content: the lesson itself (at most the budget's tokens).
        tokens: the content's length in tokens.
        status: ``model`` (the model's lesson as written), ``fallback`` (the model wrote none) or
            ``cut`` (longer than the budget; its first tokens kept).
    """

    task: Task
    title: str
    description: str
    content: str
    tokens: int
    status: Status


@dataclass(frozen=True)
class ReflectionCounts(Record):
    """How a batch of reflections went: written, of which fallbacks and cuts, model calls, tokens."""

    n: int
    fallback: int
    cut: int
    model_calls: int
    tokens: int


def wrong_arguments(verdict: Verdict) -> list[str]:
    """The arguments the checker gave no credit, in its order."""
    return [k for k, v in verdict.credit.items() if v == 0.0]


def feedback(verdict: Verdict, steps: Sequence[Step]) -> str:
    """What the checker and the runtime said about a failed attempt, as one line (no expected
    value is in it): wrong arguments, the checker's detail, ``error:`` results not already in
    the detail.

    Example:
        >>> v = Verdict(False, 0.0, {}, "refused <<qx cart.add; qty=1>>: cart.add: missing required argument sku")
        >>> feedback(v, (Step("Add tea.", "<<qx cart.add; qty=1>>", "<<qx cart.add; qty=1>>",
        ...                   "error: cart.add: missing required argument sku"),))
        'refused <<qx cart.add; qty=1>>: cart.add: missing required argument sku'
    """
    parts = []
    wrong = wrong_arguments(verdict)
    if wrong:
        parts.append(f"wrong arguments: {', '.join(wrong)}")
    if verdict.detail:
        parts.append(verdict.detail)
    for s in steps:
        for line in (s.result or "").splitlines():
            if line.startswith("error:") and line[len("error:"):].strip() not in verdict.detail:
                parts.append(line)
    return "; ".join(parts) if parts else "the answer was not the calls the request asks for"


def failure_title(task: Task, verdict: Verdict, steps: Sequence[Step]) -> str:
    """A short name for a failure: the task family and the arguments the checker gave no credit
    (else a refused call, else wrong calls).

    Example:
        >>> failure_title(Task("t", "x", "cart.add"), Verdict(False, 0.5, {"cart.add.qty": 0.0}), ())
        'cart.add failure: cart.add.qty'
    """
    wrong = wrong_arguments(verdict)
    refused = "refused" in verdict.detail or any((s.result or "").startswith("error:") for s in steps)
    what = ", ".join(wrong) if wrong else "refused call" if refused else "wrong calls"
    return f"{task.family or 'task'} failure: {what}"


def fallback_lesson(verdict: Verdict, steps: Sequence[Step]) -> str:
    """A lesson built from the feedback alone, for a model that wrote none."""
    wrong = wrong_arguments(verdict)
    errors = [line for s in steps for line in (s.result or "").splitlines() if line.startswith("error:")]
    if wrong:
        return f"Next time get {', '.join(wrong)} right: copy each value from the request."
    if errors:
        return f"Next time write a call the tool accepts; it said {errors[0]}"
    if verdict.detail:
        return f"Next time avoid this: {verdict.detail}."
    return "Next time answer with exactly the calls the request asks for, in order."


def reflection_prompt(task: Task, output: str, verdict: Verdict, steps: Sequence[Step]) -> list[dict[str, str]]:
    """The chat messages that ask for the lesson of one failed attempt.

    Example:
        >>> m = reflection_prompt(Task("t", "Add tea."), "<<qx cart.add; sku=tea; qty=2>>",
        ...                       Verdict(False, 0.5, {"cart.add.qty": 0.0}), ())
        >>> print(m[1]["content"])
        Request: Add tea.
        Your answer: <<qx cart.add; sku=tea; qty=2>>
        Feedback: wrong arguments: cart.add.qty
        Write the lesson for your next attempt in one line.
    """
    return [
        {"role": "system", "content": REFLECT_SYSTEM},
        {"role": "user", "content": f"Request: {task.text}\nYour answer: {output.strip() or '(no answer)'}\n"
                                    f"Feedback: {feedback(verdict, steps)}\n"
                                    "Write the lesson for your next attempt in one line."},
    ]


def first_line(text: str) -> str:
    """The first non-blank line, without a leading ``Lesson:`` label; ``""`` when it holds no
    letter (a model that wrote only punctuation or digits wrote no lesson).

    Example:
        >>> first_line("\\n Lesson: read the number twice.\\nmore")
        'read the number twice.'
        >>> first_line(" ... ")
        ''
    """
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    for label in ("lesson:", "Lesson:", "LESSON:"):
        if line.startswith(label):
            line = line[len(label):].strip()
    return line if any(c.isalpha() for c in line) else ""


def cut_to_tokens(tokenizer: Any, text: str, max_tokens: int) -> tuple[str, int, bool]:
    """``text`` within ``max_tokens`` tokens: ``(text, tokens, cut)``; a longer text is cut to its
    first ``max_tokens`` tokens (decoded back, surrounding blanks stripped)."""
    ids = list(tokenizer(text, add_special_tokens=False)["input_ids"])
    if len(ids) <= max_tokens:
        return text, len(ids), False
    kept = tokenizer.decode(ids[:max_tokens], skip_special_tokens=True).strip()
    return kept, len(tokenizer(kept, add_special_tokens=False)["input_ids"]), True


def to_reflection(
    tokenizer: Any, task: Task, verdict: Verdict, steps: Sequence[Step], written: str, *, max_tokens: int,
    hit_budget: bool = False,
) -> Reflection:
    """The insight of one failed attempt from the model's answer ``written`` (see the module doc).

    ``hit_budget``: the answer ran into the generation budget before its line ended, so it is a
    cut lesson even when it fits ``max_tokens``.
    """
    lesson = first_line(written)
    status: Status = "model"
    if not lesson:
        lesson, status = fallback_lesson(verdict, steps), "fallback"
    lesson, n, cut = cut_to_tokens(tokenizer, lesson, max_tokens)
    if cut or (hit_budget and status == "model" and "\n" not in written.strip()):
        status = "cut"
    description = f"{task.text} -> {feedback(verdict, steps)}"
    return Reflection(task, failure_title(task, verdict, steps), description, lesson, n, status)


def reflect(
    model: Any, tokenizer: Any, failures: Sequence[tuple[Task, str, Verdict, Sequence[Step]]], *, max_tokens: int,
    batch_size: int, generate_fn: Callable[..., Any] | None = None, desc: str | None = None,
) -> tuple[list[Reflection], ReflectionCounts]:
    """One reflection per failure ``(task, output, verdict, steps)``: one batched greedy
    generation of at most ``max_tokens`` tokens per failure, stopped at its first line's end.

    Args:
        generate_fn: stands in for :func:`~replaybank.llm.eval.decode.generate_detailed` (tests).

    Returns:
        The reflections in the order of ``failures`` and their counts.
    """
    if generate_fn is None:
        from replaybank.llm.eval.decode import generate_detailed
    generate = generate_fn or generate_detailed
    if not failures:
        return [], ReflectionCounts(0, 0, 0, 0, 0)
    texts = [render_chat(tokenizer, reflection_prompt(t, o, v, s), add_generation_prompt=True) for t, o, v, s in failures]

    def stop(ids: list[int]) -> bool:
        return "\n" in tokenizer.decode(ids, skip_special_tokens=True).strip()

    gens = generate(model, tokenizer, texts, max_new_tokens=max_tokens, batch_size=batch_size, desc=desc,
                    rendered=True, temperature=0.0, seed=0, stop_when=stop)
    out = [to_reflection(tokenizer, t, v, s, g.text, max_tokens=max_tokens, hit_budget=g.truncated)
           for (t, _, v, s), g in zip(failures, gens, strict=True)]
    counts = ReflectionCounts(
        n=len(out), fallback=sum(r.status == "fallback" for r in out), cut=sum(r.status == "cut" for r in out),
        model_calls=len(gens), tokens=sum(g.n_tokens for g in gens),
    )
    return out, counts


def as_insight(r: Reflection, episode_id: int, generation: int) -> Insight:
    """The reflection as the store's insight record, drawn from a failure, linked to its episode."""
    return Insight(r.title, r.description, r.content, "failure", (episode_id,), generation)


def failed_episodes(attempts: Sequence[Attempt], ids: Sequence[int]) -> list[tuple[int, Attempt]]:
    """The distinct failed episodes among ``attempts`` (recorded under store ``ids``, in the same
    order): ``(episode id, its first attempt)``, by first appearance."""
    seen: dict[int, Attempt] = {}
    for a, eid in zip(attempts, ids, strict=True):
        if not a.verdict.success:
            seen.setdefault(eid, a)
    return list(seen.items())


def unreflected(store: EpisodeStore, generation: int) -> list[StoredEpisode]:
    """The failed episodes of ``generation`` no insight was drawn from: after a kill between the
    generation's episodes and its reflections, the ones still to write."""
    linked = {e for r in store.insights(outcome="failure") for e in r.insight.episodes}
    return [r for r in store.episodes(generation=[generation], success=False) if r.id not in linked]


def store_reflections(
    model: Any, tokenizer: Any, store: EpisodeStore, failures: Sequence[tuple[int, Task, str, Verdict, Sequence[Step]]],
    *, generation: int, max_tokens: int, batch_size: int, generate_fn: Callable[..., Any] | None = None,
    desc: str | None = None, redact: Callable[[str], str] | None = None,
) -> tuple[list[StoredInsight], ReflectionCounts]:
    """Reflect on each failure ``(episode id, task, output, verdict, steps)`` and store the
    insights (one transaction each), each linked to its episode; returns them in order. ``redact``
    (the run's private values) is applied to every text of an insight before it is stored."""
    reflections, counts = reflect(model, tokenizer, [f[1:] for f in failures], max_tokens=max_tokens,
                                  batch_size=batch_size, generate_fn=generate_fn, desc=desc)
    stored = []
    for (eid, *_), r in zip(failures, reflections, strict=True):
        ins = as_insight(r, eid, generation)
        if redact is not None:
            ins = dataclasses.replace(ins, title=redact(ins.title), description=redact(ins.description),
                                      content=redact(ins.content))
        stored.append(StoredInsight(store.add_insight(ins), ins))
    return stored, counts


@dataclass(frozen=True)
class Rate(Record):
    """One arm of the retry pass: exact success rate and mean credit."""

    success: float
    credit: float


@dataclass(frozen=True)
class Retry(Record):
    """The retry pass: each failed episode attempted once more without and once with its
    reflection in the prompt (the same prompt otherwise, the same sampling seed).

    Args:
        n: failed episodes retried.
        without, with_reflection: exact success rate and mean credit of each arm.
        model_calls: generated answers of both arms (one per turn).
    """

    n: int
    without: Rate
    with_reflection: Rate
    model_calls: int


def retry_pass(
    model: Any, tokenizer: Any, env: Environment, failed: Sequence[Attempt], lessons: Sequence[StoredInsight], *,
    seed: int, generate_fn: Callable[..., Any] | None = None, **attempt_kw: Any,
) -> tuple[Retry, list[Attempt]]:
    """Attempt each of ``failed`` again, without and with its lesson (``lessons[i]`` for
    ``failed[i]``), in one batch; returns the figures and the attempts (without first, then with).

    ``attempt_kw``: ``max_new_tokens``, ``batch_size``, ``temperature``, ``max_calls``,
    ``max_turns``, ``desc`` of :func:`replaybank.llm.loop.act.attempt`.
    """
    tasks = [a.task for a in failed] * 2
    prompts = [(list(a.messages), a.replayed) for a in failed]
    prompts += [(add_lessons(a.messages, [insight_line(ins)]), a.replayed) for a, ins in zip(failed, lessons, strict=True)]
    if not failed:
        return Retry(0, Rate(0.0, 0.0), Rate(0.0, 0.0), 0), []
    attempts, _ = attempt(model, tokenizer, env, tasks, prompts, seed=seed, generate_fn=generate_fn, **attempt_kw)
    half = len(failed)

    def arm(group: Sequence[Attempt]) -> Rate:
        s = summarise(group)
        return Rate(s.success, s.credit)

    calls = sum(max(len(a.steps), 1) for a in attempts)
    return Retry(half, arm(attempts[:half]), arm(attempts[half:]), calls), attempts
