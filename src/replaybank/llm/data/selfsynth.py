"""Self-synthesized rehearsal: the base model's own answers to general prompts, as rehearsal rows.

The idea of Self-Synthesized Rehearsal (SSR) and self-distillation fine-tuning (SDFT): rows that
carry the behaviour to keep are best written by the model that has it. The base model (a PEFT
model's adapter is disabled, so no second copy is held) answers prompts drawn with a seed from a
pool: the shipped ``selfsynth_prompts.txt`` (about 200 general requests: questions, instructions,
formatting constraints, small sums, short Python tasks), a user file, and/or Magpie-style requests
the model writes itself (:mod:`replaybank.llm.data.magpie`). Answers are greedy and
filtered; the kept rows and a manifest are cached on disk, so a second call with the same model,
seed, pool and settings reads them back instead of generating.

Filters, in order (each dropped answer is counted under its reason):

- ``overlap``: the answer overlaps an evaluation-suite prompt (``exclude``; see
  :func:`~replaybank.llm.eval.suite.overlaps`); a pool *prompt* that overlaps raises instead,
  naming the pool file;
- ``truncated``: the answer hit ``max_new_tokens`` before the end of its turn (with
  ``keep_truncated`` such an answer is kept instead, as an open row: ``"open": True``, trained
  without an end of turn, see :func:`~replaybank.llm.data.rows.encode_pair`);
- ``empty``: no word in the answer;
- ``repetition``: degenerate text (:func:`~replaybank.llm.eval.checkers.degenerate`: a line or a
  word 4-gram 3+ times, or under half of the word 3-grams distinct);
- ``tool_call``: the answer looks like a tool call (so rehearsal never teaches tool syntax);
- ``wrong``: the prompt is a small sum the answer can be checked on (``What is 14 + 9?``,
  ``Calculate 81 - 36.``, ``6 times 7``, ``half of 50``, ``double 16``: :func:`arithmetic_value`)
  and the answer does not state the right number. SmolLM2-135M gets about a third of the pool's
  sums wrong ("14 + 9 = 13"), and rehearsal rows should carry behaviour worth keeping (the
  evaluation suite, too, keeps only the sums the base model gets right). In the consolidation
  loop the filter had no measurable effect on retention (docs/loop.md, "Measurements").
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from replaybank.errors import ReplayBankError
from replaybank.files import read_regular
from replaybank.llm.config import Config
from replaybank.llm.data.magpie import write_prompts
from replaybank.llm.data.rows import TokenRows, encode_pair, token_rows
from replaybank.llm.eval.checkers import check, degenerate, looks_like_tool_call, words
from replaybank.llm.eval.decode import (
    Generation,
    Precision,
    base_model_context,
    generate_detailed,
    model_fingerprint,
    precision_key,
)
from replaybank.llm.eval.suite import overlap_key, overlaps

BUILTIN = "builtin"
MAGPIE = "magpie"
CACHE_SCHEMA = 2  # 2: the "wrong" filter (rows cached by schema 1 may rehearse wrong sums)
FILTERS = ("overlap", "truncated", "empty", "repetition", "tool_call", "wrong")
ANSWER_TOKENS = 96  # the token budget of a self row's answer (and of the adapter's own, selfgen)

GenerateFn = Callable[..., list[Generation]]


class SelfSynthError(ReplayBankError):
    """A prompt pool is unusable, overlaps the evaluation suite, or generation yielded no row."""


def builtin_pool_path() -> Path:
    """The shipped prompt pool."""
    return Path(str(resources.files("replaybank.llm.data").joinpath("selfsynth_prompts.txt")))


def load_prompt_pool(source: str = BUILTIN) -> tuple[list[str], Path]:
    """Prompts of a pool file: one per line (``#`` comments and blank lines skipped), or JSONL
    lines ``{"prompt": ...}`` for a ``.jsonl`` file. Duplicates are dropped, order kept.

    Returns:
        ``(prompts, path)``.

    Raises:
        SelfSynthError: missing file, non-UTF-8 bytes, malformed JSONL line (``file:line``), or
            no prompt at all.
    """
    path = builtin_pool_path() if source == BUILTIN else Path(source).expanduser()
    data = read_regular(path, error=SelfSynthError, what="prompt pool")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        lineno = data.count(b"\n", 0, exc.start) + 1
        raise SelfSynthError(f"{path}:{lineno}: not valid UTF-8; re-encode the prompt pool as UTF-8") from None
    prompts: list[str] = []
    jsonl = path.suffix.lower() == ".jsonl"
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or (not jsonl and line.lstrip().startswith("#")):
            continue
        if jsonl:
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise SelfSynthError(f"{path}:{number}: malformed JSON ({exc.msg} at column {exc.colno})") from None
            if not isinstance(obj, dict) or not isinstance(obj.get("prompt"), str) or not obj["prompt"].strip():
                raise SelfSynthError(f"{path}:{number}: a prompt-pool line needs a non-empty string 'prompt'")
            prompts.append(obj["prompt"].strip())
        else:
            prompts.append(line.strip())
    prompts = list(dict.fromkeys(prompts))
    if not prompts:
        raise SelfSynthError(f"{path}: prompt pool has no prompts")
    return prompts, path


def _reject(prompt: str, gen: Generation, excluded: list[str], keep_truncated: bool) -> str | None:
    low = overlap_key(gen.text)
    if any(overlaps(low, e) for e in excluded):
        return "overlap"
    if gen.truncated and not keep_truncated:
        return "truncated"
    if not words(gen.text):
        return "empty"
    if degenerate(gen.text):
        return "repetition"
    if looks_like_tool_call(gen.text):
        return "tool_call"
    value = arithmetic_value(prompt)
    if value is not None and check({"type": "number", "value": value}, gen.text, prompt=prompt)[0] < 1:
        return "wrong"
    return None


_BINARY = re.compile(r"^(?:what is|calculate|compute)\s+(-?\d+)\s*(\+|-|\*|x|×|plus|minus|times)\s*(-?\d+)\b", re.I)
_UNARY = re.compile(r"^what is\s+(half of|double|twice)\s+(-?\d+)\b", re.I)
# Sums asked in words ("Add 17 and 25.", "Subtract 9 from 40."): the pool's worded arithmetic.
_WORDED: tuple[tuple[re.Pattern[str], Callable[[int, int], int]], ...] = (
    (re.compile(r"^(?:add|what is the sum of|what do you get when you add)\s+(-?\d+)\s+(?:and|to)\s+(-?\d+)\b", re.I), lambda a, b: a + b),
    (re.compile(r"^how much is\s+(-?\d+)\s+plus\s+(-?\d+)\b", re.I), lambda a, b: a + b),
    (re.compile(r"^subtract\s+(-?\d+)\s+from\s+(-?\d+)\b", re.I), lambda a, b: b - a),
    (re.compile(r"^(?:what is the difference between)\s+(-?\d+)\s+and\s+(-?\d+)\b", re.I), lambda a, b: a - b),
    (re.compile(r"^(?:multiply|what is)\s+(-?\d+)\s+(?:by|multiplied by)\s+(-?\d+)\b", re.I), lambda a, b: a * b),
    (re.compile(r"^what is the product of\s+(-?\d+)\s+and\s+(-?\d+)\b", re.I), lambda a, b: a * b),
)


def arithmetic_value(prompt: str) -> int | float | None:
    """The answer to a small-sum prompt, or None when the prompt is not one.

    Example:
        >>> arithmetic_value("What is 14 + 9?"), arithmetic_value("Calculate 81 - 36."), arithmetic_value("What is 6 times 7?")
        (23, 45, 42)
        >>> arithmetic_value("What is half of 50?"), arithmetic_value("Name a famous painting.")
        (25, None)
    """
    text = prompt.strip()
    m = _BINARY.match(text)
    if m:
        a, op, b = int(m.group(1)), m.group(2).lower(), int(m.group(3))
        return a + b if op in ("+", "plus") else a - b if op in ("-", "minus") else a * b
    for pattern, combine in _WORDED:
        m = pattern.match(text)
        if m:
            return combine(int(m.group(1)), int(m.group(2)))
    m = _UNARY.match(text)
    if m:
        n = int(m.group(2))
        if m.group(1).lower() != "half of":
            return 2 * n
        return n // 2 if n % 2 == 0 else n / 2
    return None


def synthesize(
    model: Any,
    tokenizer: Any,
    *,
    seed: int,
    n_rows: int,
    cache_dir: Path,
    prompts: str = BUILTIN,
    exclude: Iterable[str] = (),
    batch_size: int = 16,
    max_new_tokens: int = ANSWER_TOKENS,
    keep_truncated: bool = False,
    model_id: str | None = None,
    generate_fn: GenerateFn | None = None,
    desc: str | None = "self-synthesis",
    precision: Precision = "fp32",
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Rehearsal rows written by the base model, drawn with ``seed`` from a prompt pool (cached).

    Prompts are taken in a seeded random order and answered in rounds until ``n_rows`` pass the
    filters or the pool is used up; fewer rows than asked are returned (``manifest["short"]``)
    when the pool runs out.

    Args:
        model: the base model, or a PEFT model (its adapter is disabled while generating).
        tokenizer: its tokenizer.
        seed: draws the prompts; each seed gives its own rows.
        n_rows: rows wanted.
        cache_dir: folder of ``selfsynth-<key>.json``; the key hashes the model, seed, pool,
            ``n_rows``, ``max_new_tokens``, the excluded prompts and the chat template.
        prompts: ``"builtin"`` or a pool file (see :func:`load_prompt_pool`); ``"magpie"`` for
            requests the base model writes itself (:mod:`replaybank.llm.data.magpie`,
            ``max(2 * n_rows, batch_size)`` sampled with ``seed``), or ``"builtin+magpie"`` /
            ``"<file>+magpie"`` for both.
        exclude: evaluation prompts that must never be rehearsed (the suite's prompts).
        batch_size, max_new_tokens: generation settings.
        keep_truncated: keep answers cut at ``max_new_tokens`` as open rows (``"open": True``)
            instead of dropping them. Dropping them keeps only the answers shorter than the
            budget (about half of SmolLM2's at 96 tokens), so rehearsal then covers short answers
            only and training drifts the model toward short answers.
        model_id: identifies the model in the cache key; default: a fingerprint of its weights.
        generate_fn: stands in for :func:`~replaybank.llm.eval.decode.generate_detailed`
            (tests inject a fake).
        desc: progress-bar label (None for none).
        precision: generation arithmetic (:func:`~replaybank.llm.eval.decode.resolve_precision`);
            in the cache key unless fp32.

    Returns:
        ``(rows, manifest)``: rows are ``{"prompt", "response"}`` (plus ``"open": True`` for a kept
        truncated answer); the manifest holds the model id,
        seed, prompt source and SHA-256 of the pool, Magpie counts (or None), counts (``generated``, ``kept``, ``dropped`` by filter),
        ``seconds`` of generation and ``cached`` (True when read back).

    Raises:
        SelfSynthError: ``n_rows < 1``, a bad pool, a pool prompt that contains an excluded
            prompt (naming the pool file and line's prompt), or no usable row at all.
    """
    if n_rows < 1:
        raise SelfSynthError(f"n_rows must be >= 1, got {n_rows}")
    source, magpie = _source(prompts)
    pool, path = load_prompt_pool(source) if source is not None else ([], None)
    where = " + ".join(([str(path)] if path is not None else []) + ([MAGPIE] if magpie else []))
    excluded = [overlap_key(e) for e in exclude if overlap_key(e)]
    for p in pool:
        low = overlap_key(p)
        hit = next((e for e in excluded if overlaps(low, e)), None)
        if hit is not None:
            raise SelfSynthError(
                f"{path}: prompt {p!r} overlaps the evaluation suite ({hit!r}); remove it from the prompt pool"
            )
    pool_sha = hashlib.sha256("\n".join(pool).encode()).hexdigest()
    ident = model_id or model_fingerprint(model)
    key_src = json.dumps({
        "schema": CACHE_SCHEMA, "model": ident, "seed": seed, "pool": pool_sha, "n_rows": n_rows,
        "max_new_tokens": max_new_tokens, "exclude": hashlib.sha256("\n".join(sorted(excluded)).encode()).hexdigest(),
        "template": str(getattr(tokenizer, "chat_template", "")), "magpie": magpie,
        **({"keep_truncated": True} if keep_truncated else {}),
        **precision_key(precision, model),
    }, sort_keys=True)
    cache = Path(cache_dir) / f"selfsynth-{hashlib.sha256(key_src.encode()).hexdigest()[:16]}.json"
    cached = _read_cache(cache)
    if cached is not None:
        return cached[0], {**cached[1], "cached": True, "cache": str(cache)}

    gen = generate_fn or functools.partial(generate_detailed, precision=precision)
    order = np.random.default_rng(seed).permutation(len(pool))
    rows: list[dict[str, Any]] = []
    dropped: Counter[str] = Counter()
    generated = 0
    t0 = time.perf_counter()
    magpie_counts: dict[str, Any] | None = None
    with base_model_context(model):
        if magpie:
            written, magpie_counts = write_prompts(
                model, tokenizer, n=max(2 * n_rows, batch_size), seed=seed, exclude_keys=excluded,
                batch_size=batch_size, generate_fn=generate_fn, desc=None if desc is None else f"{desc}: prompts",
            )
            known = set(pool)
            pool = pool + [p for p in written if p not in known]
            order = np.random.default_rng(seed).permutation(len(pool))
            if not pool:
                raise SelfSynthError(
                    f"Magpie-style prompt writing kept none of {magpie_counts['written']} requests "
                    f"(dropped: {magpie_counts['dropped']}); use a prompt pool file"
                )
        while len(rows) < n_rows and generated < len(pool):
            # Ask for what is missing over the yield so far (SmolLM2 keeps about half of its
            # answers at 96 tokens; the rest run longer), so most calls need one round.
            rate = max(0.2, len(rows) / generated) if generated else 0.5
            want = min(len(pool) - generated, max(batch_size, int(np.ceil((n_rows - len(rows)) / rate * 1.1))))
            batch = [pool[int(i)] for i in order[generated : generated + want]]
            outs = gen(model, tokenizer, batch, max_new_tokens=max_new_tokens, batch_size=batch_size, desc=desc)
            generated += len(batch)
            for prompt, out in zip(batch, outs, strict=True):
                reason = _reject(prompt, out, excluded, keep_truncated)
                if reason is not None:
                    dropped[reason] += 1
                elif len(rows) < n_rows:
                    rows.append({"prompt": prompt, "response": out.text, **({"open": True} if out.truncated else {})})
    seconds = time.perf_counter() - t0
    if not rows:
        raise SelfSynthError(
            f"self-synthesis from {where} yielded no usable row: {generated} answers generated, all "
            f"filtered ({', '.join(f'{k} {v}' for k, v in sorted(dropped.items()))}); try a larger "
            "max_new_tokens or another prompt pool"
        )
    manifest = {
        "model": ident, "seed": seed, "prompts": where, "prompts_sha256": pool_sha, "magpie": magpie_counts,
        "pool_size": len(pool), "n_rows": n_rows, "max_new_tokens": max_new_tokens,
        "generated": generated, "kept": len(rows), "short": len(rows) < n_rows,
        "keep_truncated": keep_truncated, "open": sum(bool(r.get("open")) for r in rows),
        "dropped": {k: dropped.get(k, 0) for k in FILTERS}, "seconds": round(seconds, 2),
    }
    _write_cache(cache, {"schema": CACHE_SCHEMA, "manifest": manifest, "rows": rows})
    return rows, {**manifest, "cached": False, "cache": str(cache)}


def _source(prompts: str) -> tuple[str | None, bool]:
    # "builtin", a file, "magpie", or either of the first two + "+magpie".
    if prompts == MAGPIE:
        return None, True
    if prompts.endswith("+" + MAGPIE):
        return prompts[: -len(MAGPIE) - 1], True
    return prompts, False


def _read_cache(path: Path) -> tuple[list[dict[str, Any]], dict[str, Any]] | None:
    try:  # a FIFO or device in the cache is skipped (read_regular refuses it), never waited on
        obj = json.loads(read_regular(path).decode("utf-8"))
    except (ValueError, RecursionError):  # ReplayBankError included
        return None
    if not isinstance(obj, dict) or obj.get("schema") != CACHE_SCHEMA:
        return None
    rows, manifest = obj.get("rows"), obj.get("manifest")
    if not isinstance(rows, list) or not isinstance(manifest, dict) or not all(
        isinstance(r, dict) and isinstance(r.get("prompt"), str) and isinstance(r.get("response"), str) for r in rows
    ):
        return None
    if not all(isinstance(r.get("open", False), bool) for r in rows):
        return None
    return [{"prompt": r["prompt"], "response": r["response"], **({"open": True} if r.get("open") else {})}
            for r in rows], manifest


def _write_cache(path: Path, obj: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(obj, indent=1, ensure_ascii=False), "utf-8")
    os.replace(tmp, path)


def row_texts(rows: Sequence[dict[str, str]]) -> list[str]:
    """Prompts and responses of ``rows`` as one list (for overlap checks)."""
    return [r["prompt"] for r in rows] + [r["response"] for r in rows]


def synthesize_rows(model: Any, tokenizer: Any, cfg: Config, suite: list[Any], log: Callable[[str], None]) -> tuple[TokenRows, dict[str, Any]]:
    """Self-synthesized rehearsal rows of ``cfg.training.seed`` (cached), checked against the suite."""
    records, manifest = synthesize_records(model, tokenizer, cfg, suite, log)
    return encode_records(tokenizer, records, cfg.training.max_seq_length), manifest


def encode_records(tokenizer: Any, records: Sequence[dict[str, Any]], max_seq_length: int) -> TokenRows:
    """``{prompt, response, open}`` rows of :func:`synthesize` as token rows (open ones without an end of turn)."""
    return token_rows([encode_pair(tokenizer, r["prompt"], r["response"], max_seq_length, open_end=bool(r.get("open")))
                       for r in records])


def synthesize_records(
    model: Any, tokenizer: Any, cfg: Config, suite: list[Any], log: Callable[[str], None],
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The rows of :func:`synthesize_rows` as ``{prompt, response, open}`` records, and the manifest."""
    from replaybank.llm.eval.suite import check_no_overlap
    from replaybank.llm.model import cache_dir

    t, d = cfg.training, cfg.data
    rows, manifest = synthesize(
        model, tokenizer, seed=t.seed, n_rows=d.self_rows, cache_dir=cache_dir() / "selfsynth",
        prompts=d.self_prompts, exclude=[i.prompt for i in suite], batch_size=cfg.evaluation.generation_batch_size,
        precision=cfg.evaluation.generation_precision,
        keep_truncated=d.self_open_rows,
    )
    if not rows:
        raise ReplayBankError(
            f"self-synthesis from {d.self_prompts!r} (seed {t.seed}) yielded no usable row; "
            "check the prompt pool or raise [data] self_rows"
        )
    check_no_overlap(suite, [r["prompt"] + "\n" + r["response"] for r in rows], f"self-synthesized rows ({d.self_prompts})")
    log(f"self rows: {len(rows)} ({manifest.get('cache', 'generated')})")
    return rows, manifest
