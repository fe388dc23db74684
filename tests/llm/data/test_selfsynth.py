"""Self-synthesized rehearsal: pool loading, filters, seeded draws, caching, overlap and errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from replaybank.errors import ReplayBankError
from replaybank.llm.data.selfsynth import (
    SelfSynthError,
    arithmetic_value,
    load_prompt_pool,
    synthesize,
)
from replaybank.llm.eval.checkers import degenerate
from replaybank.llm.eval.decode import Generation


class FakeGen:
    """Answers each prompt with ``answers.get(prompt, default)``; counts prompts generated."""

    def __init__(self, answers: dict[str, Generation] | None = None) -> None:
        self.answers = answers or {}
        self.prompts: list[str] = []

    def __call__(self, model: Any, tok: Any, prompts: list[str], **kw: Any) -> list[Generation]:
        self.prompts += prompts
        return [self.answers.get(p, Generation(f"A fine answer to: {p}", False, 9)) for p in prompts]


def pool_file(tmp_path: Path, prompts: list[str], name: str = "pool.txt") -> Path:
    path = tmp_path / name
    path.write_text("# a comment\n\n" + "\n".join(prompts) + "\n", "utf-8")
    return path


def run(tmp_path: Path, pool: Path, gen: FakeGen, **kw: Any) -> tuple[list[dict[str, str]], dict[str, Any]]:
    args: dict[str, Any] = {"seed": 0, "n_rows": 4, "cache_dir": tmp_path / "cache", "prompts": str(pool),
                            "model_id": "fake", "generate_fn": gen, "desc": None}
    args.update(kw)
    return synthesize(object(), None, **args)


def test_builtin_pool_is_large_and_unique() -> None:
    prompts, path = load_prompt_pool()
    assert path.name == "selfsynth_prompts.txt"
    assert len(prompts) >= 150
    assert not any(p.startswith("#") for p in prompts)


def test_filters_drop_bad_answers_and_count_them(tmp_path: Path) -> None:
    bad = {
        "p-trunc": Generation("This answer runs on and on", True, 96),
        "p-empty": Generation("  ...  ", False, 2),
        "p-rep": Generation("the cat sat on " * 5, False, 30),
        "p-tool": Generation("<<qx timer.arm; dur=60s; tag=tea>>", False, 14),
        "p-overlap": Generation("You asked: why is the sky blue? Because of scattering.", False, 14),
    }
    prompts = list(bad) + ["good-1", "good-2"]
    gen = FakeGen(bad)
    rows, manifest = run(tmp_path, pool_file(tmp_path, prompts), gen, n_rows=10, exclude=["Why is the sky blue?"])
    assert sorted(r["prompt"] for r in rows) == ["good-1", "good-2"]
    assert manifest["dropped"] == {"overlap": 1, "truncated": 1, "empty": 1, "repetition": 1, "tool_call": 1, "wrong": 0}
    assert manifest["generated"] == 7 and manifest["kept"] == 2 and manifest["short"] is True
    assert rows[0]["response"].startswith("A fine answer to: good-")


def test_wrong_sums_are_not_rehearsed(tmp_path: Path) -> None:
    """The base model's wrong answers to checkable sums are dropped; right ones and other prompts kept."""
    answers = {
        "What is 14 + 9?": Generation("14 + 9 = 13.", False, 8),
        "What is 100 - 45?": Generation("100 - 45 = 45.", False, 8),  # only the prompt's own number
        "Calculate 45 + 23.": Generation("To calculate 45 + 23, we add them, which is 68. So, 45 + 23 = 68.", False, 30),
        "What is 6 times 7?": Generation("To find 6 times 7, we can use the formula for", True, 96),
        "What is half of 50?": Generation("Half of 50 is 25.", False, 7),
    }
    pool = pool_file(tmp_path, [*answers, "Name a colour."])
    rows, manifest = run(tmp_path, pool, FakeGen(answers), n_rows=10, keep_truncated=True)
    assert sorted(r["prompt"] for r in rows) == ["Calculate 45 + 23.", "Name a colour.", "What is half of 50?"]
    assert manifest["dropped"]["wrong"] == 3  # a cut answer that has not reached its number yet counts as wrong


