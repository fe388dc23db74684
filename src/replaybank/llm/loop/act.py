"""Acting: the current model attempts tasks, with replayed successes in context, and is checked.

Prompts are chat messages: the agent's system prompt (which tools it has, how calls are
written), then, for acting and for the "with context" evaluation, up to ``context_examples``
successful episodes retrieved from the store by **lexical BM25 similarity** over the task text
(:class:`replaybank.episodic.retrieval.Retriever`), then the task. The "without context"
evaluation is the system prompt and the request alone, which is also the form consolidation
trains on (:mod:`.consolidate`). Generation is batched (:func:`replaybank.llm.eval.generate.generate_detailed`) and each row
stops at the end of its last call (:func:`call_end`): at the closing ``>>`` once the call budget
is used, or at the first text after a ``>>`` that does not open another call. So a model that
would go on (``end; end; ...``) is cut where its call ends. Each call is validated against the
tool schema before it counts as executed (:func:`replaybank.episodic.qx.make_step`), and the
environment's checker labels the answer (:func:`replaybank.episodic.env.run_check`).
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from replaybank.episodic import Episode, Task, Verdict
from replaybank.episodic.env import Environment, run_check
from replaybank.episodic.qx import make_step
from replaybank.episodic.retrieval import Retriever
from replaybank.llm.rows import _render

SYSTEM = (
    "You turn requests into qx tool calls. Answer with the calls only, each written "
    "<<qx tool.name; key=value; ...>>."
)
_CLOSED = re.compile(r"<<qx\b.*?>>", re.DOTALL)


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
    """One answer to one task: the prompt messages, the output (cut at the call's end), the verdict."""

    task: Task
    messages: list[dict[str, str]]
    replayed: tuple[int, ...]
    output: str
    verdict: Verdict
    n_tokens: int
    truncated: bool


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
    desc: str | None = None,
) -> tuple[list[Attempt], dict[str, float]]:
    """Generate one answer per (task, prompt), cut at the call's end, and check it.

    Returns:
        ``(attempts, stats)``; stats: ``seconds``, ``tokens`` (generated, stop tokens
        included), ``tokens_per_second``, ``truncated`` (share of rows that hit the budget).

    Raises:
        CheckerError: the environment's checker raised or returned something else than a
            Verdict (the message names the checker and the task).
    """
    from replaybank.llm.eval.generate import generate_detailed

    texts = [_render(tokenizer, msgs, add_generation_prompt=True) for msgs, _ in prompts]

    def stop(ids: list[int]) -> bool:
        # Only a token that can complete ">>" can end a call: skip decoding otherwise.
        return bool(ids) and call_end(tokenizer.decode(ids, skip_special_tokens=True), max_calls) is not None

    t0 = time.perf_counter()
    gens = generate_detailed(
        model, tokenizer, texts, max_new_tokens=max_new_tokens, batch_size=batch_size, desc=desc,
        rendered=True, temperature=temperature, seed=seed, stop_when=stop,
    )
    seconds = time.perf_counter() - t0
    out: list[Attempt] = []
    for task, (msgs, replayed), gen in zip(tasks, prompts, gens, strict=True):
        cut = call_end(gen.text, max_calls)
        text = gen.text[:cut] if cut is not None else gen.text
        out.append(Attempt(task, msgs, replayed, text, run_check(env, task, text), gen.n_tokens, gen.truncated))
    tokens = sum(a.n_tokens for a in out)
    stats = {
        "seconds": round(seconds, 3), "tokens": tokens,
        "tokens_per_second": round(tokens / seconds, 1) if seconds > 0 else 0.0,
        "truncated": sum(a.truncated for a in out) / max(len(out), 1),
    }
    return out, stats


def to_episode(a: Attempt, *, generation: int, adapter: str, seed: int, started_at: float) -> Episode:
    """An attempt as the store records it (context = every message before the task)."""
    return Episode(
        a.task, (make_step(a.task.text, a.output),), a.verdict, generation=generation, adapter=adapter,
        seed=seed, context=tuple(a.messages[:-1]), replayed=a.replayed, started_at=started_at,
        finished_at=time.time(),
    )


def summarise(attempts: Sequence[Attempt]) -> dict[str, Any]:
    """Exact success rate, mean argument credit (the reward) and counts, overall and per level.

    Example:
        >>> t = Task("t", "x", "cart.add", 1, ("<<qx cart.add; sku=tea; qty=1>>",))
        >>> a = Attempt(t, [], (), "", Verdict(False, 0.5), 3, False)
        >>> b = Attempt(t, [], (), "", Verdict(True, 1.0), 3, False)
        >>> s = summarise([a, b]); s["success"], s["credit"], s["n"]
        (0.5, 0.75, 2)
    """
    n = len(attempts)
    levels: dict[str, dict[str, float]] = {}
    for lv in sorted({a.task.difficulty for a in attempts}):
        group = [a for a in attempts if a.task.difficulty == lv]
        levels[str(lv)] = {
            "success": sum(a.verdict.success for a in group) / len(group),
            "credit": sum(a.verdict.reward for a in group) / len(group),
            "n": len(group),
        }
    return {
        "success": sum(a.verdict.success for a in attempts) / n if n else 0.0,
        "credit": sum(a.verdict.reward for a in attempts) / n if n else 0.0,
        "n": n,
        "levels": levels,
    }
