"""The general-capability suite: held-out requests in five families, scored on generated answers.

Families (see ``suite.jsonl`` next to this module for the shipped items):

- ``conversation``: plain requests scored by deterministic checkers (a numbered or bulleted list,
  JSON with given keys, a fact the answer must contain).
- ``instruction``: verifiable instruction constraints (start with a word, use a word, exactly N
  list items, repeat a sentence, answer with a number only, JSON with given keys, no tool call
  when told not to; :mod:`replaybank.llm.eval.constraints`).
- ``arithmetic``: short questions; exact match of the number in the answer.
- ``code``: Python requests; the first fenced code block (or the whole answer) must parse, and
  where a test is given, code + test must exit 0 in a subprocess (``python -I``, time limit).
- ``open``: open requests with no checker, scored by **agreement with the base model's own
  greedy wording** (token F1 >= 0.5, SQuAD-style); reported apart from the checked families
  (:data:`CHECKED_FAMILIES`), since it measures wording kept rather than a capability.

Only items the base model passes are kept (by :func:`prepare_suite`): a checked item the base
fails is dropped and named in the manifest.

Two splits ship: the test split ``suite.jsonl`` (``"builtin"``), which is only ever scored, and the
validation split ``validation.jsonl`` (``"builtin:validation"``: other requests in the same families
and check types, about two thirds of the size, curated like the test split: every item is one the
embedded base model passes), on which anything chosen from suite scores (checkpoints, scales,
thresholds) is chosen. :func:`check_disjoint` holds two splits apart.

Tool-call leakage is the share of all suite answers (none of them asks for a tool) that contain
something shaped like a tool call (:func:`~replaybank.llm.eval.checkers.looks_like_tool_call`).

The base model's answers are generated once per (model, items, settings) and cached as JSON with
a manifest; every later evaluation compares against them. The cache is read back only when it is
exactly what was asked for (:func:`read_answers`): the file is JSON (never code), and a file that
does not match (another model, other items, a newer or older schema, a value that is not text) is
ignored and the answers are generated again.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from replaybank.errors import ReplayBankError
from replaybank.files import read_regular
from replaybank.jsonl import iter_jsonl
from replaybank.llm.data.corpus import normalise
from replaybank.llm.eval.checkers import CheckError, check, looks_like_tool_call, validate_spec
from replaybank.llm.eval.decode import (
    Generation,
    Precision,
    base_model_context,
    generate_detailed,
    model_fingerprint,
    precision_key,
)
from replaybank.llm.eval.prose import general_text_paragraphs, general_text_rows
from replaybank.llm.eval.text import words

__all__ = [  # the prose helpers moved to eval/prose.py; importers of this module keep working
    "AGREEMENT_FAMILY", "BUILTIN", "BUILTIN_VALIDATION", "CHECKED_FAMILIES", "FAMILIES", "FAMILY_MAX_NEW_TOKENS", "Suite", "SuiteError",
    "SuiteItem", "SuiteOverlapError", "check_disjoint", "check_no_overlap", "evaluate_suite", "general_text_paragraphs",
    "general_text_rows", "generate_items", "items_digest", "load_suite", "ngram_overlap", "overlap_key", "overlaps",
    "prepare_suite", "read_answers", "sample_suite", "summarise", "write_json_atomic",
]

Family = Literal["conversation", "instruction", "arithmetic", "code", "open"]
FAMILIES: tuple[Family, ...] = ("conversation", "instruction", "arithmetic", "code", "open")
AGREEMENT_FAMILY: Family = "open"
"""The one family scored by agreement with the base model's answer (and the only one that may be)."""
CHECKED_FAMILIES: tuple[Family, ...] = tuple(f for f in FAMILIES if f != AGREEMENT_FAMILY)
"""The families scored by checkers: the ones retention targets are set on."""
BUILTIN = "builtin"
BUILTIN_VALIDATION = "builtin:validation"
_BUILTIN_FILES = {BUILTIN: "suite.jsonl", BUILTIN_VALIDATION: "validation.jsonl"}
FAMILY_MAX_NEW_TOKENS: dict[str, int] = {"conversation": 48, "instruction": 48, "arithmetic": 32, "code": 64, "open": 32}
"""Generation budget per family; an item's ``max_new_tokens`` overrides it."""
CACHE_SCHEMA = 1


