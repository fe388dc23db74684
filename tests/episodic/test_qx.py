from __future__ import annotations

import pytest

from replaybank.episodic.qx import SCHEMA, TYPES, execute, make_step, parse_calls, score, validate
from replaybank.llm.data.toolapi import generate_examples

TIMER = "<<qx timer.arm; dur=300s; tag=tea>>"
SHOP = "<<qx cart.add; sku=eggs; qty=3>>"


def test_every_generated_reference_call_is_valid_and_scores_exactly():
    rows = generate_examples(300, seed=5)
    assert {parse_calls(r["response"])[0].tool for r in rows} == set(SCHEMA)
    for r in rows:
        (call,) = parse_calls(r["response"])
        assert validate(call) == [], r["response"]
        v = score([r["response"]], r["response"])
        assert v.success and v.reward == 1.0 and set(v.credit.values()) == {1.0}


def test_parse_keeps_order_notes_syntax_errors():
    calls = parse_calls("x <<qx timer.arm;dur=5s ; tag = tea>> <<qx Bad Tool; k; a=1; a=2>>")
    assert calls[0].args == (("dur", "5s"), ("tag", "tea"))
    assert calls[1].problems == ("tool name 'Bad Tool' is not like name.verb",
                                 "argument 'k' is not key=value", "argument a given twice")
    assert parse_calls("no call here <<qx never closed") == []


@pytest.mark.parametrize(
    "text, problem",
    [
        ("<<qx timer.fire; dur=5s; tag=tea>>", "unknown tool 'timer.fire'"),
        ("<<qx timer.arm; dur=300s>>", "missing required argument tag"),
        ("<<qx timer.arm; dur=300s; tag=tea; loud=yes>>", "unknown argument loud"),
        ("<<qx timer.arm; dur=5 minutes; tag=tea>>", "dur='5 minutes' is not seconds"),
        ("<<qx sky.cast; at=Paris; day=+1>>", "at='Paris' is not an upper-case city"),
        ("<<qx sky.cast; at=PARIS; day=1>>", "day='1' is not a day offset"),
        ("<<qx purse.send; to=anna; cents=500>>", "to='anna' is not a handle"),
        ("<<qx purse.send; to=@anna; cents=5.00>>", "cents='5.00' is not a non-negative integer"),
        ("<<qx nudge.set; day=+1; at=3pm; note=stretch>>", "at='3pm' is not a 24-hour time"),
        ("<<qx cart.add; sku=olive oil; qty=2>>", "sku='olive oil' is not a lower_case item"),
    ],
)
def test_validate_names_each_schema_violation(text, problem):
    problems = validate(parse_calls(text)[0])
    assert any(problem in p for p in problems), problems
    assert execute(parse_calls(text)[0]).startswith("error: ")


def test_argument_level_partial_credit():
    v = score([TIMER], "<<qx timer.arm; dur=5m; tag=tea>>")  # invalid dur: refused, not executed
    assert not v.success and v.reward == 0.0 and "refused" in v.detail
    v = score([TIMER], "<<qx timer.arm; dur=180s; tag=tea>>")
    assert v.credit == {"timer.arm.dur": 0.0, "timer.arm.tag": 1.0} and v.reward == 0.5
    v = score([TIMER], "<<qx timer.arm; tag=tea; dur=300s>>")  # argument order does not matter
    assert v.success and v.reward == 1.0
    v = score([TIMER], SHOP)
    assert v.reward == 0.0 and "no executed timer.arm call" in v.detail
    assert score([TIMER], "Sure, a timer for 5 minutes!").reward == 0.0


def test_two_call_tasks_need_both_calls_in_order_and_no_extras():
    v = score([TIMER, SHOP], f"{TIMER}\n{SHOP}")
    assert v.success and v.reward == 1.0 and set(v.credit) == {
        "0.timer.arm.dur", "0.timer.arm.tag", "1.cart.add.sku", "1.cart.add.qty"}
    v = score([TIMER, SHOP], TIMER)
    assert not v.success and v.reward == 0.5
    v = score([TIMER, SHOP], f"{SHOP} {TIMER}")  # both right, wrong order: full credit, no success
    assert not v.success and v.reward == 1.0
    v = score([TIMER], f"{TIMER} {TIMER} {SHOP}")  # spamming calls is scaled down
    assert not v.success and v.reward == pytest.approx(1 / 3) and "2 extra call(s)" in v.detail


def test_a_bad_expected_call_is_a_task_error():
    with pytest.raises(ValueError, match="expected call .* is not one valid qx call"):
        score(["<<qx timer.arm; dur=soon>>"], TIMER)


def test_every_type_pattern_is_used_by_the_schema():
    assert {t for args in SCHEMA.values() for t in args.values()} == set(TYPES)


def test_make_step_executes_only_valid_calls():
    s = make_step("p", f"{TIMER} then <<qx timer.arm; dur=5; tag=tea>>")
    assert s.call == f"{TIMER}\n<<qx timer.arm; dur=5; tag=tea>>"
    assert s.result.splitlines() == ["ok timer.arm dur=300s tag=tea",
                                     "error: timer.arm: dur='5' is not seconds like 300s"]
    assert make_step("p", "I cannot do that").call is None


def test_cart_add_returns_the_total_of_a_fixed_price_list():
    from replaybank.episodic.qx import OTHER_PRICE, PRICES
    from replaybank.llm.data.toolapi import _ITEMS

    assert sorted(PRICES) == sorted(i.replace(" ", "_") for i in _ITEMS)  # every item the requests name
    assert execute(parse_calls("<<qx cart.add; sku=olive_oil; qty=3>>")[0]) == "ok cart.add sku=olive_oil qty=3 total=3297"
    assert execute(parse_calls("<<qx cart.add; sku=kale; qty=2>>")[0]).endswith(f"total={2 * OTHER_PRICE}")
    assert execute(parse_calls("<<qx cart.add; sku=tea; qty=x>>")[0]).startswith("error: ")  # refused: no total
    assert "total" not in execute(parse_calls("<<qx purse.send; to=@anna; cents=5>>")[0])
