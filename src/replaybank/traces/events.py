"""What a cache of one layer is asked for, event by event: the replay semantics, made explicit.

* ``"step"`` (atomic, the correct semantics): one event per step, needing the **union** of the
  experts that the step's tokens route to. A prefill of 128 tokens is one event that may need most
  of the layer's experts at once; all of them must be resident together.
* ``"token"`` (the biased semantics many evaluations use): one event per token, needing only that
  token's top-k. A prefill is replayed as if its tokens ran one after another, so an expert can be
  evicted and reloaded inside one step, and reuse within a step is counted as hits.

Events are stored flat (CSR): event ``i`` needs ``ids[ptr[i]:ptr[i+1]]`` (distinct, ascending);
``next_use[j]`` is the next event that needs expert ``ids[j]`` again (``len(ptr) - 1`` if none),
which is all the offline optimum and the victim-selection rate need to know of the future.

>>> import numpy as np
>>> from replaybank.traces import Trace
>>> t = Trace.build(request=[0, 0], kind=[0, 1], start=[0, 2], tokens=[2, 1],
...                 experts=[[[0, 1], [1, 2], [0, 3]]], num_experts=[4])
>>> ev = layer_events(t, 0, "step")
>>> ev.ptr.tolist(), ev.ids.tolist(), ev.next_use.tolist()
([0, 3, 5], [0, 1, 2, 0, 3], [1, 2, 2, 2, 2])
>>> layer_events(t, 0, "token").ptr.tolist()
[0, 2, 4, 6]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from ..errors import ReplayBankError
from .trace import DECODE, PREFILL, Trace

Semantics = Literal["step", "token"]
SEMANTICS: tuple[Semantics, ...] = ("step", "token")
Steps = Literal["all", "decode", "prefill"]
STEPS: tuple[Steps, ...] = ("all", "decode", "prefill")


@dataclass(frozen=True, eq=False)
class Events:
    """One layer's events (see the module doc); ``step[i]`` is the trace step of event ``i``."""

    ptr: np.ndarray  # int64 (n + 1,)
    ids: np.ndarray  # int32 (ptr[-1],)
    next_use: np.ndarray  # int64 (ptr[-1],)
    step: np.ndarray  # int64 (n,)
    num_experts: int

    @property
    def count(self) -> int:
        return len(self.ptr) - 1

    def sizes(self) -> np.ndarray:
        """Distinct experts each event needs (the per-step union size under ``"step"``)."""
        return np.diff(self.ptr)


def layer_events(trace: Trace, layer: int, semantics: Semantics, steps: Steps = "all") -> Events:
    """The events of traced layer ``layer`` (0-based index into ``trace.layers``) under
    ``semantics``; see the module doc. ``steps="decode"`` (or ``"prefill"``) keeps only the events
    of those steps, as if the others were served elsewhere."""
    if steps not in STEPS:
        raise ReplayBankError(f"steps = {steps!r}: expected one of {list(STEPS)}")
    if semantics not in SEMANTICS:
        raise ReplayBankError(f"semantics = {semantics!r}: expected one of {list(SEMANTICS)}")
    if not 0 <= layer < trace.num_layers:
        raise ReplayBankError(f"layer = {layer}: the trace has layers 0..{trace.num_layers - 1}")
    e = trace.num_experts[layer]
    experts = trace.experts[layer].astype(np.int64)
    step_of_token = trace.step_of_token()
    if semantics == "token":
        ids = np.sort(experts, axis=1).ravel()  # a token's top-k are distinct already
        ptr = np.arange(trace.num_tokens + 1, dtype=np.int64) * trace.top_k
        step = step_of_token
    else:
        keys = _step_keys(np.sort(experts, axis=1), step_of_token, trace.tokens, e)
        event = keys // e
        ids = keys - event * e
        counts = np.bincount(event, minlength=trace.num_steps)
        ptr = np.zeros(trace.num_steps + 1, dtype=np.int64)
        np.cumsum(counts, out=ptr[1:])
        step = np.arange(trace.num_steps, dtype=np.int64)
    if steps != "all":
        keep = trace.kind[step] == (DECODE if steps == "decode" else PREFILL)
        if not keep.any():
            raise ReplayBankError(f"steps = {steps!r}: the trace has no {steps} steps")
        sizes = np.diff(ptr)[keep]
        ids, step = ids[np.repeat(keep, np.diff(ptr))], step[keep]
        ptr = np.zeros(len(sizes) + 1, dtype=np.int64)
        np.cumsum(sizes, out=ptr[1:])
    n = len(ptr) - 1
    event_of = np.repeat(np.arange(n, dtype=np.int64), np.diff(ptr))
    return Events(ptr, ids.astype(np.int32), _next_use(ids, event_of, n, e), step, e)


def _step_keys(
    rows: np.ndarray, step_of_token: np.ndarray, tokens: np.ndarray, e: int
) -> np.ndarray:
    """Sorted distinct ``step * e + expert`` of every step. A one-token step's sorted row is its
    union already; only multi-token steps (prefills) go through ``np.unique``, and a stable sort
    merges the two sorted runs in linear time."""
    keys = step_of_token[:, None] * e + rows
    single = tokens[step_of_token] == 1
    if single.all():
        return keys.ravel()
    merged = np.concatenate([keys[single].ravel(), np.unique(keys[~single])])
    return np.sort(merged, kind="stable")


def _next_use(ids: np.ndarray, event_of: np.ndarray, n: int, e: int) -> np.ndarray:
    """For each access, the next event that needs the same expert (``n`` if none)."""
    order = np.argsort(ids.astype(np.int64) * (n + 1) + event_of, kind="stable")
    nxt = np.full(len(ids), n, dtype=np.int64)
    same = ids[order[1:]] == ids[order[:-1]]
    nxt[order[:-1][same]] = event_of[order[1:][same]]
    return nxt


def union_stats(trace: Trace) -> list[dict[str, float]]:
    """Per traced layer, the per-step union sizes the paper asks every evaluation to report:
    ``max``, ``mean``, ``p50``, ``p95`` over all steps, and the mean over prefill and over decode
    steps separately (``nan`` when the trace has none of that kind), with ``num_experts``."""
    out = []
    for layer in range(trace.num_layers):
        sizes = layer_events(trace, layer, "step").sizes().astype(np.float64)
        prefill = sizes[trace.kind == 0]
        decode = sizes[trace.kind == 1]
        out.append(
            {
                "layer": trace.layers[layer],
                "num_experts": trace.num_experts[layer],
                "max": float(sizes.max()),
                "mean": float(sizes.mean()),
                "p50": float(np.percentile(sizes, 50)),
                "p95": float(np.percentile(sizes, 95)),
                "prefill_mean": float(prefill.mean()) if len(prefill) else float("nan"),
                "decode_mean": float(decode.mean()) if len(decode) else float("nan"),
            }
        )
    return out