class SuiteError(ReplayBankError):
    """A suite file is unusable; the message names the file (and line)."""


class SuiteOverlapError(SuiteError):
    """Text meant for training contains an evaluation-suite prompt."""


@dataclass(frozen=True)
class SuiteItem:
    """One held-out request.

    Attributes:
        id: unique within the suite.
        family: one of :data:`FAMILIES`.
        prompt: the user message.
        check: the checker spec (see :mod:`replaybank.llm.eval.checkers`).
        max_new_tokens: generation budget; None means the family's default.
    """

    id: str
    family: str
    prompt: str
    check: dict[str, Any]
    max_new_tokens: int | None = None

    @property
    def budget(self) -> int:
        return self.max_new_tokens or FAMILY_MAX_NEW_TOKENS[self.family]


@dataclass
class Suite:
    """Items kept for evaluation, with the base model's answers and scores.

    Attributes:
        items: the items scored (items the base model fails are dropped).
        base_answers: item id -> the base model's greedy answer.
        base: the base model's own :func:`evaluate_suite` result on ``items``.
        dropped: ids of items dropped because the base model fails them.
        manifest: model fingerprint, items digest, settings, counts, seconds.
    """

    items: list[SuiteItem]
    base_answers: dict[str, str]
    base: dict[str, Any]
    dropped: list[str] = field(default_factory=list)
    manifest: dict[str, Any] = field(default_factory=dict)


def builtin_suite_path(source: str = BUILTIN) -> Path:
    """The shipped file of a split: ``"builtin"`` (the test split) or ``"builtin:validation"``."""
    if source not in _BUILTIN_FILES:
        raise SuiteError(f"unknown builtin suite {source!r}; expected {BUILTIN!r} or {BUILTIN_VALIDATION!r}")
    return Path(str(resources.files("replaybank.llm.eval").joinpath(_BUILTIN_FILES[source])))


def load_suite(source: str = BUILTIN) -> list[SuiteItem]:
    """Read suite items from a shipped split or a user JSONL file.

    ``"builtin"`` is the test split (scored, never chosen on); ``"builtin:validation"`` the
    validation split (the split choices are made on); anything else is a file path.

    Each line: ``{"id", "family", "prompt", "check"}`` and optionally ``"max_new_tokens"``.

    Raises:
        SuiteError: the file is missing, empty, not UTF-8, or a line is malformed JSON, lacks a
                field, has an unknown family or check type (or an ``agreement`` check outside the
            ``open`` family, or another check in it), or repeats an id (``file:line``).
    """
    path = builtin_suite_path(source) if source in _BUILTIN_FILES else Path(source).expanduser()
    items: list[SuiteItem] = []
    seen: set[str] = set()
    for number, obj in iter_jsonl(path, error=SuiteError):
        item = _parse_item(obj, f"{path}:{number}")
        if item.id in seen:
            raise SuiteError(f"{path}:{number}: duplicate id {item.id!r}")
        seen.add(item.id)
        items.append(item)
    if not items:
        raise SuiteError(f"{path}: suite file has no items")
    return items


def _parse_item(obj: dict[str, Any], where: str) -> SuiteItem:
    for key in ("id", "family", "prompt"):
        if not isinstance(obj.get(key), str) or not obj[key].strip():
            raise SuiteError(f"{where}: field {key!r} must be a non-empty string")
    if obj["family"] not in FAMILIES:
        raise SuiteError(f"{where}: unknown family {obj['family']!r}; expected one of {', '.join(FAMILIES)}")
    try:
        validate_spec(obj.get("check"), where)
    except CheckError as exc:
        raise SuiteError(str(exc)) from None
    if (obj["check"]["type"] == "agreement") != (obj["family"] == AGREEMENT_FAMILY):
        raise SuiteError(f"{where}: an 'agreement' check (no checker: agreement with the base model's answer) "
                         f"belongs in family {AGREEMENT_FAMILY!r} and only there; got {obj['check']['type']!r} "
                         f"in family {obj['family']!r}")
    budget = obj.get("max_new_tokens")
    if budget is not None and (not isinstance(budget, int) or budget < 1):
        raise SuiteError(f"{where}: max_new_tokens must be a positive integer, got {budget!r}")
    return SuiteItem(obj["id"], obj["family"], obj["prompt"], dict(obj["check"]), budget)


