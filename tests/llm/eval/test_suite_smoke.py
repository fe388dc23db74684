"""The real base model on a few suite items and a few self-synthesized rows (a few seconds).

Select with ``-m llm_smoke``; deselect with ``-m "not llm_smoke"``. Skipped when the embedded
SmolLM2 model is not installed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.llm_smoke


@pytest.fixture(scope="module")
def smol() -> tuple[Any, Any]:
    from replaybank.llm.model import ModelError, load_model

    try:
        return load_model("SmolLM2-135M-Instruct", "cpu", log=lambda *a: None)
    except ModelError as exc:
        pytest.skip(str(exc))


def test_base_answers_stop_at_end_of_turn_and_pass_their_checks(smol: tuple[Any, Any], tmp_path: Path) -> None:
    from replaybank.llm.eval.suite import evaluate_suite, load_suite, prepare_suite

    model, tok = smol
    items = load_suite()
    picked = [next(i for i in items if i.check["type"] == t) for t in ("numbered_list", "json_keys", "number", "code")]
    suite = prepare_suite(model, tok, picked, cache_dir=tmp_path, desc=None)
    assert suite.dropped == [] and suite.base["leakage"] == 0.0
    assert set(suite.base["families"].values()) == {1.0}
    result = evaluate_suite(model, tok, suite)
    assert result["families"] == suite.base["families"]
    # Short answers (a three-item list, a two-key JSON object) end their turn well within budget.
    assert not any(o["truncated"] for o in result["items"] if o["check"] in ("numbered_list", "json_keys"))
    assert not any("<|im_end|>" in o["answer"] for o in result["items"])


def test_base_passes_one_instruction_item_of_each_kind(smol: tuple[Any, Any], tmp_path: Path) -> None:
    from replaybank.llm.eval.suite import load_suite, prepare_suite

    model, tok = smol
    kinds: dict[str, Any] = {}
    for item in load_suite():
        if item.family == "instruction":
            kinds.setdefault(item.check["type"], item)
    # the family is curated so the base passes every item (benchmarks/curate_instruction.py)
    suite = prepare_suite(model, tok, list(kinds.values()), cache_dir=tmp_path, desc=None)
    assert len(kinds) >= 6 and suite.dropped == [] and suite.base["families"] == {"instruction": 1.0}


def test_self_synthesis_writes_usable_rows(smol: tuple[Any, Any], tmp_path: Path) -> None:
    from replaybank.llm.data.selfsynth import synthesize
    from replaybank.llm.eval.suite import load_suite

    model, tok = smol
    exclude = [i.prompt for i in load_suite()]
    # one round of 8 prompts (the default batch of 16 answers twice the prompts the rows need)
    rows, manifest = synthesize(model, tok, seed=0, n_rows=3, cache_dir=tmp_path, exclude=exclude, batch_size=8,
                                desc=None)
    assert len(rows) == 3 and manifest["kept"] == 3 and not manifest["cached"]
    assert all(r["response"].strip() and "<<" not in r["response"] for r in rows)
    again, manifest2 = synthesize(model, tok, seed=0, n_rows=3, cache_dir=tmp_path, exclude=exclude, batch_size=8,
                                  desc=None)
    assert again == rows and manifest2["cached"]
