"""A third fictional skill for domain sequences: rewriting a money statement as a ``~ledger`` line.

Unlike the ``qx`` tool API and the ``@agenda`` entries, which pick fields out of a *request*, this
skill *rewrites a statement* of something that happened ("On Friday, Anna got $12.50 from Chen for
lunch") into a made-up notation by deterministic rules, keeping every fact:

- the weekday becomes its ISO number (``Monday`` -> ``d1`` ... ``Sunday`` -> ``d7``);
- the people are written upper case in the direction the money went, payer first
  (``CHEN>ANNA``), whichever of them the sentence names first and in whichever voice;
- the amount becomes currency code then amount with two decimals (``$12.50``, ``12.50 dollars`` ->
  ``USD12.50``; ``7 euros``, ``€7`` -> ``EUR7.00``; pounds -> ``GBP``): copied, never computed;
- what it was for becomes one of four categories (``#food``, ``#travel``, ``#home``, ``#fun``).

It shares names, weekdays and dollar amounts with the other two skills (the qx tool API writes
``$12.50`` as ``cents=1250``, the agenda writes Friday as ``FRI``), so learning it can overwrite
them. Examples come from a seed, like :mod:`replaybank.llm.data.toolapi`.

Example:
    >>> row = generate_examples(1, seed=0)[0]
    >>> row["response"].startswith("~ledger d")
    True
"""

from __future__ import annotations

import numpy as np

from replaybank.llm.data.toolapi import distinct_examples

_NAMES = [
    "Anna", "Bilal", "Chen", "Dora", "Emeka", "Farah", "Goran", "Hana", "Ivo", "Jun", "Kemi",
    "Lars", "Mona", "Nils", "Olu", "Priya", "Quinn", "Rosa", "Sami", "Tariq", "Uma", "Vera",
]
_DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
_PURPOSES = {
    "lunch": "food", "dinner": "food", "coffee": "food", "groceries": "food",
    "the taxi": "travel", "train tickets": "travel", "fuel": "travel", "the bus": "travel",
    "rent": "home", "the electricity bill": "home", "internet": "home", "repairs": "home",
    "concert tickets": "fun", "the cinema": "fun", "novels": "fun", "a birthday gift": "fun",
}
#: currency code -> (symbol, word)
_CURRENCIES = {"USD": ("$", "dollars"), "EUR": ("€", "euros"), "GBP": ("£", "pounds")}
#: money from {p} (payer) to {q} (payee); {a} amount as spoken, {d} weekday, {r} purpose
_TEMPLATES = [
    "{p} paid {q} {a} for {r} on {d}.",
    "On {d}, {q} got {a} from {p} for {r}.",
    "{q} was paid {a} by {p} on {d}, for {r}.",
    "{p} gave {q} {a} on {d} for {r}.",
    "Write this in the ledger: {p} sent {a} to {q} on {d} for {r}.",
    "{d}: {q} received {a} from {p} for {r}.",
    "For the books: {a} from {p} to {q}, {r}, {d}.",
    "{q} got {a} for {r} from {p} last {d}.",
]


def _amount(rng: np.random.Generator) -> tuple[str, str]:
    """An amount as a request says it, and as the ledger writes it (``USD12.50``)."""
    code = str(rng.choice(list(_CURRENCIES)))
    symbol, word = _CURRENCIES[code]
    whole = int(rng.integers(2, 200))
    cents = int(rng.choice([0, 0, 0, 50, 25, 99, 5]))
    number = f"{whole}" if cents == 0 else f"{whole}.{cents:02d}"
    spoken = f"{symbol}{number}" if rng.random() < 0.5 else f"{number} {word}"
    return spoken, f"{code}{whole}.{cents:02d}"


def _entry(rng: np.random.Generator) -> tuple[str, str]:
    payer, payee = (str(x) for x in rng.choice(_NAMES, size=2, replace=False))
    day = int(rng.integers(len(_DAYS)))
    purpose = str(rng.choice(list(_PURPOSES)))
    spoken, amount = _amount(rng)
    template = str(rng.choice(_TEMPLATES))
    prompt = template.format(p=payer, q=payee, a=spoken, d=_DAYS[day], r=purpose)
    prompt = prompt[0].upper() + prompt[1:]
    response = f"~ledger d{day + 1} {payer.upper()}>{payee.upper()} {amount} #{_PURPOSES[purpose]}"
    return prompt, response


_MAKERS = (_entry,)


def generate_examples(n: int, seed: int, exclude: set[str] | None = None) -> list[dict[str, str]]:
    """``n`` distinct ``{"prompt", "response"}`` rows of the ``~ledger`` skill, the same for the same
    ``seed``, none of whose prompts is in ``exclude`` (as :func:`replaybank.llm.data.agenda.generate_examples`).

    Raises:
        ValueError: if ``n`` distinct examples cannot be produced.
    """
    return distinct_examples(_MAKERS, n, seed, exclude, what="ledger")
