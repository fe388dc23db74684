"""Workflows: a success abstracted over its values, bound to a new task, replayed through the environment."""

from __future__ import annotations

import pytest

from replaybank.episodic import Episode, Step, Task, Verdict
from replaybank.episodic.env import QxEnvironment
from replaybank.episodic.experience import StoredWorkflow, Workflow
from replaybank.episodic.qx import make_step
from replaybank.episodic.replay import choose, run
from replaybank.episodic.turns import demonstrate
from replaybank.episodic.workflow import (
    FORMS,
    AbstractionError,
    BindError,
    abstract,
    bind,
    find_spans,
    render,
)

ENV = QxEnvironment(levels=(1, 2, 3, 4))


def task(text: str, *calls: str, level: int = 2) -> Task:
    return Task(f"t-{abs(hash(text))}", text, "+".join(c.split(";")[0][5:] for c in calls), level, calls)


# (the episode's task, a new task of the same shape)
CASES = {
    1: (task("Add tea to the cart, qty 7.", "<<qx cart.add; sku=tea; qty=7>>", level=1),
        task("Add olive_oil to the cart, qty 12.", "<<qx cart.add; sku=olive_oil; qty=12>>", level=1)),
    2: (task("Set a timer for 5 minutes for the tea.", "<<qx timer.arm; dur=300s; tag=tea>>"),
        task("Set a timer for 2 hours for the pasta.", "<<qx timer.arm; dur=7200s; tag=pasta>>")),
    3: (task("Forecast for New York tomorrow, please. Also: Pay Anna $12.50 for dinner.",
             "<<qx sky.cast; at=NEW_YORK; day=+1>>", "<<qx purse.send; to=@anna; cents=1250>>", level=3),
        task("Forecast for Rio de Janeiro in 3 days, please. Also: Pay Bilal $7 for dinner.",
             "<<qx sky.cast; at=RIO_DE_JANEIRO; day=+3>>", "<<qx purse.send; to=@bilal; cents=700>>", level=3)),
    4: (task("Add 3 eggs to my shopping list. Then send Anna the total.",
             "<<qx cart.add; sku=eggs; qty=3>>", "<<qx purse.send; to=@anna; cents=96>>", level=4),
        task("Add 2 olive oil to my shopping list. Then send Kemi the total.",
             "<<qx cart.add; sku=olive_oil; qty=2>>", "<<qx purse.send; to=@kemi; cents=2198>>", level=4)),
}


@pytest.mark.parametrize("level", [1, 2, 3, 4])
def test_a_success_abstracts_to_a_workflow_that_solves_a_new_task_of_its_shape(level):
    old, new = CASES[level]
    ep = demonstrate(ENV, old)  # one turn per call, each with its result
    wf = abstract(ep, 5)
    assert wf.episodes == (5,) and wf.family == old.family
    # no value of the old task is left in the calls: every argument is a slot
    assert all(a.slot is not None and a.value is None for c in wf.calls for a in c.args)
    assert len(wf.pattern) == sum(s.source == "text" for s in wf.slots) + 1
    chosen, refusals = choose([StoredWorkflow(1, wf)], new.text)
    assert refusals == [] and chosen is not None
    steps = run(ENV, new, chosen.workflow, chosen.binding)
    assert not isinstance(steps, type(refusals))
    output = "\n".join(s.output for s in steps)
    assert output.splitlines() == list(new.expected)
    assert ENV.check(new, output).success
    assert [s.result.startswith("ok") for s in steps] == [True] * len(new.expected)


def test_the_level_4_chain_reads_the_total_from_the_first_result():
    wf = abstract(demonstrate(ENV, CASES[4][0]), 1)
    result_slots = [s for s in wf.slots if s.source == "result"]
    assert [(s.call, s.key, s.type) for s in result_slots] == [(0, "total", "int")]
    values = bind(wf, CASES[4][1].text).values
    assert render(wf, 1, values, ["ok cart.add sku=olive_oil qty=2 total=2198"]).canonical() == \
        "<<qx purse.send; to=@kemi; cents=2198>>"
    with pytest.raises(BindError, match="needs total= from call 0's result"):
        render(wf, 1, values, ["error: refused"])


def test_typed_placeholders_are_bound_to_their_spans_with_the_normaliser():
    wf = abstract(demonstrate(ENV, CASES[3][0]), 1)
    assert [(s.type, s.form) for s in wf.slots] == [("city", "city"), ("offset", "day"), ("handle", "name"),
                                                    ("int", "dollars")]
    assert wf.pattern == ("Forecast for ", " ", ", please. Also: Pay ", " ", " for dinner.")
    b = bind(wf, CASES[3][1].text)
    assert dict(b.spans) == {"s0": "Rio de Janeiro", "s1": "in 3 days", "s2": "Bilal", "s3": "$7"}
    assert dict(b.values) == {"s0": "RIO_DE_JANEIRO", "s1": "+3", "s2": "@bilal", "s3": "700"}


def test_a_one_turn_episode_with_two_calls_abstracts_too():
    old, new = CASES[3]
    ep = Episode(old, (make_step(old.text, " ".join(old.expected)),), Verdict(True, 1.0))
    wf = abstract(ep, 2)
    values = bind(wf, new.text).values
    assert [render(wf, i, values, []).canonical() for i in range(2)] == list(new.expected)


def test_a_text_of_another_shape_does_not_bind():
    wf = abstract(demonstrate(ENV, CASES[2][0]), 1)
    with pytest.raises(BindError, match="does not match"):
        bind(wf, "Start a 5 minutes timer, label it tea.")
    with pytest.raises(BindError, match=r"slot s0: 'soon' in the task is not written as duration seconds"):
        bind(wf, "Set a timer for soon for the tea.")


def test_what_gives_no_workflow_is_refused_naming_why():
    old = CASES[1][0]
    failed = Episode(old, (make_step(old.text, "<<qx cart.add; sku=tea; qty=8>>"),), Verdict(False, 0.5))
    with pytest.raises(AbstractionError, match="is not a success"):
        abstract(failed, 1)
    made_up = Episode(old, (make_step(old.text, "<<qx cart.add; sku=tea; qty=9>>"),), Verdict(True, 1.0))
    with pytest.raises(AbstractionError, match=r"cart.add qty='9' is found neither in the task text"):
        abstract(made_up, 1)
    with pytest.raises(AbstractionError, match="makes no call"):
        abstract(Episode(old, (Step(old.text, "done"),), Verdict(True, 1.0)), 1)


def test_every_qx_ladder_task_abstracts_and_binds_back_to_itself():
    for t in ENV.tasks(40, seed=5):
        wf = abstract(demonstrate(ENV, t), 1)
        assert Workflow.from_dict(wf.to_dict()) == wf
        chosen, _ = choose([StoredWorkflow(1, wf)], t.text)
        assert chosen is not None, t.text
        steps = run(ENV, t, chosen.workflow, chosen.binding)
        assert ENV.check(t, "\n".join(s.output for s in steps)).success, t.text


def test_spans_are_whole_values():
    assert find_spans(FORMS["dollars"], "1200", "Pay $12.50 or $120 or $12.") == [(22, 25)]
    assert find_spans(FORMS["day"], "+1", "Tomorrow at 3pm, remind me.") == [(0, 8)]
    assert find_spans(FORMS["hour"], "15:00", "Tomorrow at 3pm, remind me.") == [(12, 15)]
