"""Magpie-style prompts: the base model writes user requests itself from its chat template.

The template's text up to the start of a user message (for SmolLM2, the system turn and
``<|im_start|>user\\n``) is continued by sampling (temperature 0.7 by default, seeded), up to the
end-of-turn token; each continuation is a request the model finds typical of its own training
chats (Magpie, Xu et al. 2024). Requests are filtered before use:

- ``truncated``: no end of turn within ``max_new_tokens``;
- ``short``: fewer than 3 words;
- ``repetition``: degenerate text (:func:`~replaybank.llm.eval.checkers.degenerate`);
- ``tool_call``: looks like a tool call;
- ``overlap``: overlaps an evaluation-suite prompt;
- ``duplicate``: a request already written.

SmolLM2-135M writes plausible but open-ended requests ("I'm planning to launch a new business...")
whose answers mostly run past the default 96-token answer budget: in
``benchmarks/results/llm_suite.json`` 38 of 40 requests passed these filters but only 4 of their 38
answers ended within 96 tokens (the shipped pool kept 20 of 44). Hence the shipped pool is the
default and Magpie an option (``prompts="builtin+magpie"`` adds variety; raise ``max_new_tokens``
to keep more of its answers).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from replaybank.llm.eval.checkers import degenerate, looks_like_tool_call, words
from replaybank.llm.eval.decode import Generation, generate_detailed, user_turn_prefix
from replaybank.llm.eval.suite import overlap_key, overlaps

MAGPIE_FILTERS = ("truncated", "short", "repetition", "tool_call", "overlap", "duplicate")


def write_prompts(
    model: Any,
    tokenizer: Any,
    *,
    n: int,
    seed: int,
    exclude_keys: Sequence[str] = (),
    max_new_tokens: int = 48,
    temperature: float = 0.7,
    batch_size: int = 16,
    generate_fn: Callable[..., list[Generation]] | None = None,
    desc: str | None = None,
) -> tuple[list[str], dict[str, Any]]:
    """Sample ``n`` requests from ``model`` in the user role and keep those that pass the filters.

    Args:
        model: the model that writes (call it under ``disable_adapter()`` for the base).
        tokenizer: its tokenizer (its chat template gives the user-turn prefix).
        n: requests to sample.
        seed: seed of the sampler.
        exclude_keys: evaluation prompts in :func:`~replaybank.llm.eval.suite.overlap_key` form.
        max_new_tokens, temperature, batch_size: sampling settings.
        generate_fn: stands in for ``generate_detailed`` (tests).
        desc: progress-bar label.

    Returns:
        ``(prompts, counts)``: kept requests in sampling order, and
        ``{"written": n, "kept": k, "dropped": {filter: count}}``.
    """
    gen = generate_fn or generate_detailed
    prefix = user_turn_prefix(tokenizer)
    outs = gen(model, tokenizer, [prefix] * n, max_new_tokens=max_new_tokens, batch_size=batch_size,
               desc=desc, rendered=True, temperature=temperature, seed=seed)
    kept: list[str] = []
    seen: set[str] = set()
    dropped: Counter[str] = Counter()
    for out in outs:
        text = out.text.strip()
        key = overlap_key(text)
        if out.truncated:
            reason = "truncated"
        elif len(words(text)) < 3:
            reason = "short"
        elif degenerate(text):
            reason = "repetition"
        elif looks_like_tool_call(text):
            reason = "tool_call"
        elif any(overlaps(key, e) for e in exclude_keys):
            reason = "overlap"
        elif key in seen:
            reason = "duplicate"
        else:
            seen.add(key)
            kept.append(text)
            continue
        dropped[reason] += 1
    return kept, {"written": n, "kept": len(kept), "dropped": {k: dropped.get(k, 0) for k in MAGPIE_FILTERS}}
