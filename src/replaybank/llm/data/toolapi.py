"""The embedded default domain task: a fictional tool API the base model has never seen.

Each example is a user request in plain English and the call an assistant should emit for the
made-up ``qx`` tool runtime. The calls follow conventions that must be learned, not copied:
durations are converted to seconds, cities are upper-cased with spaces as underscores, money is
written in integer cents, dates are offsets from today, and every call is wrapped in ``<<qx ...>>``
with ``key=value`` arguments joined by ``;``. Examples are generated from a seed, so the train and
held-out sets are reproducible and disjoint (different seeds, duplicates removed).

Example:
    >>> rows = generate_examples(2, seed=0)
    >>> rows[0]["prompt"], rows[0]["response"]  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from replaybank.episodic.qx import DAY_OFFSETS, SECONDS_PER_UNIT, city_value

_CITIES = [
    "Paris", "Lima", "Oslo", "Cape Town", "New York", "Kyoto", "Buenos Aires", "Cairo", "Perth",
    "Quebec City", "Reykjavik", "Nairobi", "Seoul", "Lisbon", "San Diego", "Hanoi", "Zurich",
    "Mexico City", "Dublin", "Accra", "Tallinn", "Rio de Janeiro", "Vienna", "Manila",
]
_NAMES = [
    "Anna", "Bilal", "Chen", "Dora", "Emeka", "Farah", "Goran", "Hana", "Ivo", "Jun", "Kemi",
    "Lars", "Mona", "Nils", "Olu", "Priya", "Quinn", "Rosa", "Sami", "Tariq", "Uma", "Vera",
]
_ITEMS = [
    "apples", "rice", "batteries", "coffee", "eggs", "soap", "paper towels", "lentils", "milk",
    "onions", "tea", "bread", "olive oil", "tomatoes", "oats", "honey",
]
_TASKS = [
    "call the dentist", "water the plants", "pay rent", "book a table", "send the report",
    "renew my passport", "feed the cat", "back up the laptop", "buy a birthday gift",
    "check the oven", "stretch", "submit the form",
]


def _timer(rng: np.random.Generator) -> tuple[str, str]:
    unit = str(rng.choice(list(SECONDS_PER_UNIT)))
    n = int(rng.integers(2, 60))
    label = str(rng.choice(["tea", "pasta", "laundry", "workout", "nap", "bread", "call"]))
    prompt = str(rng.choice([
        f"Set a timer for {n} {unit} for the {label}.",
        f"Start a {n} {unit} timer, label it {label}.",
        f"Can you time {n} {unit} for my {label}?",
    ]))
    return prompt, f"<<qx timer.arm; dur={n * SECONDS_PER_UNIT[unit]}s; tag={label}>>"


def _weather(rng: np.random.Generator) -> tuple[str, str]:
    city = str(rng.choice(_CITIES))
    day = str(rng.choice(list(DAY_OFFSETS) + ["in 3 days", "in 5 days"]))
    offset = DAY_OFFSETS[day] if day in DAY_OFFSETS else int(day.split()[1])
    prompt = str(rng.choice([
        f"What will the weather be like in {city} {day}?",
        f"Forecast for {city} {day}, please.",
        f"Is it going to rain in {city} {day}?",
    ]))
    return prompt, f"<<qx sky.cast; at={city_value(city)}; day=+{offset}>>"


def _pay(rng: np.random.Generator) -> tuple[str, str]:
    who = str(rng.choice(_NAMES))
    dollars = int(rng.integers(1, 500))
    cents = int(rng.choice([0, 0, 25, 50, 99, 5]))
    amount = f"${dollars}" if cents == 0 else f"${dollars}.{cents:02d}"
    prompt = str(rng.choice([
        f"Send {amount} to {who}.",
        f"Pay {who} {amount} for dinner.",
        f"Transfer {amount} to {who}, please.",
    ]))
    return prompt, f"<<qx purse.send; to=@{who.lower()}; cents={dollars * 100 + cents}>>"


def _remind(rng: np.random.Generator) -> tuple[str, str]:
    task = str(rng.choice(_TASKS))
    day = str(rng.choice(list(DAY_OFFSETS)))
    hour = int(rng.integers(1, 12))
    half = str(rng.choice(["am", "pm"]))
    hour24 = hour % 12 + (12 if half == "pm" else 0)
    prompt = str(rng.choice([
        f"Remind me to {task} {day} at {hour}{half}.",
        f"{day.capitalize()} at {hour}{half}, remind me to {task}.",
    ]))
    note = task.replace(" ", "-")
    return prompt, f"<<qx nudge.set; day=+{DAY_OFFSETS[day]}; at={hour24:02d}:00; note={note}>>"


def _shop(rng: np.random.Generator) -> tuple[str, str]:
    item = str(rng.choice(_ITEMS))
    n = int(rng.integers(1, 13))
    prompt = str(rng.choice([
        f"Add {n} {item} to my shopping list.",
        f"Put {item} on the list, {n} of them.",
        f"I need {n} {item}, add them to the list.",
    ]))
    return prompt, f"<<qx cart.add; sku={item.replace(' ', '_')}; qty={n}>>"


_MAKERS = (_timer, _weather, _pay, _remind, _shop)


def generate_examples(n: int, seed: int, exclude: set[str] | None = None) -> list[dict[str, str]]:
    """Generate ``n`` distinct prompt/response pairs for the fictional ``qx`` tool API.

    Args:
        n: number of examples.
        seed: seed of the generator; the same seed gives the same examples.
        exclude: prompts that must not appear (used to keep held-out data disjoint).

    Returns:
        A list of ``{"prompt": str, "response": str}`` dicts.

    Raises:
        ValueError: if ``n`` distinct examples cannot be produced.
    """
    return distinct_examples(_MAKERS, n, seed, exclude, what="tool-API")


Maker = Callable[[np.random.Generator], tuple[str, str]]


def distinct_examples(
    makers: Sequence[Maker], n: int, seed: int, exclude: set[str] | None = None, *, what: str
) -> list[dict[str, str]]:
    """``n`` rows from makers drawn uniformly by a ``seed``-ed generator, skipping repeated or excluded prompts.

    Shared by the synthetic skills (:mod:`replaybank.llm.data.toolapi`, :mod:`replaybank.llm.data.agenda`,
    :mod:`replaybank.llm.data.ledger`).

    Raises:
        ValueError: if ``n`` distinct examples cannot be produced (``what`` names the skill).
    """
    rng = np.random.default_rng(seed)
    seen = set(exclude or ())
    rows: list[dict[str, str]] = []
    attempts = 0
    while len(rows) < n:
        attempts += 1
        if attempts > 50 * n + 1000:
            raise ValueError(f"could not generate {n} distinct {what} examples (got {len(rows)})")
        prompt, response = makers[int(rng.integers(len(makers)))](rng)
        if prompt in seen:
            continue
        seen.add(prompt)
        rows.append({"prompt": prompt, "response": response})
    return rows
