"""Rehearsal rows the model being trained rewrites between optimizer steps: the protocol the LoRA
loop calls (:class:`RefreshedRows`) and the ``selfgen`` source (:class:`SelfGenRows`).

``selfgen`` is on-policy self-distillation. The ``self`` source holds the *base* model's answers to
general prompts, written once; the drift that breaks a skill (``14 + 51 = 14 + 51 = ...``) shows in
the *adapter's* own answers, which the KL term then never sees. ``selfgen`` holds the current
adapter's own answers to the same prompts, rewritten every ``refresh_every`` optimizer steps, and
trains them through the KL-to-base term only (the base model as teacher on the adapter's own
samples; no cross-entropy, which would reinforce the drift).

Decoding is greedy (:func:`~replaybank.llm.eval.decode.generate_detailed`, batched): the suite
scores greedy answers, so the prefixes worth holding near the base are the ones greedy decoding
visits (its loops included); the KL term covers the whole next-token distribution at each of those
positions, so a sample would only choose other prefixes. Greedy answers also depend on the
adapter alone, so a refresh needs no random state and is reproduced by generating from the model
at that step. Answers cut at the token budget are kept as open rows (no end of turn), since loops
run to the budget; an answer that overlaps an evaluation-suite prompt keeps its row from before.

Example (a fake generator standing in for the model):
    >>> from replaybank.llm.eval.decode import Generation
    >>> class Tok:
    ...     chat_template, eos_token = "toy", "$"
    ...     def __call__(self, text, add_special_tokens=False): return {"input_ids": [ord(c) for c in text]}
    ...     def apply_chat_template(self, conv, tokenize=False, add_generation_prompt=False):
    ...         return "".join(f"<{m['role'][0]}>{m['content']}|" for m in conv) + ("<a>" if add_generation_prompt else "")
    >>> fake = lambda model, tok, prompts, **kw: [Generation(f"{p} again", False, 3) for p in prompts]
    >>> rows = SelfGenRows(Tok(), [("Hi?", "Hello.", False)], every=5, generate_fn=fake)
    >>> rows.due(0), rows.due(3), rows.due(10)
    (True, False, True)
    >>> rows.refresh(model=None, step=0)
    {'rows': 1, 'changed': 1, 'open': 0, 'answer_tokens': 3.0, 'kept_previous': 0}
    >>> rows.answers
    [('Hi? again', False)]
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol

from replaybank.errors import InvalidStateError
from replaybank.llm.data.rows import TokenRows, encode_pair, token_rows
from replaybank.llm.eval.decode import Generation, Precision, generate_detailed
from replaybank.llm.eval.suite import overlap_key, overlaps

SELFGEN_SCHEMA_VERSION = 1

GenerateFn = Callable[..., list[Generation]]


class RefreshedRows(Protocol):
    """A source's rows that the model being trained rewrites between optimizer steps.

    The LoRA loop (:func:`replaybank.llm.train.train_lora`) calls :meth:`refresh` before the first
    step (unless resumed) and after every step ``due`` says, and keeps :meth:`state_dict` in its
    checkpoint, so a resumed run trains on the rows an uninterrupted one had. A refresh keeps the
    number of rows (the mixer's positions stay valid).
    """

    @property
    def rows(self) -> TokenRows:
        """The rows now."""
        ...

    def due(self, step: int) -> bool:
        """Whether the rows are rewritten after optimizer step ``step`` (0: before the first)."""
        ...

    def refresh(self, model: Any, step: int) -> dict[str, int | float]:
        """Rewrite the rows with ``model`` as it is after ``step``; returns counts for the log."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """JSON-ready state, with a schema version."""
        ...

    def check_state(self, state: Any) -> None:
        """Check ``state`` whole against this source; nothing is set.

        Raises:
            InvalidStateError: naming the key that does not fit.
        """
        ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` (checked by :meth:`check_state` first)."""
        ...


class SelfGenRows:
    """The current adapter's own greedy answers to general prompts, rewritten every ``every`` steps.

    Args:
        tokenizer: the model's tokenizer.
        records: ``(prompt, answer, open)`` per row: the prompts (the self rows' prompts: the
            general pool, checked against the suite) and the answers the rows start from (the base
            model's); the first :meth:`refresh` replaces them.
        every: optimizer steps between two refreshes (the recipe's ``refresh_every``).
        max_new_tokens, batch_size, precision: generation settings (those of the self rows).
        max_seq_length: rows are cut to this many tokens.
        exclude: evaluation prompts no answer may overlap (an overlapping answer keeps its row).
        generate_fn: stands in for :func:`~replaybank.llm.eval.decode.generate_detailed` (tests).

    Raises:
        ValueError: no records, or ``every < 1``.
    """

    def __init__(
        self, tokenizer: Any, records: Sequence[tuple[str, str, bool]], *, every: int, max_new_tokens: int = 96,
        batch_size: int = 16, max_seq_length: int = 512, precision: Precision = "fp32", exclude: Iterable[str] = (),
        generate_fn: GenerateFn | None = None,
    ) -> None:
        if not records:
            raise ValueError("selfgen rows need at least one prompt")
        if every < 1:
            raise ValueError(f"refresh_every must be >= 1, got {every}")
        self.tokenizer, self.every, self.max_seq_length = tokenizer, every, max_seq_length
        self.prompts = [p for p, _, _ in records]
        self.answers: list[tuple[str, bool]] = [(a, bool(o)) for _, a, o in records]
        self._excluded = [k for k in (overlap_key(e) for e in exclude) if k]
        self._generate = functools.partial(generate_fn or generate_detailed, max_new_tokens=max_new_tokens,
                                           batch_size=batch_size, precision=precision)
        self._prompts_sha = hashlib.sha256("\n".join(self.prompts).encode()).hexdigest()
        self.last_step: int | None = None
        self._rows = self._encode()

    @property
    def rows(self) -> TokenRows:
        return self._rows

    def due(self, step: int) -> bool:
        return step % self.every == 0

    def refresh(self, model: Any, step: int) -> dict[str, int | float]:
        """Answer every prompt with ``model`` (greedy, batched) and encode the answers as rows.

        Returns:
            ``rows``, ``changed`` (answers that differ from before), ``open`` (cut at the token
            budget), ``answer_tokens`` (mean generated tokens), ``kept_previous`` (answers that
            overlapped a suite prompt; their rows stay as they were).
        """
        gens = self._generate(model, self.tokenizer, self.prompts, desc=None)
        new: list[tuple[str, bool]] = []
        kept = 0
        for before, gen in zip(self.answers, gens, strict=True):
            key = overlap_key(gen.text)
            if any(overlaps(key, e) for e in self._excluded):
                new.append(before)
                kept += 1
            else:
                new.append((gen.text, gen.truncated))
        changed = sum(a != b for a, b in zip(new, self.answers, strict=True))
        self.answers, self.last_step = new, int(step)
        self._rows = self._encode()
        return {
            "rows": len(new), "changed": changed, "open": sum(o for _, o in new),
            "answer_tokens": round(sum(g.n_tokens for g in gens) / len(gens), 2), "kept_previous": kept,
        }

    def _encode(self) -> TokenRows:
        return token_rows([encode_pair(self.tokenizer, p, a, self.max_seq_length, open_end=o)
                           for p, (a, o) in zip(self.prompts, self.answers, strict=True)])

    # -- state -----------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The answers now (the rows are their encoding), the step they were written after, and a
        hash of the prompts."""
        return {
            "schema_version": SELFGEN_SCHEMA_VERSION, "prompts_sha256": self._prompts_sha, "step": self.last_step,
            "answers": [{"text": a, "open": o} for a, o in self.answers],
        }

    def check_state(self, state: Any) -> None:
        keys = ["answers", "prompts_sha256", "schema_version", "step"]
        if not isinstance(state, Mapping) or sorted(map(str, state)) != keys:
            raise InvalidStateError(f"selfgen state: expected a mapping with keys {keys}")
        if state["schema_version"] != SELFGEN_SCHEMA_VERSION:
            raise InvalidStateError(f"selfgen state has schema_version {state['schema_version']!r}, expected {SELFGEN_SCHEMA_VERSION}")
        if state["prompts_sha256"] != self._prompts_sha:
            raise InvalidStateError("selfgen state['prompts_sha256'] differs: answers to other prompts (another seed or pool)")
        step = state["step"]
        if step is not None and (not isinstance(step, int) or isinstance(step, bool) or step < 0):
            raise InvalidStateError(f"selfgen state['step'] = {step!r}, expected an integer >= 0 or null")
        answers = state["answers"]
        if not isinstance(answers, list) or len(answers) != len(self.prompts) or not all(
            isinstance(a, Mapping) and isinstance(a.get("text"), str) and isinstance(a.get("open"), bool) and len(a) == 2
            for a in answers
        ):
            raise InvalidStateError(f"selfgen state['answers']: expected {len(self.prompts)} entries {{text, open}}")

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.check_state(state)
        self.answers = [(a["text"], a["open"]) for a in state["answers"]]
        self.last_step = state["step"]
        self._rows = self._encode()
