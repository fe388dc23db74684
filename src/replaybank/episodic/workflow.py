"""Workflows from successes: abstract an episode's calls over the task's values, bind them to a new task.

**Abstraction** (:func:`abstract`): every argument value of a successful episode's calls is traced
to where it came from. Either a span of the task text, read by a *form* of the argument's qx type
(:data:`FORMS`: "5 minutes" is ``300s`` by ``duration``, "New York" is ``NEW_YORK`` by ``city``,
"$12" is ``1200`` by ``dollars``, "Anna" is ``@anna`` by ``name``; a value written as the call
writes it is ``verbatim``); or, when the text does not hold it, a ``key=value`` that an earlier
call's result produced (``total`` of ``cart.add``, a key the call did not itself pass). The
workflow keeps the task text as a *pattern* with those spans cut out as typed holes, and the calls
with their values replaced by the slots. A value found nowhere, or a workflow that does not give
back its own episode's calls when bound to its own task, is an :class:`AbstractionError`: no
workflow rather than a wrong one.

**Binding** (:func:`bind`): a new task matches a workflow when its text is the pattern's pieces with,
in each hole, a span written in that slot's form; the slots' values are the spans normalised.
:func:`render` then writes call ``i``, the values of result slots read from the results of the
calls before it (so a chain is rendered call by call, as it runs).

Example:
    >>> from replaybank.episodic.episode import Episode, Step, Task, Verdict
    >>> from replaybank.episodic.qx import make_step
    >>> task = Task("t", "Set a timer for 5 minutes for the tea.", "timer.arm", 2)
    >>> ep = Episode(task, (make_step(task.text, "<<qx timer.arm; dur=300s; tag=tea>>"),), Verdict(True, 1.0))
    >>> wf = abstract(ep, 7)
    >>> wf.pattern, [(s.type, s.form) for s in wf.slots]
    (('Set a timer for ', ' for the ', '.'), [('seconds', 'duration'), ('word', 'verbatim')])
    >>> b = bind(wf, "Set a timer for 2 hours for the pasta.")
    >>> render(wf, 0, b.values, []).canonical()
    '<<qx timer.arm; dur=7200s; tag=pasta>>'
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from replaybank.errors import ReplayBankError

from .episode import Episode
from .experience import Arg, CallTemplate, Slot, Workflow
from .qx import (
    DAY_OFFSETS,
    SCHEMA,
    SECONDS_PER_UNIT,
    TYPES,
    Call,
    city_value,
    parse_calls,
    validate,
)

__all__ = ["FORMS", "AbstractionError", "BindError", "Binding", "Form", "abstract", "bind", "calls_of",
           "find_spans", "form_of", "forms_of", "render", "result_values"]


class AbstractionError(ReplayBankError):
    """An episode that gives no workflow (a failure, a value found nowhere, an ambiguous text)."""


class BindError(ReplayBankError):
    """A workflow that does not bind to a task (a hole whose span is not in its slot's form, a
    result key missing)."""


@dataclass(frozen=True)
class Form:
    """One way a value of a qx type is written in a request.

    Args:
        name: the name slots record (``duration``).
        type: the qx type of the value (``seconds``).
        pattern: a regular expression (no capturing groups) a span in this form matches whole.
        normalise: span -> the value (as a call writes it).
        surfaces: value -> how it may be written in this form (searched in a text, any case;
            a span found is kept only if it matches ``pattern`` and normalises back to the value).
    """

    name: str
    type: str
    pattern: str
    normalise: Callable[[str], str]
    surfaces: Callable[[str], tuple[str, ...]]


def _duration(span: str) -> str:
    n, unit = span.split()
    return f"{int(n) * SECONDS_PER_UNIT[unit.rstrip('s') + 's']}s"


def _durations(value: str) -> tuple[str, ...]:
    seconds = int(value[:-1]) if re.fullmatch(r"[1-9]\d*s", value) else 0
    return tuple(f"{seconds // k} {units[:-1] if seconds == k else units}"
                 for units, k in SECONDS_PER_UNIT.items() if seconds and seconds % k == 0)


def _day(span: str) -> str:
    low = span.lower()
    return f"+{DAY_OFFSETS[low]}" if low in DAY_OFFSETS else f"+{int(low.split()[1])}"


def _days(value: str) -> tuple[str, ...]:
    if not re.fullmatch(r"\+\d+", value):
        return ()
    n = int(value[1:])
    return tuple(k for k, v in DAY_OFFSETS.items() if v == n) + (f"in {n} days",)


def _cents(span: str) -> str:
    dollars, _, cents = span[1:].partition(".")
    return str(int(dollars) * 100 + int(cents or 0))


def _dollars(value: str) -> tuple[str, ...]:
    if not re.fullmatch(r"0|[1-9]\d*", value):
        return ()
    d, c = divmod(int(value), 100)
    return (f"${d}.{c:02d}",) if c else (f"${d}", f"${d}.00")


def _clock(span: str) -> str:
    hour = int(span[:-2]) % 12 + (12 if span.endswith("pm") else 0)
    return f"{hour:02d}:00"


def _hours(value: str) -> tuple[str, ...]:
    m = re.fullmatch(r"(\d\d):00", value)
    if not m or int(m.group(1)) > 23:
        return ()
    h = int(m.group(1))
    return (f"{h % 12 or 12}{'pm' if h >= 12 else 'am'}",)


#: The forms of :data:`replaybank.episodic.qx.TYPES` values in requests (those of the qx ladder's
#: requests, :mod:`replaybank.llm.data.toolapi`); ``verbatim`` (the value as the call writes it) is
#: a form of every type, made by :func:`form_of`.
FORMS: dict[str, Form] = {f.name: f for f in (
    Form("duration", "seconds", r"\d+ (?:second|minute|hour)s?", _duration, _durations),
    Form("city", "city", r"[A-Z][a-z]+(?: (?:[a-z]{1,3} )?[A-Z][a-z]+)*", city_value, lambda v: (v.replace("_", " "),)),
    Form("day", "offset", r"(?:[Tt]oday|[Tt]omorrow|[Tt]he day after tomorrow|in \d+ days)", _day, _days),
    Form("dollars", "int", r"\$\d+(?:\.\d\d)?", _cents, _dollars),
    Form("name", "handle", r"[A-Z][a-z]+", lambda s: "@" + s.lower(),
         lambda v: (v[1:],) if v.startswith("@") else ()),
    Form("hour", "clock", r"(?:1[0-2]|[1-9])(?:am|pm)", _clock, _hours),
    # a phrase or an item also reads its value written as the call writes it ("pay-rent", "olive_oil"),
    # so that a one-word value ("tea") read by it binds both ways of writing later values
    Form("phrase", "slug", r"[a-z]+(?:[ -][a-z]+)*?", lambda s: s.replace(" ", "-"),
         lambda v: (v.replace("-", " "), v)),
    Form("item", "sku", r"[a-z]+(?:[ _][a-z]+)*?", lambda s: s.replace(" ", "_"), lambda v: (v.replace("_", " "), v)),
)}


def form_of(name: str, type_: str) -> Form | None:
    """The form ``name`` of values of type ``type_`` (``verbatim`` for any qx type), or None."""
    if name == "verbatim":
        if type_ not in TYPES:
            return None
        return Form("verbatim", type_, TYPES[type_][0].pattern, lambda s: s, lambda v: (v,))
    form = FORMS.get(name)
    return form if form is not None and form.type == type_ else None


def forms_of(type_: str) -> list[Form]:
    """Every form of type ``type_``, ``verbatim`` last (none for a type qx does not have): a value
    that two forms read in the same span is read by the one that reads more ways of writing."""
    verbatim = form_of("verbatim", type_)
    return [f for f in FORMS.values() if f.type == type_] + ([verbatim] if verbatim else [])


def _alone(text: str, start: int, end: int) -> bool:
    """The span is not part of a longer word, number or value (``7`` of ``$17``, ``12`` of ``$12.50``)."""
    before = text[start - 1] if start > 0 else " "
    after, next_ = (text[end] if end < len(text) else " "), (text[end + 1] if end + 1 < len(text) else " ")
    if before.isalnum() or before in "_$@+-:.":
        return False
    return not (after.isalnum() or after in "_@" or (after in ".:-" and next_.isalnum()))


def find_spans(form: Form, value: str, text: str) -> list[tuple[int, int]]:
    """Where ``text`` writes ``value`` in ``form``: spans, leftmost first.

    Example:
        >>> find_spans(FORMS["dollars"], "1200", "Pay Anna $12 and $12.50, then $12.")
        [(9, 12), (30, 33)]
    """
    whole = re.compile(f"(?:{form.pattern})")
    spans = set()
    for surface in form.surfaces(value):
        for m in re.finditer(re.escape(surface), text, re.IGNORECASE):
            span = m.group()
            if _alone(text, m.start(), m.end()) and whole.fullmatch(span) and form.normalise(span) == value:
                spans.add((m.start(), m.end()))
    return sorted(spans)


def result_values(result: str | None) -> dict[str, str]:
    """The ``key=value`` pairs of a tool result (``ok cart.add sku=eggs qty=3 total=96``)."""
    return dict(re.findall(r"(?<!\S)([a-z_]+)=(\S+)", result or ""))


def calls_of(episode: Episode) -> list[tuple[Call, str | None]]:
    """The episode's calls in order, each with its result (None when the step recorded none)."""
    out: list[tuple[Call, str | None]] = []
    for step in episode.steps:
        if step.call is None:
            continue
        calls = step.call.split("\n")
        results = step.result.split("\n") if step.result is not None else []
        for k, text in enumerate(calls):
            parsed = parse_calls(text)
            if len(parsed) != 1:
                raise AbstractionError(f"step call {text!r} is not one qx call")
            out.append((parsed[0], results[k] if k < len(results) and len(results) == len(calls) else None))
    return out


