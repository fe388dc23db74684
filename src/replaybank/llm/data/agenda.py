"""A second fictional skill for domain sequences: the ``@agenda{...}`` entry format.

A plain request about meetings, calls, time logs or blocked-out time must become one entry in a
made-up format the base model has never seen, with conventions to learn: the kind first, people
in lower case, weekdays as three upper-case letters, times as 24-hour ``HHMM``, durations in
minutes, topics hyphenated, fields joined by ``|``. It overlaps the ``qx`` tool API in what the
requests talk about (people, days, times), so learning it after the tool API can overwrite the
earlier skill: what a replay of earlier domains is for. Examples come from a seed, like
:mod:`replaybank.llm.data.toolapi`.

Example:
    >>> generate_examples(1, seed=3)[0]["response"].startswith("@agenda{kind:")
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
_TOPICS = [
    "the budget", "the launch", "hiring", "the roadmap", "travel plans", "the audit", "onboarding",
    "the garden", "the move", "the quarterly report", "the wedding", "the school trip",
]
_ACTIVITIES = ["piano practice", "running", "reading", "Spanish", "coding", "yoga", "drawing", "chess"]


def _day(rng: np.random.Generator) -> tuple[str, str]:
    day = str(rng.choice(_DAYS))
    return day, day[:3].upper()


def _clock(rng: np.random.Generator) -> tuple[str, str]:
    hour = int(rng.integers(1, 13))
    minute = int(rng.choice([0, 0, 15, 30, 45]))
    half = str(rng.choice(["am", "pm"]))
    spoken = f"{hour}{half}" if minute == 0 else f"{hour}:{minute:02d}{half}"
    hour24 = hour % 12 + (12 if half == "pm" else 0)
    return spoken, f"{hour24:02d}{minute:02d}"


def _topic(text: str) -> str:
    return text.removeprefix("the ").replace(" ", "-")


def _meeting(rng: np.random.Generator) -> tuple[str, str]:
    who = str(rng.choice(_NAMES))
    day, dd = _day(rng)
    spoken, hhmm = _clock(rng)
    topic = str(rng.choice(_TOPICS))
    prompt = str(rng.choice([
        f"Book a meeting with {who} on {day} at {spoken} about {topic}.",
        f"Put a meeting about {topic} with {who} in my agenda, {day} {spoken}.",
    ]))
    return prompt, f"@agenda{{kind:meet|who:{who.lower()}|day:{dd}|t:{hhmm}|re:{_topic(topic)}}}"


def _call(rng: np.random.Generator) -> tuple[str, str]:
    who = str(rng.choice(_NAMES))
    day, dd = _day(rng)
    spoken, hhmm = _clock(rng)
    prompt = str(rng.choice([
        f"Schedule a call with {who} on {day} at {spoken}.",
        f"I need to call {who} {day} at {spoken}, add it to the agenda.",
    ]))
    return prompt, f"@agenda{{kind:call|who:{who.lower()}|day:{dd}|t:{hhmm}}}"


def _log(rng: np.random.Generator) -> tuple[str, str]:
    activity = str(rng.choice(_ACTIVITIES))
    day, dd = _day(rng)
    if rng.random() < 0.5:
        n = int(rng.integers(1, 5))
        amount, minutes = f"{n} hour{'s' if n > 1 else ''}", 60 * n
    else:
        minutes = int(rng.choice([15, 20, 25, 40, 45, 50]))
        amount = f"{minutes} minutes"
    prompt = str(rng.choice([
        f"Log {amount} of {activity} on {day}.",
        f"I did {amount} of {activity} on {day}, log it.",
    ]))
    return prompt, f"@agenda{{kind:log|day:{dd}|min:{minutes}|re:{_topic(activity.lower())}}}"


def _block(rng: np.random.Generator) -> tuple[str, str]:
    day, dd = _day(rng)
    part = str(rng.choice(["morning", "afternoon", "evening"]))
    topic = str(rng.choice(_TOPICS))
    prompt = str(rng.choice([
        f"Block {day} {part} for {topic}.",
        f"Keep my {day} {part} free for {topic}.",
    ]))
    code = {"morning": "AM", "afternoon": "PM", "evening": "EVE"}[part]
    return prompt, f"@agenda{{kind:block|day:{dd}|part:{code}|re:{_topic(topic)}}}"


_MAKERS = (_meeting, _call, _log, _block)


def generate_examples(n: int, seed: int, exclude: set[str] | None = None) -> list[dict[str, str]]:
    """Generate ``n`` distinct prompt/response pairs of the ``@agenda`` skill.

    Args:
        n: number of examples.
        seed: seed of the generator; the same seed gives the same examples.
        exclude: prompts that must not appear (keeps held-out data disjoint).

    Returns:
        A list of ``{"prompt": str, "response": str}`` dicts.

    Raises:
        ValueError: if ``n`` distinct examples cannot be produced.
    """
    return distinct_examples(_MAKERS, n, seed, exclude, what="agenda")
