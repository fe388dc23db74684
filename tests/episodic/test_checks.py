"""Injected bad experiences: every one is refused before replay, each with its reason, and counted."""

from __future__ import annotations

import dataclasses
from collections import Counter

import pytest

from replaybank.episodic import EpisodeStore, Task
from replaybank.episodic.checks import CHECKS, Refusal, check_workflow
from replaybank.episodic.env import QxEnvironment
from replaybank.episodic.experience import Arg, CallTemplate, Slot, StoredWorkflow, Workflow
from replaybank.episodic.qx import SCHEMA
from replaybank.episodic.replay import choose, run
from replaybank.episodic.turns import demonstrate
from replaybank.episodic.workflow import abstract

ENV = QxEnvironment()
OLD = Task("old", "Add 3 eggs to my shopping list. Then send Anna the total.", "cart.add>purse.send", 4,
           ("<<qx cart.add; sku=eggs; qty=3>>", "<<qx purse.send; to=@anna; cents=96>>"))
NEW = Task("new", "Add 2 olive oil to my shopping list. Then send Kemi the total.", "cart.add>purse.send", 4,
           ("<<qx cart.add; sku=olive_oil; qty=2>>", "<<qx purse.send; to=@kemi; cents=2198>>"))
GOOD = abstract(demonstrate(ENV, OLD), 1)


def with_call(wf: Workflow, i: int, call: CallTemplate, slots: tuple[Slot, ...] | None = None) -> Workflow:
    calls = list(wf.calls)
    calls[i] = call
    return dataclasses.replace(wf, calls=tuple(calls), slots=wf.slots if slots is None else slots)


def bad_experiences() -> dict[str, tuple[Workflow, dict, str]]:
    """name -> (workflow, API, the reason it must be refused for)."""
    pay = GOOD.calls[1]
    total = next(s for s in GOOD.slots if s.source == "result")
    no_purse = {t: a for t, a in SCHEMA.items() if t != "purse.send"}
    return {
        # the payment made with another tool of the API: its arguments are not that tool's
        "wrong tool": (with_call(GOOD, 1, CallTemplate("timer.arm", pay.args)), SCHEMA, "bad_type"),
        # the API no longer has the tool the workflow calls
        "removed tool": (GOOD, no_purse, "unknown_tool"),
        # the amount written as the value of the task it was drawn from, not from the result
        "copied value": (with_call(GOOD, 1, CallTemplate("purse.send", (pay.args[0], Arg("cents", value="96"))),
                                   tuple(s for s in GOOD.slots if s is not total)), SCHEMA, "unbound"),
        # the payment reads the total of its own result: not an earlier call
        "malformed": (dataclasses.replace(GOOD, slots=tuple(dataclasses.replace(s, call=1) if s is total else s
                                                            for s in GOOD.slots)), SCHEMA, "malformed"),
        # the total (a result slot) typed as seconds, filling an amount in cents
        "wrong type": (dataclasses.replace(GOOD, slots=tuple(dataclasses.replace(s, type="seconds")
                                                             if s is total else s for s in GOOD.slots)),
                       SCHEMA, "bad_type"),
    }


@pytest.mark.parametrize("name", list(bad_experiences()))
def test_each_injected_bad_experience_is_refused_with_its_reason(name):
    wf, api, reason = bad_experiences()[name]
    got = check_workflow(wf, NEW.text, api)
    assert isinstance(got, Refusal), f"{name} was not refused"
    assert got.reason == reason, got
    assert got.check == {"malformed": "well_formed", "unknown_tool": "in_api", "unbound": "bound",
                         "bad_type": "typed"}[reason]


def test_the_good_workflow_passes_every_check():
    assert all(check(GOOD, NEW.text, SCHEMA) is None for check in CHECKS)
    assert dict(check_workflow(GOOD, NEW.text).values) == {"s0": "2", "s1": "olive_oil", "s2": "@kemi"}


def test_all_bad_experiences_refused_and_counted_by_reason_then_the_good_one_replays(tmp_path):
    bad = bad_experiences()
    stored = [StoredWorkflow(k + 1, dataclasses.replace(wf, episodes=(1, 2, 3)))  # more support: tried first
              for k, (wf, api, _) in enumerate(bad.values()) if api is SCHEMA]
    good = StoredWorkflow(99, GOOD)
    chosen, refusals = choose([*stored, good], NEW.text)
    assert chosen is not None and chosen.id == 99
    assert Counter(r.reason for r in refusals) == Counter(r for _, api, r in bad.values() if api is SCHEMA)
    steps = run(ENV, NEW, chosen.workflow, chosen.binding)
    assert ENV.check(NEW, "\n".join(s.output for s in steps)).success
    # without the good one: 100% refused, nothing chosen
    chosen, refusals = choose(stored, NEW.text)
    assert chosen is None and len(refusals) == len(stored)
    # under an API without purse.send even the good one is refused
    chosen, refusals = choose([good], NEW.text, bad["removed tool"][1])
    assert chosen is None and [r.reason for r in refusals] == ["unknown_tool"]


def test_stored_bad_experiences_are_refused_after_reading_back(tmp_path):
    kept = {name: (wf, reason) for name, (wf, api, reason) in bad_experiences().items()
            if api is SCHEMA and reason != "malformed"}  # the store refuses to record a malformed one at all
    with EpisodeStore(tmp_path / "ep.db") as s:
        e = s.add(demonstrate(ENV, OLD))
        for wf, _ in kept.values():
            s.add_workflow(dataclasses.replace(wf, episodes=(e,)))
        stored = s.workflows()
    chosen, refusals = choose(stored, NEW.text)
    assert chosen is None
    assert [r.reason for r in refusals] == [reason for _, reason in kept.values()]


def test_a_constant_the_new_task_states_is_not_refused():
    fixed = with_call(GOOD, 1, CallTemplate("purse.send", (Arg("to", value="@kemi"), GOOD.calls[1].args[1])),
                      tuple(s for s in GOOD.slots if s.name != "s2"))
    fixed = dataclasses.replace(fixed, pattern=(fixed.pattern[0], fixed.pattern[1],
                                                fixed.pattern[2] + "Kemi" + fixed.pattern[3]))
    assert not isinstance(check_workflow(fixed, NEW.text), Refusal)
    assert check_workflow(fixed, NEW.text.replace("Kemi", "Kem")).reason == "unbound"  # no longer a candidate text


def test_a_result_value_of_the_wrong_type_is_refused_when_its_call_is_rendered():
    class Odd(QxEnvironment):
        def execute(self, task, output, steps=()):
            call, result = super().execute(task, output, steps)
            return call, result.replace("total=", "total=x")

    steps = run(Odd(), NEW, GOOD, check_workflow(GOOD, NEW.text))
    assert isinstance(steps, Refusal) and steps.reason == "bad_type" and "cents='x2198'" in steps.detail