@pytest.mark.parametrize(("prompt", "value"), [
    ("What is 8 + 5?", 13), ("What is 30 - 12?", 18), ("What is 9 * 4?", 36), ("What is 5 times 9?", 45),
    ("Calculate 81 - 36.", 45), ("What is 12 + 48? Answer with the number.", 60), ("What is double 16?", 32),
    ("What is half of 7?", 3.5), ("Write a Python function subtract(a, b) that returns a minus b.", None),
    ("What is the capital of Canada?", None),
    ("Add 17 and 25.", 42), ("What is the sum of 18 and 27?", 45), ("How much is 19 plus 23?", 42),
    ("What do you get when you add 33 to 14?", 47), ("Subtract 9 from 40.", 31), ("What is 56 minus 21?", 35),
    ("Multiply 6 by 7.", 42), ("What is 7 multiplied by 8?", 56), ("What is the product of 4 and 6?", 24),
    ("Add a pinch of salt and 2 eggs.", None),
])
def test_arithmetic_value(prompt: str, value: float | None) -> None:
    assert arithmetic_value(prompt) == value


def test_keep_truncated_keeps_cut_answers_as_open_rows_and_caches_them_apart(tmp_path: Path) -> None:
    answers = {"p-trunc": Generation("This answer runs on and on", True, 96),
               "p-rep": Generation("the cat sat on " * 5, True, 96)}
    pool = pool_file(tmp_path, ["p-trunc", "p-rep", "good-1"])
    rows, manifest = run(tmp_path, pool, FakeGen(answers), n_rows=10, keep_truncated=True)
    by_prompt = {r["prompt"]: r for r in rows}
    assert sorted(by_prompt) == ["good-1", "p-trunc"]  # other filters still apply to cut answers
    assert by_prompt["p-trunc"]["open"] is True and "open" not in by_prompt["good-1"]
    assert manifest["dropped"]["truncated"] == 0 and manifest["dropped"]["repetition"] == 1
    assert manifest["open"] == 1 and manifest["keep_truncated"] is True
    again, m2 = run(tmp_path, pool, FakeGen(answers), n_rows=10, keep_truncated=True)
    assert m2["cached"] is True and again == rows  # the open flag survives the cache
    dropped, m3 = run(tmp_path, pool, FakeGen(answers), n_rows=10)
    assert m3["cached"] is False and [r["prompt"] for r in dropped] == ["good-1"]


def test_seeded_draws_cache_and_instant_second_call(tmp_path: Path) -> None:
    pool = pool_file(tmp_path, [f"Question number {i}?" for i in range(40)])
    gen = FakeGen()
    rows, manifest = run(tmp_path, pool, gen, seed=1)
    assert len(rows) == 4 and manifest["cached"] is False
    generated = len(gen.prompts)
    again, manifest2 = run(tmp_path, pool, gen, seed=1)
    assert again == rows and manifest2["cached"] is True and len(gen.prompts) == generated
    other, _ = run(tmp_path, pool, gen, seed=2)
    assert other != rows  # another seed draws other prompts (4 of 40: equal sets are unlikely)
    assert len(gen.prompts) > generated
    assert manifest["prompts_sha256"] == manifest2["prompts_sha256"] and manifest["model"] == "fake"


def test_pool_prompt_overlapping_the_suite_raises_naming_the_file(tmp_path: Path) -> None:
    pool = pool_file(tmp_path, ["How do birds fly?", "Quick one: WHAT is  17 + 25?"])
    with pytest.raises(SelfSynthError, match=r"pool\.txt: prompt 'Quick one: WHAT is  17 \+ 25\?' overlaps the evaluation suite"):
        run(tmp_path, pool, FakeGen(), exclude=["What is 17 + 25?"])


