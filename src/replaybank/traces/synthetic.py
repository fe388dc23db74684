"""Synthetic routing traces for tests and benchmarks (not for conclusions about real models).

Each layer has its own Zipf popularity over its experts (a random permutation of the ranks, so the
popular experts differ between layers): a token draws its top-k without replacement with
probabilities ``p_i ~ 1 / rank_i ** zipf`` (``zipf=0`` is uniform). Markov locality: with
probability ``stickiness`` a token reuses the previous token's experts (same request and layer),
otherwise it draws afresh. Requests run ``concurrent`` at a time: their prefills first, then
their decode steps round-robin.

>>> t = synthetic_trace(requests=3, prompt_tokens=5, decode_tokens=4, layers=2, experts=8,
...                     top_k=2, zipf=1.0, stickiness=0.5, concurrent=2, seed=0)
>>> t.num_steps, t.num_tokens, t.routing_events
(15, 27, 54)
>>> t.kind[:4].tolist(), t.request[:4].tolist()
([0, 0, 1, 1], [0, 1, 0, 1])
"""

from __future__ import annotations

import numpy as np

from ..errors import ReplayBankError
from .trace import DECODE, PREFILL, Trace, seed_generator


def _schedule(
    requests: int, prompt: int, decode: int, concurrent: int
) -> list[tuple[int, int, int]]:
    """``(request, kind, start)`` of every step in execution order."""
    steps: list[tuple[int, int, int]] = []
    for first in range(0, requests, concurrent):
        group = range(first, min(first + concurrent, requests))
        steps += [(r, PREFILL, 0) for r in group]
        steps += [(r, DECODE, prompt + d) for d in range(decode) for r in group]
    return steps


def synthetic_trace(
    *,
    requests: int,
    prompt_tokens: int,
    decode_tokens: int,
    layers: int,
    experts: int,
    top_k: int,
    zipf: float = 1.0,
    stickiness: float = 0.0,
    concurrent: int = 1,
    seed: int | np.random.Generator = 0,
) -> Trace:
    """A trace of ``requests`` requests, each a prefill of ``prompt_tokens`` tokens then
    ``decode_tokens`` decode steps, routed as the module doc says. Gate weights are the softmax
    of the winners' perturbed log-probabilities.

    Raises:
        ReplayBankError: a count below 1 (``decode_tokens`` may be 0), ``top_k > experts``,
            ``zipf < 0`` or ``stickiness`` outside [0, 1], a negative or non-integer ``seed``.
    """
    for name, value, low in (
        ("requests", requests, 1),
        ("prompt_tokens", prompt_tokens, 1),
        ("decode_tokens", decode_tokens, 0),
        ("layers", layers, 1),
        ("experts", experts, 1),
        ("top_k", top_k, 1),
        ("concurrent", concurrent, 1),
    ):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
            raise ReplayBankError(f"{name} = {value!r}: expected an integer >= {low}")
    if top_k > experts:
        raise ReplayBankError(f"top_k = {top_k}: more than experts = {experts}")
    if not (np.isfinite(zipf) and zipf >= 0) or not 0 <= stickiness <= 1:
        raise ReplayBankError(f"zipf = {zipf!r} (finite, >= 0), stickiness = {stickiness!r} (in [0, 1])")
    rng = seed_generator(seed)
    per_request = prompt_tokens + decode_tokens
    total = requests * per_request
    # routing in request-major order (token t of request r is row r * per_request + t)
    fresh = rng.random(total) >= stickiness
    fresh[::per_request] = True  # a request's first token has no previous token
    source = np.maximum.accumulate(np.where(fresh, np.arange(total), 0))
    routed = np.empty((layers, total, top_k), dtype=np.int64)
    gates = np.empty((layers, total, top_k), dtype=np.float32)
    for layer in range(layers):
        ranks = rng.permutation(experts) + 1
        logp = -zipf * np.log(ranks.astype(np.float64))
        scores = logp + rng.gumbel(size=(total, experts))  # Gumbel-top-k: sampling w/o replacement
        top = np.argpartition(-scores, top_k - 1, axis=1)[:, :top_k]
        win = np.take_along_axis(scores, top, axis=1)
        order = np.argsort(-win, axis=1)  # the winners by weight, as a router lists them
        top, win = np.take_along_axis(top, order, axis=1), np.take_along_axis(win, order, axis=1)
        w = np.exp(win - win.max(axis=1, keepdims=True))
        routed[layer], gates[layer] = top[source], (w / w.sum(axis=1, keepdims=True))[source]
    steps = _schedule(requests, prompt_tokens, decode_tokens, concurrent)
    request = np.array([s[0] for s in steps], dtype=np.int64)
    kind = np.array([s[1] for s in steps], dtype=np.uint8)
    start = np.array([s[2] for s in steps], dtype=np.int64)
    tokens = np.where(kind == PREFILL, prompt_tokens, 1)
    rows = np.concatenate(
        [request[i] * per_request + start[i] + np.arange(tokens[i]) for i in range(len(steps))]
    )
    return Trace.build(
        request=request,
        kind=kind,
        start=start,
        tokens=tokens,
        experts=routed[:, rows],
        gates=gates[:, rows],
        num_experts=[experts] * layers,
        meta={
            "source": "synthetic",
            "params": f"zipf={zipf} stickiness={stickiness} concurrent={concurrent}",
        },
    )
