"""A scripted stand-in for ``generate_detailed``: deterministic qx agents for protocol tests.

A *policy* reads the conversation a row was rendered from (ChatML, as SmolLM2's template writes
it) and the sampling seed, and returns what the agent would write, possibly running on past its
call. :class:`Scripted` then emits it token by token and stops each row where the loop's
``stop_when`` fires or the budget ends, as the real batched generation does, and logs every call
(the rendered texts and the seed).

Run as a script, it is ``replaybank`` with generation scripted by :func:`seeded` for the qx
prompts (the others, e.g. the general-capability suite, still go to the real model):
``python tests/llm/loop/scripted.py loop CONFIG --out DIR``.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

Turn = tuple[str, str]  # (role, content)
Policy = Callable[[list[Turn], int], str]
_MSG = re.compile(r"<\|im_start\|>(\w+)\n(.*?)<\|im_end\|>", re.DOTALL)
_TOTAL = re.compile(r"total=(\d+)")
JUNK = " <<qx cart.add; sku=tea; qty=1>> end; end;"  # what a model may write after its call


def turns(text: str) -> list[Turn]:
    """The messages of a ChatML rendering, in order."""
    return [(role, content) for role, content in _MSG.findall(text)]


def request_and_turn(conv: list[Turn]) -> tuple[str, list[Turn]]:
    """The task's request (the last user message) and the turns after it."""
    last = max(i for i, (role, _) in enumerate(conv) if role == "user")
    return conv[last][1], conv[last + 1:]


def oracle(answers: Mapping[str, Sequence[str]], *, junk: str = JUNK) -> Policy:
    """Writes the expected call of each turn, then no call. A payment's ``cents`` is read from the
    ``total=`` of the last tool result, so a chain is solved only if that result was shown."""

    def policy(conv: list[Turn], seed: int) -> str:
        request, after = request_and_turn(conv)
        expected = answers[request]
        k = sum(role == "assistant" for role, _ in after)
        if k >= len(expected):
            return "All done."
        call = expected[k]
        if "purse.send" in call and k > 0:
            found = _TOTAL.search(after[-1][1]) if after[-1][0] == "tool" else None
            call = re.sub(r"cents=\d+", f"cents={found.group(1) if found else 0}", call)
        return call + junk

    return policy


_CART = [re.compile(p) for p in (r"Add (\d+) ([a-z ]+) to my shopping list", r"Put ([a-z ]+) on the list, (\d+) of them",
                                   r"I need (\d+) ([a-z ]+), add them to the list")]
_PAYEE = re.compile(r"Then send (\w+) the total")


def seeded(conv: list[Turn], seed: int) -> str:
    """A fixed agent whose answers depend on the seed, and that always makes a call.

    First turn: the cart.add of a shopping request (the quantity one too many when ``seed`` is
    odd), else a cart.add of eggs. After a result with ``total=``: the payment of that total to
    whoever the request names. Otherwise a timer. So it solves chain tasks (level 4) on even seeds
    only, and never a level-3 one.
    """
    request, after = request_and_turn(conv)
    if not after:
        for pattern in _CART:
            m = pattern.search(request)
            if m:
                n, item = (m.group(2), m.group(1)) if pattern is _CART[1] else (m.group(1), m.group(2))
                return f"<<qx cart.add; sku={item.replace(' ', '_')}; qty={int(n) + seed % 2}>> end;"
        return f"<<qx cart.add; sku=eggs; qty={1 + seed % 7}>> end;"
    found = _TOTAL.search(after[-1][1])
    if found:
        payee = _PAYEE.search(request)
        return f"<<qx purse.send; to=@{payee.group(1).lower() if payee else 'anna'}; cents={found.group(1)}>>"
    return f"<<qx timer.arm; dur={60 + seed % 50}s; tag=tea>>"


class Scripted:
    """``generate_detailed`` with a policy instead of a model (``fallback`` answers prompts that
    are not qx prompts, i.e. that do not mention ``<<qx``)."""

    def __init__(self, policy: Policy, fallback: Callable[..., Any] | None = None) -> None:
        self.policy = policy
        self.fallback = fallback
        self.calls: list[dict[str, Any]] = []

    def __call__(self, model: Any, tokenizer: Any, prompts: Sequence[str], *, max_new_tokens: int = 64,
                 batch_size: int = 16, desc: str | None = None, rendered: bool = False, temperature: float = 0.0,
                 seed: int = 0, stop_when: Callable[[list[int]], bool] | None = None,
                 precision: str = "fp32") -> list[Any]:
        from replaybank.llm.eval.decode import Generation

        if self.fallback is not None and not any("<<qx" in p for p in prompts):
            return self.fallback(model, tokenizer, prompts, max_new_tokens=max_new_tokens, batch_size=batch_size,
                                 desc=desc, rendered=rendered, temperature=temperature, seed=seed, stop_when=stop_when)
        self.calls.append({"texts": list(prompts), "seed": seed, "desc": desc})
        out = []
        for text in prompts:
            ids = list(tokenizer(self.policy(turns(text), seed), add_special_tokens=False)["input_ids"])
            n, stopped = 0, False
            while n < min(len(ids), max_new_tokens) and not stopped:
                n += 1
                stopped = stop_when is not None and stop_when(ids[:n])
            ended = stopped or n == len(ids)  # the script's end stands for the end-of-turn token
            out.append(Generation(tokenizer.decode(ids[:n], skip_special_tokens=True).strip(), not ended,
                                  n + (0 if stopped else 1)))
        return out


if __name__ == "__main__":
    import replaybank.llm.eval.decode as decode
    from replaybank.cli import main

    decode.generate_detailed = Scripted(seeded, fallback=decode.generate_detailed)  # type: ignore[assignment]
    sys.exit(main(sys.argv[1:]))


#: A level-4 qx task in words: two calls, the second needing the first one's result.
CHAIN = "Add {n} {item} to my shopping list. Then send {who} the total."


def chain(n: int, item: str, who: str, total: int) -> Any:
    """A level-4 qx :class:`~replaybank.episodic.tasks.Task` of :data:`CHAIN` with its two calls."""
    from replaybank.episodic import Task

    text = CHAIN.format(n=n, item=item, who=who)
    return Task(f"c-{n}-{item}-{who}", text, "cart.add>purse.send", 4,
                (f"<<qx cart.add; sku={item.replace(' ', '_')}; qty={n}>>",
                 f"<<qx purse.send; to=@{who.lower()}; cents={total}>>"))