def items_digest(items: Sequence[SuiteItem]) -> str:
    """SHA-256 of the items (order included)."""
    return hashlib.sha256(json.dumps([asdict(i) for i in items], sort_keys=True).encode()).hexdigest()


def prepare_suite(
    base_model: Any, tokenizer: Any, items: Sequence[SuiteItem], *, cache_dir: Path, batch_size: int = 16,
    desc: str | None = "suite: base answers", precision: Precision = "fp32",
) -> Suite:
    """Generate the base model's answers once (cached) and keep the items it can be scored on.

    Items the base model fails are dropped (the suite is curated so the base passes each item; a
    user's suite may not be), so a family's retention is the share of the base's items kept.
    ``open`` items agree with the base's answer by construction. With a PEFT model the adapter is
    disabled while generating.

    Args:
        base_model: the base model (or a PEFT model wrapping it).
        tokenizer: its tokenizer.
        items: from :func:`load_suite`.
        cache_dir: folder of the cache file ``suite-<key>.json``; the key hashes the model
            fingerprint, the items and the generation settings.
        batch_size: generation batch size.
        desc: progress-bar label (None for no bar).
        precision: generation arithmetic (:func:`~replaybank.llm.eval.decode.resolve_precision`);
            part of the cache key, since bf16 and fp32 answers differ.

    Returns:
        A :class:`Suite`.

    Raises:
        SuiteError: no items, or no item left after dropping.
    """
    if not items:
        raise SuiteError("the suite has no items")
    fingerprint = model_fingerprint(base_model)
    digest = items_digest(items)
    settings = json.dumps({"budgets": FAMILY_MAX_NEW_TOKENS, "template": str(getattr(tokenizer, "chat_template", "")),
                           **precision_key(precision, base_model)}, sort_keys=True)
    key = hashlib.sha256(f"{CACHE_SCHEMA}:{fingerprint}:{digest}:{settings}".encode()).hexdigest()[:16]
    cache = Path(cache_dir) / f"suite-{key}.json"
    answers = read_answers(cache, fingerprint, digest, CACHE_SCHEMA)
    cached = answers is not None
    if answers is None:
        t0 = time.perf_counter()
        with base_model_context(base_model):
            gens = generate_items(base_model, tokenizer, items, batch_size=batch_size, desc=desc, precision=precision)
        answers = {k: g.text for k, g in gens.items()}
        write_json_atomic(cache, {"schema": CACHE_SCHEMA, "model": fingerprint, "items_sha256": digest,
                             "seconds": round(time.perf_counter() - t0, 2), "answers": answers})
    outcomes = [_score(i, answers[i.id], answers[i.id], truncated=None) for i in items]
    dropped = [o["id"] for o in outcomes if o["score"] < 1.0]
    kept = [i for i in items if i.id not in set(dropped)]
    if not kept:
        raise SuiteError(f"no suite item left: the base model fails all {len(items)} items")
    base = summarise([o for o in outcomes if o["id"] not in set(dropped)], base_scores=None)
    manifest = {
        "cache": str(cache), "cached": cached, "model": fingerprint, "items_sha256": digest,
        "items": len(items), "kept": len(kept), "dropped": len(dropped), "dropped_ids": dropped, "n": base["n"],
        "max_new_tokens": FAMILY_MAX_NEW_TOKENS,
        "agreement": f"family {AGREEMENT_FAMILY!r}: token F1 >= 0.5 with the base answer (wording kept, not a checker)",
    }
    base_answers = {i.id: answers[i.id] for i in kept}
    return Suite(kept, base_answers, base, dropped, manifest)


