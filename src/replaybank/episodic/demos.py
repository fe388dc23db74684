"""A person's demonstrations from a JSONL file: read, checked line by line, redacted, stored.

One JSON object a line (format in ``docs/episodic.md#importing-demonstrations``)::

    {"id": "pay-1", "task": "Buy 4 paper towels and send Goran the total.", "family": "cart.add>purse.send",
     "turns": [{"role": "user", "content": "Buy 4 paper towels and send Goran the total."},
               {"role": "assistant", "content": "<<qx cart.add; sku=paper_towels; qty=4>>"},
               {"role": "tool", "content": "ok cart.add sku=paper_towels qty=4 total=996"},
               {"role": "assistant", "content": "<<qx purse.send; to=@goran; cents=996>>"}],
     "calls": ["<<qx cart.add; sku=paper_towels; qty=4>>", "<<qx purse.send; to=@goran; cents=996>>"],
     "fields": {"payee": "Goran"}}

``task``, ``turns`` and ``calls`` are required. The turns are one request (``user``), then
``assistant`` turns, each call-making one followed by the ``tool`` turn that shows its result.
Every call is checked against the qx tool schema (:func:`~replaybank.episodic.qx.validate`) and
executed on the qx runtime (:func:`~replaybank.episodic.qx.execute`): a tool turn must be exactly
what the runtime returns, the calls made in the turns must be ``calls``, in order, and the
checker must judge the whole a success. ``fields`` names values the task uses; the fields named
private are redacted (:mod:`.redact`) from everything stored.

:func:`read_demonstrations` reads and checks the whole file (nothing is stored);
:func:`to_episodes` redacts; :func:`import_demonstrations` does both, then stores every line in
one transaction, so a bad file stores nothing and what was stored before is untouched.

A call that redaction makes invalid (a private payee inside ``to=@goran``) cannot be replayed:
with ``on_redacted_call="keep"`` (the default) the demonstration is stored with the markers and a
failed verdict (``success=False``, reward 0, detail ``not replayable: ...``), so retrieval and the
training rows, which take successes only, never use it; ``"refuse"`` refuses the file instead.

Example:
    >>> import json, os, tempfile
    >>> folder = tempfile.mkdtemp()
    >>> line = {"task": "Timer of 300s for tea, account 4417-22.", "fields": {"account": "4417-22"},
    ...         "turns": [{"role": "user", "content": "Timer of 300s for tea, account 4417-22."},
    ...                   {"role": "assistant", "content": "<<qx timer.arm; dur=300s; tag=tea>>"}],
    ...         "calls": ["<<qx timer.arm; dur=300s; tag=tea>>"]}
    >>> with open(os.path.join(folder, "demos.jsonl"), "w") as out:
    ...     _ = out.write(json.dumps(line) + "\\n")
    >>> with EpisodeStore(os.path.join(folder, "ep.db")) as store:
    ...     got = import_demonstrations(store, os.path.join(folder, "demos.jsonl"), ["account"])
    ...     ep = store.get(got.ids[0]).episode
    >>> ep.source, ep.verdict.success, ep.task.text, ep.steps[0].result
    ('demo', True, 'Timer of 300s for tea, account <private:account>.', 'ok timer.arm dur=300s tag=tea')
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from replaybank.errors import ReplayBankError
from replaybank.files import read_regular
from replaybank.jsonl import strict_loads

from . import fields as f
from .env import task_id
from .episode import Episode, Step, Task, Verdict
from .qx import make_step, parse_calls, score, validate
from .redact import FIELD_NAME, RedactionError, Redactor
from .store import EpisodeStore

__all__ = [
    "KEYS", "MAX_FILE_BYTES", "MAX_LINE_BYTES", "DemoFile", "DemoFileError", "Demonstration", "ImportResult",
    "OnRedactedCall", "import_demonstrations", "read_demonstrations", "to_episodes",
]

#: the keys a line may have
KEYS = ("id", "task", "family", "difficulty", "turns", "calls", "fields")
ROLES = ("user", "assistant", "tool")
#: a longer line is refused (before it is decoded or parsed)
MAX_LINE_BYTES = 256 * 2**10
#: a larger file is refused
MAX_FILE_BYTES = 64 * 2**20
OnRedactedCall = Literal["keep", "refuse"]


class DemoFileError(ReplayBankError):
    """A demonstration file that cannot be imported; the message names ``file:line`` and the field."""


@dataclass(frozen=True)
class Demonstration:
    """One line of a demonstration file, checked, before redaction.

    Args:
        line: its line number (from 1).
        id: the ``id`` given, or None (then the id is made from the redacted task text).
        task: the request (``task``).
        family: ``family``, or the tools of the calls joined by ``+``.
        difficulty: ``difficulty``, or the number of calls.
        steps: one per assistant turn: the prompt it answered, its output, its calls (canonical)
            and the runtime's result.
        calls: the calls, canonical, in order.
        fields: ``fields``, name -> value.
        credit: the checker's argument credit of the turns (all 1: a line the checker does not
            judge a success is refused).
    """

    line: int
    id: str | None
    task: str
    family: str
    difficulty: int
    steps: tuple[Step, ...]
    calls: tuple[str, ...]
    fields: Mapping[str, str]
    credit: Mapping[str, float]


@dataclass(frozen=True)
class DemoFile:
    """A demonstration file, every line checked."""

    path: Path
    demonstrations: tuple[Demonstration, ...]

    @property
    def field_names(self) -> tuple[str, ...]:
        """Every field name a line declares (the file's ``fields`` schema), sorted."""
        return tuple(sorted({name for d in self.demonstrations for name in d.fields}))

    def redactor(self, private: Sequence[str]) -> Redactor:
        """The redactor of the ``private`` fields: each value any line gives them.

        Raises:
            DemoFileError: a private field that no line declares in ``fields`` (named, with the
                fields the file has), or a value that cannot be redacted (:class:`RedactionError`).
        """
        names = self.field_names
        for name in private:
            if name not in names:
                has = ", ".join(names) if names else "none"
                raise DemoFileError(f"{self.path}: private field {name!r} is not a field of the file "
                                    f"(the 'fields' of its lines: {has})")
        try:
            return Redactor.of({n: [d.fields[n] for d in self.demonstrations if n in d.fields] for n in private})
        except RedactionError as err:
            raise DemoFileError(f"{self.path}: {err}") from None


@dataclass(frozen=True)
class ImportResult:
    """What :func:`import_demonstrations` stored.

    Args:
        path: the file.
        ids: the store id of each line's episode, in line order (an existing id when the same
            task and output was stored before: it gains an attempt).
        private: the fields redacted.
        not_replayable: the lines kept with a failed verdict because redaction made a call invalid.
    """

    path: Path
    ids: tuple[int, ...]
    private: tuple[str, ...]
    not_replayable: tuple[int, ...]


def read_demonstrations(path: str | Path) -> DemoFile:
    """Read and check every line of a demonstration file (format in the module doc).

    Raises:
        DemoFileError: the file is missing, a link, FIFO, device or folder, larger than
            :data:`MAX_FILE_BYTES`, or empty; a line longer than :data:`MAX_LINE_BYTES`, not
            UTF-8, not one JSON object (``NaN``, repeated keys and deep nesting refused), with an
            unknown or missing key, a value of the wrong type, turns out of order, a call that
            does not parse, fails the tool schema or does not match ``calls``, a tool turn that
            is not the runtime's result, or an id given twice. Each names ``file:line`` and the
            field (``turns[2].content``).
    """
    p = Path(path)
    data = read_regular(p, error=DemoFileError, follow_links=False, what="demonstration file",
                        max_bytes=MAX_FILE_BYTES)
    demos: list[Demonstration] = []
    seen: dict[str, int] = {}
    for number, raw in enumerate(data.split(b"\n"), start=1):
        where = f"{p}:{number}"
        if len(raw) > MAX_LINE_BYTES:
            raise DemoFileError(f"{where}: line of {len(raw):,} bytes, longer than {MAX_LINE_BYTES:,}; refused")
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise DemoFileError(f"{where}: not valid UTF-8 (byte 0x{raw[exc.start]:02x} at column {exc.start + 1}); "
                                "re-encode the file as UTF-8") from None
        if not line.strip():
            continue
        demo = _parse_line(_load(line, where), number, where)
        if demo.id is not None:
            if demo.id in seen:
                raise DemoFileError(f"{where}: id: {demo.id!r} is already the id of line {seen[demo.id]}")
            seen[demo.id] = number
        demos.append(demo)
    if not demos:
        raise DemoFileError(f"{p}: no demonstrations (the file is empty or blank)")
    return DemoFile(p, tuple(demos))


def to_episodes(
    demo_file: DemoFile, private: Sequence[str] = (), *, on_redacted_call: OnRedactedCall = "keep"
) -> tuple[list[Episode], tuple[int, ...]]:
    """The file's demonstrations as ``demo`` episodes (generation 0), the ``private`` fields
    redacted, and the lines that redaction made not replayable (see the module doc).

    Raises:
        DemoFileError: a private field the file does not declare, a value that cannot be
            redacted, two lines whose ids are one once redacted, or (with ``"refuse"``) a call
            that redaction makes invalid (naming the line, call and field).
    """
    if on_redacted_call not in ("keep", "refuse"):
        raise DemoFileError(f"on_redacted_call {on_redacted_call!r}: expected 'keep' or 'refuse'")
    redactor = demo_file.redactor(private)
    episodes: list[Episode] = []
    unusable: list[int] = []
    seen: dict[str, int] = {}
    for d in demo_file.demonstrations:
        where = f"{demo_file.path}:{d.line}"
        ep = redactor.episode(_episode(d))
        if d.id is None:  # made from the redacted text: a hash of a private value could be guessed back
            ep = dataclasses.replace(ep, task=dataclasses.replace(ep.task, id=task_id(ep.task.text, "demo")))
        elif ep.task.id in seen:
            raise DemoFileError(f"{where}: id: is the id of line {seen[ep.task.id]} once private values are redacted "
                                f"({ep.task.id!r}); give ids without private values")
        seen.setdefault(ep.task.id, d.line)
        broken = _broken_calls(ep)
        if broken:
            if on_redacted_call == "refuse":
                raise DemoFileError(f"{where}: calls: redacting private field(s) {', '.join(redactor.fields)} makes "
                                    f"{broken}; the call could not be replayed (keep it as a record with "
                                    "on_redacted_call='keep', or leave the field out of the private ones)")
            ep = dataclasses.replace(ep, verdict=Verdict(False, 0.0, {}, f"demonstration, not replayable: {broken}"))
            unusable.append(d.line)
        episodes.append(ep)
    return episodes, tuple(unusable)


def import_demonstrations(
    store: EpisodeStore, path: str | Path, private: Sequence[str] = (), *, on_redacted_call: OnRedactedCall = "keep"
) -> ImportResult:
    """Read, check and redact every line of ``path``, then store them all in one transaction.

    Args:
        store: an open :class:`~replaybank.episodic.store.EpisodeStore`.
        path: the JSONL file (format in the module doc).
        private: the fields (names in the lines' ``fields``) whose values are redacted.
        on_redacted_call: ``keep`` or ``refuse`` a demonstration whose call redaction makes
            invalid (module doc).

    Raises:
        DemoFileError: see :func:`read_demonstrations` and :func:`to_episodes`; nothing is stored.
        StoreError: the store is locked or read-only; nothing is stored.
    """
    demo_file = read_demonstrations(path)
    episodes, unusable = to_episodes(demo_file, private, on_redacted_call=on_redacted_call)
    ids = store.add_many(episodes)
    return ImportResult(demo_file.path, tuple(ids), tuple(sorted(set(private))), unusable)


# -- one line ----------------------------------------------------------------------------------


def _load(line: str, where: str) -> dict[str, Any]:
    try:
        obj = strict_loads(line)
    except json.JSONDecodeError as exc:
        raise DemoFileError(f"{where}: malformed JSON ({exc.msg} at column {exc.colno})") from None
    except ValueError as exc:
        raise DemoFileError(f"{where}: {exc}") from None
    except RecursionError:
        raise DemoFileError(f"{where}: nested too deeply to be a demonstration") from None
    if not isinstance(obj, dict):
        raise DemoFileError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    return obj


def _parse_line(obj: dict[str, Any], number: int, where: str) -> Demonstration:
    unknown = [k for k in obj if k not in KEYS]
    if unknown:
        raise DemoFileError(f"{where}: unknown field {unknown[0]!r}; a line has {', '.join(KEYS)}")
    for key in ("task", "turns", "calls"):
        if key not in obj:
            raise DemoFileError(f"{where}: missing field {key!r}")
    try:
        f.nesting(obj, where, limit=3)
        text = _nonblank(obj["task"], f"{where}: task")
        given_id = None if "id" not in obj else _nonblank(obj["id"], f"{where}: id")
        fields = {_field_name(k, f"{where}: fields"): _nonblank(v, f"{where}: fields[{k!r}]")
                  for k, v in f.record(obj.get("fields", {}), f"{where}: fields").items()}
        calls = [_nonblank(c, f"{where}: calls[{i}]") for i, c in enumerate(f.items(obj["calls"], f"{where}: calls"))]
        turns = [_turn(t, f"{where}: turns[{i}]") for i, t in enumerate(f.items(obj["turns"], f"{where}: turns"))]
        difficulty = f.integer(obj.get("difficulty", max(len(calls), 1)), f"{where}: difficulty", low=1, high=2**31)
        family = f.text(obj.get("family", ""), f"{where}: family")
    except ReplayBankError as err:
        raise DemoFileError(str(err)) from None
    canonical = _check_calls(calls, where)
    steps = _steps(turns, where)
    made = [c.canonical() for s in steps for c in parse_calls(s.output)]
    if made != canonical:
        k = next((i for i, (a, b) in enumerate(zip(made, canonical)) if a != b), min(len(made), len(canonical)))
        got = made[k] if k < len(made) else "no call"
        want = canonical[k] if k < len(canonical) else "no call"
        raise DemoFileError(f"{where}: calls: the turns make {len(made)} call(s), 'calls' lists {len(canonical)}; "
                            f"call {k} of the turns is {got}, calls[{k}] is {want}")
    verdict = score(canonical, "\n".join(s.output for s in steps))
    if not verdict.success:
        raise DemoFileError(f"{where}: turns: the checker does not judge the turns a success: {verdict.detail}")
    family = family or "+".join(parse_calls(c)[0].tool for c in canonical)
    return Demonstration(number, given_id, text, family, difficulty, tuple(steps), tuple(canonical), fields,
                         dict(verdict.credit))


def _nonblank(value: Any, where: str) -> str:
    value = f.text(value, where)
    if not value.strip():
        raise DemoFileError(f"{where}: empty; expected a non-blank string")
    return value


def _field_name(name: str, where: str) -> str:
    if not FIELD_NAME.fullmatch(name):
        raise DemoFileError(f"{where}: field name {name!r} is not lower-case letters, digits and _, starting with a letter")
    return name


def _turn(t: Any, where: str) -> tuple[str, str]:
    t = f.record(t, where)
    unknown = [k for k in t if k not in ("role", "content")]
    if unknown:
        raise DemoFileError(f"{where}: unknown field {unknown[0]!r}; a turn is {{\"role\", \"content\"}}")
    role = f.text(f.required(t, "role", where), f"{where}.role")
    if role not in ROLES:
        raise DemoFileError(f"{where}.role: {role!r} is not one of {', '.join(ROLES)}")
    return role, f.text(f.required(t, "content", where), f"{where}.content")


def _check_calls(calls: list[str], where: str) -> list[str]:
    if not calls:
        raise DemoFileError(f"{where}: calls: empty; a demonstration makes at least one qx call")
    out = []
    for i, text in enumerate(calls):
        parsed = parse_calls(text)
        if len(parsed) != 1:
            raise DemoFileError(f"{where}: calls[{i}]: {text!r} is {len(parsed)} qx calls; expected one <<qx tool.name; k=v; ...>>")
        problems = validate(parsed[0])
        if problems:
            raise DemoFileError(f"{where}: calls[{i}]: {parsed[0].canonical()} fails the tool schema: {'; '.join(problems)}")
        out.append(parsed[0].canonical())
    return out


def _steps(turns: list[tuple[str, str]], where: str) -> list[Step]:
    """One step per assistant turn; every call executed, each tool turn compared with the result."""
    if not turns or turns[0][0] != "user":
        raise DemoFileError(f"{where}: turns[0]: the turns start with the request, a 'user' turn")
    steps: list[Step] = []
    prompt, k = turns[0][1], 1
    while k < len(turns):
        role, output = turns[k]
        if role != "assistant":
            after = "the request" if k == 1 else "a tool result"
            raise DemoFileError(f"{where}: turns[{k}].role: {role!r} after {after}; expected 'assistant'"
                                + (" (a demonstration has one request)" if role == "user" else ""))
        for c in parse_calls(output):
            problems = validate(c)
            if problems:
                raise DemoFileError(f"{where}: turns[{k}].content: {c.canonical()} fails the tool schema: {'; '.join(problems)}")
        step = make_step(prompt, output)
        steps.append(step)
        if k + 1 == len(turns):
            break
        role, shown = turns[k + 1]
        if role != "tool":
            raise DemoFileError(f"{where}: turns[{k + 1}].role: {role!r} after an assistant turn; expected 'tool' "
                                "(the result of its call) or the end of the turns")
        if step.result is None:
            raise DemoFileError(f"{where}: turns[{k + 1}]: a tool turn after turns[{k}], which makes no call")
        if shown != step.result:
            raise DemoFileError(f"{where}: turns[{k + 1}].content: {shown!r} is not what the qx runtime returns for "
                                f"turns[{k}]'s call: {step.result!r}")
        prompt, k = shown, k + 2
    if not steps:
        raise DemoFileError(f"{where}: turns: no assistant turn; a demonstration answers its request")
    return steps


def _episode(d: Demonstration) -> Episode:
    task = Task(d.id or "", d.task, d.family, d.difficulty, d.calls)
    return Episode(task, d.steps, Verdict(True, 1.0, dict(d.credit), "demonstration"), source="demo")


def _broken_calls(ep: Episode) -> str:
    """Why the (redacted) episode's calls would not replay, or "" if they would."""
    for i, s in enumerate(ep.steps):
        calls = parse_calls(s.output)
        wanted = len(s.call.split("\n")) if s.call else 0  # make_step writes one canonical call a line
        for c in calls:
            problems = validate(c)
            if problems:
                return f"turn {i} call {c.canonical()} invalid ({'; '.join(problems)})"
        if len(calls) != wanted:
            return f"turn {i}: {len(calls)} call(s) parse from the redacted output, {wanted} were made"
    return ""
