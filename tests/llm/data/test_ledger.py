"""The third built-in skill, ``builtin:ledger``: money statements rewritten as ``~ledger`` lines.

The rules are checked against the prompt text itself (weekday, names, amount, currency, who paid),
so a generator that drifts from its documented notation fails here; the checker is the one exact
match both the held-out accuracy and on-policy replay use.
"""

from __future__ import annotations

import re

import pytest

from replaybank.llm.config import BUILTIN_LEDGER, Config
from replaybank.llm.config.check import check_sources
from replaybank.llm.data import ledger
from replaybank.llm.data.onpolicy import domain_accepts
from replaybank.llm.data.prepare import BUILTINS, load_domain
from replaybank.llm.eval.domain import exact_match

LINE = re.compile(r"~ledger d([1-7]) ([A-Z]+)>([A-Z]+) (USD|EUR|GBP)(\d+)\.(\d\d) #(food|travel|home|fun)")
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
SPOKEN = {"USD": ("$", "dollars"), "EUR": ("€", "euros"), "GBP": ("£", "pounds")}
CATEGORY = {"lunch": "food", "coffee": "food", "taxi": "travel", "fuel": "travel", "rent": "home",
            "internet": "home", "cinema": "fun", "novels": "fun"}


def test_same_seed_same_rows_other_seed_other_rows():
    rows = ledger.generate_examples(100, 5)
    assert rows == ledger.generate_examples(100, 5)
    assert rows != ledger.generate_examples(100, 6)
    assert len({r["prompt"] for r in rows}) == 100


def test_every_row_follows_the_notation_read_off_its_prompt():
    for row in ledger.generate_examples(400, 11):
        prompt, response = row["prompt"], row["response"]
        m = LINE.fullmatch(response)
        assert m, response
        day, payer, payee, code, whole, cents, category = m.groups()
        assert [d for d in DAYS if d in prompt] == [DAYS[int(day) - 1]], prompt
        named = [w.strip(".,:").upper() for w in prompt.split() if w.strip(".,:").upper() in {payer, payee}]
        assert sorted(named) == sorted([payer, payee]) and payer != payee, prompt
        # the payer is the one named after "from" or "by" when the sentence has it, else named first
        after = re.search(r"\b(?:from|by) ([A-Z][a-z]+)", prompt)
        assert payer == (after.group(1).upper() if after else named[0]), prompt
        number = whole if cents == "00" else f"{whole}.{cents}"
        symbol, word = SPOKEN[code]
        assert f"{symbol}{number}" in prompt or f"{number} {word}" in prompt, prompt
        for word_, cat in CATEGORY.items():
            if re.search(rf"\b{word_}\b", prompt):
                assert category == cat, prompt


def test_exclude_keeps_held_out_prompts_out():
    held = {r["prompt"] for r in ledger.generate_examples(48, 10_000)}
    rows = ledger.generate_examples(240, 0, exclude=held)
    assert len(rows) == 240 and not held & {r["prompt"] for r in rows}


def test_registered_as_a_builtin_domain_and_passes_the_config_check():
    assert BUILTINS[BUILTIN_LEDGER] is ledger.generate_examples
    recs, manifest = load_domain(BUILTIN_LEDGER, 12, seed=3)
    assert recs == ledger.generate_examples(12, 3)
    assert manifest["source"] == "builtin:ledger (seed 3)" and manifest["rows"] == 12
    check_sources(Config.from_dict({"data": {"domain_train": [BUILTIN_LEDGER], "domain_eval": [BUILTIN_LEDGER]}}))


@pytest.mark.parametrize("answer, right", [
    ("~ledger d5 CHEN>ANNA USD12.50 #food", True),
    ("  ~ledger d5   CHEN>ANNA\nUSD12.50 #food \n", True),   # whitespace only
    ("~ledger d5 ANNA>CHEN USD12.50 #food", False),          # the money went the other way
    ("~ledger d5 CHEN>ANNA USD12.5 #food", False),           # two decimals, always
    ("~ledger d5 CHEN>ANNA USD12.50 #food, done.", False),   # nothing after the line
    ("<<qx purse.send; to=@anna; cents=1250>>", False),      # the tool API's way of saying it
])
def test_checker_is_exact_match_after_whitespace(answer, right):
    record = {"prompt": "Anna got $12.50 from Chen for lunch on Friday.", "response": "~ledger d5 CHEN>ANNA USD12.50 #food"}
    assert exact_match(answer, record["response"]) is right
    assert domain_accepts(record, answer) is right