def abstract(episode: Episode, episode_id: int, *, api: Mapping[str, Mapping[str, str]] = SCHEMA) -> Workflow:
    """The workflow of a successful episode (see the module doc), with provenance ``(episode_id,)``
    and the episode's generation.

    Raises:
        AbstractionError: not a success, no calls, a call the schema ``api`` refuses, a value
            found neither in the text nor in an earlier result, or a workflow that does not give
            back the episode's calls on its own task.
    """
    task = episode.task
    if not episode.verdict.success:
        raise AbstractionError(f"episode {episode_id} (task {task.id!r}) is not a success")
    pairs = calls_of(episode)
    if not pairs:
        raise AbstractionError(f"episode {episode_id} (task {task.id!r}) makes no call")
    text = task.text
    claims: dict[tuple[int, int], tuple[str, str]] = {}  # span -> (type, form)
    refs: list[list[tuple[str, _Where]]] = []
    for i, (call, _) in enumerate(pairs):
        problems = validate(call, api)
        if problems:
            raise AbstractionError(f"episode {episode_id}: call {i} {call.canonical()}: {'; '.join(problems)}")
        args: list[tuple[str, _Where]] = []
        for key, value in call.args:
            type_ = api[call.tool][key]
            ref = _in_text(text, type_, value, claims) or _in_results(pairs[:i], value, type_)
            if ref is None:
                raise AbstractionError(f"episode {episode_id} (task {task.id!r}): {call.tool} {key}={value!r} is "
                                       "found neither in the task text nor in an earlier call's result")
            args.append((key, ref))
        refs.append(args)
    spans = sorted(claims)
    names = {_Where("text", *span): f"s{k}" for k, span in enumerate(spans)}
    results = sorted({ref for args in refs for _, ref in args if ref.source == "result"})
    names.update({ref: f"s{len(spans) + k}" for k, ref in enumerate(results)})
    slots = [Slot(names[_Where("text", *span)], claims[span][0], "text", form=claims[span][1]) for span in spans]
    slots += [Slot(names[ref], ref.type, "result", call=ref.at, key=ref.key) for ref in results]
    cuts = [0] + [x for span in spans for x in span] + [len(text)]
    wf = Workflow(
        tuple(text[cuts[k]:cuts[k + 1]] for k in range(0, len(cuts), 2)),
        tuple(slots),
        tuple(CallTemplate(call.tool, tuple(Arg(key, slot=names[ref]) for key, ref in args))
              for (call, _), args in zip(pairs, refs, strict=True)),
        family=task.family, episodes=(episode_id,), generation=episode.generation,
    )
    try:
        values = bind(wf, text).values
        again = [render(wf, i, values, [r or "" for _, r in pairs[:i]]).canonical() for i in range(len(pairs))]
    except BindError as err:
        raise AbstractionError(f"episode {episode_id} (task {task.id!r}): its workflow does not bind to its own "
                               f"task ({err})") from None
    if again != [c.canonical() for c, _ in pairs]:
        raise AbstractionError(f"episode {episode_id} (task {task.id!r}): its workflow gives {again} on its own "
                               "task, not the episode's calls (an ambiguous text)")
    return wf


