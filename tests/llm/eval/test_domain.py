"""Generated-answer domain accuracy: exact match and the parsed-call score."""

from __future__ import annotations

from typing import Any

import pytest

from replaybank.llm.data.toolapi import generate_examples
from replaybank.llm.eval import domain
from replaybank.llm.eval.decode import Generation
from replaybank.llm.eval.domain import (
    DomainEvalError,
    call_score,
    generated_accuracy,
    parse_qx_call,
)


def test_parse_qx_call() -> None:
    assert parse_qx_call("<<qx nudge.set; day=+1; at=09:00; note=pay-rent>>") == (
        "nudge.set", {"day": "+1", "at": "09:00", "note": "pay-rent"}
    )
    assert parse_qx_call("ok <<qx  cart.add ;sku=eggs ; qty=3 >> done") == ("cart.add", {"sku": "eggs", "qty": "3"})
    assert parse_qx_call("<<qx cart.add; sku=eggs") is None  # unterminated
    assert parse_qx_call("cart.add sku=eggs") is None
    for row in generate_examples(30, seed=3):  # every generated reference parses
        assert parse_qx_call(row["response"]) is not None


def test_call_score_partial_credit() -> None:
    ref = ("purse.send", {"to": "@ann", "cents": "500"})
    assert call_score(ref, ref) == 1.0
    assert call_score(("purse.send", {"to": "@ann", "cents": "50"}), ref) == pytest.approx(2 / 3)
    assert call_score(("cart.add", {"to": "@ann", "cents": "500"}), ref) == pytest.approx(2 / 3)
    assert call_score(("purse.send", {"to": "@ann", "cents": "500", "memo": "x"}), ref) == pytest.approx(3 / 4)
    assert call_score(("purse.send", {}), ref) == pytest.approx(1 / 3)
    assert call_score(None, ref) == 0.0


def fake_generation(answers: dict[str, str]) -> Any:
    def gen(model: Any, tok: Any, prompts: list[str], **kw: Any) -> list[Generation]:
        return [Generation(answers[p], False, 5) for p in prompts]
    return gen


def test_generated_accuracy_scores_exact_and_parsed(monkeypatch: pytest.MonkeyPatch) -> None:
    records = [
        {"prompt": "Add 3 eggs to my shopping list.", "response": "<<qx cart.add; sku=eggs; qty=3>>"},
        {"prompt": "Pay Ann $5.", "response": "<<qx purse.send; to=@ann; cents=500>>"},
        {"prompt": "Set a timer for 2 minutes for the tea.", "response": "<<qx timer.arm; dur=120s; tag=tea>>"},
        {"messages": [{"role": "user", "content": "x"}]},
    ]
    monkeypatch.setattr(domain, "generate_detailed", fake_generation({
        records[0]["prompt"]: " <<qx cart.add;  sku=eggs; qty=3>> ",  # whitespace differs only
        records[1]["prompt"]: "<<qx purse.send; to=@ann; cents=5>>",
        records[2]["prompt"]: "Sure, starting a two minute tea timer!",
    }))
    got = generated_accuracy(None, None, records)
    assert got["n"] == 3 and got["skipped"] == 1
    assert got["exact_match"] == pytest.approx(1 / 3)
    assert got["call_score"] == pytest.approx((1 + 2 / 3 + 0) / 3)
    assert [i["exact"] for i in got["items"]] == [True, False, False]


def test_generated_accuracy_needs_prompt_response_records() -> None:
    with pytest.raises(DomainEvalError, match="none of the 1 domain records"):
        generated_accuracy(None, None, [{"text": "plain"}])


def test_custom_parser_and_no_parsable_reference(monkeypatch: pytest.MonkeyPatch) -> None:
    records = [{"prompt": "p", "response": "Paris"}]
    monkeypatch.setattr(domain, "generate_detailed", fake_generation({"p": "Paris"}))
    got = generated_accuracy(None, None, records)
    assert got["exact_match"] == 1.0 and got["call_score"] is None
    got = generated_accuracy(None, None, records, parse=lambda t: (t.lower(), {}))
    assert got["call_score"] == 1.0