def test_nothing_usable_is_an_error_not_an_empty_arm(tmp_path: Path) -> None:
    gen = FakeGen({p: Generation("", False, 1) for p in ["a?", "b?"]})
    with pytest.raises(SelfSynthError, match=r"yielded no usable row: 2 answers generated, all filtered \(empty 2\)"):
        run(tmp_path, pool_file(tmp_path, ["a?", "b?"]), gen)
    assert issubclass(SelfSynthError, ReplayBankError)


def test_pool_file_errors(tmp_path: Path) -> None:
    empty = pool_file(tmp_path, [], "empty.txt")
    with pytest.raises(SelfSynthError, match=r"empty\.txt: prompt pool has no prompts"):
        load_prompt_pool(str(empty))
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"fine\ncaf\xe9?\n")
    with pytest.raises(SelfSynthError, match=r"bad\.txt:2: not valid UTF-8"):
        load_prompt_pool(str(bad))
    jl = tmp_path / "pool.jsonl"
    jl.write_text('{"prompt": "ok?"}\n{"prompt": 3}\n', "utf-8")
    with pytest.raises(SelfSynthError, match=r"pool\.jsonl:2: a prompt-pool line needs a non-empty string 'prompt'"):
        load_prompt_pool(str(jl))
    jl.write_text('{"prompt": "ok?"}\n{"prompt": \n', "utf-8")
    with pytest.raises(SelfSynthError, match=r"pool\.jsonl:2: malformed JSON"):
        load_prompt_pool(str(jl))
    with pytest.raises(SelfSynthError, match=r"missing\.txt: prompt pool not found"):
        load_prompt_pool(str(tmp_path / "missing.txt"))
    with pytest.raises(SelfSynthError, match="n_rows must be >= 1"):
        run(tmp_path, pool_file(tmp_path, ["a?"]), FakeGen(), n_rows=0)


def test_duplicates_in_pool_are_dropped(tmp_path: Path) -> None:
    prompts, _ = load_prompt_pool(str(pool_file(tmp_path, ["a?", "b?", "a?"])))
    assert prompts == ["a?", "b?"]


@pytest.mark.parametrize(
    "text, expected",
    [
        ("1. Violin\n2. Violin\n3. Violin\n4. Violin\n5. Violin", True),
        ("the cat sat on the mat the cat sat on the mat the cat sat on the mat", True),
        ("Bread needs flour, water, salt and yeast; a long cool rise gives it flavour.", False),
        ("1. Red\n2. Blue\n3. Green", False),
    ],
)
def test_degenerate(text: str, expected: bool) -> None:
    assert degenerate(text) is expected


def test_peft_adapter_is_disabled_while_synthesizing(tmp_path: Path) -> None:
    class Peft:
        active = True

        def disable_adapter(self) -> Any:
            import contextlib

            @contextlib.contextmanager
            def off() -> Any:
                self.active = False
                yield
                self.active = True

            return off()

    model = Peft()
    seen: list[bool] = []

    def gen(m: Any, tok: Any, prompts: list[str], **kw: Any) -> list[Generation]:
        seen.append(m.active)
        return [Generation("Fine.", False, 2) for _ in prompts]

    synthesize(model, None, seed=0, n_rows=1, cache_dir=tmp_path, prompts=str(pool_file(tmp_path, ["a?"])),
               model_id="m", generate_fn=gen, desc=None)
    assert seen == [False] and model.active


def test_tiny_random_model_yields_nothing_usable(tmp_path: Path, tiny_model_dir: Any, small_tok: Any) -> None:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    pool = pool_file(tmp_path, ["Why do cats purr?", "Name a river."])
    # A random model never ends its turn within 4 tokens: every answer is truncated.
    with pytest.raises(SelfSynthError, match=r"pool\.txt yielded no usable row: 2 answers generated, all filtered \(truncated 2\)"):
        synthesize(model, small_tok, seed=0, n_rows=2, cache_dir=tmp_path, prompts=str(pool), max_new_tokens=4, desc=None)
    assert not list(tmp_path.glob("selfsynth-*.json"))  # a failure is not cached


