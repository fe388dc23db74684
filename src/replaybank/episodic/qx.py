"""The qx tool runtime as a checker: parse ``<<qx tool.name; k=v; ...>>`` calls, validate them
against the tool schema, execute them, and score them against the expected calls.

The schema is the one :mod:`replaybank.llm.data.toolapi` generates data for (five tools; durations in
seconds, cities upper-cased, money in cents, days as ``+N`` offsets). A call counts as *executed*
only if :func:`validate` finds nothing wrong with it: the tool exists, every required argument is
there, none is unknown or repeated, and every value has its type.

The runtime is simulated and deterministic (:func:`execute`): a valid call returns ``ok`` and the
call's arguments; ``cart.add`` also returns the cost of the items, ``total=<cents>`` (a fixed
price list, :data:`PRICES`), which a later call may need (level 4 of the ladder:
"... then send Anna the total").

Scoring (:func:`score`): each expected call is matched to the executed call of the same tool
(in order); its credit per argument is 1 if the value is exactly right, else 0. The reward is the
mean argument credit, scaled down by ``expected / executed`` when the agent made extra calls.
Success means exactly the expected calls, in order, and nothing else.

Example:
    >>> call = parse_calls("Sure! <<qx timer.arm; dur=300s; tag=tea>>")[0]
    >>> call.tool, call.args
    ('timer.arm', (('dur', '300s'), ('tag', 'tea')))
    >>> validate(call)
    []
    >>> validate(parse_calls("<<qx timer.arm; dur=5 minutes>>")[0])
    ["timer.arm: dur='5 minutes' is not seconds like 300s", 'timer.arm: missing required argument tag']
    >>> v = score(["<<qx timer.arm; dur=300s; tag=tea>>"], "<<qx timer.arm; dur=300s; tag=pasta>>")
    >>> v.success, v.reward, dict(v.credit)
    (False, 0.5, {'timer.arm.dur': 1.0, 'timer.arm.tag': 0.0})
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .episode import Step, Verdict

_CALL = re.compile(r"<<qx\s+(.*?)>>", re.DOTALL)
_TOOL = re.compile(r"[a-z]+\.[a-z]+")
_KEY = re.compile(r"[a-z_]+")

# value type name -> (pattern, what it should look like)
TYPES: dict[str, tuple[re.Pattern[str], str]] = {
    "seconds": (re.compile(r"[1-9]\d*s"), "seconds like 300s"),
    "city": (re.compile(r"[A-Z]+(?:_[A-Z]+)*"), "an upper-case city like NEW_YORK"),
    "offset": (re.compile(r"\+\d+"), "a day offset like +2"),
    "handle": (re.compile(r"@[a-z]+"), "a handle like @anna"),
    "int": (re.compile(r"0|[1-9]\d*"), "a non-negative integer like 1250"),
    "clock": (re.compile(r"(?:[01]\d|2[0-3]):[0-5]\d"), "a 24-hour time like 15:00"),
    "slug": (re.compile(r"[a-z]+(?:-[a-z]+)*"), "a lower-case-hyphenated note like pay-rent"),
    "sku": (re.compile(r"[a-z]+(?:_[a-z]+)*"), "a lower_case item like olive_oil"),
    "word": (re.compile(r"[a-z]+"), "one lower-case word like tea"),
}

#: how a request writes a duration's unit, in seconds ("5 minutes" is ``dur=300s``)
SECONDS_PER_UNIT = {"seconds": 1, "minutes": 60, "hours": 3600}
#: the day words of requests and their offsets ("tomorrow" is ``day=+1``; else "in N days")
DAY_OFFSETS = {"today": 0, "tomorrow": 1, "the day after tomorrow": 2}


def city_value(name: str) -> str:
    """A city as a call writes it: ``New York`` is ``NEW_YORK``."""
    return name.upper().replace(" ", "_")


# tool -> {argument: type}; every argument is required.
SCHEMA: dict[str, dict[str, str]] = {
    "timer.arm": {"dur": "seconds", "tag": "word"},
    "sky.cast": {"at": "city", "day": "offset"},
    "purse.send": {"to": "handle", "cents": "int"},
    "nudge.set": {"day": "offset", "at": "clock", "note": "slug"},
    "cart.add": {"sku": "sku", "qty": "int"},
}


#: Unit prices in cents of the items ``cart.add`` knows (the shopping items of ``llm.toolapi``);
#: any other valid sku costs :data:`OTHER_PRICE`.
PRICES: dict[str, int] = {
    "apples": 45, "rice": 219, "batteries": 135, "coffee": 899, "eggs": 32, "soap": 175,
    "paper_towels": 249, "lentils": 189, "milk": 129, "onions": 38, "tea": 459, "bread": 279,
    "olive_oil": 1099, "tomatoes": 59, "oats": 329, "honey": 649,
}
OTHER_PRICE = 100


@dataclass(frozen=True)
class Call:
    """A parsed call. ``args`` keeps the written order; ``problems`` lists syntax errors."""

    tool: str
    args: tuple[tuple[str, str], ...]
    problems: tuple[str, ...] = ()

    @property
    def arg_dict(self) -> dict[str, str]:
        return dict(self.args)

    def canonical(self) -> str:
        """The call written back in canonical form (``<<qx tool; k=v; ...>>``)."""
        return "<<qx " + "; ".join([self.tool] + [f"{k}={v}" for k, v in self.args]) + ">>"


def parse_calls(text: str) -> list[Call]:
    """Every ``<<qx ...>>`` call in ``text``, in order; malformed parts are noted, not dropped.

    Example:
        >>> [c.canonical() for c in parse_calls("a <<qx cart.add;sku=eggs; qty=3>> b <<qx x>>")]
        ['<<qx cart.add; sku=eggs; qty=3>>', '<<qx x>>']
    """
    calls = []
    for body in _CALL.findall(text):
        parts = [p.strip() for p in body.split(";")]
        tool, problems, args = parts[0], [], []
        if not _TOOL.fullmatch(tool):
            problems.append(f"tool name {tool!r} is not like name.verb")
        seen: set[str] = set()
        for part in parts[1:]:
            if not part:
                continue
            key, eq, value = part.partition("=")
            key, value = key.strip(), value.strip()
            if not eq or not _KEY.fullmatch(key):
                problems.append(f"argument {part!r} is not key=value")
                continue
            if key in seen:
                problems.append(f"argument {key} given twice")
                continue
            seen.add(key)
            args.append((key, value))
        calls.append(Call(tool, tuple(args), tuple(problems)))
    return calls


def validate(call: Call, api: Mapping[str, Mapping[str, str]] = SCHEMA) -> list[str]:
    """What is wrong with ``call`` under the tool schema ``api`` (default :data:`SCHEMA`; empty if
    it may be executed). Argument types are :data:`TYPES`."""
    problems = [f"{call.tool}: {p}" for p in call.problems]
    schema = api.get(call.tool)
    if schema is None:
        return problems + [f"unknown tool {call.tool!r} (known: {', '.join(sorted(api))})"]
    given = call.arg_dict
    for key, value in call.args:
        if key not in schema:
            problems.append(f"{call.tool}: unknown argument {key}")
            continue
        if schema[key] not in TYPES:
            problems.append(f"{call.tool}: {key} has type {schema[key]!r}, which is not a qx type")
            continue
        pattern, looks = TYPES[schema[key]]
        if not pattern.fullmatch(value):
            problems.append(f"{call.tool}: {key}={value!r} is not {looks}")
    problems += [f"{call.tool}: missing required argument {k}" for k in schema if k not in given]
    return problems


def execute(call: Call) -> str:
    """Run a call on the (simulated) qx runtime: ``ok ...`` if valid, else ``error: ...``.

    A valid call returns ``ok``, the tool and its arguments; ``cart.add`` adds what the items
    cost, ``total=<cents>`` (:data:`PRICES` times ``qty``). Deterministic: the same call always
    returns the same text.

    Example:
        >>> execute(parse_calls("<<qx cart.add; sku=eggs; qty=3>>")[0])
        'ok cart.add sku=eggs qty=3 total=96'
        >>> execute(parse_calls("<<qx timer.arm; dur=60s; tag=tea>>")[0])
        'ok timer.arm dur=60s tag=tea'
        >>> execute(parse_calls("<<qx cart.drop; sku=eggs>>")[0])
        "error: unknown tool 'cart.drop' (known: cart.add, nudge.set, purse.send, sky.cast, timer.arm)"
    """
    problems = validate(call)
    if problems:
        return "error: " + "; ".join(problems)
    out = "ok " + " ".join([call.tool] + [f"{k}={v}" for k, v in call.args])
    if call.tool == "cart.add":
        args = call.arg_dict
        out += f" total={PRICES.get(args['sku'], OTHER_PRICE) * int(args['qty'])}"
    return out


def make_step(prompt: str, output: str) -> Step:
    """Record one agent turn: its calls (canonical, one per line) and what the runtime returned.

    Each call is checked with :func:`validate` before it is executed; a refused call's result is
    ``error: ...``. A turn without calls has ``call=None`` and ``result=None``.

    Example:
        >>> s = make_step("Add 3 eggs.", "<<qx cart.add; sku=eggs;qty=3>> <<qx cart.add; qty=1>>")
        >>> print(s.call); print(s.result)
        <<qx cart.add; sku=eggs; qty=3>>
        <<qx cart.add; qty=1>>
        ok cart.add sku=eggs qty=3 total=96
        error: cart.add: missing required argument sku
    """
    calls = parse_calls(output)
    if not calls:
        return Step(prompt, output)
    return Step(
        prompt,
        output,
        "\n".join(c.canonical() for c in calls),
        "\n".join(execute(c) for c in calls),
    )


def score(expected: Sequence[str], output: str) -> Verdict:
    """Check an agent's ``output`` against the ``expected`` calls (see the module doc).

    Only calls that pass :func:`validate` count; the others are reported in ``detail``.

    Raises:
        ValueError: if an expected call does not parse or is itself invalid (a bad task).
    """
    wanted = []
    for text in expected:
        calls = parse_calls(text)
        if len(calls) != 1 or validate(calls[0]):
            raise ValueError(f"expected call {text!r} is not one valid qx call: {validate(calls[0]) if calls else 'no call'}")
        wanted.append(calls[0])
    made = parse_calls(output)
    executed = [c for c in made if not validate(c)]
    detail = [f"refused {c.canonical()}: {'; '.join(validate(c))}" for c in made if validate(c)]
    credit: dict[str, float] = {}
    used: set[int] = set()
    for n, want in enumerate(wanted):
        match = next((i for i, c in enumerate(executed) if i not in used and c.tool == want.tool), None)
        got = executed[match].arg_dict if match is not None else {}
        if match is not None:
            used.add(match)
        else:
            detail.append(f"no executed {want.tool} call")
        prefix = f"{want.tool}." if len(wanted) == 1 else f"{n}.{want.tool}."
        for key, value in want.args:
            credit[prefix + key] = 1.0 if got.get(key) == value else 0.0
    mean = sum(credit.values()) / len(credit) if credit else 0.0
    reward = mean * (len(wanted) / max(len(wanted), len(executed))) if executed else 0.0
    success = len(made) == len(wanted) and all(
        c.tool == w.tool and c.arg_dict == w.arg_dict and not validate(c) for c, w in zip(made, wanted)
    )
    if len(executed) > len(wanted):
        detail.append(f"{len(executed) - len(wanted)} extra call(s)")
    return Verdict(success, 1.0 if success else round(reward, 6), credit, "; ".join(detail))
