"""A verifiable-reward task for GRPO on a chat LM: integer arithmetic, the answer is the last number.

Problems are ``a + b`` or ``a - b`` with ``digits``-digit operands. Every problem has a stable
integer id (its prompt id in the ``RolloutBuffer``), and the problems are split once, by a seeded
permutation, into a training pool and a held-out set that never overlap. The reward is 1.0 when
the last integer in the completion equals the answer, else 0.0 (so ``"45 + 23 = 68"`` and ``"68"``
both score).

>>> task = ArithmeticTask(digits=1, ops="+-", n_heldout=10, seed=0)
>>> p = task.problem(task.train_ids[0]); p.text, p.answer == eval(p.text)
('9 + 2', True)
>>> reward("The answer is 4.", 4), reward("4 or 5", 4), reward("no number", 4)
(1.0, 0.0, 0.0)
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from replaybank.errors import ReplayBankError

_INT = re.compile(r"-?\d+")
OPS = "+-"
INSTRUCTION = "Answer with the number only."


def last_integer(text: str) -> int | None:
    """The last integer written in ``text`` (thousands separators removed), or ``None``.

    >>> last_integer("3 + 4 = 7."), last_integer("-12"), last_integer("1,234"), last_integer("none")
    (7, -12, 1234, None)
    """
    found = _INT.findall(text.replace(",", ""))
    return int(found[-1]) if found else None


def reward(text: str, answer: int) -> float:
    """1.0 when the last integer in ``text`` is ``answer``, else 0.0."""
    return 1.0 if last_integer(text) == answer else 0.0


@dataclass(frozen=True)
class Problem:
    id: int
    a: int
    op: str
    b: int

    @property
    def text(self) -> str:
        return f"{self.a} {self.op} {self.b}"

    @property
    def answer(self) -> int:
        return self.a + self.b if self.op == "+" else self.a - self.b


class ArithmeticTask:
    """All ``a op b`` problems with ``digits``-digit operands, split into train and held-out.

    Args:
        digits: operand digits (1-3); 1 means 0-9, 2 means 10-99, 3 means 100-999.
        ops: operators used, a subset of ``"+-"``.
        n_heldout: held-out problems (the rest are the training pool).
        seed: seed of the split.

    Raises:
        ReplayBankError: on digits outside 1-3, an unknown operator, or a held-out set that leaves
            no training problem.
    """

    def __init__(self, digits: int = 2, ops: str = "+-", n_heldout: int = 64, seed: int = 0) -> None:
        if digits not in (1, 2, 3):
            raise ReplayBankError(f"digits must be 1, 2 or 3, got {digits!r}")
        if not ops or set(ops) - set(OPS):
            raise ReplayBankError(f"ops must be a non-empty subset of {OPS!r}, got {ops!r}")
        self.digits, self.ops = digits, "".join(sorted(set(ops), key=OPS.index))
        self.low = 0 if digits == 1 else 10 ** (digits - 1)
        self.span = 10**digits - self.low
        total = len(self.ops) * self.span**2
        if not 0 < n_heldout < total:
            raise ReplayBankError(f"n_heldout must lie in 1..{total - 1} ({total} problems), got {n_heldout}")
        order = np.random.default_rng(seed).permutation(total)
        self.heldout_ids = np.sort(order[:n_heldout])
        self.train_ids = order[n_heldout:]

    def problem(self, pid: int) -> Problem:
        """The problem with id ``pid`` (``(op * span + a') * span + b'``)."""
        op, rest = divmod(int(pid), self.span**2)
        a, b = divmod(rest, self.span)
        return Problem(int(pid), a + self.low, self.ops[op], b + self.low)

    def messages(self, pid: int) -> list[dict[str, str]]:
        """The chat prompt: the instruction as system message, the problem as the user turn."""
        return [{"role": "system", "content": INSTRUCTION}, {"role": "user", "content": self.problem(pid).text}]

    def prompt_tokens(self, tokenizer: Any, pid: int) -> list[int]:
        """Token ids of the chat prompt, ending with the assistant header."""
        ids = tokenizer.apply_chat_template(self.messages(pid), add_generation_prompt=True, tokenize=True)
        if hasattr(ids, "keys"):  # transformers >= 5 returns a BatchEncoding
            ids = ids["input_ids"]
        return [int(t) for t in ids]

    def score(self, tokenizer: Any, pid: int, completion: np.ndarray) -> float:
        """Reward of a completion (token ids) for problem ``pid``."""
        return reward(tokenizer.decode(completion, skip_special_tokens=True), self.problem(pid).answer)
