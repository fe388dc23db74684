"""A routing trace of a Mixture-of-Experts model: which experts each token needed, step by step.

A trace is columnar. The **step table** has one row per step, in execution order: a step is one
forward pass of one request, either its prefill (a range of prompt tokens) or one decode token.

=========== ============= ====================================================================
column      dtype, shape  meaning
=========== ============= ====================================================================
request     int64 (S,)    request id (any integer; the steps of a request need not be adjacent)
kind        uint8 (S,)    0 = prefill, 1 = decode (a decode step has exactly one token)
start       int64 (S,)    position of the step's first token within its request
tokens      int64 (S,)    tokens in the step (>= 1); a request's steps cover 0, 1, 2, ... in order
experts     int16 (L,T,k) per traced layer and token, the top-k expert ids (distinct, < E of layer)
gates       float32 (L,T,k) their gate weights
=========== ============= ====================================================================

``T = tokens.sum()``: token rows follow the step table, so step ``s`` owns rows
``offsets[s]:offsets[s+1]`` of every layer. ``num_experts[l]`` is layer ``l``'s expert count and
``layers[l]`` its index in the model (MoE models often leave some layers dense).

Every ``Trace`` is checked when built; an error names the field and, for a bad row, the layer,
the request and the step:

>>> import numpy as np
>>> t = Trace.build(request=[7, 7], kind=[0, 1], start=[0, 3], tokens=[3, 1],
...                 experts=[[[0, 1], [1, 2], [0, 3], [2, 3]]], num_experts=[4])
>>> t.num_steps, t.num_tokens, t.top_k, t.routing_events
(2, 4, 2, 4)
>>> Trace.build(request=[7], kind=[1], start=[0], tokens=[1], experts=[[[0, 4]]], num_experts=[4])
Traceback (most recent call last):
...
replaybank.errors.ReplayBankError: experts[layer 0, token 0, slot 1] = 4: layer 0 has 4 experts (ids 0..3) (request 7, step 0: decode at position 0)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import ReplayBankError

PREFILL, DECODE = 0, 1
STEP_COLUMNS = ("request", "kind", "start", "tokens")
COLUMNS = (*STEP_COLUMNS, "experts", "gates")
MAX_EXPERTS = 1 << 15  # expert ids are stored as int16


def seed_generator(seed: Any, where: str = "seed") -> np.random.Generator:
    """``numpy.random.default_rng(seed)`` for an integer ``seed >= 0`` or a ``Generator`` (used as
    is); anything else (a negative number, a float, a bool) is refused naming ``where``."""
    if isinstance(seed, np.random.Generator):
        return seed
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ReplayBankError(
            f"{where} = {seed!r}: expected an integer >= 0 or a numpy.random.Generator"
        )
    return np.random.default_rng(int(seed))


def _ints(value: Any, name: str, ndim: int) -> np.ndarray:
    arr = np.asarray(value)
    if arr.size == 0 and arr.dtype.kind == "f":  # np.asarray([]) is float64
        arr = arr.astype(np.int64)
    if arr.dtype.kind not in "iu" or arr.ndim != ndim:
        raise ReplayBankError(
            f"{name}: expected a {ndim}-d array of integers, got {arr.ndim}-d {arr.dtype}"
        )
    return arr


@dataclass(frozen=True, eq=False)
class Trace:
    """A checked routing trace (see the module doc for the columns). Build one with
    ``Trace.build`` (which converts lists and dtypes) or ``load_trace``."""

    request: np.ndarray
    kind: np.ndarray
    start: np.ndarray
    tokens: np.ndarray
    experts: np.ndarray
    gates: np.ndarray
    num_experts: tuple[int, ...]
    layers: tuple[int, ...]
    meta: Mapping[str, str] = field(default_factory=dict)
    offsets: np.ndarray = field(init=False, repr=False)

    @classmethod
    def build(
        cls,
        *,
        request: Any,
        kind: Any,
        start: Any,
        tokens: Any,
        experts: Any,
        num_experts: Sequence[int],
        gates: Any = None,
        layers: Sequence[int] | None = None,
        meta: Mapping[str, str] | None = None,
    ) -> Trace:
        """A trace from array-likes: integers are cast to the stored dtypes after checking they
        are integers; ``gates`` defaults to ``1/k`` each, ``layers`` to ``0..L-1``.

        Raises:
            ReplayBankError: a column of the wrong kind or shape, or a value out of range.
        """
        ex = _ints(experts, "experts", 3)
        if gates is None:
            gates = np.full(ex.shape, 1.0 / max(ex.shape[2], 1), dtype=np.float32)
        g = np.asarray(gates)
        if g.dtype.kind not in "fiu":
            raise ReplayBankError(f"gates: expected numbers, got {g.dtype}")
        return cls(
            request=_ints(request, "request", 1).astype(np.int64),
            kind=_ints(kind, "kind", 1),
            start=_ints(start, "start", 1).astype(np.int64),
            tokens=_ints(tokens, "tokens", 1).astype(np.int64),
            experts=ex,
            gates=g.astype(np.float32),
            num_experts=tuple(num_experts),
            layers=tuple(range(ex.shape[0]) if layers is None else layers),
            meta=dict(meta or {}),
        )

    def __post_init__(self) -> None:
        _check(self)
        # stored canonically; the checks above guarantee these casts are exact
        object.__setattr__(self, "kind", self.kind.astype(np.uint8, copy=False))
        object.__setattr__(self, "experts", self.experts.astype(np.int16, copy=False))
        offsets = np.zeros(len(self.tokens) + 1, dtype=np.int64)
        np.cumsum(self.tokens, out=offsets[1:])
        object.__setattr__(self, "offsets", offsets)

    @property
    def num_steps(self) -> int:
        return len(self.tokens)

    @property
    def num_tokens(self) -> int:
        return int(self.experts.shape[1])

    @property
    def num_layers(self) -> int:
        return int(self.experts.shape[0])

    @property
    def top_k(self) -> int:
        return int(self.experts.shape[2])

    @property
    def routing_events(self) -> int:
        """Tokens x traced layers: one routing decision (a top-k) each."""
        return self.num_layers * self.num_tokens

    def step_of_token(self) -> np.ndarray:
        """The step each token row belongs to, shape ``(T,)``."""
        return np.repeat(np.arange(self.num_steps), self.tokens)

    def describe_step(self, step: int) -> str:
        """``"request 7, step 1: decode at position 3"`` (for error messages)."""
        s = int(step)
        first, n = int(self.start[s]), int(self.tokens[s])
        what = (
            f"decode at position {first}"
            if self.kind[s] == DECODE
            else f"prefill of tokens {first}..{first + n - 1}"
        )
        return f"request {int(self.request[s])}, step {s}: {what}"


def _where(t: Trace, step: int) -> str:
    return f"(request {int(t.request[step])}, step {step})"


def _check(t: Trace) -> None:
    """Every rule of the module doc; the first broken one raises, naming field, request, step."""
    for name in COLUMNS:
        value = getattr(t, name)
        if not isinstance(value, np.ndarray):
            raise ReplayBankError(f"{name}: expected a numpy array, got {type(value).__name__}")
    for name in STEP_COLUMNS:
        col = getattr(t, name)
        if col.ndim != 1 or col.dtype.kind not in "iu":
            raise ReplayBankError(
                f"{name}: expected a 1-d integer array, got {col.ndim}-d {col.dtype}"
            )
        if len(col) != len(t.request):
            raise ReplayBankError(
                f"{name}: {len(col)} rows, but request has {len(t.request)} (one row per step)"
            )
    if len(t.request) == 0:
        raise ReplayBankError("request: a trace needs at least one step")
    if t.experts.ndim != 3 or t.experts.dtype.kind not in "iu":
        raise ReplayBankError(
            f"experts: expected an integer array (layers, tokens, top_k), got "
            f"{t.experts.ndim}-d {t.experts.dtype}"
        )
    layers, total, k = t.experts.shape
    if layers < 1 or k < 1:
        raise ReplayBankError(
            f"experts: shape {t.experts.shape} needs at least one layer and k >= 1"
        )
    if t.gates.shape != t.experts.shape or t.gates.dtype.kind != "f":
        raise ReplayBankError(
            f"gates: {t.gates.dtype} {t.gates.shape}, expected floats shaped like experts "
            f"{t.experts.shape}"
        )
    _check_layers(t, layers, k)
    for name, bad in (
        ("kind", (t.kind != PREFILL) & (t.kind != DECODE)),
        ("start", t.start < 0),
        ("tokens", t.tokens < 1),
    ):
        if bad.any():
            s = int(np.argmax(bad))
            rule = {"kind": "0 (prefill) or 1 (decode)", "start": ">= 0", "tokens": ">= 1"}[name]
            raise ReplayBankError(
                f"{name}[{s}] = {getattr(t, name)[s]}: expected {rule} {_where(t, s)}"
            )
    bad = (t.kind == DECODE) & (t.tokens != 1)
    if bad.any():
        s = int(np.argmax(bad))
        raise ReplayBankError(
            f"tokens[{s}] = {t.tokens[s]}: a decode step has exactly 1 token {_where(t, s)}"
        )
    if (t.tokens > total).any():  # also keeps the running sums below from overflowing int64
        s = int(np.argmax(t.tokens > total))
        raise ReplayBankError(
            f"tokens[{s}] = {t.tokens[s]}: more than the {total} token rows of experts "
            f"(a step cannot hold more tokens than the trace) {_where(t, s)}"
        )
    ends = np.cumsum(t.tokens)  # each term is in [1, total], so the first overflow shows as a drop
    if len(ends) > 1 and (ends[1:] <= ends[:-1]).any() or int(ends[-1]) != total:
        over = len(ends) > 1 and bool((ends[1:] <= ends[:-1]).any())
        got = "more than int64 can count" if over else str(int(ends[-1]))
        raise ReplayBankError(
            f"experts: {total} token rows, but the step table's tokens sum to {got} "
            "(truncated or inconsistent trace)"
        )
    _check_positions(t)
    _check_rows(t)


def _check_layers(t: Trace, layers: int, k: int) -> None:
    for name in ("num_experts", "layers"):
        values = getattr(t, name)
        if len(values) != layers or not all(
            isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in values
        ):
            raise ReplayBankError(
                f"{name} = {list(values)!r}: expected {layers} integers (one per layer)"
            )
    for i, e in enumerate(t.num_experts):
        if not k <= e <= MAX_EXPERTS:
            raise ReplayBankError(
                f"num_experts[{i}] = {e}: expected an integer in [top_k={k}, {MAX_EXPERTS}]"
            )
    if any(v < 0 for v in t.layers) or len(set(t.layers)) != layers:
        raise ReplayBankError(
            f"layers = {list(t.layers)}: expected distinct model layer indices >= 0"
        )
    if not all(isinstance(k_, str) and isinstance(v, str) for k_, v in t.meta.items()):
        raise ReplayBankError("meta: expected a mapping of strings to strings")


def _check_positions(t: Trace) -> None:
    """Within each request the steps cover positions 0, 1, 2, ... in execution order."""
    order = np.argsort(t.request, kind="stable")
    req, start, end = t.request[order], t.start[order], (t.start + t.tokens)[order]
    first = np.ones(len(order), dtype=bool)
    first[1:] = req[1:] != req[:-1]
    expected = np.where(first, 0, np.concatenate([[0], end[:-1]]))
    bad = start != expected
    if bad.any():
        i = int(np.argmax(bad))
        s = int(order[i])
        raise ReplayBankError(
            f"start[{s}] = {start[i]}: expected {expected[i]}, the next position of request "
            f"{int(req[i])} (steps of a request are contiguous, in order, from 0) {_where(t, s)}"
        )


def _check_rows(t: Trace) -> None:
    k = t.top_k
    if not np.isfinite(t.gates).all():
        layer, row, slot = (int(v) for v in np.argwhere(~np.isfinite(t.gates))[0])
        raise ReplayBankError(
            f"gates[layer {layer}, token {row}, slot {slot}] = {t.gates[layer, row, slot]}: "
            f"expected a finite number {_token_where(t, row)}"
        )
    limit = np.asarray(t.num_experts).reshape(-1, 1, 1)
    bad = (t.experts < 0) | (t.experts >= limit)
    if bad.any():
        layer, row, slot = (int(v) for v in np.argwhere(bad)[0])
        e = t.num_experts[layer]
        raise ReplayBankError(
            f"experts[layer {layer}, token {row}, slot {slot}] = {t.experts[layer, row, slot]}: "
            f"layer {layer} has {e} experts (ids 0..{e - 1}) {_token_where(t, row)}"
        )
    if k > 1:
        ordered = np.sort(t.experts, axis=2)
        dup = (ordered[:, :, 1:] == ordered[:, :, :-1]).any(axis=2)
        if dup.any():
            layer, row = (int(v) for v in np.argwhere(dup)[0])
            raise ReplayBankError(
                f"experts[layer {layer}, token {row}] = {t.experts[layer, row].tolist()}: a "
                f"token's top-k experts must be distinct {_token_where(t, row)}"
            )


def _token_where(t: Trace, row: int) -> str:
    ends = np.cumsum(t.tokens)
    step = int(np.searchsorted(ends, row, side="right"))
    first = int(t.start[step])
    what = "decode" if t.kind[step] == DECODE else "prefill"
    return f"(request {int(t.request[step])}, step {step}: {what} at position {first + row - int(ends[step] - t.tokens[step])})"