def read_answers(path: Path, fingerprint: str, digest: str, schema: int) -> dict[str, str] | None:
    """The answers cached in ``path`` when it holds answers of this model (``fingerprint``), these
    items (``digest``) and this cache ``schema``; None for anything else (missing, unreadable,
    another model, a tampered file): the caller then generates them again."""
    try:  # a FIFO or device in the cache is skipped (read_regular refuses it), never waited on
        obj = json.loads(read_regular(path).decode("utf-8"))
    except (ValueError, RecursionError):  # ReplayBankError included
        return None
    if not isinstance(obj, dict) or obj.get("schema") != schema or obj.get("model") != fingerprint \
            or obj.get("items_sha256") != digest or not isinstance(obj.get("answers"), dict):
        return None
    answers = obj["answers"]
    if not all(isinstance(v, str) for v in answers.values()):
        return None
    return {str(k): v for k, v in answers.items()}


def write_json_atomic(path: Path, obj: dict[str, Any]) -> None:
    """Write ``obj`` as JSON to ``path`` through a temporary file and a rename (never half-written)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(obj, indent=1, ensure_ascii=False), "utf-8")
    os.replace(tmp, path)


def evaluate_suite(
    model: Any, tokenizer: Any, suite: Suite, *, batch_size: int = 16, desc: str | None = None,
    precision: Precision = "fp32",
) -> dict[str, Any]:
    """Score ``model``'s greedy answers on the suite (at the precision the base answers were made at).

    Returns:
        ``{"families": {family: mean score}, "leakage": share of answers with a tool call,
        "retention": {family: score / base score (None when the base scores 0)},
        "n": {family: items}, "seconds": wall time, "items": [per-item outcomes]}``; an outcome
        is ``{"id", "family", "prompt", "check", "score", "detail", "leak", "truncated",
        "answer"}`` (the full answer; :func:`replaybank.llm.eval.flips.flips` compares two
        models' outcomes item by item). Families with no item are left out.
    """
    t0 = time.perf_counter()
    gens = generate_items(model, tokenizer, suite.items, batch_size=batch_size, desc=desc, precision=precision)
    outcomes = [
        _score(i, gens[i.id].text, suite.base_answers[i.id], truncated=gens[i.id].truncated) for i in suite.items
    ]
    result = summarise(outcomes, base_scores=suite.base["families"])
    result["seconds"] = round(time.perf_counter() - t0, 2)
    return result


def generate_items(
    model: Any, tokenizer: Any, items: Sequence[SuiteItem], *, batch_size: int = 16, desc: str | None = None,
    precision: Precision = "fp32",
) -> dict[str, Generation]:
    """Greedy answers to the items, by id: one generation call per token budget, so short-answer
    items do not pay for long ones (the suite's own generation, used by :func:`prepare_suite`)."""
    gens: dict[str, Generation] = {}
    for budget in sorted({i.budget for i in items}):
        group = [i for i in items if i.budget == budget]
        label = None if desc is None else f"{desc} ({budget} tokens)"
        out = generate_detailed(model, tokenizer, [i.prompt for i in group], max_new_tokens=budget,
                                batch_size=batch_size, desc=label, precision=precision)
        gens.update({i.id: g for i, g in zip(group, out, strict=True)})
    return gens


def _score(item: SuiteItem, answer: str, base_answer: str | None, truncated: bool | None) -> dict[str, Any]:
    score, detail = check(item.check, answer, prompt=item.prompt, base_answer=base_answer)
    return {
        "id": item.id, "family": item.family, "prompt": item.prompt, "check": item.check["type"], "score": score,
        "detail": detail, "leak": looks_like_tool_call(answer), "truncated": truncated, "answer": answer,
    }


def summarise(outcomes: list[dict[str, Any]], base_scores: dict[str, float] | None) -> dict[str, Any]:
    """Per-item outcomes (:func:`evaluate_suite`'s ``items``, from one or several generation runs,
    e.g. a routed model's groups) -> ``{"families", "leakage", "retention", "n", "items"}``; retention
    against ``base_scores`` (None: against 1)."""
    families: dict[str, float] = {}
    counts: dict[str, int] = {}
    for fam in FAMILIES:
        scores = [o["score"] for o in outcomes if o["family"] == fam]
        if scores:
            families[fam] = sum(scores) / len(scores)
            counts[fam] = len(scores)
    retention: dict[str, float | None] = {}
    for name, score in families.items():
        ref = 1.0 if base_scores is None else base_scores.get(name, 0.0)
        retention[name] = score / ref if ref > 0 else None
    leakage = sum(o["leak"] for o in outcomes) / len(outcomes) if outcomes else 0.0
    return {"families": families, "leakage": leakage, "retention": retention, "n": counts, "items": outcomes}


MIN_OVERLAP_CHARS = 12
"""A training text this short or shorter only overlaps an item by containing its whole prompt."""


def overlap_key(text: str) -> str:
    """The form overlap is checked in: whitespace collapsed, lower case."""
    return normalise(text).lower()


def overlaps(text_key: str, prompt_key: str) -> bool:
    """Whether a training text and a suite prompt (both :func:`overlap_key`) overlap: the text
    contains the prompt, or the prompt contains the whole text (of more than 12 characters, so a
    shortened copy of an item, "What is 4 + 7?" for "What is 4 + 7? Answer with the number.",
    counts too).

    Example:
        >>> overlaps("what is 4 + 7?", "what is 4 + 7? answer with the number.")
        True
        >>> overlaps("what is 4 + 70?", "what is 4 + 7? answer with the number.")
        False
    """
    if not prompt_key or not text_key:
        return False
    return prompt_key in text_key or (len(text_key) > MIN_OVERLAP_CHARS and text_key in prompt_key)


def check_no_overlap(suite: Suite | Sequence[SuiteItem], texts: Iterable[str], where: str) -> None:
    """Raise when any of ``texts`` overlaps a suite prompt (see :func:`overlaps`; whitespace and
    case ignored).

    Args:
        suite: a :class:`Suite` or its items.
        texts: training text (prompts, responses, passages).
        where: names the source of ``texts`` in the message (a file, a pool name).

    Raises:
        SuiteOverlapError: naming ``where``, the text's position and the first overlapping item.

    Example:
        >>> items = [SuiteItem("c1", "conversation", "Why is the sky blue?", {"type": "agreement"})]
        >>> check_no_overlap(items, ["How do birds fly?"], "pool.txt")
        >>> check_no_overlap(items, ["Q: why is the  sky blue? A: ..."], "pool.txt")
        Traceback (most recent call last):
        ...
        replaybank.llm.eval.suite.SuiteOverlapError: pool.txt: text 0 overlaps evaluation-suite item c1 ('Why is the sky blue?'); remove it from the training data or the suite
    """
    items = list(suite.items if isinstance(suite, Suite) else suite)
    prompts = [(overlap_key(i.prompt), i) for i in items]
    for k, text in enumerate(texts):
        key = overlap_key(text)
        for prompt, item in prompts:
            if overlaps(key, prompt):
                raise SuiteOverlapError(
                    f"{where}: text {k} overlaps evaluation-suite item {item.id} ({item.prompt!r}); "
                    "remove it from the training data or the suite"
                )


NGRAM = 5
"""Word n-gram length of :func:`ngram_overlap`."""
MAX_NGRAM_OVERLAP = 0.5
"""A validation prompt sharing more than this share of its word 5-grams with one test prompt is a
near-duplicate of it (:func:`check_disjoint`)."""


def ngram_overlap(prompt: str, other: str, n: int = NGRAM) -> float:
    """Share of ``prompt``'s word ``n``-grams that also occur in ``other`` (words as the checkers
    count them, lower case; a prompt of fewer than ``n`` words is one n-gram of all its words).

    Example:
        >>> ngram_overlap("Give me a numbered list of three sports.", "Give me a numbered list of three hobbies.")
        0.75
        >>> ngram_overlap("List three sports as a numbered list.", "List three fruits as a numbered list.")
        0.0
    """
    a, b = _ngrams(prompt, n), _ngrams(other, n)
    return len(a & b) / len(a) if a else 0.0


def _ngrams(text: str, n: int) -> set[tuple[str, ...]]:
    tokens = words(text)
    if len(tokens) < n:
        return {tuple(tokens)} if tokens else set()
    return {tuple(tokens[k:k + n]) for k in range(len(tokens) - n + 1)}


def check_disjoint(
    test: Sequence[SuiteItem], validation: Sequence[SuiteItem], where: str,
    max_overlap: float = MAX_NGRAM_OVERLAP,
) -> None:
    """Raise when the validation split shares an item with the test split: an id, a prompt
    (:func:`overlap_key`: whitespace and case ignored, or one containing the other, :func:`overlaps`)
    or a near-duplicate prompt (more than ``max_overlap`` of its word 5-grams in one test prompt,
    :func:`ngram_overlap`).

    Args:
        test: the test split's items.
        validation: the validation split's items.
        where: names the validation source in the message.

    Raises:
        SuiteOverlapError: naming ``where``, the validation item and the test item it repeats.

    Example:
        >>> test = [SuiteItem("t1", "arithmetic", "What is 4 + 7?", {"type": "number", "value": 11})]
        >>> check_disjoint(test, [SuiteItem("v1", "arithmetic", "Calculate 5 + 8.", {"type": "number", "value": 13})], "val")
        >>> check_disjoint(test, [SuiteItem("v2", "arithmetic", "what is 4 + 7 ?", {"type": "number", "value": 11})], "val")
        Traceback (most recent call last):
        ...
        replaybank.llm.eval.suite.SuiteOverlapError: val: item v2 ('what is 4 + 7 ?') repeats test item t1 ('What is 4 + 7?'): the same prompt
    """
    ids = {i.id: i for i in test}
    keyed = [(overlap_key(i.prompt), i) for i in test]
    for item in validation:
        if item.id in ids:
            raise SuiteOverlapError(f"{where}: item {item.id} has the id of a test item")
        key = overlap_key(item.prompt)
        for test_key, other in keyed:
            how = _repeat(key, test_key, ngram_overlap(item.prompt, other.prompt), max_overlap)
            if how is not None:
                raise SuiteOverlapError(f"{where}: item {item.id} ({item.prompt!r}) repeats test item {other.id} "
                                        f"({other.prompt!r}): {how}")


def _repeat(key: str, test_key: str, share: float, max_overlap: float) -> str | None:
    """How a validation prompt repeats a test prompt (both :func:`overlap_key`), or None."""
    if words(key) == words(test_key):
        return "the same prompt"
    if overlaps(key, test_key) or overlaps(test_key, key):
        return "one prompt holds the other"
    return f"{share:.0%} of its word {NGRAM}-grams" if share > max_overlap else None


def sample_suite(items: list[Any], per_family: int, seed: int) -> list[Any]:
    """A seeded sample of at most ``per_family`` items of each family, in suite order (0 = all items).

    Each seed evaluates its own sample, so a multi-seed run covers more of the suite and its spread
    includes the item sampling.

    Example:
        >>> from types import SimpleNamespace as I
        >>> items = [I(id=str(k), family="code" if k % 2 else "conversation") for k in range(10)]
        >>> [i.id for i in sample_suite(items, 2, seed=0)] == [i.id for i in sample_suite(items, 2, seed=0)]
        True
        >>> len(sample_suite(items, 2, seed=0)), len(sample_suite(items, 0, seed=0))
        (4, 10)
    """
    if per_family <= 0:
        return list(items)
    import numpy as np

    rng = np.random.default_rng([seed, 8])
    keep: set[int] = set()
    for fam in dict.fromkeys(i.family for i in items):
        idx = [k for k, i in enumerate(items) if i.family == fam]
        keep.update(int(k) for k in rng.permutation(idx)[:per_family])
    return [i for k, i in enumerate(items) if k in keep]
