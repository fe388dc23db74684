"""Redaction of private values: every occurrence replaced by a typed marker, ``<private:FIELD>``.

A :class:`Redactor` holds the private values of named fields (``{"account": ["DE89 3704"]}``)
and rewrites text, and whole episodes, so that none of those values is left in them. Matching
ignores case (a payee ``Goran`` is also redacted from the handle ``@goran``) and has no word
boundaries (``Goran`` in ``Goranson`` is redacted too): a privacy guarantee errs on the side of
redacting. Every value is replaced in one pass, the longest first, so a marker is never itself
rewritten, and the result is checked afterwards: no value may be left in it.

Refused up front, with :class:`RedactionError`: a field name that is not a lower-case identifier
(it is written into the marker), an empty or blank value (it would match everywhere), and a value
that occurs inside a marker (``account`` as the value of field ``account`` would come back with
every marker written).

Example:
    >>> r = Redactor.of({"payee": ["Goran"], "account": ["DE89 3704"]})
    >>> r.text("Send Goran the total from DE89 3704: <<qx purse.send; to=@goran; cents=996>>")
    'Send <private:payee> the total from <private:account>: <<qx purse.send; to=@<private:payee>; cents=996>>'
    >>> r.found("nothing here"), r.fields
    ((), ('account', 'payee'))
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from replaybank.errors import ReplayBankError

from .episode import Episode, Step, Task, Verdict

__all__ = ["FIELD_NAME", "Redactor", "RedactionError", "marker"]

#: what a field name may be (it is written into the marker)
FIELD_NAME = re.compile(r"[a-z][a-z0-9_]*")


class RedactionError(ReplayBankError):
    """A private field or value that cannot be redacted safely, or text still holding a value."""


def marker(field: str) -> str:
    """The text that stands in for a value of ``field``: ``<private:FIELD>``."""
    return f"<private:{field}>"


@dataclass(frozen=True)
class Redactor:
    """Replaces private values by markers; build it with :meth:`of`.

    Args:
        secrets: ``(value, field)`` pairs, longest value first; a value listed under two fields
            takes the marker of the first field in alphabetical order.
    """

    secrets: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(cls, private: Mapping[str, Iterable[str]]) -> Redactor:
        """The redactor of ``{field: values}``.

        Raises:
            RedactionError: a field name that is not like ``account_id``, an empty or blank
                value, or a value found inside a marker (both named by field; values are never
                printed).
        """
        by_value: dict[str, str] = {}
        for name in sorted(private):
            if not isinstance(name, str) or not FIELD_NAME.fullmatch(name):
                raise RedactionError(f"private field {name!r}: a field name is lower-case letters, digits and _, "
                                     "starting with a letter (it is written into the marker <private:NAME>)")
            for value in private[name]:
                if not isinstance(value, str) or not value.strip():
                    raise RedactionError(f"private field {name!r}: a value that is not a non-blank string cannot be "
                                         "redacted (it would match everywhere)")
                by_value.setdefault(value, name)
        markers = [marker(n) for n in private]
        for value, name in by_value.items():
            if any(re.search(re.escape(value), m, re.IGNORECASE) for m in markers):
                raise RedactionError(f"private field {name!r}: a value of it occurs inside a marker such as "
                                     f"{marker(name)}, so redaction would write it back; rename the field")
        ordered = sorted(by_value.items(), key=lambda kv: (-len(kv[0]), kv[0]))
        return cls(tuple(ordered))

    @property
    def fields(self) -> tuple[str, ...]:
        """The private fields, sorted."""
        return tuple(sorted({name for _, name in self.secrets}))

    def __bool__(self) -> bool:
        return bool(self.secrets)

    @functools.cached_property
    def _pattern(self) -> re.Pattern[str]:
        """Every value at once, longest first (compiled once per redactor)."""
        return re.compile("|".join(re.escape(v) for v, _ in self.secrets), re.IGNORECASE)

    def _field_of(self, matched: str) -> str:
        return next(n for v, n in self.secrets if re.fullmatch(re.escape(v), matched, re.IGNORECASE))

    def found(self, text: str) -> tuple[str, ...]:
        """The fields whose values occur in ``text`` (ignoring case, as the redaction does), sorted."""
        return tuple(sorted({n for v, n in self.secrets if re.search(re.escape(v), text, re.IGNORECASE)}))

    def text(self, text: str) -> str:
        """``text`` with every private value replaced by its field's marker.

        Raises:
            RedactionError: a value is still in the result (e.g. made up of the text around a
                replaced value); the message names the field, never the value.
        """
        if not self.secrets:
            return text
        out = self._pattern.sub(lambda m: marker(self._field_of(m.group(0))), text)
        left = self.found(out)
        if left:
            raise RedactionError(f"a value of private field(s) {', '.join(left)} is still in the text after "
                                 "redaction (it overlaps the text around another value)")
        return out

    def optional(self, text: str | None) -> str | None:
        return None if text is None else self.text(text)

    def episode(self, ep: Episode) -> Episode:
        """``ep`` with every text in it redacted: task id, text, family and expected calls, each
        step's prompt, output, call and result, the verdict's detail and credit keys, and the
        context messages. Numbers, timestamps and ids are kept."""
        if not self.secrets:
            return ep
        t, v = ep.task, ep.verdict
        task = Task(self.text(t.id), self.text(t.text), self.text(t.family), t.difficulty,
                    tuple(self.text(x) for x in t.expected))
        steps = tuple(Step(self.text(s.prompt), self.text(s.output), self.optional(s.call), self.optional(s.result))
                      for s in ep.steps)
        verdict = Verdict(v.success, v.reward, {self.text(k): c for k, c in v.credit.items()}, self.text(v.detail))
        context = tuple({self.text(k): self.text(c) for k, c in m.items()} for m in ep.context)
        return dataclasses.replace(ep, task=task, steps=steps, verdict=verdict, context=context)
