"""On-policy replay (``onpolicy``, after On-Policy Replay, arXiv 2605.29495): before a new domain,
the current model answers the stored prompts of earlier domains, and the answers the domain's
checker accepts become rehearsal rows (reward-filtered): the model rehearses its own correct
behaviour on old tasks instead of the stored original answers (``replay``).

:func:`onpolicy_records` is pure given ``generate`` (prompts -> answers), so it is tested with a
fake one; the main job passes greedy decoding of the arm's model (:mod:`..eval.decode`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from replaybank.llm.eval.domain import call_score, exact_match, parse_qx_call

Record = dict[str, Any]


def domain_accepts(record: Record, answer: str) -> bool:
    """The domain checker: the answer's call equals the reference call (every argument), or, for a
    reference that is no call, the answer equals it (:func:`~replaybank.llm.eval.domain.exact_match`:
    whitespace runs collapsed, as the held-out exact match scores it).

    Example:
        >>> rec = {"prompt": "Weather in Oslo in two days?", "response": "<<qx sky.cast; at=OSLO; day=+2>>"}
        >>> domain_accepts(rec, "Sure: <<qx sky.cast; day=+2; at=OSLO>>"), domain_accepts(rec, "<<qx sky.cast; at=OSLO; day=+1>>")
        (True, False)
    """
    reference = parse_qx_call(record["response"])
    if reference is None:
        return exact_match(answer, str(record["response"]))
    return call_score(parse_qx_call(answer), reference) == 1.0


def onpolicy_records(
    generate: Callable[[list[str]], Sequence[str]], earlier: Sequence[Sequence[Record]],
    accept: Callable[[Record, str], bool] = domain_accepts,
) -> tuple[list[Record], dict[str, Any]]:
    """The current model's accepted answers to earlier domains' prompts, as ``{prompt, response}`` rows.

    Args:
        generate: answers to a list of prompts, in order (the current model, greedy).
        earlier: the stored records (``{prompt, response}``) of each earlier domain.
        accept: the checker (``domain_accepts`` by default): whether an answer is right.

    Returns:
        The accepted rows (the model's answer as the response) and a manifest: prompts asked and
        answers accepted per earlier domain.

    Raises:
        ValueError: ``generate`` returned another number of answers than prompts.

    Example:
        >>> recs = [[{"prompt": "a?", "response": "A"}, {"prompt": "b?", "response": "B"}]]
        >>> rows, info = onpolicy_records(lambda ps: [p[0].upper() for p in ps], recs)
        >>> rows, info["accepted"]
        ([{'prompt': 'a?', 'response': 'A'}, {'prompt': 'b?', 'response': 'B'}], [2])
    """
    rows: list[Record] = []
    asked, accepted = [], []
    for records in earlier:
        usable = [r for r in records if isinstance(r.get("prompt"), str) and isinstance(r.get("response"), str)]
        answers = list(generate([r["prompt"] for r in usable])) if usable else []
        if len(answers) != len(usable):
            raise ValueError(f"onpolicy: generate gave {len(answers)} answers to {len(usable)} prompts")
        kept = [{"prompt": r["prompt"], "response": a} for r, a in zip(usable, answers, strict=True) if accept(r, a)]
        rows += kept
        asked.append(len(usable))
        accepted.append(len(kept))
    return rows, {"asked": asked, "accepted": accepted}
