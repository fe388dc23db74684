"""The checks a stored workflow must pass before it is replayed on a task, each with its refusal reason.

A workflow is a *candidate* for a task when the task text matches its pattern's pieces
(:func:`replaybank.episodic.workflow.skeleton`); a candidate is replayed only if every check of
:data:`CHECKS` passes, in this order (each may assume the ones before it passed):

=================  ================  ===============================================================
check              refusal reason    passes when
=================  ================  ===============================================================
``well_formed``    ``malformed``     :func:`~.experience.workflow_problems` finds nothing, and every
                                     text slot's form is a form of its type
``in_api``         ``unknown_tool``  every tool it calls is in the API description passed in (a tool
                                     removed from the API is refused)
``bound``          ``unbound``       every text slot binds to a span of the new task in its form, and
                                     every constant argument is written in the new task (a value
                                     copied from another task is not)
``typed``          ``bad_type``      every slot's type is the type of each argument it fills, and
                                     the calls with the bound values pass ``qx.validate`` under the
                                     API (a result slot's value is validated when its call is
                                     rendered, before it runs: :mod:`.replay`)
=================  ================  ===============================================================

Example:
    >>> from replaybank.episodic.experience import Arg, CallTemplate, Slot, Workflow
    >>> wf = Workflow(("Add ", " to the cart, qty ", "."),
    ...               (Slot("s0", "sku", "text", form="verbatim"), Slot("s1", "int", "text", form="verbatim")),
    ...               (CallTemplate("cart.add", (Arg("sku", slot="s0"), Arg("qty", slot="s1"))),))
    >>> check_workflow(wf, "Add eggs to the cart, qty 3.").values
    {'s0': 'eggs', 's1': '3'}
    >>> check_workflow(wf, "Add eggs to the cart, qty 3.", api={"timer.arm": {"dur": "seconds"}})
    Refusal(check='in_api', reason='unknown_tool', detail="call 0 calls 'cart.add', which the API does not have")
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

from .experience import Workflow, workflow_problems
from .qx import SCHEMA, TYPES, Call, validate
from .workflow import BindError, Binding, bind, find_spans, form_of, forms_of

Api = Mapping[str, Mapping[str, str]]
Reason = Literal["malformed", "unknown_tool", "unbound", "bad_type"]
#: every refusal reason, in the order of the checks that give them
REASONS: tuple[Reason, ...] = ("malformed", "unknown_tool", "unbound", "bad_type")


@dataclass(frozen=True)
class Refusal:
    """Why a workflow is not replayed: the check that failed, its reason, and what it found."""

    check: str
    reason: Reason
    detail: str


Check = Callable[[Workflow, str, Api], "Refusal | None"]


def well_formed(wf: Workflow, text: str, api: Api) -> Refusal | None:
    """Refused ``malformed``: a structural problem, or a text slot whose form is not of its type."""
    problems = workflow_problems(wf)
    problems += [f"slot {s.name}: {s.form!r} is not a form of type {s.type!r}"
                 for s in wf.slots if s.source == "text" and s.form and form_of(s.form, s.type) is None]
    return Refusal("well_formed", "malformed", "; ".join(problems)) if problems else None


def in_api(wf: Workflow, text: str, api: Api) -> Refusal | None:
    """Refused ``unknown_tool``: a call to a tool the API description does not have."""
    for i, call in enumerate(wf.calls):
        if call.tool not in api:
            return Refusal("in_api", "unknown_tool", f"call {i} calls {call.tool!r}, which the API does not have")
    return None


def bound(wf: Workflow, text: str, api: Api) -> Refusal | None:
    """Refused ``unbound``: a hole not written in its slot's form, or a constant not in the task."""
    try:
        bind(wf, text)
    except BindError as err:
        return Refusal("bound", "unbound", str(err))
    for i, call in enumerate(wf.calls):
        for a in call.args:
            if a.value is None:
                continue
            type_ = api.get(call.tool, {}).get(a.key, "")
            forms = forms_of(type_)
            stated = any(find_spans(f, a.value, text) for f in forms) if forms else a.value in text
            if not stated:
                return Refusal("bound", "unbound", f"call {i} ({call.tool}): {a.key}={a.value!r} is a constant "
                                                   "the task does not state (copied from another task?)")
    return None


def typed(wf: Workflow, text: str, api: Api) -> Refusal | None:
    """Refused ``bad_type``: a slot of another type than an argument it fills, or a call that
    ``qx.validate`` refuses with the bound values (result-slot arguments left to replay time)."""
    slots = {s.name: s for s in wf.slots}
    values = bind(wf, text).values
    for i, call in enumerate(wf.calls):
        schema = api[call.tool]
        later: set[str] = set()
        args = []
        for a in call.args:
            slot = slots.get(str(a.slot)) if a.value is None else None
            if slot is not None and a.key in schema and slot.type != schema[a.key]:
                return Refusal("typed", "bad_type", f"call {i} ({call.tool}): {a.key} is {schema[a.key]}, "
                                                    f"its slot {slot.name} is {slot.type}")
            if slot is not None and slot.type not in TYPES:
                return Refusal("typed", "bad_type", f"slot {slot.name}: {slot.type!r} is not a qx type")
            if slot is not None and slot.source == "result":
                later.add(a.key)
                continue
            args.append((a.key, a.value if a.value is not None else values[str(a.slot)]))
        now = {call.tool: {k: t for k, t in schema.items() if k not in later}}
        problems = validate(Call(call.tool, tuple(args)), now)
        if problems:
            return Refusal("typed", "bad_type", f"call {i}: {'; '.join(problems)}")
    return None


#: the checks, in the order they run
CHECKS: tuple[Check, ...] = (well_formed, in_api, bound, typed)


def check_workflow(wf: Workflow, text: str, api: Api = SCHEMA) -> Binding | Refusal:
    """Run :data:`CHECKS` on ``wf`` for a task with ``text``: the binding if all pass, else the
    first refusal."""
    for check in CHECKS:
        refusal = check(wf, text, api)
        if refusal is not None:
            return refusal
    return bind(wf, text)
