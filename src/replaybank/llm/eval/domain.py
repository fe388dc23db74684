"""Domain success measured on generated answers: exact match, and a parsed-call score for tool calls.

``exact_match`` compares the greedy answer with the reference response after collapsing whitespace.
``call_score`` parses both as tool calls (``<<qx name; key=value; ...>>`` by default) and gives
partial credit::

    call_score = (name matches) + (arguments with the reference's exact value)
                 / (1 + max(#reference arguments, #generated arguments))

so a perfect call scores 1, the right tool with half the arguments right scores about one half,
and an answer that is not a call scores 0. Extra or missing arguments lower the score.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from typing import Any

from replaybank.errors import ReplayBankError
from replaybank.llm.data.corpus import normalise
from replaybank.llm.eval.decode import Precision, generate_detailed

ParsedCall = tuple[str, dict[str, str]]
_QX = re.compile(r"<<\s*qx\s+([^;>\s]+)\s*((?:;[^;>]*)*)>>")


class DomainEvalError(ReplayBankError):
    """Domain records cannot be scored by generation."""


def parse_qx_call(text: str) -> ParsedCall | None:
    """The first ``<<qx name; k=v; ...>>`` call in ``text`` as ``(name, {k: v})``, or None.

    Example:
        >>> parse_qx_call("Sure: <<qx timer.arm; dur=60s; tag=tea>>")
        ('timer.arm', {'dur': '60s', 'tag': 'tea'})
        >>> parse_qx_call("I cannot do that.") is None
        True
    """
    m = _QX.search(text)
    if m is None:
        return None
    args: dict[str, str] = {}
    for part in m.group(2).split(";"):
        part = part.strip()
        if not part:
            continue
        key, _, value = part.partition("=")
        args[key.strip()] = value.strip()
    return m.group(1), args


def exact_match(answer: str, reference: str) -> bool:
    r"""Whether a generated answer is the reference response, whitespace runs collapsed and ends stripped.

    The check of every domain without a parsed form (``@agenda{...}`` entries, ``~ledger`` lines),
    for held-out accuracy and for on-policy replay alike.

    Example:
        >>> exact_match(" ~ledger d5  CHEN>ANNA USD12.50 #food\n", "~ledger d5 CHEN>ANNA USD12.50 #food")
        True
    """
    return normalise(answer) == normalise(reference)


def call_score(answer: ParsedCall | None, reference: ParsedCall | None) -> float:
    """Partial credit of a parsed call against the reference call (see the module docstring).

    Example:
        >>> call_score(("sky.cast", {"at": "OSLO", "day": "+2"}), ("sky.cast", {"at": "OSLO", "day": "+1"}))
        0.6666666666666666
    """
    if answer is None or reference is None:
        return 0.0
    name, args = answer
    ref_name, ref_args = reference
    hits = sum(1 for k, v in ref_args.items() if args.get(k) == v)
    return (float(name == ref_name) + hits) / (1 + max(len(ref_args), len(args)))


def generated_accuracy(
    model: Any,
    tokenizer: Any,
    records: Sequence[dict[str, Any]],
    *,
    max_new_tokens: int = 48,
    batch_size: int = 16,
    desc: str | None = None,
    parse: Callable[[str], ParsedCall | None] | None = None,
    precision: Precision = "fp32",
) -> dict[str, Any]:
    """Greedy answers to the records' prompts, scored against their responses.

    Args:
        model, tokenizer: the model under test.
        records: ``{"prompt", "response"}`` dicts (:data:`~replaybank.llm.data.prepare.DomainRecord`);
            records without both (``messages`` or ``text`` ones) are skipped and counted.
        max_new_tokens: generation budget (qx calls take at most ~30 tokens).
        batch_size: generation batch size.
        desc: progress-bar label.
        precision: generation arithmetic (:func:`~replaybank.llm.eval.decode.resolve_precision`).
        parse: call parser, ``text -> (name, args) | None``; default :func:`parse_qx_call`.
            ``call_score`` is None when no reference response parses as a call.

    Returns:
        ``{"exact_match", "call_score", "n", "skipped", "truncated", "seconds", "items"}``; items
        hold ``prompt``, ``answer``, ``reference``, ``exact``, ``call``.

    Raises:
        DomainEvalError: when no record has a prompt and a response.
    """
    parse = parse or parse_qx_call
    usable = [r for r in records if isinstance(r.get("prompt"), str) and isinstance(r.get("response"), str)]
    if not usable:
        raise DomainEvalError(
            f"none of the {len(records)} domain records has a prompt and a response to score generation against"
        )
    t0 = time.perf_counter()
    gens = generate_detailed(model, tokenizer, [r["prompt"] for r in usable],
                             max_new_tokens=max_new_tokens, batch_size=batch_size, desc=desc,
                             precision=precision)
    items = []
    scored_calls: list[float] = []
    for rec, gen in zip(usable, gens, strict=True):
        exact = exact_match(gen.text, rec["response"])
        reference = parse(rec["response"])
        score = None if reference is None else call_score(parse(gen.text), reference)
        if score is not None:
            scored_calls.append(score)
        items.append({"prompt": rec["prompt"], "answer": gen.text, "reference": rec["response"],
                      "exact": exact, "call": score, "truncated": gen.truncated})
    return {
        "exact_match": sum(i["exact"] for i in items) / len(items),
        "call_score": sum(scored_calls) / len(scored_calls) if scored_calls else None,
        "n": len(items),
        "skipped": len(records) - len(usable),
        "truncated": sum(bool(i["truncated"]) for i in items),
        "seconds": round(time.perf_counter() - t0, 2),
        "items": items,
    }