@dataclass(frozen=True, order=True)
class _Where:
    """Where a value was found: a text span ``[at, end)``, or call ``at``'s result under ``key``
    (read as ``type``)."""

    source: str
    at: int
    end: int = 0
    key: str = ""
    type: str = ""


def _in_text(text: str, type_: str, value: str, claims: dict[tuple[int, int], tuple[str, str]]) -> _Where | None:
    """A text slot for ``value``, recorded in ``claims``: a span overlapping no claim (so a value
    the text writes twice, for two calls, is two slots), else a span already claimed by the same
    type and form (one value written once, used twice); None if the text does not write it."""
    for form in forms_of(type_):
        spans = find_spans(form, value, text)
        free = [s for s in spans if all(s[1] <= a or b <= s[0] for a, b in claims)]
        shared = [s for s in spans if claims.get(s) == (type_, form.name)]
        if free:
            claims[free[0]] = (type_, form.name)
            return _Where("text", *free[0])
        if shared:
            return _Where("text", *shared[0])
    return None


def _in_results(pairs: Sequence[tuple[Call, str | None]], value: str, type_: str) -> _Where | None:
    """A result slot: the latest earlier call whose result produced ``value`` under a key that the
    call did not pass itself (``total``, not an echoed ``qty``)."""
    for j in range(len(pairs) - 1, -1, -1):
        call, result = pairs[j]
        for key, got in result_values(result).items():
            if got == value and key not in call.arg_dict:
                return _Where("result", j, key=key, type=type_)
    return None