class FakeWriter(FakeGen):
    """Writes Magpie requests (rendered=True calls) from a list, answers the rest like FakeGen."""

    def __init__(self, requests: list[Generation]) -> None:
        super().__init__()
        self.requests = requests
        self.sampling: list[dict[str, Any]] = []

    def __call__(self, model: Any, tok: Any, prompts: list[str], **kw: Any) -> list[Generation]:
        if kw.get("rendered"):
            self.sampling.append({"prefix": prompts[0], "n": len(prompts), **kw})
            return self.requests[: len(prompts)]
        return super().__call__(model, tok, prompts, **kw)


def test_magpie_prompts_are_written_filtered_and_answered(tmp_path: Path, smol_tok: Any) -> None:
    requests = [
        Generation("How do I repot a cactus without getting hurt?", False, 12),
        Generation("How do I repot a cactus without getting hurt?", False, 12),  # duplicate
        Generation("Tell me about the history of the violin in Italy and", True, 48),  # truncated
        Generation("Hi", False, 2),  # short
        Generation("Quick: why is the sky blue?", False, 8),  # overlaps the suite
        Generation("<<qx sky.cast; at=OSLO; day=+1>>", False, 14),  # tool call
        Generation("What should I pack for a rainy weekend in the mountains?", False, 14),
    ] + [Generation(f"Name a good book about topic number {i}.", False, 10) for i in range(9)]
    gen = FakeWriter(requests)
    rows, manifest = synthesize(object(), smol_tok, seed=5, n_rows=3, cache_dir=tmp_path, prompts="magpie",
                                exclude=["Why is the sky blue?"], model_id="m", generate_fn=gen, desc=None)
    assert gen.sampling[0]["prefix"].endswith("<|im_start|>user\n") and gen.sampling[0]["n"] == 16
    assert gen.sampling[0]["temperature"] > 0 and gen.sampling[0]["seed"] == 5
    assert manifest["magpie"] == {"written": 16, "kept": 11, "dropped": {
        "truncated": 1, "short": 1, "repetition": 0, "tool_call": 1, "overlap": 1, "duplicate": 1}}
    assert manifest["prompts"] == "magpie" and len(rows) == 3
    written = {g.text for g in requests}
    assert all(r["prompt"] in written and "sky" not in r["prompt"] for r in rows)


def test_builtin_plus_magpie_pool(tmp_path: Path, smol_tok: Any) -> None:
    gen = FakeWriter([Generation("How do I repot a cactus without getting hurt?", False, 12)] * 16)
    pool = pool_file(tmp_path, ["Why do cats purr?"])
    rows, manifest = synthesize(object(), smol_tok, seed=0, n_rows=5, cache_dir=tmp_path, prompts=f"{pool}+magpie",
                                model_id="m", generate_fn=gen, desc=None)
    assert sorted(r["prompt"] for r in rows) == ["How do I repot a cactus without getting hurt?", "Why do cats purr?"]
    assert manifest["prompts"] == f"{pool} + magpie" and manifest["pool_size"] == 2 and manifest["short"]


def test_rounds_adapt_to_the_yield(tmp_path: Path) -> None:
    prompts = [f"Question number {i}?" for i in range(200)]
    # Only every fourth answer is usable: the first round (sized for a 50% yield) falls short,
    # the next ones are sized from the yield measured so far.
    gen = FakeGen({p: Generation("cut off", True, 96) for i, p in enumerate(prompts) if i % 4})
    rows, manifest = run(tmp_path, pool_file(tmp_path, prompts), gen, n_rows=20)
    assert manifest["kept"] == 20 and not manifest["short"]
    assert 60 <= manifest["generated"] <= 120  # about n_rows / yield = 80 (seeded draw), not the pool of 200
    assert manifest["dropped"]["truncated"] == manifest["generated"] - sum(1 for p in gen.prompts if prompts.index(p) % 4 == 0)
