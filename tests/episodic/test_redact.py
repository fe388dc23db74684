from __future__ import annotations

import pytest

from replaybank.episodic import Episode, Step, Task, Verdict
from replaybank.episodic.redact import RedactionError, Redactor


def test_every_occurrence_is_replaced_ignoring_case_longest_value_first():
    r = Redactor.of({"org": ["ACME"], "company": ["ACME Corp"], "payee": ["Goran"]})
    got = r.text("ACME Corp pays goran; acme too; GORAN again")
    assert got == "<private:company> pays <private:payee>; <private:org> too; <private:payee> again"
    assert r.found(got) == () and r.found("acme") == ("org",)


def test_an_episode_is_redacted_in_every_text_it_holds():
    r = Redactor.of({"account": ["DE89 3704"]})
    task = Task("acct-DE89 3704", "Pay from DE89 3704.", "fam DE89 3704", 2, ("x DE89 3704",))
    step = Step("Pay from DE89 3704.", "out DE89 3704", "call DE89 3704", "result DE89 3704")
    ep = Episode(task, (step,), Verdict(True, 1.0, {"k DE89 3704": 1.0}, "detail DE89 3704"),
                 context=({"role": "user", "content": "seen DE89 3704"},), generation=3, seed=5)
    red = r.episode(ep)
    assert "DE89" not in repr(red) and red.to_dict().keys() == ep.to_dict().keys()
    assert (red.generation, red.seed, red.steps[0].output) == (3, 5, "out <private:account>")


@pytest.mark.parametrize(("private", "words"), [
    ({"Account": ["x"]}, "field name"),
    ({"account": [""]}, "non-blank"),
    ({"account": ["   "]}, "non-blank"),
    ({"account": ["private"]}, "inside a marker"),
    ({"acct": ["ACCT"]}, "inside a marker"),
])
def test_values_that_cannot_be_redacted_safely_are_refused(private, words):
    with pytest.raises(RedactionError, match=words):
        Redactor.of(private)


def test_a_value_left_after_redaction_is_an_error_not_a_leak():
    # "abcq": "abc" becomes "<private:code>", whose last letters and the "q" after it spell "e>q"
    r = Redactor.of({"code": ["abc"], "tail": ["e>q"]})
    with pytest.raises(RedactionError, match=r"private field\(s\) tail is still in the text") as err:
        r.text("abcq")
    assert "e>q" not in str(err.value)  # the message names the field, never the value
    assert r.text("abc") == "<private:code>"
    assert not Redactor.of({}) and Redactor.of({}).text("anything") == "anything"