@dataclass(frozen=True)
class Binding:
    """A workflow bound to a task's text: each text slot's span and its value (normalised)."""

    spans: Mapping[str, str]
    values: Mapping[str, str]


def skeleton(wf: Workflow) -> re.Pattern[str]:
    """The pattern's pieces with free holes: a text it matches is a candidate for the workflow."""
    return re.compile("(.+?)".join(re.escape(p) for p in wf.pattern), re.DOTALL)


def bind(wf: Workflow, text: str) -> Binding:
    """Each text slot's span in ``text`` and its value (see the module doc).

    Raises:
        BindError: ``text`` does not match the pattern, or a hole's span is not in its slot's form
            (named), or a slot's form is not one of its type.
    """
    text_slots = [s for s in wf.slots if s.source == "text"]
    forms = []
    for s in text_slots:
        form = form_of(s.form, s.type)
        if form is None:
            raise BindError(f"slot {s.name}: {s.form!r} is not a form of type {s.type!r}")
        forms.append(form)
    if len(wf.pattern) != len(text_slots) + 1:
        raise BindError(f"the pattern has {len(wf.pattern)} pieces for {len(text_slots)} text slots")
    holes = [f"((?:{f.pattern}))" for f in forms] + [""]
    typed = "".join(re.escape(p) + hole for p, hole in zip(wf.pattern, holes, strict=True))
    m = re.fullmatch(typed, text, re.DOTALL)
    if m is None:
        loose = skeleton(wf).fullmatch(text)
        if loose is None:
            raise BindError("the task text does not match the workflow's pattern")
        for s, f, span in zip(text_slots, forms, loose.groups(), strict=True):
            if not re.fullmatch(f"(?:{f.pattern})", span):
                raise BindError(f"slot {s.name}: {span!r} in the task is not written as {f.name} {s.type}")
        raise BindError("the task text matches the pattern's pieces, but not with every hole in its form")
    spans = dict(zip((s.name for s in text_slots), m.groups(), strict=True))
    return Binding(spans, {s.name: f.normalise(spans[s.name]) for s, f in zip(text_slots, forms, strict=True)})


def render(wf: Workflow, i: int, values: Mapping[str, str], results: Sequence[str]) -> Call:
    """Call ``i`` of ``wf`` written with the text slots' ``values`` and the results of the calls
    before it (``results[j]``: call ``j``'s result).

    Raises:
        BindError: a slot with no value, or a result slot whose call's result lacks its key.
    """
    slots = {s.name: s for s in wf.slots}
    args = []
    for a in wf.calls[i].args:
        if a.value is not None:
            args.append((a.key, a.value))
            continue
        slot = slots.get(str(a.slot))
        if slot is None:
            raise BindError(f"call {i}: {a.key} names no slot ({a.slot!r})")
        if slot.source == "result":
            got = result_values(results[slot.call] if slot.call < len(results) else None).get(slot.key)
            if got is None:
                raise BindError(f"call {i}: {a.key} needs {slot.key}= from call {slot.call}'s result, which has none")
            args.append((a.key, got))
        elif slot.name in values:
            args.append((a.key, values[slot.name]))
        else:
            raise BindError(f"call {i}: {a.key}: slot {slot.name} has no value")
    return Call(wf.calls[i].tool, tuple(args))
